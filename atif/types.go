package atif

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// This file holds one Go type per ATIF object. One set of types covers
// every field of ATIF-v1.0 to ATIF-v1.7; which fields a given
// schema_version allows is the validator's business, not the types'.
//
// ATIF treats null and absent alike for every optional field, so optional
// scalars are pointers and optional slices use omitzero (nil is absent, an
// empty non-nil slice is written as []). Members whose shape ATIF leaves
// open (extra, arguments, tool definitions, a numeric-or-string
// reasoning_effort) are json.RawMessage, kept as sent.
//
// Parse is the way in: it validates and decodes in one pass. json.Unmarshal
// into these types checks nothing and rejects integral numbers written with
// a fraction or exponent (1.0, 1e3), which ATIF allows for integer fields.

// Source is who produced a step.
type Source string

// The step sources of ATIF.
const (
	SourceSystem Source = "system"
	SourceUser   Source = "user"
	SourceAgent  Source = "agent"
)

// Trajectory is an ATIF document: one agent run (the root object), or an
// embedded subagent run inside a parent's SubagentTrajectories.
type Trajectory struct {
	// SchemaVersion is the document's ATIF version, e.g. "ATIF-v1.7". It
	// must be listed in atif-accepted.json.
	SchemaVersion string `json:"schema_version"`
	// SessionID identifies the run. Required before ATIF-v1.7; from v1.7 it
	// is run-scoped and several documents may share it.
	SessionID *string `json:"session_id,omitempty"`
	// TrajectoryID identifies this document (v1.7+). Required, and unique
	// among siblings, on every embedded subagent trajectory.
	TrajectoryID *string `json:"trajectory_id,omitempty"`
	// Agent describes the agent system.
	Agent Agent `json:"agent"`
	// Steps are the run's steps, step_id 1, 2, … in order; at least one.
	Steps []Step `json:"steps"`
	// Notes is free text, e.g. why FinalMetrics.TotalSteps differs from
	// len(Steps).
	Notes *string `json:"notes,omitempty"`
	// FinalMetrics holds run totals; nothing checks them against the steps.
	FinalMetrics *FinalMetrics `json:"final_metrics,omitempty"`
	// ContinuedTrajectoryRef is the path or URI of the document that
	// continues this one after a context reset (v1.5+).
	ContinuedTrajectoryRef *string `json:"continued_trajectory_ref,omitempty"`
	// Extra is custom root metadata, a JSON object (v1.1+).
	Extra json.RawMessage `json:"extra,omitempty"`
	// SubagentTrajectories are embedded, independently valid subagent runs
	// (v1.7+), referenced from observations by trajectory_id.
	SubagentTrajectories []Trajectory `json:"subagent_trajectories,omitzero"`
}

