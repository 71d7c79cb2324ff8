package sqlstore

import (
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// TestRolloutClass_FinishedIsTheLastAttemptThatEndedDecided: a finished
// rollout was not replaced and ended graded with its training grade
// decided, abandoned or deadline_exceeded; released, cancelled, pending and
// replaced rollouts are not finished.
func TestRolloutClass_FinishedIsTheLastAttemptThatEndedDecided(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		c    rolloutClass
		want bool
	}{
		{"graded and decided", rolloutClass{state: gyre.StateGraded, grade: 0}, true},
		{"graded, training grade", rolloutClass{state: gyre.StateGraded, grade: 1}, true},
		{"graded, reconciliation pending", rolloutClass{state: gyre.StateGraded, grade: -1}, false},
		{"graded then retried", rolloutClass{state: gyre.StateGraded, grade: 0, replaced: true}, false},
		{"abandoned", rolloutClass{state: gyre.StateAbandoned, grade: -1}, true},
		{"abandoned then retried", rolloutClass{state: gyre.StateAbandoned, grade: -1, replaced: true}, false},
		{"deadline exceeded", rolloutClass{state: gyre.StateDeadlineExceeded, grade: -1}, true},
		{"released", rolloutClass{state: gyre.StateReleased, grade: -1, replaced: true}, false},
		{"cancelled", rolloutClass{state: gyre.StateCancelled, grade: -1}, false},
		{"submitted", rolloutClass{state: gyre.StateSubmitted, grade: -1}, false},
		{"queued", rolloutClass{state: gyre.StateQueued, grade: -1}, false},
	}
	for _, c := range cases {
		if got := c.c.finished(); got != c.want {
			t.Errorf("%s: finished = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRolloutClass_ExcludedRolloutsCountInNoPassRateOrReward: an excluded
// graded rollout counts as excluded whatever its outcome, and its reward
// is in no mean.
func TestRolloutClass_ExcludedRolloutsCountInNoPassRateOrReward(t *testing.T) {
	t.Parallel()
	sum := store.BatchSummary{Counts: map[gyre.RolloutState]int{}, NotTrainingGrade: map[string]int{}}
	for _, c := range []rolloutClass{
		{state: gyre.StateGraded, outcome: "passed", grade: 1, n: 2, rewardSum: 2, rewardN: 2},
		{state: gyre.StateGraded, outcome: "failed", grade: 0, n: 1, rewardSum: 0.25, rewardN: 1},
		{state: gyre.StateGraded, outcome: "unscored", grade: 0, n: 1},
		{state: gyre.StateGraded, outcome: "passed", excluded: true, grade: 0, n: 3, rewardSum: 3, rewardN: 3},
		{state: gyre.StateAbandoned, grade: -1, n: 1},
		{state: gyre.StateAbandoned, grade: -1, replaced: true, n: 4},
	} {
		c.add(&sum)
	}
	if sum.Passed != 2 || sum.Failed != 1 || sum.Unscored != 1 || sum.Excluded != 3 {
		t.Errorf("outcomes = %d %d %d %d, want 2 1 1 3", sum.Passed, sum.Failed, sum.Unscored, sum.Excluded)
	}
	if sum.MeanReward == nil || *sum.MeanReward != 0.75 || sum.RewardN != 3 {
		t.Errorf("mean reward = %v over %d, want 0.75 over 3", sum.MeanReward, sum.RewardN)
	}
	if sum.Finished != 8 || sum.TrainingGrade != 2 || sum.NotTrainingGrade["state:abandoned"] != 1 || sum.Counts[gyre.StateAbandoned] != 5 {
		t.Errorf("finished %d training grade %d reasons %v counts %v", sum.Finished, sum.TrainingGrade, sum.NotTrainingGrade, sum.Counts)
	}
}
