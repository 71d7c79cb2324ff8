package dataset_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"iter"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/dataset"
)

// TestManifestCountsEverySelectedRolloutOnce: each selected rollout is
// exported, pending, or counted under the first reason that kept it out;
// the file's digest and size are those of the bytes written.
func TestManifestCountsEverySelectedRolloutOnce(t *testing.T) {
	t.Parallel()
	no := false
	pending := weatherRollout("r-02", "g1", 1, "c", "x")
	pending.TrainingGrade = nil
	offPolicy := weatherRollout("r-03", "g1", 1, "c", "x")
	offPolicy.TrainingGrade, offPolicy.NotTrainingGradeReasons = &no, []string{"off_policy", "no_verdict"}
	excluded := weatherRollout("r-04", "g1", 1, "c", "x")
	excluded.TrainingGrade, excluded.NotTrainingGradeReasons = &no, []string{"excluded:capacity"}
	heldOut := weatherRollout("r-05", "g2", 1, "c", "x")
	heldOut.TaskID = "task-holdout"
	missing := weatherRollout("r-06", "g2", 1, "c", "x")
	missing.Unavailable = "bodies_missing"
	low := weatherRollout("r-07", "g2", 0.5, "c", "x")
	other := weatherRollout("r-08", "g3", 1, "c", "y")
	other.Policy, other.SuiteVersion = "pol-b", "v2"
	src := sliceSource{weatherRollout("r-01", "g1", 1, "c", "x"), pending, offPolicy, excluded, heldOut, missing, low, other}

	s := sel(dataset.FormatSFT)
	s.HoldoutTaskIDs = []string{"task-zzz", "task-holdout"}
	var buf bytes.Buffer
	m, err := dataset.Write(&buf, s, src)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	checks := []struct {
		name      string
		got, want any
	}{
		{"rows", m.Rows, 2},
		{"rollouts_selected", m.RolloutsSelected, 8},
		{"rollouts_exported", m.RolloutsExported, 2},
		{"pending", m.Pending, 1},
		{"not_exported_by_reason", m.NotExportedByReason, map[string]int{"off_policy": 1, "excluded:capacity": 1, "held_out": 1, "bodies_missing": 1, "below_min_reward": 1}},
		{"policies", m.Policies, []string{"pol-a", "pol-b"}},
		{"suite_versions", m.SuiteVersions, []string{"weather@v1", "weather@v2"}},
		{"holdout_task_ids", m.HoldoutTaskIDs, []string{"task-holdout", "task-zzz"}},
		{"rollout_ids", m.RolloutIDs, []string{"r-01", "r-02", "r-03", "r-04", "r-05", "r-06", "r-07", "r-08"}},
		{"file_sha256", m.FileSHA256, hex.EncodeToString(sum[:])},
		{"file_bytes", m.FileBytes, int64(buf.Len())},
		{"empty_reason", m.EmptyReason, (*string)(nil)},
		{"retokenization_required (rl only)", m.RetokenizationRequired, (*int)(nil)},
		{"groups_without_pairs (dpo only)", m.GroupsWithoutPairs, (*int)(nil)},
	}
	for _, c := range checks {
		if !jsonEqual(t, mustJSON(t, c.got), mustJSON(t, c.want)) {
			t.Errorf("%s = %s, want %s", c.name, mustJSON(t, c.got), mustJSON(t, c.want))
		}
	}
	total := m.RolloutsExported + m.Pending
	for _, n := range m.NotExportedByReason {
		total += n
	}
	if total != m.RolloutsSelected {
		t.Errorf("exported + pending + not exported = %d, want rollouts_selected %d", total, m.RolloutsSelected)
	}

	// include_holdout keeps the held-out rollout.
	s.Filters.IncludeHoldout = true
	_, m2 := write(t, s, src)
	if m2.RolloutsExported != 3 || m2.NotExportedByReason["held_out"] != 0 {
		t.Errorf("with include_holdout: exported %d, held_out %d", m2.RolloutsExported, m2.NotExportedByReason["held_out"])
	}
}

// TestManifestSaysWhyAFileIsEmpty: a selection of nothing is a valid
// dataset of 0 rows whose manifest says why.
func TestManifestSaysWhyAFileIsEmpty(t *testing.T) {
	t.Parallel()
	pending := weatherRollout("r-1", "g", 1, "c", "x")
	pending.TrainingGrade = nil
	tests := []struct {
		name string
		f    dataset.Format
		src  sliceSource
		want string
	}{
		{"nothing selected", dataset.FormatSFT, nil, "no rollout matched the selection"},
		{"nothing exportable", dataset.FormatRL, sliceSource{pending}, "no selected rollout could be exported: see not_exported_by_reason and pending"},
		{"no pairs", dataset.FormatDPO, sliceSource{weatherRollout("r-1", "g", 1, "c", "x"), weatherRollout("r-2", "g", 1, "c", "y")}, "no group had a pair of training-grade rollouts whose rewards differ by at least min_margin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file, m := write(t, sel(tt.f), tt.src)
			if len(file) != 0 || m.Rows != 0 {
				t.Fatalf("file has %d bytes, %d rows", len(file), m.Rows)
			}
			if m.EmptyReason == nil || *m.EmptyReason != tt.want {
				t.Errorf("empty_reason = %v, want %q", m.EmptyReason, tt.want)
			}
			if m.FileSHA256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
				t.Errorf("file_sha256 = %s, want the digest of no bytes", m.FileSHA256)
			}
		})
	}
}

