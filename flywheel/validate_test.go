package flywheel_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

func violations(t *testing.T, def flywheel.Def, body string) []flywheel.Violation {
	t.Helper()
	err := flywheel.Validate(def, []byte(body))
	var ve *flywheel.ValidationError
	if !asValidationError(err, &ve) {
		t.Fatalf("want a *ValidationError, got %v\n%s", err, body)
	}
	if ve.Def != def {
		t.Errorf("Def = %q, want %q", ve.Def, def)
	}
	return ve.Violations
}

func pointers(vs []flywheel.Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Pointer
	}
	return out
}

// Violations come in the order their fields appear in the text, whatever
// order the schema or the validator visits them in.
func TestValidate_DocumentOrder(t *testing.T) {
	t.Parallel()
	badCall := `{"status_code":200,"name":"","outcome":"unknown"}`
	turn := func(id, calls string) string {
		return `{"turn_id":` + id + `,"input_text":null,"final_text":null,"tool_calls":` + calls + `,"tool_calls_omitted_count":0}`
	}
	tests := []struct {
		name string
		def  flywheel.Def
		body string
		want []string
	}{
		{
			name: "turns before agent_id",
			def:  flywheel.DefProductionTurnBatch,
			body: `{"turns":[` + turn(`"t"`, `[`+badCall+`]`) + `],"agent_id":" bad"}`,
			want: []string{"/turns/0/tool_calls/0/status_code", "/turns/0/tool_calls/0/name", "/agent_id"},
		},
		{
			name: "agent_id before turns",
			def:  flywheel.DefProductionTurnBatch,
			body: `{"agent_id":" bad","turns":[` + turn(`"t"`, `[`+badCall+`]`) + `]}`,
			want: []string{"/agent_id", "/turns/0/tool_calls/0/status_code", "/turns/0/tool_calls/0/name"},
		},
		{
			name: "missing member sits at its object's end",
			def:  flywheel.DefProductionTurnBatch,
			body: `{"agent_id":"a","turns":[{"turn_id":"..","input_text":null,"tool_calls":null,"tool_calls_omitted_count":0},` + turn(`"t/2"`, "null") + `]}`,
			want: []string{"/turns/0/turn_id", "/turns/0/final_text", "/turns/1/turn_id"},
		},
		{
			name: "extra member at its key",
			def:  flywheel.DefRolloutOutput,
			body: `{"score":1,"final_text":7,"verdicts":[]}`,
			want: []string{"/score", "/final_text", "/verdicts"},
		},
		{
			name: "several missing members keep the required order",
			def:  flywheel.DefRolloutRequest,
			body: `{"deadline_ts":"x"}`,
			want: []string{"/deadline_ts", "/rollout_id", "/turn_input", "/llm_url", "/api_key", "/artifacts_dir"},
		},
		{
			name: "later turn with an earlier-sorting problem",
			def:  flywheel.DefProductionTurnBatch,
			body: `{"agent_id":"a","turns":[` + turn(`"ok"`, `[{"name":"x","outcome":"ok","status_code":200,"zzz":1}]`) + `,` + turn(`" "`, "null") + `]}`,
			want: []string{"/turns/0/tool_calls/0/zzz", "/turns/1/turn_id"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := pointers(violations(t, tt.def, tt.body))
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("pointers = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidate_InvalidJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, pointer, contains string
	}{
		{"truncated", `{"final_text":"x"`, "", "not valid JSON"},
		{"trailing data", `{"final_text":"x"} {}`, "", "after the top-level value"},
		{"empty", ``, "", "not valid JSON"},
		{"not UTF-8", "{\"final_text\":\"\xff\"}", "", "UTF-8"},
		{"duplicate key", `{"final_text":"x","final_text":"y"}`, "/final_text", "ambiguous"},
		{"nested duplicate key", `{"final_text":"x","tool_calls":[{"name":"a","name":"b"}]}`, "/tool_calls/0/name", "duplicate key"},
		{"lone surrogate", `{"final_text":"\ud800"}`, "/final_text", "surrogate"},
		{"huge number", `{"final_text":"x","reward":1e999}`, "/reward", "double range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vs := violations(t, flywheel.DefRolloutOutput, tt.body)
			if len(vs) != 1 {
				t.Fatalf("want one violation, got %v", vs)
			}
			if vs[0].Pointer != tt.pointer || !strings.Contains(vs[0].Message, tt.contains) {
				t.Errorf("got %v, want pointer %q and a message containing %q", vs[0], tt.pointer, tt.contains)
			}
		})
	}
}

// jsonschema v6.0.3 records a propertyNames error's instance location
// without copying it, so members validated afterwards can overwrite it. The
// explainer repairs it; run many times because map order is random.
func TestValidate_PropertyNamesPointerIsStable(t *testing.T) {
	t.Parallel()
	call := `{"name":"x","entity_ids":{"id":"1","bad":"v"},"outcome":"ok","status_code":200,"arguments":{},"error":null,"error_class":null,"latency_ms":1,"agent_name":null,"tool_call_id":null}`
	turns := make([]string, 5)
	for i := range turns {
		calls := `[]`
		if i == 3 {
			calls = `[` + strings.Replace(call, `"bad"`, `"id2"`, 1) + `,` + call + `]`
		}
		turns[i] = fmt.Sprintf(`{"turn_id":"t%d","input_text":null,"final_text":null,"tool_calls":%s,"tool_calls_omitted_count":0,"turn_index":%d,"occurred_at":"2025-01-01T00:00:00Z"}`, i, calls, i)
	}
	body := `{"agent_id":"a","turns":[` + strings.Join(turns, ",") + `]}`
	for range 50 {
		vs := violations(t, flywheel.DefProductionTurnBatch, body)
		got := pointers(vs)
		want := []string{"/turns/3/tool_calls/0/entity_ids/id2", "/turns/3/tool_calls/1/entity_ids/bad"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("pointers = %q, want %q", got, want)
		}
	}
}

func TestValidate_MessagesAreSentences(t *testing.T) {
	t.Parallel()
	vs := violations(t, flywheel.DefProductionTurnBatch,
		`{"agent_id":"a/b","turns":[{"turn_id":"t","input_text":null,"tool_calls":[{"name":"x","outcome":"unknown","status_code":200,"entity_ids":{"nick":"n"}}],"tool_calls_omitted_count":0,"extra":1}]}`)
	want := []string{
		`agent_id must be an identifier that is one path segment`,
		`status_code must be null when outcome is "unknown" (got integer)`,
		`key "nick" is not allowed in entity_ids: it must be one of "id", "key", "uuid", "sid", "gid"`,
		`property "extra" is not allowed here`,
		`"final_text" is required`,
	}
	if len(vs) != len(want) {
		t.Fatalf("got %d violations, want %d: %v", len(vs), len(want), vs)
	}
	for i, w := range want {
		if !strings.HasPrefix(vs[i].Message, w) {
			t.Errorf("violation %d = %q, want it to start with %q", i, vs[i].Message, w)
		}
	}
}

func TestValidationError_Error(t *testing.T) {
	t.Parallel()
	err := flywheel.Validate(flywheel.DefRolloutOutput, []byte(`{"score":1}`))
	want := `flywheel: invalid RolloutOutput: /score: property "score" is not allowed here: the contract lists every property this object may have (and 1 more)`
	if err == nil || err.Error() != want {
		t.Errorf("Error() = %v\nwant %s", err, want)
	}
	err = flywheel.ValidateAgentID("..")
	if err == nil || !strings.HasPrefix(err.Error(), "flywheel: invalid value: agent_id must be") {
		t.Errorf("Error() = %v", err)
	}
}

func TestValidate_UnknownDef(t *testing.T) {
	t.Parallel()
	err := flywheel.Validate("Score", []byte(`{}`))
	if !errors.Is(err, flywheel.ErrUnknownDef) {
		t.Errorf("err = %v, want ErrUnknownDef", err)
	}
	var ve *flywheel.ValidationError
	if errors.As(err, &ve) {
		t.Error("an unknown definition is not a body violation")
	}
}

func TestValidator_ConcurrentUse(t *testing.T) {
	t.Parallel()
	v, err := flywheel.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	good := []byte(batchOf(8))
	bad := []byte(strings.Replace(batchOf(8), `"turn_id":"t5"`, `"turn_id":"t/5"`, 1))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Go(func() {
			for range 20 {
				if err := v.Validate(flywheel.DefProductionTurnBatch, good); err != nil {
					errs <- fmt.Errorf("goroutine %d: valid batch rejected: %w", g, err)
					return
				}
				err := v.Validate(flywheel.DefProductionTurnBatch, bad)
				var ve *flywheel.ValidationError
				if !errors.As(err, &ve) || ve.First().Pointer != "/turns/5/turn_id" {
					errs <- fmt.Errorf("goroutine %d: invalid batch: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The server validates what it sends.
func TestMarshal_ValidatesWhatIsSent(t *testing.T) {
	t.Parallel()
	req := flywheel.RolloutRequest{
		RolloutID:    "r1",
		TurnInput:    "<b>2+2</b>",
		LLMURL:       "http://127.0.0.1:7070/gw/t/v1",
		APIKey:       "k",
		ArtifactsDir: "rollouts/r1",
		DeadlineTS:   1738324800,
		LeaseToken:   flywheel.Some("lt"),
	}
	b, err := flywheel.Marshal(flywheel.DefClaimResponse, flywheel.ClaimResponse{Rollouts: []flywheel.RolloutRequest{req}, PollAfterMS: 0})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"turn_input":"<b>2+2</b>"`) {
		t.Errorf("HTML was escaped: %s", b)
	}
	if err := flywheel.ValidateValue(flywheel.DefClaimResponse, flywheel.ClaimResponse{}); err != nil {
		t.Errorf("empty claim: %v", err)
	}
	req.LLMURL = "gw/t/v1"
	err = flywheel.ValidateValue(flywheel.DefClaimResponse, flywheel.ClaimResponse{Rollouts: []flywheel.RolloutRequest{req}})
	var ve *flywheel.ValidationError
	if !asValidationError(err, &ve) || ve.First().Pointer != "/rollouts/0/llm_url" {
		t.Errorf("relative llm_url: err = %v", err)
	}
	if _, err := flywheel.Marshal(flywheel.DefRolloutRequest, make(chan int)); err == nil {
		t.Error("Marshal of an unencodable value succeeded")
	}
}

func TestUnmarshal_ValidatesThenDecodes(t *testing.T) {
	t.Parallel()
	var out flywheel.RolloutOutput
	if err := flywheel.Unmarshal(flywheel.DefRolloutOutput, []byte(`{"final_text":"x","tool_calls":[],"llm_call_count":3e0}`), &out); err != nil {
		t.Fatal(err)
	}
	calls, ok := out.ToolCalls.Get()
	if !ok || calls == nil || len(calls) != 0 {
		t.Errorf("tool_calls [] decoded as %#v", out.ToolCalls)
	}
	if n, _ := out.LLMCallCount.Get(); n != 3 {
		t.Errorf("llm_call_count = %d, want 3", n)
	}
	var bad flywheel.RolloutOutput
	err := flywheel.Unmarshal(flywheel.DefRolloutOutput, []byte(`{"final_text":"x","score":1}`), &bad)
	var ve *flywheel.ValidationError
	if !asValidationError(err, &ve) {
		t.Errorf("err = %v, want a *ValidationError", err)
	}
	if bad.FinalText != "" {
		t.Error("an invalid body was decoded")
	}
}
