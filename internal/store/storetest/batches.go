package storetest

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Batch results (SPEC §4.8): summaries, their aggregates and the list.
func runBatches(t *testing.T, open Opener) {
	t.Run("BatchResultsAggregate", func(t *testing.T) { t.Parallel(); testBatchResultsAggregate(t, open) })
	t.Run("CancelledBatchGroupsAreNotComplete", func(t *testing.T) { t.Parallel(); testCancelledBatchGroups(t, open) })
	t.Run("ListBatches", func(t *testing.T) { t.Parallel(); testListBatches(t, open) })
	t.Run("ListBatchesByCreationWindow", func(t *testing.T) { t.Parallel(); testListBatchesByWindow(t, open) })
	t.Run("BatchIdempotencyKeyReusedWithAnotherBody", func(t *testing.T) { t.Parallel(); testBatchIdempotencyKeyReused(t, open) })
}

// grade stores a verdict set for r with the given outcome and reward;
// with reasons non-nil it also decides reconciliation and training grade
// (empty reasons: training grade).
func (f *rolloutFixture) grade(t *testing.T, id, outcome string, reward *float64, reasons []string) {
	t.Helper()
	g := store.GradeResult{RolloutID: id, Verdicts: json.RawMessage(`[]`), GraderVersions: json.RawMessage(`[]`),
		Outcome: outcome, Reward: reward}
	if reasons != nil {
		rec := "on_policy"
		g.Reconciliation, g.TrainingGrade, g.Reasons = &rec, len(reasons) == 0, reasons
	}
	if err := f.s.SaveGrade(t.Context(), g); err != nil {
		t.Fatalf("SaveGrade(%s): %v", id, err)
	}
}

func (f *rolloutFixture) summary(t *testing.T, batchID string) store.BatchSummary {
	t.Helper()
	sum, err := f.s.BatchSummary(t.Context(), f.tenant.ID, batchID)
	if err != nil {
		t.Fatalf("BatchSummary: %v", err)
	}
	return sum
}

