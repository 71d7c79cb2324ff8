package dataset

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Manifest describes a built dataset file (SPEC §9). Every member is
// always present except those of one format: RetokenizationRequired (rl),
// GroupsWithoutPairs and PairsNotExportedByReason (dpo).
//
// The counts add up: RolloutsSelected = RolloutsExported + Pending + the
// sum of NotExportedByReason, each rollout counted once under the first
// reason that kept it out (its training-grade reasons in their stable
// order, then the format's own).
type Manifest struct {
	DatasetID string    `json:"dataset_id"`
	Format    Format    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	AgentID   string    `json:"agent_id"`
	Filters   Filters   `json:"filters"`
	// Rows is the number of lines in the file.
	Rows int `json:"rows"`
	// RolloutsSelected counts the frozen rollout ids; RolloutsExported
	// those with at least one row in the file.
	RolloutsSelected int `json:"rollouts_selected"`
	RolloutsExported int `json:"rollouts_exported"`
	// Pending counts rollouts not yet graded or reconciled at creation.
	Pending int `json:"pending"`
	// NotExportedByReason counts the other rollouts left out, by reason.
	NotExportedByReason map[string]int `json:"not_exported_by_reason"`
	// Policies and SuiteVersions are those of the exported rollouts,
	// sorted; a suite version is written "suite@version".
	Policies      []string `json:"policies"`
	SuiteVersions []string `json:"suite_versions"`
	// HoldoutTaskIDs are the held-out tasks, sorted, whether or not the
	// selection included them.
	HoldoutTaskIDs []string `json:"holdout_task_ids"`
	// FileSHA256 is the lowercase hex SHA-256 of the file (the strong
	// ETag); FileBytes its length.
	FileSHA256 string `json:"file_sha256"`
	FileBytes  int64  `json:"file_bytes"`
	// RolloutIDs are the frozen rollout ids, sorted.
	RolloutIDs []string `json:"rollout_ids"`
	// RetokenizationRequired (rl) counts rows with a turn lacking
	// captured prompt or completion token ids.
	RetokenizationRequired *int `json:"retokenization_required,omitempty"`
	// GroupsWithoutPairs (dpo) counts groups that gave no row.
	GroupsWithoutPairs *int `json:"groups_without_pairs,omitempty"`
	// PairsNotExportedByReason (dpo) counts pairs with enough margin that
	// were still left out, by reason.
	PairsNotExportedByReason map[string]int `json:"pairs_not_exported_by_reason,omitempty"`
	// EmptyReason says, when Rows is 0, why the file is empty; null
	// otherwise.
	EmptyReason *string `json:"empty_reason"`
}

// The EmptyReason texts.
const (
	emptyNothingSelected = "no rollout matched the selection"
	emptyNothingExported = "no selected rollout could be exported: see not_exported_by_reason and pending"
	emptyNoPairs         = "no group had a pair of training-grade rollouts whose rewards differ by at least min_margin"
)

// tally accumulates a manifest as the rows go by.
type tally struct {
	m        Manifest
	policies map[string]bool
	suites   map[string]bool
	lastID   string
	// grouped: rollouts come group by group (dpo), so ids rise only
	// within a group; finish sorts them and refuses duplicates.
	grouped bool
}

func newTally(sel Selection) *tally {
	holdout := slices.Clone(sel.HoldoutTaskIDs)
	if holdout == nil {
		holdout = []string{}
	}
	slices.Sort(holdout)
	holdout = slices.Compact(holdout)
	t := &tally{
		m: Manifest{
			DatasetID:           sel.ID,
			Format:              sel.Format,
			CreatedAt:           sel.CreatedAt.UTC(),
			AgentID:             sel.AgentID,
			Filters:             sel.Filters,
			NotExportedByReason: map[string]int{},
			Policies:            []string{},
			SuiteVersions:       []string{},
			HoldoutTaskIDs:      holdout,
			RolloutIDs:          []string{},
		},
		policies: map[string]bool{},
		suites:   map[string]bool{},
	}
	switch sel.Format {
	case FormatRL:
		t.m.RetokenizationRequired = new(int)
	case FormatDPO:
		t.m.GroupsWithoutPairs = new(int)
		t.m.PairsNotExportedByReason = map[string]int{}
	}
	return t
}

// selected records a rollout of the frozen list, which must come in
// increasing id order.
func (t *tally) selected(r *Rollout) error {
	if r.ID == "" || r.ID <= t.lastID && t.lastID != "" {
		return errOrder(t.lastID, r.ID)
	}
	t.lastID = r.ID
	t.m.RolloutsSelected++
	t.m.RolloutIDs = append(t.m.RolloutIDs, r.ID)
	return nil
}

func (t *tally) pending() { t.m.Pending++ }

func (t *tally) notExported(reason string) { t.m.NotExportedByReason[reason]++ }

func (t *tally) exported(r *Rollout) {
	t.m.RolloutsExported++
	if r.Policy != "" {
		t.policies[r.Policy] = true
	}
	if r.Suite != "" || r.SuiteVersion != "" {
		t.suites[r.Suite+"@"+r.SuiteVersion] = true
	}
}

// startGroup lets the next rollout's id be lower than the last one's.
func (t *tally) startGroup() { t.lastID = "" }

// finish completes the manifest with the file's digest and size.
func (t *tally) finish(sha string, n int64) (Manifest, error) {
	m := t.m
	if t.grouped {
		slices.Sort(m.RolloutIDs)
		for i := 1; i < len(m.RolloutIDs); i++ {
			if m.RolloutIDs[i] == m.RolloutIDs[i-1] {
				return Manifest{}, fmt.Errorf("%w: %q in two groups", ErrOrder, m.RolloutIDs[i])
			}
		}
	}
	m.FileSHA256, m.FileBytes = sha, n
	m.Policies = sortedKeys(t.policies)
	m.SuiteVersions = sortedKeys(t.suites)
	if m.Rows == 0 {
		why := emptyNothingExported
		switch {
		case m.RolloutsSelected == 0:
			why = emptyNothingSelected
		case m.Format == FormatDPO && m.Pending == 0 && onlyNoPair(m.NotExportedByReason):
			why = emptyNoPairs
		}
		m.EmptyReason = &why
	}
	return m, nil
}

func onlyNoPair(m map[string]int) bool {
	return m[ReasonNoPair] > 0 && len(m) == 1
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}
