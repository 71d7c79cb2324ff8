package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// liveFixture is a store with a finished experiment A and a running
// experiment B of the same suite, and a UI over it.
type liveFixture struct {
	st   store.Store
	u    *UI
	s    session
	rec  *eval.StoreRecorder
	a, b store.Experiment
}

// putMixedRuns writes cases × reps runs of every shape a report meets:
// each classification (abstentions and errors among them), timeouts,
// runs in flight, continuous and binary scores, absent numbers, usage or
// none, two models. shift varies the classifications between
// experiments.
func putMixedRuns(t *testing.T, rec *eval.StoreRecorder, experimentID string, cases, reps, shift int) {
	t.Helper()
	for c := range cases {
		for r := 1; r <= reps; r++ {
			run := store.RunRecord{ExperimentID: experimentID, CaseID: fmt.Sprintf("case-%03d", c), Repetition: r, RunID: "run", Model: "m-a"}
			switch (c*7 + r + shift) % 9 {
			case 0, 1, 2:
				run.Classification = "passed"
			case 3, 4:
				run.Classification, run.TimedOut = "failed", r == 2
			case 5:
				run.Classification = "unscored"
			case 6:
				run.Classification = "error"
			case 7: // in flight
			case 8:
				run.Classification, run.Model = "passed", "m-b"
			}
			if run.Classification == "passed" || run.Classification == "failed" {
				score := float64((c+r)%4) / 3
				if c%3 == 0 {
					score = map[bool]float64{true: 1, false: 0}[run.Classification == "passed"]
				}
				run.Score = &score
			}
			if c%4 != 3 {
				lat := float64(100 + c*13 + r)
				run.LatencyMS = &lat
				run.Usage = json.RawMessage(fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"cost_usd":%g}`, 10+c, r, 0.001*float64(c+r)))
			}
			if err := rec.PutRun(t.Context(), run); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newLiveFixture(t *testing.T) liveFixture {
	t.Helper()
	ctx := t.Context()
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: t.TempDir(), Migrate: true, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tn, err := st.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	f := liveFixture{st: st, s: session{TenantID: tn.ID, TenantName: "acme"}, rec: &eval.StoreRecorder{Store: st, Tenant: tn.ID}}
	if f.u, err = New(Config{}, Deps{Store: st}); err != nil {
		t.Fatal(err)
	}
	for i, dst := range []*store.Experiment{&f.a, &f.b} {
		e, err := f.rec.CreateExperiment(ctx, store.NewExperiment{Suite: "desk", SuiteVersion: "1", Harness: "h", Capabilities: []byte(`{}`),
			Config: []byte(`{"repetitions":4,"case_threshold":0.5,"max_unscored_rate":0.2,"seed":9,"cases":40}`)})
		if err != nil {
			t.Fatal(err)
		}
		putMixedRuns(t, f.rec, e.ID, 37, 4, i)
		*dst = e
	}
	rep, err := eval.ReportFrom(ctx, f.rec, f.a)
	if err != nil {
		t.Fatal(err)
	}
	summary, _ := json.Marshal(rep)
	if err := f.rec.Finish(ctx, f.a.ID, "m-a", summary); err != nil {
		t.Fatal(err)
	}
	if f.a, err = st.Experiment(ctx, tn.ID, f.a.ID); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f liveFixture) live(t *testing.T, id string) experimentLive {
	t.Helper()
	l, err := f.u.experimentLiveOf(httptest.NewRequest("GET", "/ui/experiments/"+id, nil), f.s, id, "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A running experiment's page computes its report from its runs'
// outcomes on every refresh: it must say exactly what eval.ReportFrom —
// the report `gyre eval show` prints and a finished experiment stores —
// says of the same runs, abstentions and errors apart from failures.
func TestRunningExperimentPageShowsTheReportOfReportFrom(t *testing.T) {
	t.Parallel()
	f := newLiveFixture(t)
	ctx := context.Background()
	want, err := eval.ReportFrom(ctx, f.rec, f.b)
	if err != nil {
		t.Fatal(err)
	}
	l := f.live(t, f.b.ID)
	if !l.Running {
		t.Fatal("experiment B is not running")
	}
	if diff := cmp.Diff(want, l.Report); diff != "" {
		t.Errorf("running page's report differs from ReportFrom (-want +got):\n%s", diff)
	}
	if want.Unscored == 0 || want.Errors == 0 || want.TimedOut == 0 || want.Runs == 37*4 {
		t.Fatalf("the runs lack a shape the test needs: %+v", want.Summary)
	}

	// The fragment a refresh swaps in shows those figures, abstentions and
	// errors counted apart from failures.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/ui/experiments/"+f.b.ID+"/live", nil)
	req.SetPathValue("id", f.b.ID)
	if err := f.u.experimentLivePart(rec, req, f.s); err != nil {
		t.Fatal(err)
	}
	counts := fmt.Sprintf("%d: %d · %d · %d · %d", want.Runs, want.Passed, want.Failed, want.Unscored, want.Errors)
	if body := rec.Body.String(); !strings.Contains(body, counts) || !strings.Contains(body, fmt.Sprintf("%d of %d", want.CasesPassed, want.Cases)) {
		t.Errorf("live fragment lacks the counts %q or cases passed:\n%s", counts, body)
	}

	// Once finished with the summary eval stores, the page reads that
	// summary and shows the same report.
	summary, _ := json.Marshal(want)
	if err := f.rec.Finish(ctx, f.b.ID, "mixed", summary); err != nil {
		t.Fatal(err)
	}
	done := f.live(t, f.b.ID)
	if done.Running {
		t.Fatal("experiment B still running")
	}
	if got := mustJSON(t, done.Report); got != mustJSON(t, l.Report) {
		t.Errorf("finished report differs from the running page's:\n%s\n%s", got, mustJSON(t, l.Report))
	}
	if cmp.Diff(l.Grid, done.Grid) != "" || !slicesEqual(l.Ks, done.Ks) {
		t.Errorf("grid differs once finished:\n%s", cmp.Diff(l.Grid, done.Grid))
	}
}

func slicesEqual(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// The grid shows each run's classification as its record says, an
// in-flight run as such, in case then repetition order.
func TestExperimentGridShowsEveryRunsClassification(t *testing.T) {
	t.Parallel()
	f := newLiveFixture(t)
	l := f.live(t, f.b.ID)
	runs, _, err := f.st.ListRuns(t.Context(), f.s.TenantID, f.b.ID, store.Page{Limit: gridRuns})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, row := range l.Grid {
		for _, c := range row.Cells {
			if c == nil {
				continue
			}
			r := runs[n]
			if r.CaseID != row.CaseID || r.Repetition != c.Repetition || r.Classification != c.Class || r.TimedOut != c.TimedOut {
				t.Errorf("cell %s#%d %+v, record %s#%d %q timed out %v", row.CaseID, c.Repetition, *c, r.CaseID, r.Repetition, r.Classification, r.TimedOut)
			}
			n++
		}
	}
	if n != len(runs) {
		t.Errorf("grid shows %d runs, the store lists %d", n, len(runs))
	}
}

// The compare page compares as `gyre eval compare A B` does — reports
// from every run, B's seed — whether B has finished or is running.
func TestComparePageIsEvalCompare(t *testing.T) {
	t.Parallel()
	f := newLiveFixture(t)
	ctx := context.Background()
	ra, err := eval.ReportFrom(ctx, f.rec, f.a)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string) {
		rb, err := eval.ReportFrom(ctx, f.rec, f.b)
		if err != nil {
			t.Fatal(err)
		}
		want := eval.CompareReports(ra, rb, 9)
		for range 2 { // computed, then kept
			got, err := f.u.comparisonOf(httptest.NewRequest("GET", "/ui/compare", nil), f.s, f.a, f.b)
			if err != nil {
				t.Fatal(err)
			}
			if mustJSON(t, got) != mustJSON(t, want) {
				t.Errorf("%s: comparison differs from eval compare:\n%s\n%s", name, mustJSON(t, got), mustJSON(t, want))
			}
		}
		if want.Interval == nil || want.Paired == 0 {
			t.Errorf("%s: no paired interval to compare: %+v", name, want)
		}
	}
	check("running B")
	rb, err := eval.ReportFrom(ctx, f.rec, f.b)
	if err != nil {
		t.Fatal(err)
	}
	summary, _ := json.Marshal(rb)
	if err := f.rec.Finish(ctx, f.b.ID, "mixed", summary); err != nil {
		t.Fatal(err)
	}
	if f.b, err = f.st.Experiment(ctx, f.s.TenantID, f.b.ID); err != nil {
		t.Fatal(err)
	}
	check("finished B")
}
