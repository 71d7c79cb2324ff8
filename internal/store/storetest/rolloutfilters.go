package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
)

// The web UI's rollout filters and reward histogram (SPEC §11).
func runRolloutFilters(t *testing.T, open Opener) {
	t.Run("RolloutFiltersMatchVerdictExclusionAndTrainingGrade", func(t *testing.T) { t.Parallel(); testRolloutFilters(t, open) })
	t.Run("BatchRewardHistogramCountsWhatTheMeanRewardAverages", func(t *testing.T) { t.Parallel(); testBatchRewardHistogram(t, open) })
}

// filterFixture holds one batch of five rollouts that end every way the
// filters tell apart: passed and training grade (reward 1), failed and
// not training grade (reward 0.25), excluded for capacity (graded passed,
// reward 0.9), unscored (no reward), and cancelled by the server.
type filterFixture struct {
	*rolloutFixture
	batch                                         store.Batch
	passed, failed, excluded, unscored, cancelled string
}

func newFilterFixture(t *testing.T, open Opener) *filterFixture {
	t.Helper()
	f := &filterFixture{rolloutFixture: newRolloutFixture(t, open, 5)}
	f.batch, _ = f.rolloutFixture.batch(t, store.NewBatch{MaxAttempts: 1})
	var ids []string
	for i := range 4 {
		r, tok := f.claimOne(t, "filter"+string(rune('a'+i)))
		var excl *string
		if i == 2 {
			excl = ptr("capacity")
		}
		if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, excl); err != nil {
			t.Fatalf("submit: %v", err)
		}
		ids = append(ids, r.ID)
	}
	f.passed, f.failed, f.excluded, f.unscored = ids[0], ids[1], ids[2], ids[3]
	f.grade(t, f.passed, "passed", f64(1), []string{})
	f.grade(t, f.failed, "failed", f64(0.25), []string{"off_policy"})
	f.grade(t, f.excluded, "passed", f64(0.9), nil)
	f.grade(t, f.unscored, "unscored", nil, nil)
	queued, _, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{State: "queued"}, store.Page{Limit: 10})
	if err != nil || len(queued) != 1 {
		t.Fatalf("queued rollouts = %d, %v; want 1", len(queued), err)
	}
	f.cancelled = queued[0].ID
	if _, err := f.s.CancelRollout(t.Context(), f.tenant.ID, f.cancelled); err != nil {
		t.Fatalf("CancelRollout: %v", err)
	}
	return f
}

func testRolloutFilters(t *testing.T, open Opener) {
	f := newFilterFixture(t, open)
	list := func(flt store.RolloutFilter, limit int) []string {
		t.Helper()
		flt.BatchID = f.batch.ID
		var ids []string
		p := store.Page{Limit: limit}
		for {
			rs, next, err := f.s.ListRollouts(t.Context(), f.tenant.ID, flt, p)
			if err != nil {
				t.Fatalf("ListRollouts(%+v): %v", flt, err)
			}
			for _, r := range rs {
				ids = append(ids, r.ID)
			}
			if next == "" {
				break
			}
			p.Cursor = next
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	for _, tc := range []struct {
		name string
		f    store.RolloutFilter
		want []string
	}{
		{"every rollout", store.RolloutFilter{}, sorted(f.passed, f.failed, f.excluded, f.unscored, f.cancelled)},
		{"outcome passed (an excluded rollout is still graded)", store.RolloutFilter{Outcome: "passed"}, sorted(f.passed, f.excluded)},
		{"outcome failed", store.RolloutFilter{Outcome: "failed"}, sorted(f.failed)},
		{"outcome unscored", store.RolloutFilter{Outcome: "unscored"}, sorted(f.unscored)},
		{"no exclusion", store.RolloutFilter{Exclusion: store.ExclusionNone}, sorted(f.passed, f.failed, f.unscored)},
		{"any exclusion, server-ended included", store.RolloutFilter{Exclusion: store.ExclusionAny}, sorted(f.excluded, f.cancelled)},
		{"the output's exclusion reason", store.RolloutFilter{Exclusion: "capacity"}, sorted(f.excluded)},
		{"a server-ended state as reason", store.RolloutFilter{Exclusion: "state:cancelled"}, sorted(f.cancelled)},
		{"a state that the server does not end is no reason", store.RolloutFilter{Exclusion: "state:graded"}, nil},
		{"training grade", store.RolloutFilter{TrainingGrade: ptr(true)}, sorted(f.passed)},
		{"not training grade", store.RolloutFilter{TrainingGrade: ptr(false)}, sorted(f.failed)},
		{"filters combine", store.RolloutFilter{Exclusion: store.ExclusionNone, Outcome: "failed"}, sorted(f.failed)},
	} {
		for _, limit := range []int{1, 50} {
			if got := list(tc.f, limit); !slices.Equal(got, tc.want) {
				t.Errorf("%s (pages of %d): got %v, want %v", tc.name, limit, got, tc.want)
			}
		}
	}
	// A cursor is bound to its filter.
	_, next, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{BatchID: f.batch.ID, Exclusion: store.ExclusionNone}, store.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	_, _, err = f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{BatchID: f.batch.ID, Exclusion: store.ExclusionAny}, store.Page{Limit: 1, Cursor: next})
	if !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("cursor of another filter: %v, want ErrInvalidCursor", err)
	}
	// The rollout carries its outcome and reward.
	r := mustGet(t, f.s, f.tenant.ID, f.failed)
	if r.Outcome == nil || *r.Outcome != "failed" || r.Reward == nil || *r.Reward != 0.25 {
		t.Errorf("failed rollout: outcome %v reward %v, want failed 0.25", r.Outcome, r.Reward)
	}
	if r := mustGet(t, f.s, f.tenant.ID, f.cancelled); r.Outcome != nil || r.Reward != nil {
		t.Errorf("cancelled rollout: outcome %v reward %v, want nil nil", r.Outcome, r.Reward)
	}
}

func testBatchRewardHistogram(t *testing.T, open Opener) {
	f := newFilterFixture(t, open)
	got, err := f.s.BatchRewardHistogram(t.Context(), f.tenant.ID, f.batch.ID, 4)
	if err != nil {
		t.Fatal(err)
	}
	// 0.25 starts the second bin; 1 falls in the last; the excluded 0.9
	// and the unscored rollout count nowhere.
	if want := []int{0, 1, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("BatchRewardHistogram = %v, want %v", got, want)
	}
	total := 0
	for _, n := range got {
		total += n
	}
	if sum := f.summary(t, f.batch.ID); sum.RewardN != total {
		t.Errorf("histogram counts %d rewards, the mean reward averages %d", total, sum.RewardN)
	}
	other := mustTenant(t, f.s, "other")
	if _, err := f.s.BatchRewardHistogram(t.Context(), other.ID, f.batch.ID, 4); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's batch: %v, want ErrNotFound", err)
	}
	if _, err := f.s.BatchRewardHistogram(t.Context(), f.tenant.ID, f.batch.ID, 0); err == nil {
		t.Error("0 bins: want an error")
	}
}
