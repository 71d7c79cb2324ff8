package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
)

// A batch group driven through the real API and gateway, read from
// GET /api/v1/batches/{id}/groups?complete=true: the line's rows are the
// rl rows of its training-grade rollouts only; the rollout that did not
// report its tool calls is counted by reason, never a row. The group is
// absent until its last rollout is reconciled.
func TestBatchGroups_LineHoldsOnlyTrainingGradeRollouts(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{s3OnPostgres: true})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			answerText(w, body, "refund issued")
		})
		ctx := context.Background()
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refund order 7 ✓")}
		a := h.rollout(`,"policy":"p1","group_size":2`)
		if _, err := h.client(a).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		h.submit(a, `{"final_text":"refund issued","llm_call_count":1,"tool_calls":[]}`)
		b := h.claimNext()
		if _, err := h.client(b).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		ro, err := h.st.GetRollout(ctx, h.tenant.ID, a.RolloutID)
		if err != nil {
			t.Fatal(err)
		}
		get := func() []groupLineView {
			t.Helper()
			r := h.mustJSON(http.MethodGet, "/api/v1/batches/"+ro.BatchID+"/groups?complete=true", h.admin, "", http.StatusOK)
			var out []groupLineView
			for _, l := range lines(r.body) {
				var g groupLineView
				if err := json.Unmarshal(l, &g); err != nil {
					t.Fatalf("line %s: %v", l, err)
				}
				out = append(out, g)
			}
			return out
		}
		h.settle(a.RolloutID)
		if got := get(); len(got) != 0 {
			t.Fatalf("with rollout b still leased: %d lines, want none", len(got))
		}
		// b does not report its tool calls: not training grade.
		h.submit(b, `{"final_text":"refund issued","llm_call_count":1}`)
		h.settle(b.RolloutID)
		got := get()
		if len(got) != 1 || got[0].GroupID != ro.GroupID || got[0].Sequence < 1 {
			t.Fatalf("lines %+v, want one for group %s with a sequence", got, ro.GroupID)
		}
		var ids []string
		for _, row := range got[0].Rollouts {
			var rl struct {
				RolloutID string            `json:"rollout_id"`
				Turns     []json.RawMessage `json:"turns"`
			}
			if err := json.Unmarshal(row, &rl); err != nil || len(rl.Turns) != 1 {
				t.Fatalf("rl row %s: %v, want one turn", row, err)
			}
			ids = append(ids, rl.RolloutID)
		}
		if !slices.Equal(ids, []string{a.RolloutID}) {
			t.Errorf("rows of %v, want only the training-grade %s", ids, a.RolloutID)
		}
		n := 0
		for _, c := range got[0].NotExportedByReason {
			n += c
		}
		if n != 1 || got[0].NotExportedByReason["pending"] != 0 {
			t.Errorf("not exported %v, want b counted once under its reason", got[0].NotExportedByReason)
		}
	})
}

type groupLineView struct {
	Sequence            int64             `json:"sequence"`
	GroupID             string            `json:"group_id"`
	Rollouts            []json.RawMessage `json:"rollouts"`
	NotExportedByReason map[string]int    `json:"not_exported_by_reason"`
}