// TestManifestGolden pins a manifest's JSON: every SPEC §9 member, in a
// fixed order.
func TestManifestGolden(t *testing.T) {
	t.Parallel()
	s := sel(dataset.FormatRL)
	s.Filters.MinReward, s.Filters.BatchIDs = ptr(0.5), []string{"batch-1"}
	s.HoldoutTaskIDs = []string{"task-h"}
	_, m := write(t, s, sliceSource{weatherRollout("r-1", "g", 1, "c", "x"), weatherRollout("r-2", "g", 1, "d", "y")})
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "manifest.json", append(b, '\n'))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// orderedSource yields rollouts as given, for order checks.
type orderedSource []*dataset.Rollout

func (s orderedSource) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) {
		for _, r := range s {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func (s orderedSource) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) {
		for _, r := range s {
			if !yield([]*dataset.Rollout{r}, nil) {
				return
			}
		}
	}
}

// TestWriteRefusesRolloutsOutOfOrder: a source that yields rollouts out of
// id order (or twice) fails the build rather than writing a file that
// depends on the order of reads.
func TestWriteRefusesRolloutsOutOfOrder(t *testing.T) {
	t.Parallel()
	a, b := weatherRollout("r-1", "g1", 1, "c", "x"), weatherRollout("r-2", "g2", 1, "c", "x")
	for _, f := range dataset.Formats {
		for _, src := range []orderedSource{{b, a}, {a, a}} {
			if _, err := dataset.Write(&bytes.Buffer{}, sel(f), src); !errors.Is(err, dataset.ErrOrder) {
				t.Errorf("%s: err = %v, want ErrOrder", f, err)
			}
		}
	}
}

// TestWriteFailsWithItsSource: a source error ends the build with that
// error.
func TestWriteFailsWithItsSource(t *testing.T) {
	t.Parallel()
	boom := errors.New("blob read failed")
	src := failingSource{err: boom}
	for _, f := range dataset.Formats {
		if _, err := dataset.Write(&bytes.Buffer{}, sel(f), src); !errors.Is(err, boom) {
			t.Errorf("%s: err = %v, want the source's", f, err)
		}
	}
}

type failingSource struct{ err error }

func (s failingSource) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) { yield(nil, s.err) }
}

func (s failingSource) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) { yield(nil, s.err) }
}

// TestWriteRefusesUnknownFormat: an unknown format is refused before
// anything is read or written.
func TestWriteRefusesUnknownFormat(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if _, err := dataset.Write(&buf, sel("csv"), sliceSource{weatherRollout("r-1", "g", 1, "c", "x")}); err == nil || buf.Len() != 0 {
		t.Errorf("err = %v, %d bytes written", err, buf.Len())
	}
	if !slices.Equal(dataset.Formats, []dataset.Format{"sft", "dpo", "rl", "atif"}) {
		t.Errorf("Formats = %v", dataset.Formats)
	}
}

// TestSelectionRefusesWhatNoBuildCouldFix: an unknown format or a filter
// out of range is a 422 invalid_body pointing at the member at fault.
func TestSelectionRefusesWhatNoBuildCouldFix(t *testing.T) {
	t.Parallel()
	later := t0.Add(time.Hour)
	tests := []struct {
		name    string
		edit    func(*dataset.Selection)
		pointer string
	}{
		{"every format is valid with no filters", func(*dataset.Selection) {}, ""},
		{"unknown format", func(s *dataset.Selection) { s.Format = "parquet" }, "/format"},
		{"empty format", func(s *dataset.Selection) { s.Format = "" }, "/format"},
		{"negative min_margin", func(s *dataset.Selection) { s.Filters.MinMargin = ptr(-0.1) }, "/min_margin"},
		{"NaN min_reward", func(s *dataset.Selection) { s.Filters.MinReward = ptr(math.NaN()) }, "/min_reward"},
		{"until before since", func(s *dataset.Selection) { s.Filters.Since, s.Filters.Until = &later, &t0 }, "/until"},
		{"until equal to since", func(s *dataset.Selection) { s.Filters.Since, s.Filters.Until = &t0, &t0 }, "/until"},
		{"a since before until", func(s *dataset.Selection) { s.Filters.Since, s.Filters.Until = &t0, &later }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := sel(dataset.FormatDPO)
			tt.edit(&s)
			err := s.Validate()
			if tt.pointer == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ge *gyre.Error
			if !errors.As(err, &ge) || ge.Code != gyre.CodeInvalidBody || ge.Pointer != tt.pointer || ge.Status() != 422 {
				t.Errorf("err = %v, want 422 invalid_body at %s", err, tt.pointer)
			}
		})
	}
}
