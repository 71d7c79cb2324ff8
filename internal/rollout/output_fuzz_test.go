package rollout

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/jcs"
)

// FuzzOutputIntake feeds arbitrary bodies to the output decoder and
// validator. It must never panic; a refusal is always a 422 invalid_body;
// an accepted body is canonical JSON that decodes as a RolloutOutput,
// validates against the contract again, keeps tool_calls null apart from
// [], and normalises to itself (intake is idempotent, so replays compare
// equal).
func FuzzOutputIntake(f *testing.F) {
	for _, s := range []string{
		`{"final_text":"hi"}`,
		`{"final_text":"hi","tool_calls":[]}`,
		`{"final_text":"hi","tool_calls":null,"tool_calls_omitted_count":2,"llm_call_count":3}`,
		`{"final_text":"x","tool_calls":[{"name":"t","outcome":"unknown","status_code":null,"tool_call_id":"c1","entity_ids":{"id":"9"}}]}`,
		`{"final_text":"x","tool_calls":[{"name":"t","outcome":"ok","status_code":200,"arguments":{"a":1e3}}]}`,
		`{"final_text":"x","artifacts":{"a":"skipped:too_large:5","b":{"sha256":"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4","size_bytes":2,"content":"hi"}}}`,
		`{"final_text":"x","exclusion":{"reason":"capacity","detail":null},"events":[{}],"timing":{},"agent_fingerprint":null}`,
		`{"final_text":"x","score":1}`,
		`{"final_text":"x","final_text":"y"}`,
		`[]`, `null`, `{"final_text":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		canon, hash, exclusion, err := NormalizeOutput(body)
		if err != nil {
			var ge *gyre.Error
			if !errors.As(err, &ge) || ge.Code != gyre.CodeInvalidBody {
				t.Fatalf("refusal is not invalid_body: %v", err)
			}
			return
		}
		if len(hash) != 64 {
			t.Fatalf("hash %q", hash)
		}
		var out flywheel.RolloutOutput
		if err := flywheel.Unmarshal(flywheel.DefRolloutOutput, canon, &out); err != nil {
			t.Fatalf("accepted output does not validate again: %v\n%s", err, canon)
		}
		if out.ToolCalls.IsAbsent() {
			t.Fatalf("tool_calls absent after normalisation: %s", canon)
		}
		var in map[string]json.RawMessage
		_ = json.Unmarshal(body, &in)
		if tc, ok := in["tool_calls"]; ok && string(tc) == "[]" && out.ToolCalls.IsNull() {
			t.Fatal("[] became null")
		}
		if ex, ok := out.Exclusion.Get(); ok != (exclusion != nil) || (ok && string(ex.Reason) != *exclusion) {
			t.Fatalf("exclusion %v vs %v", ex, exclusion)
		}
		again, hash2, _, err := NormalizeOutput(canon)
		if err != nil || hash2 != hash {
			t.Fatalf("normalising the normalised output: %v, hash %s vs %s", err, hash2, hash)
		}
		if eq, err := jcs.Equal(again, canon); err != nil || !eq {
			t.Fatalf("normalisation is not idempotent: %s vs %s", again, canon)
		}
	})
}
