package harnesskit

import (
	"encoding/json"
	"errors"
	"slices"
)

// This file holds one Go type per component schema of Harness API v1.
// Nullable members are pointers (or json.RawMessage, which can hold null)
// and are omitted when nil: every nullable member defaults to null, so
// absent and null mean the same here. Members a type does not name are kept
// in its Extra map (see extra.go). TestTypesAgreeWithSchema checks every
// type against the embedded contract in both directions.

// Capabilities is a harness's self-description (GET /capabilities), which
// the evaluator snapshots per experiment.
type Capabilities struct {
	// ContractVersion is the Harness API version the harness implements;
	// empty means the default, "v1" (see Version).
	ContractVersion string `json:"contract_version,omitempty"`
	// Agent is the harness's own name for itself. Required; informational.
	Agent string `json:"agent"`
	// Revision is the git commit of the deployed harness, recorded on the
	// experiment so results trace to a build.
	Revision *string `json:"revision,omitempty"`
	// Branch is the git branch the deployed harness was built from.
	Branch *string `json:"branch,omitempty"`
	// InputSchema is the JSON Schema (draft 2020-12 unless its $schema says
	// otherwise) of the run input the agent accepts, excluding files. Nil
	// means the default question-and-answer schema: an object with a
	// required string "question".
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// CheckInput is the run input "harness check" sends; it must pass
	// InputSchema (or the default schema).
	CheckInput json.RawMessage `json:"check_input,omitempty"`
	// Provides says what the harness's runs and trajectories carry.
	Provides *Provides `json:"provides,omitempty"`
	// Accepts says which optional request features the harness honours.
	Accepts *Accepts `json:"accepts,omitempty"`
	// Limits are the harness's own limits.
	Limits *Limits `json:"limits,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// Version returns ContractVersion, or its default "v1" when empty.
func (c Capabilities) Version() string {
	if c.ContractVersion == "" {
		return ContractVersion
	}
	return c.ContractVersion
}

// MarshalJSON encodes c followed by its Extra members.
func (c Capabilities) MarshalJSON() ([]byte, error) {
	type plain Capabilities
	return marshalExtra(plain(c), c.Extra)
}

// UnmarshalJSON decodes c, keeping unnamed members in Extra.
func (c *Capabilities) UnmarshalJSON(b []byte) error {
	type plain Capabilities
	p := plain(*c)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*c = Capabilities(p)
	return nil
}

// Accepts lists the optional request features a harness honours. Every
// flag defaults to false.
type Accepts struct {
	// Files means POST /runs accepts multipart file attachments.
	Files bool `json:"files"`
	// FileURLs means POST /runs (JSON body) accepts files as [{name, url}]
	// and the harness fetches each url itself; preferred over multipart
	// when both are declared.
	FileURLs bool `json:"file_urls"`
	// ModelOverride means POST /runs honours the model field.
	ModelOverride bool `json:"model_override"`
	// Stop means POST /runs/{id}/stop is implemented.
	Stop bool `json:"stop"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes a followed by its Extra members.
func (a Accepts) MarshalJSON() ([]byte, error) {
	type plain Accepts
	return marshalExtra(plain(a), a.Extra)
}

// UnmarshalJSON decodes a, keeping unnamed members in Extra.
func (a *Accepts) UnmarshalJSON(b []byte) error {
	type plain Accepts
	p := plain(*a)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*a = Accepts(p)
	return nil
}

// Provides lists what a harness's runs and trajectories reliably carry.
// Every flag defaults to false.
type Provides struct {
	// Trajectory means GET /runs/{id}/trajectory is served at all.
	Trajectory bool `json:"trajectory"`
	// ToolCalls means trajectories reliably contain tool calls.
	ToolCalls bool `json:"tool_calls"`
	// Thinking means trajectories reliably contain reasoning content.
	Thinking bool `json:"thinking"`
	// TokenUsage means trajectories carry per-step token usage.
	TokenUsage bool `json:"token_usage"`
	// Artifacts means run status reports the artifacts the agent produced.
	Artifacts bool `json:"artifacts"`
	// Workspace means the files endpoints are implemented.
	Workspace bool `json:"workspace"`
	// RunListing means GET /runs (the list) is implemented.
	RunListing bool `json:"run_listing"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes p followed by its Extra members.
func (p Provides) MarshalJSON() ([]byte, error) {
	type plain Provides
	return marshalExtra(plain(p), p.Extra)
}

// UnmarshalJSON decodes p, keeping unnamed members in Extra.
func (p *Provides) UnmarshalJSON(b []byte) error {
	type plain Provides
	q := plain(*p)
	extra, err := unmarshalExtra(b, &q)
	if err != nil {
		return err
	}
	q.Extra = extra
	*p = Provides(q)
	return nil
}

// Limits are a harness's own limits.
type Limits struct {
	// MaxConcurrentRuns caps concurrent runs on the harness side; the
	// evaluator uses the smaller of this and its own setting. Nil: no cap.
	MaxConcurrentRuns *int `json:"max_concurrent_runs,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes l followed by its Extra members.
func (l Limits) MarshalJSON() ([]byte, error) {
	type plain Limits
	return marshalExtra(plain(l), l.Extra)
}

// UnmarshalJSON decodes l, keeping unnamed members in Extra.
func (l *Limits) UnmarshalJSON(b []byte) error {
	type plain Limits
	p := plain(*l)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*l = Limits(p)
	return nil
}

// RunRequest starts one agent run in a fresh session (POST /runs).
type RunRequest struct {
	// Input is the case input, verbatim: the evaluator never rewrites it.
	// A free-form object (see Capabilities.InputSchema). Required.
	Input json.RawMessage `json:"input"`
	// Model is sent only when the harness accepts model_override.
	Model *string `json:"model,omitempty"`
	// Metadata is for the harness's own records; it may ignore it.
	Metadata *RunMetadata `json:"metadata,omitempty"`
	// Files are the case's fixture files, each with its context. On a JSON
	// request (accepts.file_urls) each carries the url to fetch; on
	// multipart they travel in the payload part without urls.
	Files []FileRef `json:"files,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// errNoInput reports a RunRequest without its required input object.
var errNoInput = errors.New("harnesskit: RunRequest.Input is required")

// MarshalJSON encodes r followed by its Extra members. A nil Input is an
// error: the contract requires the input object.
func (r RunRequest) MarshalJSON() ([]byte, error) {
	if len(r.Input) == 0 {
		return nil, errNoInput
	}
	type plain RunRequest
	return marshalExtra(plain(r), r.Extra)
}

// UnmarshalJSON decodes r, keeping unnamed members in Extra.
func (r *RunRequest) UnmarshalJSON(b []byte) error {
	type plain RunRequest
	p := plain(*r)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*r = RunRequest(p)
	return nil
}

// RunMetadata identifies a run for the harness's records, so evaluation
// traffic is distinguishable and traceable.
type RunMetadata struct {
	// ExperimentID is the evaluator's experiment id.
	ExperimentID *string `json:"experiment_id,omitempty"`
	// CaseID is the suite case's id.
	CaseID *string `json:"case_id,omitempty"`
	// Repetition is the repetition number, 1-based.
	Repetition *int `json:"repetition,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes m followed by its Extra members.
func (m RunMetadata) MarshalJSON() ([]byte, error) {
	type plain RunMetadata
	return marshalExtra(plain(m), m.Extra)
}

// UnmarshalJSON decodes m, keeping unnamed members in Extra.
func (m *RunMetadata) UnmarshalJSON(b []byte) error {
	type plain RunMetadata
	p := plain(*m)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*m = RunMetadata(p)
	return nil
}

// FileRef is one fixture file of a run request.
type FileRef struct {
	// Name is the file name to present to the agent: the fixture key.
	Name string `json:"name"`
	// URL is where the harness fetches the bytes (JSON requests only); on
	// multipart the bytes arrive as the part with this name.
	URL *string `json:"url,omitempty"`
	// Context is what the file holds, from the suite's fixture registry.
	Context *string `json:"context,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes f followed by its Extra members.
func (f FileRef) MarshalJSON() ([]byte, error) {
	type plain FileRef
	return marshalExtra(plain(f), f.Extra)
}

// UnmarshalJSON decodes f, keeping unnamed members in Extra.
func (f *FileRef) UnmarshalJSON(b []byte) error {
	type plain FileRef
	p := plain(*f)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*f = FileRef(p)
	return nil
}

// RunCreated answers POST /runs.
type RunCreated struct {
	// RunID is the harness's own identifier, typically its session id: the
	// key for every other endpoint.
	RunID string `json:"run_id"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes c followed by its Extra members.
func (c RunCreated) MarshalJSON() ([]byte, error) {
	type plain RunCreated
	return marshalExtra(plain(c), c.Extra)
}

// UnmarshalJSON decodes c, keeping unnamed members in Extra.
func (c *RunCreated) UnmarshalJSON(b []byte) error {
	type plain RunCreated
	p := plain(*c)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*c = RunCreated(p)
	return nil
}

// Status is a run's state. The evaluator polls until it is terminal or the
// case times out.
type Status string

// The run states of Harness API v1.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Statuses lists every Status, in the contract's order.
var Statuses = []Status{StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// IsTerminal reports whether s is a final state: completed, failed or
// cancelled.
func (s Status) IsTerminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// RunStatus answers GET /runs/{run_id}.
type RunStatus struct {
	// Status is the run's state. Required.
	Status Status `json:"status"`
	// Answer is the final user-visible answer. A completed run carries
	// Answer, Output, or both.
	Answer *string `json:"answer,omitempty"`
	// Output is the agent's structured result (an object), for agents that
	// return typed data.
	Output json.RawMessage `json:"output,omitempty"`
	// Model is the model the run executes on: the requested one when
	// honoured, otherwise the harness's default. Required; the evaluator
	// records it as the experiment's model.
	Model string `json:"model"`
	// Artifacts are files the agent produced as deliverables.
	Artifacts []ArtifactRef `json:"artifacts,omitempty"`
	// Error is the message when Status is failed; a completed run may carry
	// a non-fatal one.
	Error *string `json:"error,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// IsTerminal reports whether the run has reached a final state.
func (s RunStatus) IsTerminal() bool { return s.Status.IsTerminal() }

// MarshalJSON encodes s followed by its Extra members.
func (s RunStatus) MarshalJSON() ([]byte, error) {
	type plain RunStatus
	return marshalExtra(plain(s), s.Extra)
}

// UnmarshalJSON decodes s, keeping unnamed members in Extra.
func (s *RunStatus) UnmarshalJSON(b []byte) error {
	type plain RunStatus
	p := plain(*s)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*s = RunStatus(p)
	return nil
}

// ArtifactRef names one deliverable a run produced.
type ArtifactRef struct {
	// Name is the artifact's display name. Required.
	Name string `json:"name"`
	// Path is the workspace path, fetchable via the files endpoint.
	Path *string `json:"path,omitempty"`
	// ContentType is the MIME type, if known.
	ContentType *string `json:"content_type,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes a followed by its Extra members.
func (a ArtifactRef) MarshalJSON() ([]byte, error) {
	type plain ArtifactRef
	return marshalExtra(plain(a), a.Extra)
}

// UnmarshalJSON decodes a, keeping unnamed members in Extra.
func (a *ArtifactRef) UnmarshalJSON(b []byte) error {
	type plain ArtifactRef
	p := plain(*a)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*a = ArtifactRef(p)
	return nil
}

// RunList answers GET /runs: one page of runs, newest first.
type RunList struct {
	// Runs is the page. A nil slice encodes as [].
	Runs []RunListItem `json:"runs"`
	// Total counts all runs matching the query.
	Total int `json:"total"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes l followed by its Extra members; a nil Runs is [].
func (l RunList) MarshalJSON() ([]byte, error) {
	type plain RunList
	p := plain(l)
	if p.Runs == nil {
		p.Runs = []RunListItem{}
	}
	return marshalExtra(p, l.Extra)
}

// UnmarshalJSON decodes l, keeping unnamed members in Extra.
func (l *RunList) UnmarshalJSON(b []byte) error {
	type plain RunList
	p := plain(*l)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*l = RunList(p)
	return nil
}

// RunListItem is one run (or session) of a RunList.
type RunListItem struct {
	// RunID is usable with the other /runs/{id} endpoints. Required.
	RunID string `json:"run_id"`
	// Title is the run's display title.
	Title *string `json:"title,omitempty"`
	// UserID is a filter value; a fixed dummy without multi-tenancy.
	UserID *string `json:"user_id,omitempty"`
	// ClientID is a filter value; a fixed dummy without multi-tenancy.
	ClientID *string `json:"client_id,omitempty"`
	// CreatedAt is the run's creation time as the harness wrote it (the
	// contract says date-time; it is kept as a string so a harness that
	// writes a zone-less ISO 8601 time still lists).
	CreatedAt *string `json:"created_at,omitempty"`
	// SessionID groups a harness's several runs of one session; items that
	// share it are listed once, as the newest of them.
	SessionID *string `json:"session_id,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes i followed by its Extra members.
func (i RunListItem) MarshalJSON() ([]byte, error) {
	type plain RunListItem
	return marshalExtra(plain(i), i.Extra)
}

// UnmarshalJSON decodes i, keeping unnamed members in Extra.
func (i *RunListItem) UnmarshalJSON(b []byte) error {
	type plain RunListItem
	p := plain(*i)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*i = RunListItem(p)
	return nil
}

// FileList answers GET /runs/{run_id}/files: the workspace listing.
type FileList struct {
	// Files is the listing. A nil slice encodes as [].
	Files []FileEntry `json:"files"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes l followed by its Extra members; a nil Files is [].
func (l FileList) MarshalJSON() ([]byte, error) {
	type plain FileList
	p := plain(l)
	if p.Files == nil {
		p.Files = []FileEntry{}
	}
	return marshalExtra(p, l.Extra)
}

// UnmarshalJSON decodes l, keeping unnamed members in Extra.
func (l *FileList) UnmarshalJSON(b []byte) error {
	type plain FileList
	p := plain(*l)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*l = FileList(p)
	return nil
}

// FileEntry is one file of a workspace listing.
type FileEntry struct {
	// Path is the workspace-relative path. Required.
	Path string `json:"path"`
	// Size is the file's size in bytes. Required.
	Size int64 `json:"size"`
	// ContentType is the MIME type, if known.
	ContentType *string `json:"content_type,omitempty"`
	// Extra holds members this type does not name, kept as sent.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON encodes e followed by its Extra members.
func (e FileEntry) MarshalJSON() ([]byte, error) {
	type plain FileEntry
	return marshalExtra(plain(e), e.Extra)
}

// UnmarshalJSON decodes e, keeping unnamed members in Extra.
func (e *FileEntry) UnmarshalJSON(b []byte) error {
	type plain FileEntry
	p := plain(*e)
	extra, err := unmarshalExtra(b, &p)
	if err != nil {
		return err
	}
	p.Extra = extra
	*e = FileEntry(p)
	return nil
}
