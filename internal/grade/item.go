package grade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// ItemSchema is the version tag of the graded item's JSON form. A change to
// the meaning or shape of Item that a grader could observe needs a new tag.
const ItemSchema = "gyre.graded-item/1"

// Kind says what was graded.
type Kind string

// The kinds of graded item.
const (
	// KindRollout is a flywheel/1 rollout: the agent's RolloutOutput plus
	// what the gateway counted.
	KindRollout Kind = "rollout"
	// KindRun is an eval run against a Harness API v1 server.
	KindRun Kind = "run"
)

// Item is the graded item, gyre.graded-item/1: the one object every grader
// reads (and the JSON a command grader receives on stdin). Every key is
// always present in its JSON form; a key that does not apply to the kind, or
// whose evidence is missing, is null. The advisory reward, success and
// agent_fingerprint of a RolloutOutput are deliberately absent.
//
// JSON form (docs/graded-item.md):
//
//	{
//	  "schema": "gyre.graded-item/1",
//	  "kind": "rollout" | "run",
//	  "input": {…} | null,              // the case input
//	  "final_text": string | null,      // rollouts: RolloutOutput.final_text
//	  "answer": string | null,          // runs: RunStatus.answer
//	  "output": {…} | null,             // runs: RunStatus.output
//	  "tool_calls": [ToolCall…] | null, // null = not reported, [] = observed zero
//	  "tool_calls_omitted_count": int,
//	  "emitted_tool_calls": [EmittedToolCall…] | null,
//	  "artifacts": {name: Artifact} | null,
//	  "llm_calls": int | null,          // rollouts: counted gateway completions
//	  "usage": {"prompt_tokens", "completion_tokens", "cost_usd"} | null,
//	  "steps": int | null,
//	  "trajectory_valid": bool | null,  // runs
//	  "provides_tool_calls": bool | null // runs: capabilities provides.tool_calls
//	}
type Item struct {
	// Schema is ItemSchema; empty is read as ItemSchema.
	Schema string `json:"schema"`
	// Kind is rollout or run.
	Kind Kind `json:"kind"`
	// Input is the case input object, or null (JSON null or nil).
	Input json.RawMessage `json:"input"`
	// FinalText is the rollout's final text; nil on runs.
	FinalText *string `json:"final_text"`
	// Answer is the run's answer; nil on rollouts or when the harness gave none.
	Answer *string `json:"answer"`
	// Output is the run's structured output object, or null.
	Output json.RawMessage `json:"output"`
	// ToolCalls are the executed calls: for rollouts as the agent reported
	// them, for runs from the trajectory. nil means not reported (JSON null);
	// an empty non-nil slice means observed zero calls (JSON []).
	ToolCalls []ToolCall `json:"tool_calls"`
	// ToolCallsOmittedCount is the number of executed calls deliberately not
	// reported; non-zero makes the list incomplete.
	ToolCallsOmittedCount int `json:"tool_calls_omitted_count"`
	// EmittedToolCalls are the calls the gateway saw the model emit, in
	// completion order; nil when unknown (always nil on runs).
	EmittedToolCalls []EmittedToolCall `json:"emitted_tool_calls"`
	// Artifacts maps an artifact name to what was reported about it; nil
	// when none were reported.
	Artifacts map[string]Artifact `json:"artifacts"`
	// LLMCalls counts completions: for rollouts the gateway's counted
	// completions, for runs the sum of ATIF llm_call_count (1 per agent step
	// when absent). nil when unknown.
	LLMCalls *int `json:"llm_calls"`
	// Usage is token and cost evidence, nil when there is none.
	Usage *Usage `json:"usage"`
	// Steps is the number of agent steps (runs: ATIF agent steps; rollouts:
	// one per counted completion, as in the ATIF conversion), nil when unknown.
	Steps *int `json:"steps"`
	// TrajectoryValid is, on runs, whether a valid ATIF trajectory was
	// fetched; nil on rollouts.
	TrajectoryValid *bool `json:"trajectory_valid"`
	// ProvidesToolCalls is, on runs, the harness's provides.tool_calls; nil
	// on rollouts.
	ProvidesToolCalls *bool `json:"provides_tool_calls"`
}

// Outcome is a tool call's reported outcome. Unknown is a legal, honest
// value and is never read as ok.
type Outcome string

// The outcomes of the flywheel/1 ToolCallRecord.
const (
	OutcomeOK      Outcome = "ok"
	OutcomeFailed  Outcome = "failed"
	OutcomeUnknown Outcome = "unknown"
)

// ToolCall is one executed tool call. Its JSON form has the keys of the
// flywheel/1 ToolCallRecord, so a reported record decodes into it directly.
type ToolCall struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Outcome    Outcome         `json:"outcome"`
	StatusCode *int            `json:"status_code"`
	Output     json.RawMessage `json:"output"`
	Error      *string         `json:"error"`
	ErrorClass *string         `json:"error_class"`
	ToolCallID *string         `json:"tool_call_id"`
	// EntityIDs is the identity a write produced, by the field it came from
	// (id, key, uuid, sid, gid). nil or empty means no identity evidence.
	EntityIDs map[string]string `json:"entity_ids"`
	LatencyMS *float64          `json:"latency_ms"`
	AgentName *string           `json:"agent_name"`
}

