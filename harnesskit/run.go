package harnesskit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// ErrRunFinished is returned by a Run method that records something after
// the run reached a terminal status: a trajectory is frozen once served.
var ErrRunFinished = errors.New("harnesskit: the run has finished")

// Run is the handle an Agent gets for one run: the request (input, model,
// metadata, fixture files) and the recorders for its trajectory, workspace
// and display data. Its methods are safe for concurrent use.
type Run struct {
	id       string
	input    json.RawMessage
	metadata *RunMetadata
	refs     []FileRef // as requested, before delivery
	uploads  []File    // multipart bytes, in refs order
	files    []File    // delivered, set before the agent starts
	log      *slog.Logger
	now      func() time.Time
	ws       *workspace
	done     chan struct{} // closed when the run is terminal

	mu            sync.Mutex
	status        Status
	model         string
	title         *string
	sessionID     *string
	userID        *string
	clientID      *string
	createdAt     time.Time
	startedAt     time.Time
	finishedAt    time.Time
	seq           uint64 // creation order, for ties in created_at
	steps         []atifStep
	artifacts     []ArtifactRef
	answer        *string
	output        json.RawMessage
	errMsg        *string
	cancel        context.CancelFunc
	stopRequested bool
}

// ID returns the run's id, the run_id of every endpoint.
func (r *Run) ID() string { return r.id }

// Input returns the run input, verbatim as the request sent it: a JSON
// object that matched the input schema.
func (r *Run) Input() json.RawMessage { return r.input }

// DecodeInput decodes the run input into v.
func (r *Run) DecodeInput(v any) error {
	if err := json.Unmarshal(r.input, v); err != nil {
		return fmt.Errorf("decode run input: %w", err)
	}
	return nil
}

// Question returns the input's "question" member when it is a string (the
// contract's default input), else "".
func (r *Run) Question() string {
	var in struct {
		Question any `json:"question"`
	}
	if json.Unmarshal(r.input, &in) != nil {
		return ""
	}
	q, _ := in.Question.(string)
	return q
}

// Metadata returns the request's metadata (experiment, case, repetition),
// or nil when it sent none.
func (r *Run) Metadata() *RunMetadata { return r.metadata }

// Files returns the run's fixture files, in request order.
func (r *Run) Files() []File { return slices.Clone(r.files) }

// File returns the fixture file called name.
func (r *Run) File(name string) (File, bool) {
	i := slices.IndexFunc(r.files, func(f File) bool { return f.Name == name })
	if i < 0 {
		return File{}, false
	}
	return r.files[i], true
}

// Model returns the model the run executes on: the requested one when the
// harness accepts model_override and the request named one, else
// Options.Model, unless the agent changed it with SetModel.
func (r *Run) Model() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.model
}

// SetModel changes the model the run reports, for an agent that resolved
// which model it really used. An empty model is ignored.
func (r *Run) SetModel(model string) {
	if model == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.model = model
}

// Logger returns the server's logger with the run id attached.
func (r *Run) Logger() *slog.Logger { return r.log }

// SetTitle sets the run's display title in GET /runs (default: the input's
// question on one line, cut to 200 characters).
func (r *Run) SetTitle(title string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.title = &title
}

// SetSessionID puts the run in a session: GET /runs lists the runs of one
// session once, as the newest of them, and the trajectory's session_id is
// the session's (default: the run id).
func (r *Run) SetSessionID(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sessionID = nilIfEmpty(id)
}

// SetUserID sets the user the run belongs to, a GET /runs filter value.
func (r *Run) SetUserID(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.userID = nilIfEmpty(id)
}

// SetClientID sets the client the run belongs to, a GET /runs filter value.
func (r *Run) SetClientID(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clientID = nilIfEmpty(id)
}

// AddSystemMessage records a system step (the system prompt).
func (r *Run) AddSystemMessage(text string) error {
	return r.addStep(atifStep{Source: "system", Message: text})
}

// AddUserMessage records a user step.
func (r *Run) AddUserMessage(text string) error {
	return r.addStep(atifStep{Source: "user", Message: text})
}

