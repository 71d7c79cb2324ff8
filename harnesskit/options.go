package harnesskit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Defaults of Options. A zero field takes its default.
const (
	DefaultMaxConcurrentRuns = 4
	DefaultMaxQueuedRuns     = 256
	DefaultMaxBodyBytes      = 64 << 20
	DefaultMaxFileBytes      = 32 << 20
	DefaultMaxFiles          = 64
	DefaultFetchTimeout      = 60 * time.Second
	DefaultRetainRuns        = 1000
	DefaultRetainFor         = 24 * time.Hour
	DefaultAgentVersion      = "dev"
	// DefaultListLimit is the page size of GET /runs without limit.
	DefaultListLimit = 50
	// MaxListLimit caps GET /runs's limit; a larger one is clamped.
	MaxListLimit = 1000
)

// Options configure a Server: what GET /capabilities declares, and the
// bounds that keep a long-lived harness's memory and disk in check. Only
// Agent and Model are required; every other zero field takes its default.
type Options struct {
	// Agent is the harness's name for itself (capabilities.agent, and the
	// ATIF agent.name). Required.
	Agent string
	// Model is the model runs execute on unless a request overrides it
	// (with ModelOverride) or the agent calls Run.SetModel. Every RunStatus
	// reports a model, so it is required.
	Model string
	// AgentVersion is the ATIF agent.version of trajectories. Default:
	// Revision, else "dev".
	AgentVersion string
	// Revision is the git commit the harness was built from
	// (capabilities.revision). Optional.
	Revision string
	// Branch is the git branch the harness was built from
	// (capabilities.branch). Optional.
	Branch string

	// InputSchema is the JSON Schema of the run input (capabilities.
	// input_schema): draft 2020-12 unless its $schema names draft 4, 6, 7
	// or 2019-09. Nil declares nothing, and inputs are checked against the
	// contract's default: an object with a required string "question".
	// POST /runs answers 422 for an input that does not match.
	InputSchema json.RawMessage
	// CheckInput is the run input "harness check" sends
	// (capabilities.check_input). It must match the input schema; New
	// refuses it otherwise. Optional, but declare one with an InputSchema.
	CheckInput json.RawMessage

	// ToolCalls declares that trajectories reliably contain tool calls.
	ToolCalls bool
	// Thinking declares that trajectories reliably contain reasoning.
	Thinking bool
	// TokenUsage declares that trajectories carry per-step token usage.
	TokenUsage bool
	// Artifacts declares that RunStatus reports the artifacts runs produce
	// (see Run.WriteArtifact and Result.Artifacts).
	Artifacts bool
	// ModelOverride declares that the agent honours a request's model: the
	// kit passes it on as Run.Model. Without it a requested model is
	// ignored and runs report Model.
	ModelOverride bool
	// NoFiles stops declaring accepts.files: multipart requests are
	// refused with 415.
	NoFiles bool
	// NoFileURLs stops declaring accepts.file_urls, for a harness that
	// cannot reach the evaluator's file URLs: JSON requests whose files
	// carry urls are refused with 415.
	NoFileURLs bool
	// ToolDefinitions are the tools offered to the model, written into
	// every trajectory as ATIF agent.tool_definitions. Optional.
	ToolDefinitions []ToolDefinition
	// Capabilities, when set, is called with the capabilities the kit
	// built, to add members of its own (Extra maps) before they are served.
	Capabilities func(*Capabilities)

	// MaxConcurrentRuns is the size of the worker pool: at most this many
	// runs execute at once (capabilities.limits.max_concurrent_runs).
	MaxConcurrentRuns int
	// MaxQueuedRuns bounds the runs waiting for a worker; POST /runs
	// answers 503 with Retry-After when the queue is full.
	MaxQueuedRuns int
	// MaxBodyBytes bounds a POST /runs body, multipart files included
	// (413 over it).
	MaxBodyBytes int64
	// MaxFileBytes bounds one fixture file, uploaded or fetched.
	MaxFileBytes int64
	// MaxFiles bounds the fixture files of one run.
	MaxFiles int
	// FetchTimeout bounds fetching one file url, from the first byte sent
	// to the last byte read.
	FetchTimeout time.Duration
	// FetchFile, when set, fetches a file url instead of the built-in
	// http/https client; use it for other schemes (s3://…) or
	// credentials. The kit still bounds the size it reads and cancels ctx
	// after FetchTimeout.
	FetchFile func(ctx context.Context, url string) (io.ReadCloser, error)

	// APIKey, when set, is required in the x-api-key header of every
	// request (compared in constant time); without it the server is open.
	APIKey string

	// WorkspaceDir is the directory under which each run gets its own
	// temporary workspace directory, created on first use. Default:
	// os.TempDir().
	WorkspaceDir string
	// RetainRuns is how many finished runs are kept (oldest dropped first,
	// with their workspaces).
	RetainRuns int
	// RetainFor is how long a finished run is kept after it finished.
	RetainFor time.Duration

	// Logger receives the kit's logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests pass a fake.
	Now func() time.Time
}