// testBatchResultsAggregate walks one batch through every kind of ending
// and checks each aggregate: pass rate counts graded rollouts without an
// exclusion that did not abstain; mean reward averages those with a
// reward; finished leaves out replaced (retried) and undecided rollouts;
// reasons count finished rollouts that are not training grade.
func testBatchResultsAggregate(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	b, _ := f.batch(t, store.NewBatch{GroupSize: 2, MaxAttempts: 2, RetryOn: []string{"capacity"}})
	capacity := "capacity"

	// Task 0: one pass (training grade), one fail (off policy).
	r1, tok1 := f.claimOne(t, "a1")
	r2, tok2 := f.claimOne(t, "a2")
	for _, s := range []struct {
		r   store.Rollout
		tok [32]byte
	}{{r1, tok1}, {r2, tok2}} {
		if _, err := f.submit(t, s.r, s.tok, `{"final_text":"x"}`, nil); err != nil {
			t.Fatal(err)
		}
	}
	if sum := f.summary(t, b.ID); sum.State != gyre.BatchRunning || sum.Counts[gyre.StateSubmitted] != 2 {
		t.Fatalf("with submitted rollouts awaiting grading: state %s counts %v, want running", sum.State, sum.Counts)
	}
	f.grade(t, r1.ID, "passed", ptr(1.0), []string{})
	f.grade(t, r2.ID, "failed", ptr(0.5), nil) // graded, reconciliation pending
	if sum := f.summary(t, b.ID); sum.Finished != 1 || sum.TrainingGrade != 1 || sum.Passed != 1 || sum.Failed != 1 {
		t.Fatalf("a rollout awaiting reconciliation counted as finished: %+v", sum)
	}
	f.grade(t, r2.ID, "failed", ptr(0.5), []string{"off_policy"})

	// Task 1, first rollout: excluded with a retryable reason, so retried;
	// the retry abstains.
	r3, tok3 := f.claimOne(t, "a3")
	res, err := f.submit(t, r3, tok3, `{"final_text":"","exclusion":{"reason":"capacity"}}`, &capacity)
	if err != nil || res.Retry == "" {
		t.Fatalf("retryable exclusion: %+v %v", res, err)
	}
	f.grade(t, r3.ID, "passed", ptr(1.0), []string{"excluded:capacity"})
	r3b, tok3b := f.claimOne(t, "a3b")
	if r3b.ID != res.Retry {
		t.Fatalf("claimed %s, want the retry %s", r3b.ID, res.Retry)
	}
	if _, err := f.submit(t, r3b, tok3b, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	f.grade(t, r3b.ID, "unscored", nil, []string{"no_verdict", "no_completions"})

	// Task 1, second rollout: abandoned twice; the first is retried, the
	// second is at max attempts and stays abandoned.
	f.claimOne(t, "a4")
	f.clk.Advance(2 * time.Minute)
	if sw, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(sw.Retries) != 1 {
		t.Fatalf("sweep: %+v %v", sw, err)
	}
	if sum := f.summary(t, b.ID); sum.State != gyre.BatchRunning || sum.GroupsComplete != 1 {
		t.Fatalf("with a retry queued: state %s groups complete %d, want running and 1", sum.State, sum.GroupsComplete)
	}
	f.claimOne(t, "a4b")
	f.clk.Advance(2 * time.Minute)
	if sw, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(sw.Abandoned) != 1 || len(sw.Retries) != 0 {
		t.Fatalf("sweep of the last attempt: %+v %v", sw, err)
	}

	sum := f.summary(t, b.ID)
	if sum.State != gyre.BatchFinished {
		t.Errorf("state = %s, want finished", sum.State)
	}
	wantCounts := map[gyre.RolloutState]int{gyre.StateGraded: 4, gyre.StateAbandoned: 2}
	if !maps.Equal(sum.Counts, wantCounts) {
		t.Errorf("counts = %v, want %v", sum.Counts, wantCounts)
	}
	if sum.Groups != 2 || sum.GroupsComplete != 2 || sum.GroupsCancelled != 0 {
		t.Errorf("groups = %d complete %d cancelled %d, want 2 2 0", sum.Groups, sum.GroupsComplete, sum.GroupsCancelled)
	}
	if sum.Passed != 1 || sum.Failed != 1 || sum.Unscored != 1 || sum.Excluded != 1 {
		t.Errorf("passed %d failed %d unscored %d excluded %d, want 1 1 1 1 (the excluded pass is not a pass)",
			sum.Passed, sum.Failed, sum.Unscored, sum.Excluded)
	}
	if sum.MeanReward == nil || *sum.MeanReward != 0.75 || sum.RewardN != 2 {
		t.Errorf("mean reward = %v over %d, want 0.75 over 2 (no excluded or abstaining rollout)", sum.MeanReward, sum.RewardN)
	}
	// Finished: the pass, the fail, the retry that abstained and the last
	// abandoned attempt; not the retried exclusion nor the retried abandon.
	if sum.Finished != 4 || sum.TrainingGrade != 1 {
		t.Errorf("finished %d training grade %d, want 4 and 1", sum.Finished, sum.TrainingGrade)
	}
	wantReasons := map[string]int{"off_policy": 1, "no_verdict": 1, "no_completions": 1, "state:abandoned": 1}
	if !maps.Equal(sum.NotTrainingGrade, wantReasons) {
		t.Errorf("reasons = %v, want %v", sum.NotTrainingGrade, wantReasons)
	}
}

// testCancelledBatchGroups: a group whose rollouts were cancelled is
// cancelled, never complete, and a cancelled rollout is not finished.
func testCancelledBatchGroups(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	b, _ := f.batch(t, store.NewBatch{GroupSize: 2})
	f.claimOne(t, "c1")
	if _, err := f.s.CancelBatch(t.Context(), f.tenant.ID, b.ID); err != nil {
		t.Fatal(err)
	}
	sum := f.summary(t, b.ID)
	if sum.State != gyre.BatchCancelled || sum.Groups != 2 || sum.GroupsComplete != 0 || sum.GroupsCancelled != 2 {
		t.Errorf("cancelled batch: state %s groups %d complete %d cancelled %d, want cancelled 2 0 2",
			sum.State, sum.Groups, sum.GroupsComplete, sum.GroupsCancelled)
	}
	if sum.Finished != 0 || len(sum.NotTrainingGrade) != 0 || sum.MeanReward != nil || sum.Passed+sum.Failed != 0 {
		t.Errorf("cancelled rollouts counted as results: %+v", sum)
	}
}

func testListBatches(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	list := func(fl store.BatchFilter, p store.Page) ([]string, string) {
		t.Helper()
		sums, next, err := f.s.ListBatches(t.Context(), f.tenant.ID, fl, p)
		if err != nil {
			t.Fatalf("ListBatches(%+v): %v", fl, err)
		}
		ids := make([]string, len(sums))
		for i, s := range sums {
			ids[i] = s.ID
		}
		return ids, next
	}
	// Oldest first: finished (its only rollout abandoned at max
	// attempts), cancelled, running; then another agent's running batch.
	finished, _ := f.batch(t, store.NewBatch{MaxAttempts: 1})
	f.claimOne(t, "l1")
	f.clk.Advance(2 * time.Minute)
	if _, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Millisecond)
	cancelled, _ := f.batch(t, store.NewBatch{})
	if _, err := f.s.CancelBatch(t.Context(), f.tenant.ID, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Millisecond)
	running, _ := f.batch(t, store.NewBatch{})
	f.clk.Advance(time.Millisecond)
	other, _ := f.batch(t, store.NewBatch{AgentID: "agent-2"})

	if ids, next := list(store.BatchFilter{}, store.Page{}); !slices.Equal(ids, []string{other.ID, running.ID, cancelled.ID, finished.ID}) || next != "" {
		t.Errorf("all = %v next %q, want newest first", ids, next)
	}
	cases := []struct {
		name   string
		filter store.BatchFilter
		want   []string
	}{
		{"agent", store.BatchFilter{AgentID: "agent-1"}, []string{running.ID, cancelled.ID, finished.ID}},
		{"running", store.BatchFilter{State: gyre.BatchRunning}, []string{other.ID, running.ID}},
		{"finished", store.BatchFilter{State: gyre.BatchFinished}, []string{finished.ID}},
		{"cancelled", store.BatchFilter{State: gyre.BatchCancelled}, []string{cancelled.ID}},
		{"agent and state", store.BatchFilter{AgentID: "agent-2", State: gyre.BatchFinished}, []string{}},
		{"created since", store.BatchFilter{Since: cancelled.CreatedAt}, []string{other.ID, running.ID, cancelled.ID}},
		{"agent created since", store.BatchFilter{AgentID: "agent-1", Since: running.CreatedAt}, []string{running.ID}},
		{"created since, none", store.BatchFilter{Since: other.CreatedAt.Add(time.Millisecond)}, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if ids, _ := list(c.filter, store.Page{}); !slices.Equal(ids, c.want) {
				t.Errorf("ids = %v, want %v", ids, c.want)
			}
		})
	}
	// Pages follow the filter.
	page1, next := list(store.BatchFilter{AgentID: "agent-1"}, store.Page{Limit: 2})
	if !slices.Equal(page1, []string{running.ID, cancelled.ID}) || next == "" {
		t.Fatalf("page 1 = %v next %q", page1, next)
	}
	page2, next := list(store.BatchFilter{AgentID: "agent-1"}, store.Page{Limit: 2, Cursor: next})
	if !slices.Equal(page2, []string{finished.ID}) || next != "" {
		t.Fatalf("page 2 = %v next %q", page2, next)
	}
	// A page of a window follows the window it was asked with.
	page1, next = list(store.BatchFilter{Since: finished.CreatedAt}, store.Page{Limit: 2})
	if !slices.Equal(page1, []string{other.ID, running.ID}) || next == "" {
		t.Fatalf("windowed page 1 = %v next %q", page1, next)
	}
	if page2, _ = list(store.BatchFilter{Since: finished.CreatedAt}, store.Page{Limit: 2, Cursor: next}); !slices.Equal(page2, []string{cancelled.ID, finished.ID}) {
		t.Errorf("windowed page 2 = %v, want the window's older batches", page2)
	}
	sums, _, err := f.s.ListBatches(t.Context(), f.tenant.ID, store.BatchFilter{State: gyre.BatchCancelled}, store.Page{})
	if err != nil || len(sums) != 1 || sums[0].GroupsCancelled != 1 || sums[0].Counts[gyre.StateCancelled] != 1 {
		t.Errorf("listed summaries carry their aggregates: %+v %v", sums, err)
	}
	if _, _, err := f.s.ListBatches(t.Context(), f.tenant.ID, store.BatchFilter{}, store.Page{Cursor: "bad"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	stranger := mustTenant(t, f.s, "stranger")
	if sums, _, err := f.s.ListBatches(t.Context(), stranger.ID, store.BatchFilter{}, store.Page{}); err != nil || len(sums) != 0 {
		t.Errorf("another tenant lists %d batches (%v)", len(sums), err)
	}
	if _, err := f.s.BatchSummary(t.Context(), stranger.ID, running.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's summary: %v", err)
	}
}

// testBatchIdempotencyKeyReused: the same Idempotency-Key with another
// body is refused and creates nothing; with the same body it returns the
// original batch (SPEC §4.2).
func testBatchIdempotencyKeyReused(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	nb := store.NewBatch{TenantID: f.tenant.ID, AgentID: "a", TaskIDs: f.tasks, GroupSize: 1, DeadlineS: 60, MaxAttempts: 1,
		IdempotencyKey: "k1", RequestSHA256: "aaaa"}
	b1, ids1, _, err := f.s.CreateBatch(t.Context(), nb)
	if err != nil {
		t.Fatal(err)
	}
	changed := nb
	changed.RequestSHA256, changed.TaskIDs = "bbbb", f.tasks[:1]
	if _, _, _, err := f.s.CreateBatch(t.Context(), changed); !errors.Is(err, store.ErrIdempotencyKeyReused) {
		t.Fatalf("same key, another body: err = %v, want ErrIdempotencyKeyReused", err)
	}
	if rs, _, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{}, store.Page{}); err != nil || len(rs) != len(ids1) {
		t.Errorf("the refused batch left %d rollouts, want the original %d (%v)", len(rs), len(ids1), err)
	}
	b2, ids2, existed, err := f.s.CreateBatch(t.Context(), nb)
	if err != nil || !existed || b2.ID != b1.ID || !slices.Equal(ids1, ids2) {
		t.Fatalf("same key, same body: %s existed=%v err=%v, want the original %s", b2.ID, existed, err, b1.ID)
	}
	// Past the window the key is free again, whatever the body.
	f.clk.Advance(25 * time.Hour)
	if b3, _, existed, err := f.s.CreateBatch(t.Context(), changed); err != nil || existed || b3.ID == b1.ID {
		t.Fatalf("expired key with another body: %s existed=%v err=%v, want a new batch", b3.ID, existed, err)
	}
	f.clk.Advance(time.Hour)
	if _, _, _, err := f.s.CreateBatch(t.Context(), nb); !errors.Is(err, store.ErrIdempotencyKeyReused) {
		t.Fatalf("the renewed key remembers its new body: err = %v", err)
	}
}