// EmittedToolCall is a tool call the gateway saw the model emit in a
// completion. Arguments is the parsed arguments object when the model's
// arguments string was valid JSON, else that string.
type EmittedToolCall struct {
	Name          string          `json:"name"`
	Arguments     json.RawMessage `json:"arguments"`
	ToolCallID    *string         `json:"tool_call_id"`
	CompletionSeq int             `json:"completion_seq"`
}

// Usage is token and cost evidence. A nil field is unknown.
type Usage struct {
	PromptTokens     *int64   `json:"prompt_tokens"`
	CompletionTokens *int64   `json:"completion_tokens"`
	CostUSD          *float64 `json:"cost_usd"`
}

// Artifact is what was reported about one artifact. Exactly one of these
// shapes holds:
//   - inline: SHA256, SizeBytes and Content set;
//   - digest only: SHA256 set, Content nil (SizeBytes may be nil);
//   - skipped: Skipped holds the marker (e.g. "skipped:too_large:2000000000"),
//     everything else empty.
//
// Its JSON form is {"sha256", "size_bytes", "content", "skipped"} with every
// key present (null when empty). UnmarshalJSON also accepts the flywheel/1
// RolloutOutput forms: a digest or skip-marker string, or an inline
// {sha256, size_bytes, content} object.
type Artifact struct {
	SHA256    string
	SizeBytes *int64
	Content   *string
	Skipped   string
}

var (
	digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	skipRE   = regexp.MustCompile(`^skipped:[a-z_]+(:[0-9]+)?$`)
)

type artifactJSON struct {
	SHA256    *string `json:"sha256"`
	SizeBytes *int64  `json:"size_bytes"`
	Content   *string `json:"content"`
	Skipped   *string `json:"skipped"`
}

// MarshalJSON writes the item form of the artifact.
func (a Artifact) MarshalJSON() ([]byte, error) {
	var j artifactJSON
	if a.Skipped != "" {
		j.Skipped = &a.Skipped
	} else {
		j.SHA256 = &a.SHA256
		j.SizeBytes = a.SizeBytes
		j.Content = a.Content
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the item form or a flywheel/1 artifact value.
func (a *Artifact) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch {
		case digestRE.MatchString(s):
			*a = Artifact{SHA256: s}
		case skipRE.MatchString(s):
			*a = Artifact{Skipped: s}
		default:
			return fmt.Errorf("artifact %q is neither a sha256 digest nor a skip marker", s)
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j artifactJSON
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	if j.Skipped != nil {
		if j.SHA256 != nil || j.SizeBytes != nil || j.Content != nil {
			return errors.New("artifact: a skipped artifact carries no digest, size or content")
		}
		if !skipRE.MatchString(*j.Skipped) {
			return fmt.Errorf("artifact: bad skip marker %q", *j.Skipped)
		}
		*a = Artifact{Skipped: *j.Skipped}
		return nil
	}
	if j.SHA256 == nil || !digestRE.MatchString(*j.SHA256) {
		return errors.New("artifact: sha256 must be 64 lowercase hex digits")
	}
	if j.SizeBytes != nil && *j.SizeBytes < 0 {
		return errors.New("artifact: size_bytes must not be negative")
	}
	*a = Artifact{SHA256: *j.SHA256, SizeBytes: j.SizeBytes, Content: j.Content}
	return nil
}

// DigestOnly reports whether the artifact has a digest but no inline content.
func (a Artifact) DigestOnly() bool { return a.Skipped == "" && a.Content == nil }

// Text is the item's answer text: final_text on rollouts, answer on runs.
func (it *Item) Text() *string {
	if it.Kind == KindRun {
		return it.Answer
	}
	return it.FinalText
}

// Validate checks what graders rely on: a known schema and kind, known
// outcomes, no negative counts.
func (it *Item) Validate() error {
	if it.Schema != "" && it.Schema != ItemSchema {
		return fmt.Errorf("graded item: unsupported schema %q", it.Schema)
	}
	if it.Kind != KindRollout && it.Kind != KindRun {
		return fmt.Errorf("graded item: kind must be rollout or run, not %q", it.Kind)
	}
	if it.ToolCallsOmittedCount < 0 {
		return errors.New("graded item: tool_calls_omitted_count is negative")
	}
	for i, c := range it.ToolCalls {
		switch c.Outcome {
		case OutcomeOK, OutcomeFailed, OutcomeUnknown:
		default:
			return fmt.Errorf("graded item: tool_calls[%d]: outcome must be ok, failed or unknown, not %q", i, c.Outcome)
		}
		if c.Name == "" {
			return fmt.Errorf("graded item: tool_calls[%d]: empty name", i)
		}
	}
	if it.LLMCalls != nil && *it.LLMCalls < 0 {
		return errors.New("graded item: llm_calls is negative")
	}
	if it.Steps != nil && *it.Steps < 0 {
		return errors.New("graded item: steps is negative")
	}
	return nil
}

// MarshalJSON writes the item with its schema tag always set.
func (it Item) MarshalJSON() ([]byte, error) {
	type plain Item
	p := plain(it)
	if p.Schema == "" {
		p.Schema = ItemSchema
	}
	if len(p.Input) == 0 {
		p.Input = nil
	}
	if len(p.Output) == 0 {
		p.Output = nil
	}
	return json.Marshal(p)
}

// isNull reports whether raw is absent or the JSON null literal.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
