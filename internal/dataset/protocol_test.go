package dataset_test

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset"
)

// TestChatFormatsLeaveOutRolloutsWithoutAChatForm: a rollout whose
// Responses or Messages traffic holds an item chat cannot carry is not
// written by sft, dpo or atif and is counted under its reason; rl writes
// it.
func TestChatFormatsLeaveOutRolloutsWithoutAChatForm(t *testing.T) {
	t.Parallel()
	const reason = "protocol_item_not_exportable:reasoning"
	for _, f := range dataset.Formats {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			good := weatherRollout("r-1", "g", 1, "call_a", "Sunny.")
			score := 0.0 // a dpo partner
			if f == dataset.FormatSFT {
				score = 1 // above min_reward
			}
			bad := weatherRollout("r-2", "g", score, "call_b", "Rain.")
			bad.NoChatForm = reason
			file, m := write(t, sel(f), sliceSource{good, bad})
			rows := lines(t, file)
			want, wantCounted := 1, 1
			switch f {
			case dataset.FormatRL:
				want, wantCounted = 2, 0
			case dataset.FormatDPO:
				// Without its partner, the pair cannot be made: the good
				// rollout is counted under no_pair.
				want = 0
			}
			if len(rows) != want || m.NotExportedByReason[reason] != wantCounted {
				t.Errorf("%d rows, %d under %s (%v); want %d and %d", len(rows), m.NotExportedByReason[reason], reason,
					m.NotExportedByReason, want, wantCounted)
			}
		})
	}
}

// TestRLTurnsKeepTheirNativeProtocol: a Responses or Messages turn is
// written in its own protocol's shape — its native items, tools and
// answer — with its protocol named, beside chat turns.
func TestRLTurnsKeepTheirNativeProtocol(t *testing.T) {
	t.Parallel()
	r := weatherRollout("r-1", "g", 1, "call_a", "Sunny.")
	r.Completions[1].Protocol = "responses"
	r.Completions[1].Native = &dataset.Native{
		Items:    raws(`{"role":"user","content":"Weather?"}`, `{"type":"reasoning","id":"rs_1","summary":[]}`),
		Tools:    json.RawMessage(`[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`),
		Response: json.RawMessage(`[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Sunny.","annotations":[]}]}]`),
	}
	file, _ := write(t, sel(dataset.FormatRL), sliceSource{r})
	rows := lines(t, file)
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	var row dataset.RLRow
	if err := json.Unmarshal(rows[0], &row); err != nil {
		t.Fatal(err)
	}
	t0, t1 := row.Turns[0], row.Turns[1]
	if t0.Protocol != "chat" || len(t0.RequestMessages) != 2 {
		t.Errorf("chat turn: %+v", t0)
	}
	if t1.Protocol != "responses" || len(t1.RequestMessages) != 2 ||
		string(t1.RequestMessages[1]) != `{"id":"rs_1","summary":[],"type":"reasoning"}` ||
		string(t1.Tools) != `[{"name":"get_weather","parameters":{"type":"object"},"type":"function"}]` ||
		string(t1.ResponseMessage) != `[{"content":[{"annotations":[],"text":"Sunny.","type":"output_text"}],"role":"assistant","type":"message"}]` {
		t.Errorf("responses turn is not native: %+v", t1)
	}
}