// AgentStep is one agent turn of a trajectory: usually one model call, with
// its text, reasoning, tool calls and token usage.
type AgentStep struct {
	// Message is the assistant's text; empty is usual for a turn that only
	// calls tools.
	Message string
	// Reasoning is the model's explicit reasoning, if it exposes any.
	Reasoning string
	// ReasoningEffort is the effort the model was asked for ("low", …).
	ReasoningEffort string
	// ToolCalls are the tools the turn calls. A call without an ID gets
	// "call_<step>_<n>" (n from 1); record results with AddToolResult.
	ToolCalls []ToolCall
	// Model is the model of this turn; default the run's model.
	Model string
	// Metrics is the turn's token usage, if known.
	Metrics *Metrics
	// LLMCallCount is how many model calls the turn aggregates: nil when
	// not tracked, 0 for a deterministic (non-model) decision, which then
	// carries neither Metrics nor Reasoning.
	LLMCallCount *int
}

// ToolCall is one tool call of an agent step.
type ToolCall struct {
	// ID identifies the call; results name it. Unique within the step.
	ID string
	// Name is the tool's function name.
	Name string
	// Arguments is the arguments object; nil means {}. A JSON string of an
	// object, as the OpenAI wire format sends it, is decoded.
	Arguments json.RawMessage
}

// Metrics is one agent step's token usage.
type Metrics struct {
	// PromptTokens counts every input token, cached ones included.
	PromptTokens int
	// CompletionTokens counts generated tokens, reasoning and tool calls
	// included.
	CompletionTokens int
	// CachedTokens is the part of PromptTokens served from a prompt cache.
	CachedTokens int
	// CostUSD is the call's cost, if known.
	CostUSD *float64
}

