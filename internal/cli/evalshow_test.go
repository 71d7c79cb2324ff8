package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/grade"
)

// TestPrintShowRun pins the text form of one run in gyre eval show: the
// answer (or the output when there is none), the error, and every verdict
// with its reason, marked pass, FAIL or abstain.
func TestPrintShowRun(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		run  eval.ShowRun
		want string
	}{
		{"answer and verdicts", eval.ShowRun{CaseID: "refund", Repetition: 2, RunID: str("run-7"), Classification: str("failed"),
			Answer: str("Sorry,\nno."), Verdicts: []grade.Verdict{
				{Grader: "contains", Pass: &no, Reason: `"Refund" not found`},
				{Grader: "max_llm_calls", Pass: &yes, Reason: "2 calls"},
				{Grader: "judge", Reason: "judge_unavailable"},
			}}, `
refund #2  run-7  failed
  answer: Sorry,
          no.
  FAIL    contains: "Refund" not found
  pass    max_llm_calls: 2 calls
  abstain judge: judge_unavailable
`},
		{"output, no answer", eval.ShowRun{CaseID: "c", Repetition: 1, RunID: str("r"), Classification: str("passed"),
			Output: json.RawMessage("{\n  \"refund\": true\n}"), Verdicts: []grade.Verdict{}}, `
c #1  r  passed
  output: {"refund":true}
`},
		{"errored, timed out, nothing answered", eval.ShowRun{CaseID: "c", Repetition: 3, Classification: str("failed"), TimedOut: true,
			Error: str("timed out after 5m0s"), Output: json.RawMessage("null")}, `
c #3  -  failed (timed out)
  answer: -
  error:  timed out after 5m0s
`},
	}
	for _, tt := range tests {
		var b strings.Builder
		printShowRun(&b, tt.run)
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tt.name, b.String(), tt.want)
		}
	}
}
