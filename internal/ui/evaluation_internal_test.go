package ui

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
)

func f(v float64) *float64 { return &v }

func TestCompareRegressionsFirst(t *testing.T) {
	t.Parallel()
	cases := []eval.CaseDiff{
		{CaseID: "a-fixed", Change: "fixed", PassRateDelta: f(1)},
		{CaseID: "b-same", Change: "unchanged", PassRateDelta: f(0)},
		{CaseID: "c-small-drop", Change: "unchanged", PassRateDelta: f(-0.2)},
		{CaseID: "d-new-failure", Change: "new_failure", PassRateDelta: f(-0.5)},
		{CaseID: "e-big-drop", Change: "unchanged", PassRateDelta: f(-0.6)},
		{CaseID: "f-removed", Change: "removed"},
		{CaseID: "g-new-failure", Change: "new_failure", PassRateDelta: f(-1)},
	}
	var got []string
	for _, c := range regressionsFirst(cases) {
		got = append(got, c.CaseID)
	}
	want := "g-new-failure d-new-failure e-big-drop c-small-drop f-removed b-same a-fixed"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

func TestGridCellEveryClassificationLooksDifferent(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, c := range []string{"passed", "failed", "unscored", "error", ""} {
		class := cellClass(c)
		if prev, ok := seen[class]; ok {
			t.Errorf("%q and %q share the class %s", c, prev, class)
		}
		seen[class] = c
	}
	if cellText(gridCell{Class: "error"}) == cellText(gridCell{Class: "failed"}) {
		t.Error("an error reads as a failure")
	}
	if got := cellText(gridCell{Class: "unscored"}); got != "abstained" {
		t.Errorf("unscored run shows %q, want abstained", got)
	}
}

func TestStepsPageEndsAtStepCountOrTextBudget(t *testing.T) {
	t.Parallel()
	mk := func(n, textLen int) *atif.Trajectory {
		tr := &atif.Trajectory{}
		for i := 1; i <= n; i++ {
			tr.Steps = append(tr.Steps, atif.Step{StepID: i, Source: atif.SourceUser, Message: atif.TextContent(strings.Repeat("x", textLen))})
		}
		return tr
	}
	for _, tc := range []struct {
		name                string
		steps, text, from   int
		wantSteps, wantNext int
	}{
		{"short steps fill a page", 100, 10, 0, stepsPerPage, stepsPerPage},
		{"the last page has no next", 30, 10, 25, 5, 0},
		// Each step shows 32 KiB of its 100 KiB: the ninth passes 256 KiB.
		{"large steps end a page at the text budget", 100, 100 << 10, 0, 9, 9},
		{"the budget counts text as shown", 5, maxShownText * 4, 2, 3, 0},
	} {
		p := pageOfSteps(mk(tc.steps, tc.text), tc.from)
		if len(p.Steps) != tc.wantSteps || p.Next != tc.wantNext {
			t.Errorf("%s: %d steps, next %d; want %d, %d", tc.name, len(p.Steps), p.Next, tc.wantSteps, tc.wantNext)
		}
	}
}

func TestShownTextCutsLongTextOnARuneBoundary(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", maxShownText) // 2 bytes a rune
	got := showText(s + "x")
	if !utf8.ValidString(got.Text) || len(got.Text)+got.Cut != len(s)+1 || len(got.Text) > maxShownText {
		t.Errorf("cut %d + %d bytes of %d, valid %v", len(got.Text), got.Cut, len(s)+1, utf8.ValidString(got.Text))
	}
	if short := showText("hi"); short.Text != "hi" || short.Cut != 0 {
		t.Errorf("short text changed: %+v", short)
	}
}

// TestViewerReadsEveryTestdataTrajectory: each real ATIF document of the
// test data shows its steps; the invalid ones say why they are invalid.
func TestViewerReadsEveryTestdataTrajectory(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"valid", "invalid"} {
		files, err := filepath.Glob(filepath.Join("../../atif/testdata", dir, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no test data in %s: %v", dir, err)
		}
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			p, err := readTrajectory(data)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if (dir == "invalid") != (len(p.Invalid) > 0) {
				t.Errorf("%s: violations %v", name, p.Invalid)
			}
			page := pageOfSteps(p.T, 0)
			if len(page.Steps) == 0 && len(p.T.Steps) > 0 {
				t.Errorf("%s: no step shown", name)
			}
			_ = headOf(p.T)
		}
	}
}

func TestComparisonKeptOnlyForFinishedExperimentsAndTheirSummaries(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a := store.Experiment{ID: "a", FinishedAt: &now, Summary: []byte(`{"pass_rate":0.5}`)}
	b := store.Experiment{ID: "b", FinishedAt: &now, Summary: []byte(`{"pass_rate":0.7}`)}
	running := store.Experiment{ID: "b"}
	regraded := b
	regraded.Summary = []byte(`{"pass_rate":0.9}`)
	k := comparisonKey("t1", a, b)
	switch {
	case k == "":
		t.Error("two finished experiments have no key")
	case comparisonKey("t1", a, running) != "":
		t.Error("a running experiment's comparison would be kept")
	case comparisonKey("t1", a, regraded) == k:
		t.Error("a regraded summary keeps the old comparison")
	case comparisonKey("t2", a, b) == k:
		t.Error("another tenant shares the key")
	case comparisonKey("t1", b, a) == k:
		t.Error("A and B swapped share the key")
	}
}
