package atif

import (
	"iter"
	"strings"
)

// The helpers below read a decoded trajectory the way the evaluator does.
// They all cover the trajectory and its embedded subagent trajectories
// (external ones, by trajectory_path, are not followed), and they all skip
// steps marked is_copied_context: such a step repeats work recorded in an
// earlier document, and counting it again would count it twice.

// All returns an iterator over t and its embedded subagent trajectories,
// depth first, each parent before its subagents.
func (t *Trajectory) All() iter.Seq[*Trajectory] {
	return func(yield func(*Trajectory) bool) {
		t.walk(yield)
	}
}

func (t *Trajectory) walk(yield func(*Trajectory) bool) bool {
	if !yield(t) {
		return false
	}
	for i := range t.SubagentTrajectories {
		if !t.SubagentTrajectories[i].walk(yield) {
			return false
		}
	}
	return true
}

// AgentSteps counts the agent steps of t and its embedded subagents.
func (t *Trajectory) AgentSteps() int {
	n := 0
	for tr := range t.All() {
		for i := range tr.Steps {
			if s := &tr.Steps[i]; s.Source == SourceAgent && !s.Copied() {
				n++
			}
		}
	}
	return n
}

// LLMCalls sums llm_call_count over the steps of t and its embedded
// subagents. A step without one counts 1 if it is an agent step (ATIF's
// one-inference-per-step convention) and 0 otherwise; a step with
// llm_call_count 0 is a deterministic dispatch and counts 0.
func (t *Trajectory) LLMCalls() int {
	n := 0
	for tr := range t.All() {
		for i := range tr.Steps {
			s := &tr.Steps[i]
			switch {
			case s.Copied():
			case s.LLMCallCount != nil:
				n += *s.LLMCallCount
			case s.Source == SourceAgent:
				n++
			}
		}
	}
	return n
}

// Usage is token and cost accounting. A nil field means no source reported
// it.
type Usage struct {
	// PromptTokens counts input tokens, cached ones included.
	PromptTokens *int `json:"prompt_tokens,omitempty"`
	// CompletionTokens counts generated tokens.
	CompletionTokens *int `json:"completion_tokens,omitempty"`
	// CachedTokens is the part of PromptTokens served from a prompt cache.
	CachedTokens *int `json:"cached_tokens,omitempty"`
	// CostUSD is the cost in US dollars.
	CostUSD *float64 `json:"cost_usd,omitempty"`
}

// TotalUsage sums the per-step metrics of t and its embedded subagents.
// Each total is nil when no step reports that field; final_metrics are
// not consulted (nothing ties them to the steps; read FinalMetrics for
// them).
func (t *Trajectory) TotalUsage() Usage {
	var u Usage
	addInt := func(dst **int, v *int) {
		if v == nil {
			return
		}
		if *dst == nil {
			*dst = new(int)
		}
		**dst += *v
	}
	for tr := range t.All() {
		for i := range tr.Steps {
			s := &tr.Steps[i]
			if s.Copied() || s.Metrics == nil {
				continue
			}
			m := s.Metrics
			addInt(&u.PromptTokens, m.PromptTokens)
			addInt(&u.CompletionTokens, m.CompletionTokens)
			addInt(&u.CachedTokens, m.CachedTokens)
			if m.CostUSD != nil {
				if u.CostUSD == nil {
					u.CostUSD = new(float64)
				}
				*u.CostUSD += *m.CostUSD
			}
		}
	}
	return u
}

// ToolUse is one tool call of a trajectory with the results that answer
// it.
type ToolUse struct {
	// Trajectory is the trajectory holding the call: the one asked, or one
	// of its embedded subagents.
	Trajectory *Trajectory
	// Step is the agent step that made the call.
	Step *Step
	// ToolCall is the call: FunctionName, Arguments, ToolCallID, Extra.
	ToolCall
	// Results are the step's observation results whose source_call_id is
	// the call's tool_call_id, in order; empty when none answers it.
	Results []ObservationResult
}

// Output returns the text of the call's results joined with newlines.
func (u ToolUse) Output() string {
	var texts []string
	for _, r := range u.Results {
		if r.Content != nil {
			texts = append(texts, r.Content.String())
		}
	}
	return strings.Join(texts, "\n")
}

// ToolUses lists every tool call of t and its embedded subagents in order,
// each with the results that answer it.
func (t *Trajectory) ToolUses() []ToolUse {
	var out []ToolUse
	for tr := range t.All() {
		for i := range tr.Steps {
			s := &tr.Steps[i]
			if s.Copied() {
				continue
			}
			for _, call := range s.ToolCalls {
				u := ToolUse{Trajectory: tr, Step: s, ToolCall: call}
				if s.Observation != nil {
					for _, r := range s.Observation.Results {
						if r.SourceCallID != nil && *r.SourceCallID == call.ToolCallID {
							u.Results = append(u.Results, r)
						}
					}
				}
				out = append(out, u)
			}
		}
	}
	return out
}
