package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// Completed groups of a batch in completion order (SPEC §9).
func runGroups(t *testing.T, open Opener) {
	t.Run("GroupsCompleteInCompletionOrder", func(t *testing.T) { t.Parallel(); testGroupsCompletionOrder(t, open) })
	t.Run("GroupDecidedConcurrentlyCompletes", func(t *testing.T) { t.Parallel(); testGroupDecidedConcurrently(t, open) })
	t.Run("RetriedGroupCompletesWithItsLastAttempt", func(t *testing.T) { t.Parallel(); testRetriedGroupCompletion(t, open) })
}

func (f *rolloutFixture) completed(t *testing.T, batchID string, after int64, n int) []store.CompletedGroup {
	t.Helper()
	gs, err := f.s.CompletedGroups(t.Context(), f.tenant.ID, batchID, after, n)
	if err != nil {
		t.Fatalf("CompletedGroups: %v", err)
	}
	return gs
}

func groupIDs(gs []store.CompletedGroup) []string {
	out := []string{}
	for _, g := range gs {
		out = append(out, g.GroupID)
	}
	return out
}

// testGroupsCompletionOrder: a group completes when its last current
// rollout is decided (graded and reconciled), not when it is submitted or
// graded with reconciliation pending; groups are listed in the order
// they completed, not by group id, and page with after and n.
func testGroupsCompletionOrder(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	b, _ := f.batch(t, store.NewBatch{GroupSize: 2, MaxAttempts: 1})
	byGroup := map[string][]store.Rollout{}
	for i := range 4 {
		r, tok := f.claimOne(t, "g"+string(rune('a'+i)))
		if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
			t.Fatal(err)
		}
		byGroup[r.GroupID] = append(byGroup[r.GroupID], r)
	}
	groups := slices.Sorted(func(yield func(string) bool) {
		for g := range byGroup {
			if !yield(g) {
				return
			}
		}
	})
	if len(groups) != 2 {
		t.Fatalf("groups %v, want 2", groups)
	}
	first, second := groups[1], groups[0] // the later group id completes first
	if got := f.completed(t, b.ID, 0, 10); len(got) != 0 {
		t.Fatalf("with every rollout submitted, not graded: completed %v, want none", groupIDs(got))
	}
	f.grade(t, byGroup[first][0].ID, "passed", ptr(1.0), []string{})
	f.grade(t, byGroup[first][1].ID, "failed", ptr(0.0), nil) // reconciliation pending
	if got := f.completed(t, b.ID, 0, 10); len(got) != 0 {
		t.Fatalf("with a rollout awaiting reconciliation: completed %v, want none", groupIDs(got))
	}
	f.grade(t, byGroup[first][1].ID, "failed", ptr(0.0), []string{"off_policy"})
	got := f.completed(t, b.ID, 0, 10)
	if !slices.Equal(groupIDs(got), []string{first}) {
		t.Fatalf("completed %v, want [%s]", groupIDs(got), first)
	}
	seq1 := got[0].Seq
	// A grade written again on a complete group does not stamp it twice.
	f.grade(t, byGroup[first][0].ID, "passed", ptr(1.0), []string{})
	for _, r := range byGroup[second] {
		f.grade(t, r.ID, "passed", ptr(1.0), []string{})
	}
	got = f.completed(t, b.ID, 0, 10)
	if !slices.Equal(groupIDs(got), []string{first, second}) || got[1].Seq <= seq1 || got[0].Seq != seq1 {
		t.Fatalf("completed %+v, want [%s %s] in increasing seq from %d", got, first, second, seq1)
	}
	if page := f.completed(t, b.ID, 0, 1); !slices.Equal(groupIDs(page), []string{first}) {
		t.Errorf("limit 1: %v, want [%s]", groupIDs(page), first)
	}
	if page := f.completed(t, b.ID, seq1, 10); !slices.Equal(groupIDs(page), []string{second}) {
		t.Errorf("after %d: %v, want [%s]", seq1, groupIDs(page), second)
	}
	if page := f.completed(t, b.ID, got[1].Seq, 10); page == nil || len(page) != 0 {
		t.Errorf("after the last: %v, want an empty page", page)
	}

	members, err := f.s.GroupRollouts(t.Context(), f.tenant.ID, b.ID, first)
	if err != nil || len(members) != 2 {
		t.Fatalf("GroupRollouts: %d %v", len(members), err)
	}
	if members[0].RolloutID >= members[1].RolloutID {
		t.Errorf("members not in rollout id order: %s, %s", members[0].RolloutID, members[1].RolloutID)
	}
	grades := map[string]bool{}
	for _, m := range members {
		if m.TrainingGrade == nil || m.GroupID != first || m.Verdicts == nil {
			t.Fatalf("member %+v: want a decided training grade, its group and verdicts", m)
		}
		grades[m.RolloutID] = *m.TrainingGrade
	}
	if !grades[byGroup[first][0].ID] || grades[byGroup[first][1].ID] {
		t.Errorf("training grades %v, want %s true and %s false", grades, byGroup[first][0].ID, byGroup[first][1].ID)
	}

	other := mustTenant(t, f.s, "other")
	if _, err := f.s.CompletedGroups(t.Context(), other.ID, b.ID, 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's batch: %v, want ErrNotFound", err)
	}
}

