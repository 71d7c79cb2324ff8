package dataset_test

import (
	"encoding/json"
	"errors"
	"iter"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset"
)

func stream(rs ...*dataset.Rollout) iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) {
		for _, r := range rs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

// TestGroupsOfSplitsACursorAtEachNewGroup: consecutive rollouts of one
// group become one group; a group id going backwards is an order error.
func TestGroupsOfSplitsACursorAtEachNewGroup(t *testing.T) {
	t.Parallel()
	a1, a2 := weatherRollout("r-1", "g-a", 1, "c", "x"), weatherRollout("r-4", "g-a", 0, "c", "y")
	b1 := weatherRollout("r-2", "g-b", 1, "c", "x")
	var sizes []int
	for g, err := range dataset.GroupsOf(stream(a1, a2, b1)) {
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(g))
	}
	if len(sizes) != 2 || sizes[0] != 2 || sizes[1] != 1 {
		t.Errorf("group sizes = %v, want [2 1]", sizes)
	}
	var err error
	for _, e := range dataset.GroupsOf(stream(b1, a1)) {
		if e != nil {
			err = e
		}
	}
	if !errors.Is(err, dataset.ErrOrder) {
		t.Errorf("err = %v, want ErrOrder", err)
	}
}

// TestGroupLineHoldsRLRowsOfTrainingGradeRollouts: a completed group's
// line carries the rl rows of its training-grade rollouts and counts the
// others by reason, undecided ones as pending.
func TestGroupLineHoldsRLRowsOfTrainingGradeRollouts(t *testing.T) {
	t.Parallel()
	no := false
	pending := weatherRollout("r-2", "g", 1, "c", "x")
	pending.TrainingGrade = nil
	off := weatherRollout("r-3", "g", 1, "c", "x")
	off.TrainingGrade, off.NotTrainingGradeReasons = &no, []string{"off_policy"}
	line, err := dataset.GroupLine([]*dataset.Rollout{weatherRollout("r-1", "g", 0.5, "c", "x"), pending, off})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		GroupID             string          `json:"group_id"`
		Rollouts            []dataset.RLRow `json:"rollouts"`
		NotExportedByReason map[string]int  `json:"not_exported_by_reason"`
	}
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatal(err)
	}
	if got.GroupID != "g" || len(got.Rollouts) != 1 || got.Rollouts[0].RolloutID != "r-1" || *got.Rollouts[0].Reward != 0.5 {
		t.Errorf("line = %s", line)
	}
	if got.NotExportedByReason["pending"] != 1 || got.NotExportedByReason["off_policy"] != 1 {
		t.Errorf("not_exported_by_reason = %v", got.NotExportedByReason)
	}
	if _, err := dataset.GroupLine([]*dataset.Rollout{off, pending}); !errors.Is(err, dataset.ErrOrder) {
		t.Errorf("out of order: err = %v, want ErrOrder", err)
	}
}