// The batches list keeps the batches created in a window (since
// inclusive, until exclusive), with the other filters and within pages;
// an unfiltered cursor stays valid and a windowed one is bound to its
// window.
func testListBatchesByWindow(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	t0 := f.clk.Now()
	a, _ := f.batch(t, store.NewBatch{})
	f.clk.Advance(time.Hour)
	b, _ := f.batch(t, store.NewBatch{AgentID: "agent-2"})
	f.clk.Advance(time.Hour)
	c, _ := f.batch(t, store.NewBatch{})
	list := func(fl store.BatchFilter) []string {
		t.Helper()
		var ids []string
		cursor := ""
		for {
			sums, next, err := f.s.ListBatches(t.Context(), f.tenant.ID, fl, store.Page{Limit: 1, Cursor: cursor})
			if err != nil {
				t.Fatalf("ListBatches(%+v): %v", fl, err)
			}
			for _, s := range sums {
				ids = append(ids, s.ID)
			}
			if next == "" {
				return ids
			}
			cursor = next
		}
	}
	for _, tc := range []struct {
		name string
		f    store.BatchFilter
		want []string
	}{
		{"since is inclusive", store.BatchFilter{Since: t0.Add(time.Hour)}, []string{c.ID, b.ID}},
		{"until is exclusive", store.BatchFilter{Until: t0.Add(time.Hour)}, []string{a.ID}},
		{"window", store.BatchFilter{Since: t0.Add(time.Minute), Until: t0.Add(2 * time.Hour)}, []string{b.ID}},
		{"window and agent", store.BatchFilter{AgentID: "agent-1", Since: t0, Until: t0.Add(3 * time.Hour)}, []string{c.ID, a.ID}},
		{"window and state", store.BatchFilter{State: gyre.BatchFinished, Since: t0}, nil},
		{"empty window", store.BatchFilter{Since: t0.Add(3 * time.Hour)}, nil},
	} {
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	_, next, err := f.s.ListBatches(t.Context(), f.tenant.ID, store.BatchFilter{Since: t0}, store.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first windowed page: %q %v", next, err)
	}
	if _, _, err := f.s.ListBatches(t.Context(), f.tenant.ID, store.BatchFilter{Since: t0.Add(time.Hour)}, store.Page{Limit: 1, Cursor: next}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("a cursor of another window: %v, want ErrInvalidCursor", err)
	}
}
