package atif_test

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/atif"
)

// FuzzValidate checks that the validator never panics, lists at most
// MaxViolations violations, each with a message, and that whatever it
// accepts it decodes into a Trajectory that encodes back into a valid
// document the helpers can read.
//
// Only the smallest samples seed it: the fuzzer minimises each new
// interesting input byte by byte, which on a multi-kilobyte seed takes
// longer than a CI fuzz run; the large samples are covered by the tests.
func FuzzValidate(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		for _, b := range readFiles(f, dir) {
			if len(b) <= 2<<10 {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(doc("ATIF-v1.7", step("agent", `"tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{"a":[1,{"b":null}]}}]`, `"observation":{"results":[{"source_call_id":"c","content":[{"type":"image","source":{"media_type":"image/png","path":"x"}}]}]}`, `"llm_call_count":0`))))
	f.Add([]byte(`{"steps":[{"step_id":1e0,"source":"agent","message":"","metrics":{"logprobs":[1e-400,-0]}}],"schema_version":"ATIF-v1.2","session_id":"\ud800","agent":{"name":"a","version":"1","name":"b"}}`))
	f.Add([]byte(`{"schema_version":"ATIF-v1.7","agent":{"name":"a","version":"1"},"steps":[{"step_id":1,"source":"user","message":"x"}],"subagent_trajectories":[{"trajectory_id":"a","schema_version":"ATIF-v1.0","agent":{},"steps":[{}]}]}`))
	f.Add([]byte(`[[[[[[[[[[[[]]]]]]]]]]]]`))
	f.Add([]byte("\xef\xbb\xbf{}"))
	v, err := atif.NewValidator(atif.Options{MaxViolations: 50, MaxDepth: 64})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := v.Check(data)
		if len(r.Violations) > 50 {
			t.Fatalf("%d violations listed, limit 50", len(r.Violations))
		}
		for _, vi := range r.Violations {
			if vi.Message == "" {
				t.Fatalf("violation without a message at %q", vi.Path)
			}
		}
		if !r.Valid() {
			if r.Trajectory != nil {
				t.Fatal("Trajectory set for an invalid document")
			}
			return
		}
		if r.Trajectory == nil {
			t.Fatal("no Trajectory for a valid document")
		}
		out, err := json.Marshal(r.Trajectory)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		if again := v.Check(out); !again.Valid() {
			t.Fatalf("re-encoded document is invalid: %v\ninput: %s\nre-encoded: %s", again.Err(), data, out)
		}
		tr := r.Trajectory
		_ = atif.ToChat(tr)
		_, _, _ = tr.AgentSteps(), tr.LLMCalls(), tr.TotalUsage()
		_ = tr.ToolUses()
	})
}
