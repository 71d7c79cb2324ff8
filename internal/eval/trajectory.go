package eval

import (
	"encoding/json"
	"fmt"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/internal/grade"
)

// TrajectoryInfo is what a run record keeps about its trajectory: the
// {valid, errors, schema_version} of SPEC §7.2.
type TrajectoryInfo struct {
	Valid         bool     `json:"valid"`
	Errors        []string `json:"errors"`
	SchemaVersion *string  `json:"schema_version"`
}

// maxTrajectoryErrors bounds the violations a run record keeps.
const maxTrajectoryErrors = 100

// checkTrajectory validates an ATIF document (SPEC §7.4) and returns what
// a run record keeps, plus the decoded trajectory when it is valid.
func checkTrajectory(doc []byte) (TrajectoryInfo, *atif.Trajectory) {
	res := atif.Check(doc)
	info := TrajectoryInfo{Valid: res.Valid(), Errors: []string{}}
	if res.SchemaVersion != "" {
		v := res.SchemaVersion
		info.SchemaVersion = &v
	}
	for i, v := range res.Violations {
		if i == maxTrajectoryErrors {
			info.Errors = append(info.Errors, fmt.Sprintf("… and %d more", len(res.Violations)-i+res.Omitted))
			break
		}
		info.Errors = append(info.Errors, v.String())
	}
	if len(res.Violations) <= maxTrajectoryErrors && res.Omitted > 0 {
		info.Errors = append(info.Errors, fmt.Sprintf("… and %d more", res.Omitted))
	}
	if !info.Valid {
		return info, nil
	}
	return info, res.Trajectory
}

// invalidTrajectory is the info of a trajectory that could not be read.
func invalidTrajectory(reason string) TrajectoryInfo {
	return TrajectoryInfo{Valid: false, Errors: []string{reason}}
}

// Evidence is what the graded item takes from a valid trajectory.
type Evidence struct {
	// ToolCalls are the trajectory's tool calls (outcome unknown: ATIF
	// records none), never nil.
	ToolCalls []grade.ToolCall
	// Steps counts agent steps; LLMCalls sums llm_call_count (1 per agent
	// step without one).
	Steps, LLMCalls int
	// Usage is token and cost evidence, nil when the trajectory has none.
	Usage *grade.Usage
}

// evidence reads the graded item's evidence from a valid trajectory.
// Steps copied from an earlier document are not counted.
func evidence(t *atif.Trajectory) Evidence {
	ev := Evidence{ToolCalls: []grade.ToolCall{}, Steps: t.AgentSteps(), LLMCalls: t.LLMCalls()}
	for _, u := range t.ToolUses() {
		id := u.ToolCallID
		call := grade.ToolCall{Name: u.FunctionName, Arguments: u.Arguments, Outcome: grade.OutcomeUnknown, ToolCallID: &id}
		if len(u.Results) > 0 {
			if out, err := json.Marshal(u.Output()); err == nil {
				call.Output = out
			}
		}
		ev.ToolCalls = append(ev.ToolCalls, call)
	}
	tu := t.TotalUsage()
	var u grade.Usage
	if tu.PromptTokens != nil {
		v := int64(*tu.PromptTokens)
		u.PromptTokens = &v
	}
	if tu.CompletionTokens != nil {
		v := int64(*tu.CompletionTokens)
		u.CompletionTokens = &v
	}
	u.CostUSD = tu.CostUSD
	// Without per-step metrics, the document's own totals are the
	// evidence.
	if fm := t.FinalMetrics; fm != nil {
		if u.PromptTokens == nil && fm.TotalPromptTokens != nil {
			v := int64(*fm.TotalPromptTokens)
			u.PromptTokens = &v
		}
		if u.CompletionTokens == nil && fm.TotalCompletionTokens != nil {
			v := int64(*fm.TotalCompletionTokens)
			u.CompletionTokens = &v
		}
		if u.CostUSD == nil && fm.TotalCostUSD != nil {
			c := *fm.TotalCostUSD
			u.CostUSD = &c
		}
	}
	if u.PromptTokens != nil || u.CompletionTokens != nil || u.CostUSD != nil {
		ev.Usage = &u
	}
	return ev
}
