package dataset_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset"
)

// TestChainIsARequestNoLaterRequestExtends checks the chain rule of SPEC
// §9: a counted completion ends a chain when its request messages are not
// a prefix of a later counted completion's request.
func TestChainIsARequestNoLaterRequestExtends(t *testing.T) {
	t.Parallel()
	s, u, a1, t1, a2 := "S", "U", "A1", "T1", "A2"
	req := func(msgs ...string) [][]byte {
		out := make([][]byte, len(msgs))
		for i, m := range msgs {
			out[i] = []byte(m)
		}
		return out
	}
	tests := []struct {
		name     string
		requests [][][]byte
		want     []int
	}{
		{"one completion is one chain", [][][]byte{req(s, u)}, []int{0}},
		{"a conversation that grows is one chain, its last request", [][][]byte{req(s, u), req(s, u, a1, t1), req(s, u, a1, t1, a2, u)}, []int{2}},
		{"a rewritten history (compaction) starts a new chain", [][][]byte{req(s, u, a1, t1), req(s, "summary", u)}, []int{0, 1}},
		{"a repeated request ends the chain at its last repetition", [][][]byte{req(s, u), req(s, u)}, []int{1}},
		{"a branch that nothing extends is its own chain", [][][]byte{req(s, u), req(s, "sub-agent task"), req(s, u, a1, t1)}, []int{1, 2}},
		{"an earlier request is not extended by a shorter later one", [][][]byte{req(s, u, a1, t1), req(s, u)}, []int{0, 1}},
		{"a message differing inside the prefix breaks it", [][][]byte{req(s, u, a1), req(s, "U'", a1, t1)}, []int{0, 1}},
		{"no completions, no chains", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := dataset.Chains(tt.requests); !slices.Equal(got, tt.want) {
				t.Errorf("Chains = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSFTRowIsChainRequestPlusResponse pins a file: one row per chain,
// the chain's request messages plus the response message, with tools and
// parallel_tool_calls, rows in rollout id order.
func TestSFTRowIsChainRequestPlusResponse(t *testing.T) {
	t.Parallel()
	compacted := rollout("r-03", "g-2", 1,
		comp(1, asst("Paris is 18°C."), sys("You answer weather questions."), user("Weather in Paris?")),
		comp(2, asst("Still 18°C."), sys("You answer weather questions."), user("Summary: Paris is 18°C."), user("And now?")),
	)
	file, m := write(t, sel(dataset.FormatSFT), sliceSource{
		weatherRollout("r-02", "g-1", 1, "call_abc", "It is 18°C in Paris."),
		compacted,
		weatherRollout("r-01", "g-1", 1, "call_xyz", "18°C and sunny."),
	})
	golden(t, "sft.jsonl", file)
	rows := lines(t, file)
	if len(rows) != 4 || m.Rows != 4 || m.RolloutsExported != 3 {
		t.Fatalf("rows = %d, manifest rows %d exported %d; want 4, 4, 3", len(rows), m.Rows, m.RolloutsExported)
	}
	first := decode(t, rows[0])
	msgs := first["messages"].([]any)
	if len(msgs) != 5 {
		t.Fatalf("first row has %d messages, want 5 (system, user, tool call, tool, answer)", len(msgs))
	}
	last := msgs[4].(map[string]any)
	if last["content"] != "18°C and sunny." {
		t.Errorf("first row (r-01) ends with %v, want r-01's answer", last)
	}
	for _, k := range []string{"refusal", "annotations"} {
		if _, ok := last[k]; ok {
			t.Errorf("the response message keeps %q, which a training message does not have", k)
		}
	}
	if first["parallel_tool_calls"] != false || first["tools"] == nil {
		t.Errorf("tools or parallel_tool_calls missing: %s", rows[0])
	}
}

// TestSFTMinRewardFilter checks that sft exports only rollouts whose
// reward is at least min_reward (default 1.0), counting the others.
func TestSFTMinRewardFilter(t *testing.T) {
	t.Parallel()
	src := sliceSource{
		weatherRollout("r-1", "g", 1, "c1", "a"),
		weatherRollout("r-2", "g", 0.75, "c2", "b"),
		weatherRollout("r-3", "g", 0.5, "c3", "c"),
		weatherRollout("r-4", "g", 0, "c4", "d"),
	}
	tests := []struct {
		name      string
		minReward *float64
		want      int
	}{
		{"default 1.0 keeps perfect rollouts only", nil, 1},
		{"0.75 keeps rewards at or above it", ptr(0.75), 2},
		{"0.5", ptr(0.5), 3},
		{"0 keeps every training-grade rollout", ptr(0.0), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := sel(dataset.FormatSFT)
			s.Filters.MinReward = tt.minReward
			_, m := write(t, s, src)
			if m.Rows != tt.want || m.RolloutsExported != tt.want {
				t.Errorf("rows %d, exported %d; want %d", m.Rows, m.RolloutsExported, tt.want)
			}
			if got := m.NotExportedByReason[dataset.ReasonBelowMinReward]; got != 4-tt.want {
				t.Errorf("below_min_reward = %d, want %d", got, 4-tt.want)
			}
		})
	}
}

// TestSFTMinRewardOnlyAppliesToSFT: rl and atif export a rollout whatever
// its reward once it is training grade.
func TestSFTMinRewardOnlyAppliesToSFT(t *testing.T) {
	t.Parallel()
	for _, f := range []dataset.Format{dataset.FormatRL, dataset.FormatATIF} {
		s := sel(f)
		s.Filters.MinReward = ptr(1.0)
		_, m := write(t, s, sliceSource{weatherRollout("r-1", "g", 0.25, "c1", "a")})
		if m.Rows != 1 {
			t.Errorf("%s: rows = %d, want 1", f, m.Rows)
		}
	}
}

// TestFormatInvalidToolArgumentsNotJSON: a rollout whose model emitted
// tool-call arguments that are not JSON is left out, counted under
// format_invalid:tool_call_arguments_not_json, and the others are kept.
func TestFormatInvalidToolArgumentsNotJSON(t *testing.T) {
	t.Parallel()
	s, u := sys("S"), user("U")
	bad := asstCalls(call("c1", "get_weather", `{"city": "Par`))
	broken := rollout("r-2", "g", 1,
		comp(1, bad, s, u),
		comp(2, asst("done"), s, u, bad, tool("c1", "x")),
	)
	file, m := write(t, sel(dataset.FormatSFT), sliceSource{weatherRollout("r-1", "g", 1, "ok1", "fine"), broken})
	if m.Rows != 1 || len(lines(t, file)) != 1 {
		t.Fatalf("rows = %d, want 1", m.Rows)
	}
	if got := m.NotExportedByReason["format_invalid:tool_call_arguments_not_json"]; got != 1 {
		t.Errorf("not_exported_by_reason = %v, want format_invalid:tool_call_arguments_not_json: 1", m.NotExportedByReason)
	}
	if strings.Contains(string(file), "Par\\\"") || strings.Contains(string(file), `"r-2"`) {
		t.Errorf("the refused rollout reached the file:\n%s", file)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSFTRowsKeepEveryMessageAsRecorded decodes each row's messages and
// compares them with what was recorded: equal as JSON values, strings
// exact.
func TestSFTRowsKeepEveryMessageAsRecorded(t *testing.T) {
	t.Parallel()
	r := weatherRollout("r-1", "g", 1, "c1", "fine")
	file, _ := write(t, sel(dataset.FormatSFT), sliceSource{r})
	row := lines(t, file)[0]
	var got struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(row, &got); err != nil {
		t.Fatal(err)
	}
	want := r.Completions[1].Request.Messages
	for i := range want {
		if !sameMessage(t, got.Messages[i], want[i]) {
			t.Errorf("message %d = %s, want %s", i, got.Messages[i], want[i])
		}
	}
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestChatRowsDropMembersThatSayNothing: an agent that appends each
// response message to its history resends "refusal": null,
// "annotations": [] and the like; chat rows leave such members out (null
// reads as absent) and keep every other member, so a refusal the model
// actually wrote still makes the row invalid.
func TestChatRowsDropMembersThatSayNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		echoed  string
		wantRow string // the echoed message as the row holds it; "" when refused
		reason  string
	}{
		{"null refusal, empty annotations, null audio and function_call", `{"role":"assistant","content":"hi","refusal":null,"annotations":[],"audio":null,"function_call":null}`, `{"content":"hi","role":"assistant"}`, ""},
		{"null tool_calls", `{"role":"assistant","content":"hi","tool_calls":null}`, `{"content":"hi","role":"assistant"}`, ""},
		{"a null name on a user message", `{"role":"user","content":"hi","name":null}`, `{"content":"hi","role":"user"}`, ""},
		{"a text that merely contains :null stays", `{"role":"assistant","content":"x:null"}`, `{"content":"x:null","role":"assistant"}`, ""},
		{"a written refusal is kept, so the row is refused", `{"role":"assistant","content":null,"refusal":"I can't."}`, "", "format_invalid:unknown_message_key"},
		{"annotations with content are kept, so the row is refused", `{"role":"assistant","content":"hi","annotations":[{"type":"url_citation"}]}`, "", "format_invalid:unknown_message_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rollout("r-1", "g", 1, comp(1, asst("ok"), user("q"), tt.echoed, user("again")))
			file, m := write(t, sel(dataset.FormatSFT), sliceSource{r})
			if tt.reason != "" {
				if m.Rows != 0 || m.NotExportedByReason[tt.reason] != 1 {
					t.Errorf("rows %d, reasons %v; want the rollout refused as %s", m.Rows, m.NotExportedByReason, tt.reason)
				}
				return
			}
			var row struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(lines(t, file)[0], &row); err != nil {
				t.Fatal(err)
			}
			if got := string(row.Messages[1]); got != tt.wantRow {
				t.Errorf("echoed message = %s, want %s", got, tt.wantRow)
			}
		})
	}
}
