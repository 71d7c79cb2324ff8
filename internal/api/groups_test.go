package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

type groupLine struct {
	Sequence            int64             `json:"sequence"`
	GroupID             string            `json:"group_id"`
	Rollouts            []json.RawMessage `json:"rollouts"`
	NotExportedByReason map[string]int    `json:"not_exported_by_reason"`
}

// groupLines reads GET /api/v1/batches/{id}/groups?complete=true&query.
func (e *env) groupLines(batchID, query string) []groupLine {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/v1/batches/"+batchID+"/groups?complete=true"+query, e.key(gyre.RoleReader), nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET groups: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/jsonl; charset=utf-8" {
		e.t.Fatalf("Content-Type = %q, want application/jsonl; charset=utf-8", ct)
	}
	out := []groupLine{}
	for l := range bytes.Lines(r.body) {
		var g groupLine
		if err := json.Unmarshal(l, &g); err != nil || g.Rollouts == nil || g.NotExportedByReason == nil {
			e.t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, g)
	}
	return out
}

func lineGroups(ls []groupLine) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.GroupID)
	}
	return out
}

// TestBatchGroups_FollowARunningBatchInCompletionOrder: lines come in the
// order groups completed, not group id order; ?after= returns only the
// groups completed since, so a group that completes after a first read
// is read next; ?limit= bounds the page; a rollout that is not training
// grade is counted by reason, never a row.
func TestBatchGroups_FollowARunningBatchInCompletionOrder(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batchID, _ := e.batch(e.tasks(2), `,"group_size":2,"max_attempts":1`)
		byGroup := map[string][]string{}
		for range 4 {
			r := e.claimOne()
			if o := e.output(r.RolloutID, leaseOf(r), `{"final_text":"x","tool_calls":[],"llm_call_count":0}`); o.status != http.StatusOK {
				t.Fatalf("output: %d %s", o.status, o.body)
			}
			ro, err := e.st.GetRollout(t.Context(), e.tenant.ID, r.RolloutID)
			if err != nil {
				t.Fatal(err)
			}
			byGroup[ro.GroupID] = append(byGroup[ro.GroupID], ro.ID)
		}
		var ids []string
		for g := range byGroup {
			ids = append(ids, g)
		}
		slices.Sort(ids)
		first, second := ids[1], ids[0]
		decide := func(group string) {
			for _, id := range byGroup[group] {
				rec := "on_policy"
				if err := e.st.SaveGrade(t.Context(), store.GradeResult{RolloutID: id, Verdicts: json.RawMessage(`[]`),
					GraderVersions: json.RawMessage(`[]`), Outcome: "passed", Reconciliation: &rec,
					Reasons: []string{"no_completions"}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := e.groupLines(batchID, ""); len(got) != 0 {
			t.Fatalf("before grading: %v, want no line", lineGroups(got))
		}
		decide(first)
		got := e.groupLines(batchID, "")
		if !slices.Equal(lineGroups(got), []string{first}) {
			t.Fatalf("lines %v, want [%s]", lineGroups(got), first)
		}
		if len(got[0].Rollouts) != 0 || got[0].NotExportedByReason["no_completions"] != 2 {
			t.Errorf("line %+v: want no row and 2 counted under no_completions", got[0])
		}
		seq := got[0].Sequence
		if next := e.groupLines(batchID, fmt.Sprintf("&after=%d", seq)); len(next) != 0 {
			t.Fatalf("after %d with nothing new: %v", seq, lineGroups(next))
		}
		decide(second)
		next := e.groupLines(batchID, fmt.Sprintf("&after=%d", seq))
		if !slices.Equal(lineGroups(next), []string{second}) || next[0].Sequence <= seq {
			t.Fatalf("after %d: %+v, want [%s] with a greater sequence", seq, next, second)
		}
		if all := e.groupLines(batchID, ""); !slices.Equal(lineGroups(all), []string{first, second}) {
			t.Errorf("all lines %v, want completion order [%s %s]", lineGroups(all), first, second)
		}
		if one := e.groupLines(batchID, "&limit=1"); !slices.Equal(lineGroups(one), []string{first}) {
			t.Errorf("limit 1: %v, want [%s]", lineGroups(one), first)
		}
	})
}

// TestBatchGroups_BadQueryIs400AndForeignBatch404: only complete=true is
// served; after and limit are checked; another tenant's batch is 404.
func TestBatchGroups_BadQueryIs400AndForeignBatch404(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batchID, _ := e.batch(e.tasks(1), `,"group_size":1,"max_attempts":1`)
		for _, q := range []string{"", "?complete=false", "?complete=1", "?complete=true&after=-1", "?complete=true&after=x",
			"?complete=true&limit=0", "?complete=true&limit=501", "?complete=true&cursor=a", "?complete=true&complete=true"} {
			t.Run(q, func(t *testing.T) {
				e.do(http.MethodGet, "/api/v1/batches/"+batchID+"/groups"+q, e.admin, nil).
					wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			})
		}
		_, otherAdmin := e.newTenant("other")
		e.do(http.MethodGet, "/api/v1/batches/"+batchID+"/groups?complete=true", otherAdmin, nil).
			wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	})
}
