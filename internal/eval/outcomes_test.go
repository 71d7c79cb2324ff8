package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/store"
)

// mixedRuns are run records of every shape a report meets: each
// classification (abstentions and errors among them), timeouts, runs in
// flight, continuous and binary scores, absent numbers, usage or none,
// two models, cases scored and cases never scored.
func mixedRuns(experimentID string, cases, reps int) []store.RunRecord {
	var out []store.RunRecord
	for c := range cases {
		for r := 1; r <= reps; r++ {
			rec := store.RunRecord{ExperimentID: experimentID, CaseID: fmt.Sprintf("case-%03d", c), Repetition: r, RunID: "run",
				Model: "m-a"}
			switch (c*7 + r) % 9 {
			case 0, 1, 2:
				rec.Classification = "passed"
			case 3, 4:
				rec.Classification = "failed"
				rec.TimedOut = r == 2
			case 5:
				rec.Classification = "unscored"
			case 6:
				rec.Classification = "error"
			case 7:
				// in flight: counted nowhere
			case 8:
				rec.Classification = "passed"
				rec.Model = "m-b"
			}
			if c%5 == 4 { // never scored
				rec.Classification = []string{"unscored", "error"}[r%2]
			}
			if rec.Classification == "passed" || rec.Classification == "failed" {
				score := float64((c+r)%4) / 3
				if c%3 == 0 {
					score = map[bool]float64{true: 1, false: 0}[rec.Classification == "passed"]
				}
				if c%11 != 10 {
					rec.Score = &score
				}
			}
			if c%4 != 3 {
				lat := float64(100 + c*13 + r)
				rec.LatencyMS = &lat
				rec.Usage = json.RawMessage(fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"cost_usd":%g}`, 10+c, r, 0.001*float64(c+r)))
			}
			out = append(out, rec)
		}
	}
	return out
}

func TestReportFromOutcomesIsReportFrom(t *testing.T) {
	t.Parallel()
	for _, eng := range storeEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			st := eng.open(t)
			tn, err := st.CreateTenant(t.Context(), "acme")
			if err != nil {
				t.Fatal(err)
			}
			rec := &StoreRecorder{Store: st, Tenant: tn.ID}
			e, err := rec.CreateExperiment(t.Context(), store.NewExperiment{Suite: "s", SuiteVersion: "1", Harness: "h",
				Capabilities: []byte(`{}`), Config: []byte(`{"repetitions":4,"case_threshold":0.5,"max_unscored_rate":0.2,"seed":9,"cases":40}`)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range mixedRuns(e.ID, 37, 4) {
				if err := rec.PutRun(t.Context(), r); err != nil {
					t.Fatal(err)
				}
			}
			want, err := ReportFrom(t.Context(), rec, e)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReportFromOutcomes(e, StoreOutcomes(t.Context(), st, tn.ID, e.ID))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ReportFromOutcomes differs from ReportFrom (-want +got):\n%s", diff)
			}
			if want.Unscored == 0 || want.Errors == 0 || want.TimedOut == 0 || want.Runs == 37*4 {
				t.Errorf("the runs lack a shape: %+v", want.Summary)
			}
		})
	}
}

// pagedOutcomes serves outcomes a few at a time, as a store does past
// store.MaxRunOutcomes.
type pagedOutcomes struct {
	store.ExperimentStore
	all  []store.RunOutcome
	size int
	err  error
}

func (p *pagedOutcomes) ListRunOutcomes(_ context.Context, _, _ string, pg store.Page) ([]store.RunOutcome, string, error) {
	from := 0
	if pg.Cursor != "" {
		fmt.Sscan(pg.Cursor, &from)
	}
	if from >= len(p.all)/2 && p.err != nil {
		return nil, "", p.err
	}
	to := min(from+p.size, len(p.all))
	next := ""
	if to < len(p.all) {
		next = fmt.Sprint(to)
	}
	return p.all[from:to], next, nil
}

func TestStoreOutcomesReadsEveryPage(t *testing.T) {
	t.Parallel()
	e := store.Experiment{ID: "e", Suite: "s", Config: json.RawMessage(`{"repetitions":3,"seed":4}`)}
	runs := mixedRuns(e.ID, 30, 3)
	src := &pagedOutcomes{size: 7}
	for _, r := range runs {
		src.all = append(src.all, store.OutcomeOf(r))
	}
	got, err := ReportFromOutcomes(e, StoreOutcomes(t.Context(), src, "t", e.ID))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ReportOf(e, runs), got); diff != "" {
		t.Errorf("report over pages of 7 differs from ReportOf (-want +got):\n%s", diff)
	}
	src.err = fmt.Errorf("disk on fire")
	if _, err := ReportFromOutcomes(e, StoreOutcomes(t.Context(), src, "t", e.ID)); err == nil {
		t.Error("a page that failed gave a report")
	}
	var seq iter.Seq2[store.RunOutcome, error] = StoreOutcomes(t.Context(), &pagedOutcomes{all: src.all, size: 7}, "t", e.ID)
	n := 0
	for range seq {
		if n++; n == 3 {
			break
		}
	}
}
