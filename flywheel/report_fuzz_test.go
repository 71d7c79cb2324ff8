package flywheel_test

import (
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

// FuzzParseReport feeds agent-written reports to the parser gyre worker
// runs on them: it never panics, and a report it accepts re-encodes to a
// report it accepts again with the same meaning.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"final_text":"hi","tool_calls":[]}`, `{"tool_calls":null}`,
		`{"tool_calls":[{"name":"t","outcome":"unknown","status_code":null,"output":{"a":1}}],"llm_call_count":2}`,
		`{"exclusion":{"reason":"credential_expired","detail":null},"events":[{"x":1}],"reward":-0.5,"success":false}`,
		`{"final_text":"a","final_text":"b"}`, `{"timing":{}}`, `[]`, `"x"`, `{"llm_call_count":1e300}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := flywheel.ParseReport(b)
		if err != nil {
			return
		}
		again, err := rep.Marshal()
		if err != nil {
			t.Fatalf("an accepted report does not re-encode: %v\n%s", err, b)
		}
		rep2, err := flywheel.ParseReport(again)
		if err != nil {
			t.Fatalf("a re-encoded report is refused: %v\n%s", err, again)
		}
		if rep.ToolCalls.IsNull() != rep2.ToolCalls.IsNull() || rep.ToolCalls.IsAbsent() != rep2.ToolCalls.IsAbsent() {
			t.Fatalf("tool_calls changed state: %s -> %s", b, again)
		}
	})
}