// testRetriedGroupCompletion: a rollout abandoned and retried leaves its
// group incomplete (the retry is queued); the group completes when the
// last attempt ends.
func testRetriedGroupCompletion(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	b, _ := f.batch(t, store.NewBatch{GroupSize: 1, MaxAttempts: 2})
	f.claimOne(t, "r1")
	f.clk.Advance(2 * time.Minute)
	if sw, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(sw.Retries) != 1 {
		t.Fatalf("sweep: %+v %v", sw, err)
	}
	if got := f.completed(t, b.ID, 0, 10); len(got) != 0 {
		t.Fatalf("with the retry queued: completed %v, want none", groupIDs(got))
	}
	r2, _ := f.claimOne(t, "r2")
	f.clk.Advance(2 * time.Minute)
	if sw, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(sw.Abandoned) != 1 || len(sw.Retries) != 0 {
		t.Fatalf("sweep of the last attempt: %+v %v", sw, err)
	}
	if got := f.completed(t, b.ID, 0, 10); !slices.Equal(groupIDs(got), []string{r2.GroupID}) {
		t.Fatalf("after the last attempt was abandoned: completed %v, want [%s]", groupIDs(got), r2.GroupID)
	}
}

// testGroupDecidedConcurrently: when the last two rollouts of a group are
// decided by two transactions at once, the group still completes (each
// transaction alone sees the other's rollout undecided).
func testGroupDecidedConcurrently(t *testing.T, open Opener) {
	const groups = 12
	f := newRolloutFixture(t, open, groups)
	b, _ := f.batch(t, store.NewBatch{GroupSize: 2, MaxAttempts: 1})
	byGroup := map[string][]string{}
	for i := range 2 * groups {
		r, tok := f.claimOne(t, "c"+strconv.Itoa(i))
		if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
			t.Fatal(err)
		}
		byGroup[r.GroupID] = append(byGroup[r.GroupID], r.ID)
	}
	rec := "on_policy"
	for _, ids := range byGroup {
		var wg sync.WaitGroup
		errs := make([]error, len(ids))
		for i, id := range ids {
			wg.Go(func() {
				errs[i] = f.s.SaveGrade(t.Context(), store.GradeResult{RolloutID: id, Verdicts: json.RawMessage(`[]`),
					GraderVersions: json.RawMessage(`[]`), Outcome: "passed", Reconciliation: &rec, TrainingGrade: true})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.completed(t, b.ID, 0, 100); len(got) != groups {
		t.Fatalf("completed %d groups, want all %d", len(got), groups)
	}
}
