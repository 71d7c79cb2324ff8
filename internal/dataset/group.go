package dataset

import (
	"encoding/json"
	"fmt"
	"iter"

	"github.com/gyrehq/gyre/internal/grade"
)

// GroupsOf turns a stream of rollouts ordered by group id, then rollout
// id (one store cursor), into the stream of groups Source.Groups yields,
// holding one group at a time.
func GroupsOf(rollouts iter.Seq2[*Rollout, error]) iter.Seq2[[]*Rollout, error] {
	return func(yield func([]*Rollout, error) bool) {
		var group []*Rollout
		for r, err := range rollouts {
			if err != nil {
				yield(nil, err)
				return
			}
			if len(group) > 0 && r.GroupID != group[0].GroupID {
				if r.GroupID < group[0].GroupID {
					yield(nil, fmt.Errorf("%w: group %q after %q", ErrOrder, r.GroupID, group[0].GroupID))
					return
				}
				if !yield(group, nil) {
					return
				}
				group = nil
			}
			group = append(group, r)
		}
		if len(group) > 0 {
			yield(group, nil)
		}
	}
}

// ReasonPending counts, in a GroupLine, a rollout whose training grade
// was not decided yet.
const ReasonPending = "pending"

// GroupLine renders one completed group as a line of
// GET /batches/{id}/groups (SPEC §9), without its newline:
//
//	{"group_id", "rollouts": [rl rows of its training-grade rollouts], "not_exported_by_reason": {…}}
//
// rollouts are the group's current rollouts in id order. Rows are those of
// WriteRL; every other rollout is counted once under the first reason that
// kept it out, an undecided one under "pending". No holdout applies: a
// batch is followed as it runs, not selected.
func GroupLine(group []*Rollout) ([]byte, error) {
	if len(group) == 0 {
		return nil, fmt.Errorf("dataset: an empty group")
	}
	var c canon
	line := struct {
		GroupID             string            `json:"group_id"`
		Rollouts            []json.RawMessage `json:"rollouts"`
		NotExportedByReason map[string]int    `json:"not_exported_by_reason"`
	}{GroupID: group[0].GroupID, Rollouts: []json.RawMessage{}, NotExportedByReason: map[string]int{}}
	last := ""
	for _, r := range group {
		if r.GroupID != line.GroupID || r.ID <= last {
			return nil, fmt.Errorf("%w: rollout %q of group %q after %q in group %q", ErrOrder, r.ID, r.GroupID, last, line.GroupID)
		}
		last = r.ID
		reason, pending := eligibility(r, nil)
		switch {
		case pending:
			line.NotExportedByReason[ReasonPending]++
			continue
		case reason != "":
			line.NotExportedByReason[reason]++
			continue
		case len(r.Completions) == 0:
			line.NotExportedByReason[grade.NotGradeNoCompletions]++
			continue
		}
		row, _, err := rlRow(&c, r)
		if err != nil {
			line.NotExportedByReason[reasonOf(err)]++
			continue
		}
		line.Rollouts = append(line.Rollouts, row)
	}
	b, err := encode(line)
	if err != nil {
		return nil, err
	}
	return escapeLineSeparators(nil, b), nil
}
