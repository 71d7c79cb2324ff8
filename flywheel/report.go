package flywheel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gyrehq/gyre/internal/jcs"
)

// Report is the optional JSON file an agent running under gyre worker
// writes at the path in GYRE_REPORT (SPEC §5). It carries what only the
// agent knows; the worker adds stdout (when final_text is missing),
// artifacts and timing, and submits the RolloutOutput.
//
// Its members have the same types and rules as in RolloutOutput. Every
// member is optional; a member the agent does not know is left absent.
// Absent tool_calls means not reported (the rollout then cannot be
// training grade); Some of an empty slice asserts zero calls.
type Report struct {
	// FinalText is the agent's final answer; absent means "use stdout".
	FinalText *string `json:"final_text,omitempty"`
	// ToolCalls is every tool call the agent executed, or null when it
	// cannot report them all. Never a partial list.
	ToolCalls Optional[[]ToolCallRecord] `json:"tool_calls,omitzero"`
	// ToolCallsOmittedCount counts executed calls deliberately left out.
	ToolCallsOmittedCount *int `json:"tool_calls_omitted_count,omitempty"`
	// LLMCallCount is how many completions the agent believes it issued.
	LLMCallCount Optional[int] `json:"llm_call_count,omitzero"`
	// Success is the agent's own view of whether it succeeded.
	Success Optional[bool] `json:"success,omitzero"`
	// Reward is advisory only.
	Reward Optional[float64] `json:"reward,omitzero"`
	// Events are the agent's event objects; the worker appends its own.
	Events []json.RawMessage `json:"events,omitzero"`
	// Exclusion is the agent's own "do not train" signal, e.g.
	// credential_expired or substrate_unavailable.
	Exclusion Optional[Exclusion] `json:"exclusion,omitzero"`
	// AgentFingerprint is the customer-declared scaffold identity object.
	AgentFingerprint json.RawMessage `json:"agent_fingerprint,omitempty"`
}

// ReportKeys lists the members a Report may carry. Anything else (timing
// and artifacts are the worker's) makes a report invalid.
var ReportKeys = []string{
	"final_text", "tool_calls", "tool_calls_omitted_count", "llm_call_count",
	"success", "reward", "events", "exclusion", "agent_fingerprint",
}

// MaxReportBytes caps the size of a report file the worker reads.
const MaxReportBytes = 8 << 20

// ParseReport decodes and checks a report: a JSON object with only
// ReportKeys, each valid under the contract's RolloutOutput rules. The
// error is a *ValidationError (with pointers) for a report that breaks the
// contract, or a plain error for one that is not a JSON object.
func ParseReport(b []byte) (Report, error) {
	if len(b) > MaxReportBytes {
		return Report{}, fmt.Errorf("report is %d bytes, over the %d byte limit", len(b), MaxReportBytes)
	}
	tree, err := jcs.Parse(b)
	if err != nil {
		if verr := Validate(DefRolloutOutput, b); verr != nil {
			return Report{}, verr // explains the parse error with a pointer
		}
		return Report{}, fmt.Errorf("report: %w", err)
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return Report{}, errors.New("report must be a JSON object")
	}
	var extra []string
	for k := range obj {
		if !slices.Contains(ReportKeys, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		vs := make([]Violation, len(extra))
		for i, k := range extra {
			vs[i] = Violation{Pointer: "/" + jcs.EscapePointerToken(k),
				Message: fmt.Sprintf("a report may not carry %q (it may carry %s)", k, strings.Join(ReportKeys, ", "))}
		}
		return Report{}, &ValidationError{Def: DefRolloutOutput, Violations: vs}
	}
	// Validate as the RolloutOutput it becomes: the same members, with a
	// placeholder final_text when the report has none.
	if _, ok := obj["final_text"]; !ok {
		obj["final_text"] = ""
	}
	canon, err := jcs.Marshal(obj)
	if err != nil {
		return Report{}, fmt.Errorf("report: %w", err)
	}
	if err := Validate(DefRolloutOutput, canon); err != nil {
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("report: %w", err)
	}
	return r, nil
}

// Marshal encodes r, checked with ParseReport's rules.
func (r Report) Marshal() ([]byte, error) {
	b, err := marshal(r)
	if err != nil {
		return nil, fmt.Errorf("flywheel: encode report: %w", err)
	}
	if _, err := ParseReport(b); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteReportFile writes r to path atomically (a temporary file in the same
// directory, then a rename), so the worker never reads half a report.
func WriteReportFile(path string, r Report) error {
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".report-*")
	if err != nil {
		return fmt.Errorf("flywheel: write report: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("flywheel: write report: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("flywheel: write report: %w", err)
	}
	return nil
}