// ToolDefinition is one tool offered to the model, in the OpenAI
// function-calling shape ATIF's agent.tool_definitions uses.
type ToolDefinition struct {
	// Name is the function name the model calls.
	Name string
	// Description tells the model what the tool does.
	Description string
	// Parameters is the JSON Schema of the arguments object. Nil means
	// {"type":"object"}.
	Parameters json.RawMessage
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.AgentVersion == "" {
		o.AgentVersion = o.Revision
		if o.AgentVersion == "" {
			o.AgentVersion = DefaultAgentVersion
		}
	}
	if o.MaxConcurrentRuns == 0 {
		o.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	if o.MaxQueuedRuns == 0 {
		o.MaxQueuedRuns = DefaultMaxQueuedRuns
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.FetchTimeout == 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.RetainRuns == 0 {
		o.RetainRuns = DefaultRetainRuns
	}
	if o.RetainFor == 0 {
		o.RetainFor = DefaultRetainFor
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports the first problem with o: a missing Agent or Model, a
// negative bound, or an input schema or check input that is not a JSON
// object. New also compiles the schema and checks CheckInput against it.
func (o Options) Validate() error {
	var errs []error
	if o.Agent == "" {
		errs = append(errs, errors.New("Agent is required"))
	}
	if o.Model == "" {
		errs = append(errs, errors.New("Model is required: every run status reports the model it ran on"))
	}
	for _, b := range []struct {
		name string
		v    int64
	}{
		{"MaxConcurrentRuns", int64(o.MaxConcurrentRuns)},
		{"MaxQueuedRuns", int64(o.MaxQueuedRuns)},
		{"MaxBodyBytes", o.MaxBodyBytes},
		{"MaxFileBytes", o.MaxFileBytes},
		{"MaxFiles", int64(o.MaxFiles)},
		{"FetchTimeout", int64(o.FetchTimeout)},
		{"RetainRuns", int64(o.RetainRuns)},
		{"RetainFor", int64(o.RetainFor)},
	} {
		if b.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", b.name))
		}
	}
	for _, m := range []struct {
		name string
		raw  json.RawMessage
	}{{"InputSchema", o.InputSchema}, {"CheckInput", o.CheckInput}} {
		if m.raw != nil && !isJSONObject(m.raw) {
			errs = append(errs, fmt.Errorf("%s must be a JSON object", m.name))
		}
	}
	for i, t := range o.ToolDefinitions {
		if t.Name == "" {
			errs = append(errs, fmt.Errorf("ToolDefinitions[%d].Name is required", i))
		}
		if t.Parameters != nil && !isJSONObject(t.Parameters) {
			errs = append(errs, fmt.Errorf("ToolDefinitions[%d].Parameters must be a JSON object", i))
		}
	}
	return errors.Join(errs...)
}

// capabilities builds what GET /capabilities serves.
func (o Options) capabilities() Capabilities {
	c := Capabilities{
		ContractVersion: ContractVersion,
		Agent:           o.Agent,
		InputSchema:     o.InputSchema,
		CheckInput:      o.CheckInput,
		Provides: &Provides{
			Trajectory: true,
			ToolCalls:  o.ToolCalls,
			Thinking:   o.Thinking,
			TokenUsage: o.TokenUsage,
			Artifacts:  o.Artifacts,
			Workspace:  true,
			RunListing: true,
		},
		Accepts: &Accepts{
			Files:         !o.NoFiles,
			FileURLs:      !o.NoFileURLs,
			ModelOverride: o.ModelOverride,
			Stop:          true,
		},
		Limits: &Limits{MaxConcurrentRuns: new(o.MaxConcurrentRuns)},
	}
	if o.Revision != "" {
		c.Revision = new(o.Revision)
	}
	if o.Branch != "" {
		c.Branch = new(o.Branch)
	}
	if o.Capabilities != nil {
		o.Capabilities(&c)
	}
	return c
}

// isJSONObject reports whether raw is one JSON object.
func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}
