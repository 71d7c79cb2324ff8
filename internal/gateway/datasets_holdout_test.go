package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
)

// A promotion's cases are held out of datasets created after it (SPEC §9,
// §10), through the real API: rollouts of suite "gate" run in a batch of
// their own (its own task ids), then a promotion over "gate" makes new
// tasks of the same cases. A dataset created afterwards counts the gate
// rollouts under held_out and lists their tasks in holdout_task_ids;
// with include_holdout it exports them and still lists them. A dataset
// frozen before the promotion, even one built after it, keeps the bytes
// of a dataset built before it.
func TestDatasets_PromotionCasesAreHeldOut(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{s3OnPostgres: true})
		h.up.set(func(w http.ResponseWriter, _ *http.Request, body []byte) { answerText(w, body, "refund issued") })
		ctx := context.Background()
		complete := func(rolloutID string, call func() error) {
			t.Helper()
			if err := call(); err != nil {
				t.Fatal(err)
			}
			h.settle(rolloutID)
		}
		ask := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refund order 7")}}
		output := `{"final_text":"refund issued","llm_call_count":1,"tool_calls":[]}`

		// Two rollouts of suite "gate" (cases c0, c1) in a batch of their
		// own, and one of another suite whose only case is also c0.
		h.mustJSON(http.MethodPost, "/api/v1/suites", h.admin, `{"name":"gate","cases":[
			{"id":"c0","input":{"q":"refund 7"},"graders":[{"contains":"refund"}]},
			{"id":"c1","input":{"q":"refund 8"},"graders":[{"contains":"refund"}]}]}`, http.StatusCreated)
		r := h.do(http.MethodPost, "/api/v1/tasks", h.admin, []byte(`{"suite":"gate"}`))
		var tasks struct {
			Items []struct {
				TaskID string `json:"task_id"`
			} `json:"items"`
		}
		if err := json.Unmarshal(r.body, &tasks); err != nil || len(tasks.Items) != 2 {
			t.Fatalf("tasks: %s (%v)", r.body, err)
		}
		gateTasks := []string{tasks.Items[0].TaskID, tasks.Items[1].TaskID}
		slices.Sort(gateTasks)
		h.mustJSON(http.MethodPost, "/api/v1/batches", h.admin, fmt.Sprintf(`{"agent_id":"agent-1","policy":"p1","task_ids":[%q,%q]}`,
			gateTasks[0], gateTasks[1]), http.StatusCreated)
		for range 2 {
			rr := h.claimNext()
			complete(rr.RolloutID, func() error {
				_, err := h.client(rr).Chat.Completions.New(ctx, ask)
				h.submit(rr, output)
				return err
			})
		}
		other := h.rollout(`,"policy":"p1"`) // suite s<n>, case c0
		complete(other.RolloutID, func() error {
			_, err := h.client(other).Chat.Completions.New(ctx, ask)
			h.submit(other, output)
			return err
		})

		builder := build.New(h.st, h.blobs, nil)
		manifest := func(id string) (dataset.Manifest, []byte) {
			t.Helper()
			mr := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+id+"/manifest", h.admin, "", http.StatusOK)
			var m dataset.Manifest
			if err := json.Unmarshal(mr.body, &m); err != nil {
				t.Fatal(err)
			}
			file := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+id+"/file", h.admin, "", http.StatusOK)
			return m, file.body
		}
		before := h.createDataset(builder, `{"agent_id":"agent-1","format":"rl"}`)
		mBefore, fileBefore := manifest(before.ID)
		if mBefore.Rows != 3 || len(mBefore.HoldoutTaskIDs) != 0 || mBefore.HoldoutTaskIDs == nil {
			t.Fatalf("before any promotion: %d rows, holdout %#v; want 3 rows and []", mBefore.Rows, mBefore.HoldoutTaskIDs)
		}
		fr := h.mustJSON(http.MethodPost, "/api/v1/datasets", h.admin, `{"agent_id":"agent-1","format":"rl"}`, http.StatusCreated)
		var frozen datasetView
		if err := json.Unmarshal(fr.body, &frozen); err != nil || frozen.State != "building" {
			t.Fatalf("dataset frozen before the promotion: %s", fr.body)
		}

		h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"p2","upstream":"stub","model":"other-model"}`, http.StatusCreated)
		pr := h.mustJSON(http.MethodPost, "/api/v1/promotions", h.admin,
			`{"agent_id":"agent-1","candidate":"p2","baseline":"p1","suite":"gate","repetitions":1}`, http.StatusCreated)
		var promo struct {
			TaskIDs []string `json:"task_ids"`
		}
		if err := json.Unmarshal(pr.body, &promo); err != nil || len(promo.TaskIDs) != 2 {
			t.Fatalf("promotion: %s (%v)", pr.body, err)
		}
		for _, id := range promo.TaskIDs {
			if slices.Contains(gateTasks, id) {
				t.Fatalf("the promotion reuses task %s: the test would not show matching by case", id)
			}
		}

		after := h.createDataset(builder, `{"agent_id":"agent-1","format":"rl"}`)
		m, file := manifest(after.ID)
		if m.Rows != 1 || m.RolloutsSelected != 3 || m.RolloutsExported != 1 || m.NotExportedByReason["held_out"] != 2 ||
			len(m.NotExportedByReason) != 1 || !slices.Equal(m.HoldoutTaskIDs, gateTasks) || m.Filters.IncludeHoldout {
			t.Errorf("dataset created after the promotion: manifest %+v, want 1 row, 2 held_out, holdout_task_ids %v", m, gateTasks)
		}
		var row struct {
			RolloutID string `json:"rollout_id"`
		}
		if rows := lines(file); len(rows) != 1 || json.Unmarshal(rows[0], &row) != nil || row.RolloutID != other.RolloutID {
			t.Errorf("held-out file: %s, want only rollout %s", file, other.RolloutID)
		}

		included := h.createDataset(builder, `{"agent_id":"agent-1","format":"rl","include_holdout":true}`)
		mi, fileIncluded := manifest(included.ID)
		if mi.Rows != 3 || mi.NotExportedByReason["held_out"] != 0 || !slices.Equal(mi.HoldoutTaskIDs, gateTasks) ||
			!mi.Filters.IncludeHoldout || !bytes.Equal(fileIncluded, fileBefore) {
			t.Errorf("include_holdout: manifest %+v, want 3 rows, none held out, holdout_task_ids %v, the file of before", mi, gateTasks)
		}

		// The dataset frozen before the promotion, built only now.
		for range 10 {
			if _, err := builder.RunOnce(ctx, "builder", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		mf, fileFrozen := manifest(frozen.ID)
		if !bytes.Equal(fileFrozen, fileBefore) || len(mf.HoldoutTaskIDs) != 0 || mf.NotExportedByReason["held_out"] != 0 {
			t.Errorf("a dataset frozen before the promotion and built after it: holdout %v, file\n%s\nwant\n%s", mf.HoldoutTaskIDs, fileFrozen, fileBefore)
		}
		if _, again := manifest(before.ID); !bytes.Equal(again, fileBefore) {
			t.Errorf("the dataset built before the promotion changed")
		}
	})
}