// AddAgentStep records an agent step and returns its step id (1-based). It
// refuses tool calls without a name, with duplicate ids or with arguments
// that are not a JSON object, and LLMCallCount 0 with metrics or reasoning.
func (r *Run) AddAgentStep(s AgentStep) (int, error) {
	st := atifStep{
		Source:           "agent",
		Message:          s.Message,
		ReasoningContent: s.Reasoning,
		ReasoningEffort:  s.ReasoningEffort,
		ModelName:        s.Model,
		LLMCallCount:     s.LLMCallCount,
	}
	if s.LLMCallCount != nil {
		switch {
		case *s.LLMCallCount < 0:
			return 0, errors.New("harnesskit: LLMCallCount must not be negative")
		case *s.LLMCallCount == 0 && (s.Metrics != nil || s.Reasoning != ""):
			return 0, errors.New("harnesskit: a step with LLMCallCount 0 carries no metrics or reasoning")
		}
	}
	if m := s.Metrics; m != nil {
		st.Metrics = &atifMetrics{
			PromptTokens:     m.PromptTokens,
			CompletionTokens: m.CompletionTokens,
			CachedTokens:     m.CachedTokens,
			CostUSD:          m.CostUSD,
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.IsTerminal() {
		return 0, ErrRunFinished
	}
	id := len(r.steps) + 1
	seen := map[string]bool{}
	for i, tc := range s.ToolCalls {
		if tc.Name == "" {
			return 0, fmt.Errorf("harnesskit: tool call %d has no name", i)
		}
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d_%d", id, i+1)
		}
		if seen[tc.ID] {
			return 0, fmt.Errorf("harnesskit: tool call id %q appears twice in one step", tc.ID)
		}
		seen[tc.ID] = true
		args, err := toolArguments(tc.Arguments)
		if err != nil {
			return 0, fmt.Errorf("harnesskit: tool call %q: %w", tc.ID, err)
		}
		st.ToolCalls = append(st.ToolCalls, atifToolCall{ToolCallID: tc.ID, FunctionName: tc.Name, Arguments: args})
	}
	st.StepID = id
	st.Timestamp = formatTime(r.now())
	if st.ModelName == "" {
		st.ModelName = r.model
	}
	r.steps = append(r.steps, st)
	return id, nil
}

// toolArguments returns raw as a JSON object: nil is {}, a JSON string
// holding an object (OpenAI's wire form) is decoded, anything else that is
// not an object is refused.
func toolArguments(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("{}"), nil
	}
	if isJSONObject(raw) {
		return compact(raw), nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && isJSONObject(json.RawMessage(s)) {
		return compact(json.RawMessage(s)), nil
	}
	return nil, errors.New("arguments must be a JSON object")
}

// AddToolResult records the result of the tool call callID, as an
// observation of the agent step that made the call.
func (r *Run) AddToolResult(callID, content string) error {
	if callID == "" {
		return errors.New("harnesskit: AddToolResult needs the tool call id")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.IsTerminal() {
		return ErrRunFinished
	}
	for i := len(r.steps) - 1; i >= 0; i-- {
		st := &r.steps[i]
		if slices.ContainsFunc(st.ToolCalls, func(tc atifToolCall) bool { return tc.ToolCallID == callID }) {
			st.observe(atifResult{SourceCallID: callID, Content: content})
			return nil
		}
	}
	return fmt.Errorf("harnesskit: no agent step made tool call %q", callID)
}

// AddObservation records the result of an action that is not a structured
// tool call (shell output, an environment event) on the latest agent step.
func (r *Run) AddObservation(content string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.IsTerminal() {
		return ErrRunFinished
	}
	for i := len(r.steps) - 1; i >= 0; i-- {
		if r.steps[i].Source == "agent" {
			r.steps[i].observe(atifResult{Content: content})
			return nil
		}
	}
	return errors.New("harnesskit: no agent step to attach the observation to")
}

// AddArtifact reports a deliverable in RunStatus.artifacts. Its Path, when
// set, should be a workspace path (see WriteArtifact).
func (r *Run) AddArtifact(a ArtifactRef) error {
	if a.Name == "" {
		return errors.New("harnesskit: an artifact needs a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.IsTerminal() {
		return ErrRunFinished
	}
	r.artifacts = append(r.artifacts, a)
	return nil
}

// WriteFile writes data to the workspace-relative path name (slash
// separated, no "..", no leading slash), creating parent directories. The
// evaluator reads the workspace through GET /runs/{id}/files.
func (r *Run) WriteFile(name string, data []byte) error {
	r.mu.Lock()
	done := r.status.IsTerminal()
	r.mu.Unlock()
	if done {
		return ErrRunFinished
	}
	return r.ws.writeFile(name, data)
}

// WriteArtifact writes a workspace file and reports it as an artifact
// named after its path.
func (r *Run) WriteArtifact(name string, data []byte, contentType string) error {
	if err := r.WriteFile(name, data); err != nil {
		return err
	}
	a := ArtifactRef{Name: name, Path: &name}
	if contentType != "" {
		a.ContentType = &contentType
	}
	return r.AddArtifact(a)
}

// Workspace returns the run's workspace directory as an *os.Root, created
// on first use, for agents that run tools in it. The root is closed when
// the run is dropped; do not close it.
func (r *Run) Workspace() (*os.Root, error) { return r.ws.root(true) }

// addStep appends a system or user step.
func (r *Run) addStep(st atifStep) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.IsTerminal() {
		return ErrRunFinished
	}
	st.StepID = len(r.steps) + 1
	st.Timestamp = formatTime(r.now())
	r.steps = append(r.steps, st)
	return nil
}

// statusLocked returns the RunStatus of r; r.mu is held.
func (r *Run) statusLocked() RunStatus {
	st := RunStatus{
		Status: r.status,
		Model:  r.model,
		Answer: r.answer,
		Output: r.output,
		Error:  r.errMsg,
	}
	if len(r.artifacts) > 0 {
		st.Artifacts = slices.Clone(r.artifacts)
	}
	extra := map[string]json.RawMessage{"created_at": jsonString(formatTime(r.createdAt))}
	if !r.startedAt.IsZero() {
		extra["started_at"] = jsonString(formatTime(r.startedAt))
	}
	if !r.finishedAt.IsZero() {
		extra["finished_at"] = jsonString(formatTime(r.finishedAt))
	}
	st.Extra = extra
	return st
}

// runStatus returns the RunStatus of r.
func (r *Run) runStatus() RunStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusLocked()
}

// listItem returns r's GET /runs entry and the fields listing filters on.
func (r *Run) listItem() listEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return listEntry{
		id:        r.id,
		title:     r.title,
		userID:    r.userID,
		clientID:  r.clientID,
		sessionID: r.sessionID,
		createdAt: r.createdAt,
		seq:       r.seq,
		status:    r.status,
	}
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// formatTime writes t as RFC 3339 in UTC with the precision it has.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func jsonString(s string) json.RawMessage {
	b, _ := marshal(s)
	return b
}
