package harnesskit

import (
	"bytes"
	"encoding/json"
	"slices"
)

// ATIFVersion is the schema_version of the trajectories a Server writes
// (reference/atif.md: Harbor's ATIF-v1.7).
const ATIFVersion = "ATIF-v1.7"

// The ATIF objects the kit writes. Harbor rejects unknown keys at every
// level, so these name only ATIF fields; optional ones are omitted when
// empty.
type atifTrajectory struct {
	SchemaVersion string            `json:"schema_version"`
	SessionID     string            `json:"session_id"`
	Agent         atifAgent         `json:"agent"`
	Steps         []atifStep        `json:"steps"`
	FinalMetrics  *atifFinalMetrics `json:"final_metrics,omitempty"`
	Extra         map[string]any    `json:"extra,omitempty"`
}

type atifAgent struct {
	Name            string            `json:"name"`
	Version         string            `json:"version"`
	ModelName       string            `json:"model_name,omitempty"`
	ToolDefinitions []json.RawMessage `json:"tool_definitions,omitempty"`
}

type atifStep struct {
	StepID           int              `json:"step_id"`
	Timestamp        string           `json:"timestamp,omitempty"`
	Source           string           `json:"source"`
	ModelName        string           `json:"model_name,omitempty"`
	ReasoningEffort  string           `json:"reasoning_effort,omitempty"`
	Message          string           `json:"message"`
	ReasoningContent string           `json:"reasoning_content,omitempty"`
	ToolCalls        []atifToolCall   `json:"tool_calls,omitempty"`
	Observation      *atifObservation `json:"observation,omitempty"`
	Metrics          *atifMetrics     `json:"metrics,omitempty"`
	LLMCallCount     *int             `json:"llm_call_count,omitempty"`
}

type atifToolCall struct {
	ToolCallID   string          `json:"tool_call_id"`
	FunctionName string          `json:"function_name"`
	Arguments    json.RawMessage `json:"arguments"`
}

type atifObservation struct {
	Results []atifResult `json:"results"`
}

type atifResult struct {
	SourceCallID string `json:"source_call_id,omitempty"`
	Content      string `json:"content"`
}

type atifMetrics struct {
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
	CachedTokens     int      `json:"cached_tokens"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
}

type atifFinalMetrics struct {
	TotalPromptTokens     *int     `json:"total_prompt_tokens,omitempty"`
	TotalCompletionTokens *int     `json:"total_completion_tokens,omitempty"`
	TotalCachedTokens     *int     `json:"total_cached_tokens,omitempty"`
	TotalCostUSD          *float64 `json:"total_cost_usd,omitempty"`
	TotalSteps            int      `json:"total_steps"`
}

func (s *atifStep) observe(res atifResult) {
	if s.Observation == nil {
		s.Observation = &atifObservation{}
	}
	s.Observation.Results = append(s.Observation.Results, res)
}

// finishTrajectoryLocked completes a trajectory the agent left empty, so
// that every terminal run has at least one step: the input as a user step,
// then the answer (or output) as an agent step when the run completed.
// r.mu is held.
func (r *Run) finishTrajectoryLocked() {
	if len(r.steps) > 0 {
		return
	}
	ts := formatTime(r.finishedAt)
	msg := r.Question()
	if msg == "" {
		msg = string(compact(r.input))
	}
	r.steps = append(r.steps, atifStep{StepID: 1, Timestamp: ts, Source: "user", Message: msg})
	if r.status != StatusCompleted {
		return
	}
	var answer string
	switch {
	case r.answer != nil:
		answer = *r.answer
	case r.output != nil:
		answer = string(r.output)
	}
	r.steps = append(r.steps, atifStep{StepID: 2, Timestamp: ts, Source: "agent", ModelName: r.model, Message: answer})
}

// trajectory returns r's ATIF document.
func (r *Run) trajectory(o *Options, tools []json.RawMessage) atifTrajectory {
	r.mu.Lock()
	defer r.mu.Unlock()
	session := r.id
	if r.sessionID != nil {
		session = *r.sessionID
	}
	t := atifTrajectory{
		SchemaVersion: ATIFVersion,
		SessionID:     session,
		Agent: atifAgent{
			Name:            o.Agent,
			Version:         o.AgentVersion,
			ModelName:       r.model,
			ToolDefinitions: tools,
		},
		Steps: slices.Clone(r.steps),
		Extra: map[string]any{"run_id": r.id, "status": r.status},
	}
	if r.errMsg != nil {
		t.Extra["error"] = *r.errMsg
	}
	fm := &atifFinalMetrics{TotalSteps: len(t.Steps)}
	var prompt, completion, cached int
	var cost float64
	var withMetrics, withCost bool
	for _, st := range t.Steps {
		if st.Metrics == nil {
			continue
		}
		withMetrics = true
		prompt += st.Metrics.PromptTokens
		completion += st.Metrics.CompletionTokens
		cached += st.Metrics.CachedTokens
		if st.Metrics.CostUSD != nil {
			withCost = true
			cost += *st.Metrics.CostUSD
		}
	}
	if withMetrics {
		fm.TotalPromptTokens, fm.TotalCompletionTokens, fm.TotalCachedTokens = &prompt, &completion, &cached
	}
	if withCost {
		fm.TotalCostUSD = &cost
	}
	t.FinalMetrics = fm
	return t
}

// toolDefinitions renders tool definitions in the OpenAI function-calling
// shape.
func toolDefinitions(defs []ToolDefinition) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for _, d := range defs {
		params := d.Parameters
		if params == nil {
			params = json.RawMessage(`{"type":"object"}`)
		}
		fn := map[string]any{"name": d.Name, "parameters": params}
		if d.Description != "" {
			fn["description"] = d.Description
		}
		b, err := marshal(map[string]any{"type": "function", "function": fn})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// compact returns raw without insignificant whitespace (raw itself when it
// does not compact).
func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}