// Agent is the agent system that produced a trajectory.
type Agent struct {
	// Name is the agent system's name (terminus-2, openhands, …).
	Name string `json:"name"`
	// Version is the agent's version; any string, multi-line banners
	// included.
	Version string `json:"version"`
	// ModelName is the run's default model; a step's ModelName overrides it.
	ModelName *string `json:"model_name,omitempty"`
	// ToolDefinitions are the tools offered to the model, each a JSON object,
	// conventionally in OpenAI function-calling shape (v1.5+).
	ToolDefinitions []json.RawMessage `json:"tool_definitions,omitzero"`
	// Extra is custom agent configuration, a JSON object.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Step is one turn of a trajectory.
type Step struct {
	// StepID is the step's 1-based position in Steps.
	StepID int `json:"step_id"`
	// Timestamp is when the step happened, ISO 8601.
	Timestamp *string `json:"timestamp,omitempty"`
	// Source is who produced the step.
	Source Source `json:"source"`
	// ModelName is the model used for this turn (agent steps only).
	ModelName *string `json:"model_name,omitempty"`
	// ReasoningEffort is a JSON string ("low", …) or number (agent steps
	// only), kept as sent.
	ReasoningEffort json.RawMessage `json:"reasoning_effort,omitempty"`
	// Message is the system prompt, the user's text or the agent's reply;
	// it may be "" (usual for pure tool-call turns).
	Message Content `json:"message"`
	// ReasoningContent is the agent's explicit reasoning (agent steps only).
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	// ToolCalls are the tool calls the agent made in this step (agent steps
	// only).
	ToolCalls []ToolCall `json:"tool_calls,omitzero"`
	// Observation holds the results of this step's actions.
	Observation *Observation `json:"observation,omitempty"`
	// Metrics are the step's LLM metrics (agent steps only).
	Metrics *Metrics `json:"metrics,omitempty"`
	// IsCopiedContext marks a step copied from an earlier trajectory for
	// context; consumers drop such steps from training data (v1.5+).
	IsCopiedContext *bool `json:"is_copied_context,omitempty"`
	// LLMCallCount is how many LLM inferences the step stands for (v1.7+):
	// nil is not tracked, 0 a deterministic dispatch (then Metrics and
	// ReasoningContent are absent), above 1 aggregated metrics.
	LLMCallCount *int `json:"llm_call_count,omitempty"`
	// Extra is custom step metadata, a JSON object.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Copied reports whether the step is marked is_copied_context: true.
func (s *Step) Copied() bool { return s.IsCopiedContext != nil && *s.IsCopiedContext }

// ToolCall is one tool call an agent step made.
type ToolCall struct {
	// ToolCallID identifies the call; observation results answer it by
	// source_call_id in the same step.
	ToolCallID string `json:"tool_call_id"`
	// FunctionName is the tool's name.
	FunctionName string `json:"function_name"`
	// Arguments is the call's argument object (never a JSON-encoded
	// string), kept as sent.
	Arguments json.RawMessage `json:"arguments"`
	// Extra is custom per-call metadata, a JSON object (v1.7+).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Observation is what a step's actions produced.
type Observation struct {
	// Results are the individual results; possibly empty, never absent.
	Results []ObservationResult `json:"results"`
}

// MarshalJSON writes o, with a nil Results as [].
func (o Observation) MarshalJSON() ([]byte, error) {
	type plain Observation
	if o.Results == nil {
		o.Results = []ObservationResult{}
	}
	return json.Marshal(plain(o))
}

// ObservationResult is one result of a step's actions.
type ObservationResult struct {
	// SourceCallID is the tool_call_id this result answers; nil for the
	// result of an action that was not a structured tool call.
	SourceCallID *string `json:"source_call_id,omitempty"`
	// Content is the result's output; nil when absent.
	Content *Content `json:"content,omitempty"`
	// SubagentTrajectoryRef names the subagent runs this result delegated
	// to, one entry per subagent.
	SubagentTrajectoryRef []SubagentTrajectoryRef `json:"subagent_trajectory_ref,omitzero"`
	// Extra is custom result metadata, a JSON object (v1.7+).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// SubagentTrajectoryRef points at a subagent's trajectory: embedded (by
// TrajectoryID) or in another file (by TrajectoryPath).
type SubagentTrajectoryRef struct {
	// SessionID is the subagent's session: required before v1.7,
	// informational from v1.7 on and never used to resolve the reference.
	SessionID *string `json:"session_id,omitempty"`
	// TrajectoryID matches the TrajectoryID of an embedded subagent
	// trajectory (v1.7+).
	TrajectoryID *string `json:"trajectory_id,omitempty"`
	// TrajectoryPath is a path, URL or database reference of an external
	// trajectory document. From v1.7 a reference carries TrajectoryID,
	// TrajectoryPath or both.
	TrajectoryPath *string `json:"trajectory_path,omitempty"`
	// Extra is custom metadata, a JSON object.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Metrics are one agent step's LLM metrics; every field is optional.
type Metrics struct {
	// PromptTokens counts every input token, cached ones included.
	PromptTokens *int `json:"prompt_tokens,omitempty"`
	// CompletionTokens counts generated tokens, reasoning and tool-call
	// tokens included.
	CompletionTokens *int `json:"completion_tokens,omitempty"`
	// CachedTokens is the part of PromptTokens served from a prompt cache.
	CachedTokens *int `json:"cached_tokens,omitempty"`
	// CostUSD is the call's cost at run time (may be 0).
	CostUSD *float64 `json:"cost_usd,omitempty"`
	// PromptTokenIDs are the token ids sent, history included (v1.4+).
	PromptTokenIDs []int `json:"prompt_token_ids,omitzero"`
	// CompletionTokenIDs are the generated token ids (v1.3+).
	CompletionTokenIDs []int `json:"completion_token_ids,omitzero"`
	// Logprobs holds one log-probability per completion token.
	Logprobs []float64 `json:"logprobs,omitzero"`
	// Extra holds provider-specific numbers, a JSON object.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// FinalMetrics are a trajectory's totals; every field is optional.
type FinalMetrics struct {
	// TotalPromptTokens sums the steps' prompt tokens.
	TotalPromptTokens *int `json:"total_prompt_tokens,omitempty"`
	// TotalCompletionTokens sums the steps' completion tokens.
	TotalCompletionTokens *int `json:"total_completion_tokens,omitempty"`
	// TotalCachedTokens sums the steps' cached tokens.
	TotalCachedTokens *int `json:"total_cached_tokens,omitempty"`
	// TotalCostUSD is the run's cost, subagents included.
	TotalCostUSD *float64 `json:"total_cost_usd,omitempty"`
	// TotalSteps counts steps (≥ 0); Notes explains a difference from
	// len(Steps).
	TotalSteps *int `json:"total_steps,omitempty"`
	// Extra is custom metadata, a JSON object.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// The content part types of ATIF-v1.6+.
const (
	PartText  = "text"
	PartImage = "image"
)

// ContentPart is one part of a multimodal message or result (v1.6+).
type ContentPart struct {
	// Type is PartText or PartImage.
	Type string `json:"type"`
	// Text is the text of a text part; nil on an image part.
	Text *string `json:"text,omitempty"`
	// Source locates the image of an image part; nil on a text part.
	Source *ImageSource `json:"source,omitempty"`
}

// ImageSource locates an image file; images are never inlined.
type ImageSource struct {
	// MediaType is image/jpeg, image/png, image/gif or image/webp.
	MediaType string `json:"media_type"`
	// Path is relative to the trajectory file, absolute, or a URL.
	Path string `json:"path"`
}

// Content is a step message or a result's content: a plain string, or
// (v1.6+) an array of content parts. Parts non-nil means the array form,
// even when empty; otherwise Text is the string.
type Content struct {
	// Text is the string form.
	Text string
	// Parts is the array form when non-nil.
	Parts []ContentPart
}

// TextContent returns the string form of s.
func TextContent(s string) Content { return Content{Text: s} }

// IsParts reports whether c is in array form.
func (c Content) IsParts() bool { return c.Parts != nil }

// String returns the text of c: the string form, or the text parts joined
// with newlines (image parts contribute nothing).
func (c Content) String() string {
	if c.Parts == nil {
		return c.Text
	}
	var texts []string
	for _, p := range c.Parts {
		if p.Type == PartText && p.Text != nil {
			texts = append(texts, *p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// MarshalJSON writes the string or the array of parts.
func (c Content) MarshalJSON() ([]byte, error) {
	if c.Parts != nil {
		return json.Marshal(c.Parts)
	}
	return json.Marshal(c.Text)
}

// UnmarshalJSON reads a string or an array of parts; anything else is an
// error. It checks nothing else: use Parse to validate.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if bytes.Equal(b, []byte("null")) {
		return nil // the encoding/json convention: null leaves c as it is
	}
	if len(b) > 0 && b[0] == '[' {
		parts := []ContentPart{}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		*c = Content{Parts: parts}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("atif: content must be a string or an array of content parts")
	}
	*c = Content{Text: s}
	return nil
}
