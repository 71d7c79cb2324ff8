package storetest

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// runExperiments runs the conformance tests of eval experiments, their run
// records and blob refs.
func runExperiments(t *testing.T, open Opener) {
	t.Run("CreateAndFinish", func(t *testing.T) { t.Parallel(); testExperimentCreateFinish(t, open) })
	t.Run("ExperimentRejects", func(t *testing.T) { t.Parallel(); testExperimentRejects(t, open) })
	t.Run("ListExperimentsPages", func(t *testing.T) { t.Parallel(); testListExperimentsPages(t, open) })
	t.Run("FilterExperimentsBySuiteStateAndTime", func(t *testing.T) { t.Parallel(); testFilterExperiments(t, open) })
	t.Run("PutRun", func(t *testing.T) { t.Parallel(); testPutRun(t, open) })
	t.Run("PutRunRejects", func(t *testing.T) { t.Parallel(); testPutRunRejects(t, open) })
	t.Run("ListRunsPages", func(t *testing.T) { t.Parallel(); testListRunsPages(t, open) })
	t.Run("RunOutcomesAreTheRecordsWithoutTheirDocuments", func(t *testing.T) {
		t.Parallel()
		testRunOutcomes(t, open)
	})
	t.Run("ConcurrentPutRuns", func(t *testing.T) { t.Parallel(); testConcurrentPutRuns(t, open) })
	t.Run("BlobRefs", func(t *testing.T) { t.Parallel(); testBlobRefs(t, open) })
	t.Run("ExperimentIsolation", func(t *testing.T) { t.Parallel(); testExperimentIsolation(t, open) })
}

func newExperiment(tenantID string) store.NewExperiment {
	return store.NewExperiment{
		TenantID: tenantID, Suite: "refunds", SuiteVersion: "3", Harness: "http://harness.test",
		Capabilities: json.RawMessage(`{"agent":"bot","revision":"abc123"}`),
		Config:       json.RawMessage(`{"repetitions":3}`),
	}
}

func mustExperiment(t *testing.T, s store.Store, tenantID string) store.Experiment {
	t.Helper()
	e, err := s.CreateExperiment(t.Context(), newExperiment(tenantID))
	if err != nil {
		t.Fatalf("CreateExperiment: %v", err)
	}
	return e
}

func testExperimentCreateFinish(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")

	e := mustExperiment(t, s, tn.ID)
	checkID(t, "experiment", e.ID)
	want := store.Experiment{
		ID: e.ID, Suite: "refunds", SuiteVersion: "3", Harness: "http://harness.test",
		Capabilities: json.RawMessage(`{"agent":"bot","revision":"abc123"}`),
		Config:       json.RawMessage(`{"repetitions":3}`),
		CreatedAt:    us(Start),
	}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("CreateExperiment (-want +got):\n%s", diff)
	}
	got, err := s.Experiment(ctx, tn.ID, e.ID)
	if err != nil {
		t.Fatalf("Experiment: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Experiment (-want +got):\n%s", diff)
	}

	clk.Advance(time.Minute)
	fin, err := s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: tn.ID, ID: e.ID, Model: "gpt-x", Summary: json.RawMessage(`{"runs":3}`)})
	if err != nil {
		t.Fatalf("FinishExperiment: %v", err)
	}
	finished := us(Start.Add(time.Minute))
	want.Model, want.Summary, want.FinishedAt = "gpt-x", json.RawMessage(`{"runs":3}`), &finished
	if diff := cmp.Diff(want, fin); diff != "" {
		t.Errorf("FinishExperiment (-want +got):\n%s", diff)
	}
	// Finishing again (after a resume) replaces model and summary.
	clk.Advance(time.Minute)
	fin, err = s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: tn.ID, ID: e.ID, Model: "mixed", Summary: json.RawMessage(`{"runs":6}`)})
	if err != nil {
		t.Fatalf("FinishExperiment again: %v", err)
	}
	if fin.Model != "mixed" || string(fin.Summary) != `{"runs":6}` || !fin.FinishedAt.Equal(us(Start.Add(2*time.Minute))) {
		t.Errorf("second finish = %+v", fin)
	}
	got, _ = s.Experiment(ctx, tn.ID, e.ID)
	if diff := cmp.Diff(fin, got); diff != "" {
		t.Errorf("Experiment after finish (-want +got):\n%s", diff)
	}
}

func testExperimentRejects(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	for name, mut := range map[string]func(*store.NewExperiment){
		"no suite":       func(e *store.NewExperiment) { e.Suite = "" },
		"no version":     func(e *store.NewExperiment) { e.SuiteVersion = "" },
		"no harness":     func(e *store.NewExperiment) { e.Harness = "" },
		"bad caps":       func(e *store.NewExperiment) { e.Capabilities = json.RawMessage(`{`) },
		"bad config":     func(e *store.NewExperiment) { e.Config = json.RawMessage(`nope`) },
		"unknown tenant": func(e *store.NewExperiment) { e.TenantID = uuid.Must(uuid.NewV7()).String() },
	} {
		e := newExperiment(tn.ID)
		mut(&e)
		if _, err := s.CreateExperiment(ctx, e); err == nil {
			t.Errorf("%s: CreateExperiment succeeded", name)
		}
	}
	if _, err := s.CreateExperiment(ctx, store.NewExperiment{TenantID: uuid.Must(uuid.NewV7()).String(), Suite: "s", SuiteVersion: "v", Harness: "h", Capabilities: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown tenant: error = %v, want ErrNotFound", err)
	}
	missing := uuid.Must(uuid.NewV7()).String()
	if _, err := s.Experiment(ctx, tn.ID, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Experiment(missing) error = %v, want ErrNotFound", err)
	}
	if _, err := s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: tn.ID, ID: missing, Summary: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FinishExperiment(missing) error = %v, want ErrNotFound", err)
	}
	e := mustExperiment(t, s, tn.ID)
	if _, err := s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: tn.ID, ID: e.ID, Summary: json.RawMessage(`{`)}); err == nil {
		t.Error("FinishExperiment with a non-JSON summary succeeded")
	}
}

func testListExperimentsPages(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	var ids []string
	for range 5 {
		ids = append(ids, mustExperiment(t, s, tn.ID).ID)
		clk.Advance(time.Millisecond)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("too many pages")
		}
		page, next, err := s.ListExperiments(ctx, tn.ID, store.Page{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListExperiments: %v", err)
		}
		for _, e := range page {
			got = append(got, e.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListExperiments is not newest first (-want +got):\n%s", diff)
	}
	if _, _, err := s.ListExperiments(ctx, tn.ID, store.Page{Cursor: "bogus"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("bad cursor error = %v, want ErrInvalidCursor", err)
	}
}

// testFilterExperiments: the UI's experiment filters keep the suite, the
// state (running until finished) and the creation window asked for,
// newest first, and their cursors belong to their filter.
func testFilterExperiments(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	mk := func(suite string, finish bool) string {
		t.Helper()
		ne := newExperiment(tn.ID)
		ne.Suite = suite
		e, err := s.CreateExperiment(ctx, ne)
		if err != nil {
			t.Fatal(err)
		}
		if finish {
			if _, err := s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: tn.ID, ID: e.ID, Model: "m", Summary: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Hour)
		return e.ID
	}
	r0 := mk("refunds", true)  // Start
	r1 := mk("refunds", false) // Start+1h
	o2 := mk("orders", true)   // Start+2h
	r3 := mk("refunds", true)  // Start+3h
	if _, err := s.CreateExperiment(ctx, newExperiment(other.ID)); err != nil {
		t.Fatal(err)
	}
	all := func(f store.ExperimentFilter) []string {
		t.Helper()
		var got []string
		cursor := ""
		for range 10 {
			page, next, err := s.FilterExperiments(ctx, tn.ID, f, store.Page{Limit: 1, Cursor: cursor})
			if err != nil {
				t.Fatalf("FilterExperiments(%+v): %v", f, err)
			}
			for _, e := range page {
				got = append(got, e.ID)
			}
			if next == "" {
				return got
			}
			cursor = next
		}
		t.Fatal("too many pages")
		return nil
	}
	for _, tc := range []struct {
		name string
		f    store.ExperimentFilter
		want []string
	}{
		{"none", store.ExperimentFilter{}, []string{r3, o2, r1, r0}},
		{"suite", store.ExperimentFilter{Suite: "refunds"}, []string{r3, r1, r0}},
		{"running", store.ExperimentFilter{State: store.ExperimentRunning}, []string{r1}},
		{"finished suite", store.ExperimentFilter{Suite: "refunds", State: store.ExperimentFinished}, []string{r3, r0}},
		{"since is inclusive", store.ExperimentFilter{Since: Start.Add(2 * time.Hour)}, []string{r3, o2}},
		{"until is exclusive", store.ExperimentFilter{Until: Start.Add(2 * time.Hour)}, []string{r1, r0}},
		{"window", store.ExperimentFilter{Since: Start.Add(time.Hour), Until: Start.Add(3 * time.Hour)}, []string{o2, r1}},
		{"unknown suite", store.ExperimentFilter{Suite: "nope"}, nil},
	} {
		if diff := cmp.Diff(tc.want, all(tc.f)); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", tc.name, diff)
		}
	}
	_, next, err := s.FilterExperiments(ctx, tn.ID, store.ExperimentFilter{Suite: "refunds"}, store.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	if _, _, err := s.FilterExperiments(ctx, tn.ID, store.ExperimentFilter{Suite: "orders"}, store.Page{Cursor: next}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("a cursor of another filter: %v, want ErrInvalidCursor", err)
	}
	if _, _, err := s.FilterExperiments(ctx, tn.ID, store.ExperimentFilter{State: "paused"}, store.Page{}); err == nil {
		t.Error("an unknown state was accepted")
	}
}

func f64(v float64) *float64 { return &v }

func testPutRun(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	e := mustExperiment(t, s, tn.ID)

	// In flight: only the harness's run id, committed right after POST /runs.
	started := Start.Add(time.Second)
	inflight := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "refund-small", Repetition: 1,
		RunID: "run-1", Status: "queued", StartedAt: &started, Attempts: json.RawMessage(`[{"attempt":1}]`)}
	created, err := s.PutRun(ctx, inflight)
	if err != nil || !created {
		t.Fatalf("PutRun(in flight) = %v, %v; want created", created, err)
	}
	got, err := s.Run(ctx, tn.ID, e.ID, "refund-small", 1)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := inflight
	st := us(started)
	want.StartedAt = &st
	want.UpdatedAt = us(Start)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Run in flight (-want +got):\n%s", diff)
	}

	// Finished: the whole record replaces the first.
	clk.Advance(time.Minute)
	answer := "Refunded order 1042."
	finished := Start.Add(time.Minute)
	done := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "refund-small", Repetition: 1,
		RunID: "run-2", Status: "completed", Classification: "passed", Model: "gpt-x", Answer: &answer,
		Output:           json.RawMessage(`{"refund":true}`),
		Verdicts:         json.RawMessage(`[{"grader":"contains","pass":true,"score":null,"reason":"ok"}]`),
		TrajectorySHA256: fixtureSum("trajectory"),
		Trajectory:       json.RawMessage(`{"valid":true,"errors":[],"schema_version":"ATIF-v1.7"}`),
		Files:            json.RawMessage(`[]`), Artifacts: json.RawMessage(`[{"name":"a"}]`),
		Attempts: json.RawMessage(`[{"attempt":1},{"attempt":2}]`),
		Usage:    json.RawMessage(`{"prompt_tokens":10}`), Score: f64(0.75), LatencyMS: f64(1234.5),
		StartedAt: &started, FinishedAt: &finished}
	created, err = s.PutRun(ctx, done)
	if err != nil || created {
		t.Fatalf("PutRun(finished) = %v, %v; want replaced", created, err)
	}
	got, err = s.Run(ctx, tn.ID, e.ID, "refund-small", 1)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want = done
	fin := us(finished)
	want.StartedAt, want.FinishedAt, want.UpdatedAt = &st, &fin, us(Start.Add(time.Minute))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Run finished (-want +got):\n%s", diff)
	}
	// Writing the same record again is harmless; blobs it lists are
	// recorded for the tenant with it.
	again := done
	again.Blobs = []store.BlobRef{{SHA256: fixtureSum("trajectory"), Size: 10}, {SHA256: fixtureSum("file"), Size: 4}}
	if created, err := s.PutRun(ctx, again); err != nil || created {
		t.Errorf("PutRun(same) = %v, %v", created, err)
	}
	if size, err := s.BlobRef(ctx, tn.ID, fixtureSum("file")); err != nil || size != 4 {
		t.Errorf("BlobRef of a blob PutRun listed = %d, %v", size, err)
	}
	if _, err := s.PutRun(ctx, again); err != nil {
		t.Errorf("PutRun listing recorded blobs again: %v", err)
	}
	bad := done
	bad.Blobs = []store.BlobRef{{SHA256: "nope"}}
	if _, err := s.PutRun(ctx, bad); err == nil {
		t.Error("PutRun with a bad blob sha succeeded")
	}
	// A timed-out failure with an empty answer (not null).
	empty := ""
	to := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "refund-small", Repetition: 2,
		RunID: "r", Status: "running", Classification: "failed", TimedOut: true, Answer: &empty}
	if _, err := s.PutRun(ctx, to); err != nil {
		t.Fatalf("PutRun(timed out): %v", err)
	}
	got, _ = s.Run(ctx, tn.ID, e.ID, "refund-small", 2)
	if !got.TimedOut || got.Answer == nil || *got.Answer != "" || got.Classification != "failed" {
		t.Errorf("timed-out run = %+v", got)
	}
	if _, err := s.Run(ctx, tn.ID, e.ID, "refund-small", 3); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Run(missing) error = %v, want ErrNotFound", err)
	}
}

func testPutRunRejects(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	e := mustExperiment(t, s, tn.ID)
	base := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "c", Repetition: 1}
	for name, mut := range map[string]func(*store.RunRecord){
		"empty case":      func(r *store.RunRecord) { r.CaseID = "" },
		"repetition 0":    func(r *store.RunRecord) { r.Repetition = 0 },
		"classification":  func(r *store.RunRecord) { r.Classification = "skipped" },
		"bad sha":         func(r *store.RunRecord) { r.TrajectorySHA256 = "ABC" },
		"bad output json": func(r *store.RunRecord) { r.Output = json.RawMessage(`{`) },
		"bad usage json":  func(r *store.RunRecord) { r.Usage = json.RawMessage(`x`) },
	} {
		r := base
		mut(&r)
		if _, err := s.PutRun(ctx, r); err == nil {
			t.Errorf("%s: PutRun succeeded", name)
		}
	}
	r := base
	r.ExperimentID = uuid.Must(uuid.NewV7()).String()
	if _, err := s.PutRun(ctx, r); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutRun(unknown experiment) error = %v, want ErrNotFound", err)
	}
	if _, _, err := s.ListRuns(ctx, tn.ID, r.ExperimentID, store.Page{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListRuns(unknown experiment) error = %v, want ErrNotFound", err)
	}
}

func testListRunsPages(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	e := mustExperiment(t, s, tn.ID)
	// Written out of order; listed by case id, then repetition (numeric).
	var want []string
	for _, c := range []string{"b", "a", "c"} {
		for _, rep := range []int{10, 2, 1} {
			if _, err := s.PutRun(ctx, store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: c, Repetition: rep}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []string{"a", "b", "c"} {
		for _, rep := range []int{1, 2, 10} {
			want = append(want, fmt.Sprintf("%s/%d", c, rep))
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("too many pages")
		}
		page, next, err := s.ListRuns(ctx, tn.ID, e.ID, store.Page{Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		for _, r := range page {
			got = append(got, fmt.Sprintf("%s/%d", r.CaseID, r.Repetition))
			if r.TenantID != tn.ID || r.ExperimentID != e.ID {
				t.Errorf("run %+v has the wrong tenant or experiment", r)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListRuns order (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"bogus", "cnVuOjA6YQ", "cnVuOng6YQ"} { // "run:0:a", "run:x:a"
		if _, _, err := s.ListRuns(ctx, tn.ID, e.ID, store.Page{Cursor: bad}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("cursor %q: error = %v, want ErrInvalidCursor", bad, err)
		}
	}
}

func testConcurrentPutRuns(t *testing.T, open Opener) {
	s := open(t, clock.Real{})
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	e := mustExperiment(t, s, tn.ID)
	const workers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: fmt.Sprintf("case-%d", w), Repetition: i + 1, RunID: "x"}
				if _, err := s.PutRun(ctx, r); err != nil {
					errs <- err
				}
				r.Classification = "passed"
				if _, err := s.PutRun(ctx, r); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("PutRun: %v", err)
	}
	runs, next, err := s.ListRuns(ctx, tn.ID, e.ID, store.Page{Limit: 500})
	if err != nil || next != "" || len(runs) != workers*each {
		t.Fatalf("ListRuns = %d runs, next %q, %v; want %d", len(runs), next, err, workers*each)
	}
	for _, r := range runs {
		if r.Classification != "passed" {
			t.Errorf("run %s/%d classification %q, want passed", r.CaseID, r.Repetition, r.Classification)
		}
	}
}

func testBlobRefs(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	sum := fixtureSum("trajectory bytes")
	if _, err := s.BlobRef(ctx, tn.ID, sum); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BlobRef before put: error = %v, want ErrNotFound", err)
	}
	if created, err := s.PutBlobRef(ctx, tn.ID, sum, 16); err != nil || !created {
		t.Fatalf("PutBlobRef = %v, %v; want created", created, err)
	}
	if created, err := s.PutBlobRef(ctx, tn.ID, sum, 16); err != nil || created {
		t.Errorf("PutBlobRef again = %v, %v; want not created", created, err)
	}
	if size, err := s.BlobRef(ctx, tn.ID, sum); err != nil || size != 16 {
		t.Errorf("BlobRef = %d, %v; want 16", size, err)
	}
	if _, err := s.PutBlobRef(ctx, tn.ID, "not-a-sha", 1); err == nil {
		t.Error("PutBlobRef(bad sha) succeeded")
	}
	if _, err := s.PutBlobRef(ctx, uuid.Must(uuid.NewV7()).String(), sum, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutBlobRef(unknown tenant) error = %v, want ErrNotFound", err)
	}
}

func testExperimentIsolation(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	e := mustExperiment(t, s, a.ID)
	if _, err := s.PutRun(ctx, store.RunRecord{TenantID: a.ID, ExperimentID: e.ID, CaseID: "c", Repetition: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Experiment(ctx, b.ID, e.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Experiment from another tenant: error = %v, want ErrNotFound", err)
	}
	if list, _, err := s.ListExperiments(ctx, b.ID, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("ListExperiments of another tenant = %d, %v; want none", len(list), err)
	}
	if _, err := s.PutRun(ctx, store.RunRecord{TenantID: b.ID, ExperimentID: e.ID, CaseID: "c", Repetition: 1, Classification: "failed"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutRun into another tenant's experiment: error = %v, want ErrNotFound", err)
	}
	if _, _, err := s.ListRuns(ctx, b.ID, e.ID, store.Page{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListRuns from another tenant: error = %v, want ErrNotFound", err)
	}
	if _, err := s.Run(ctx, b.ID, e.ID, "c", 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Run from another tenant: error = %v, want ErrNotFound", err)
	}
	if _, err := s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: b.ID, ID: e.ID, Summary: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FinishExperiment from another tenant: error = %v, want ErrNotFound", err)
	}
	sum := fixtureSum("x")
	if _, err := s.PutBlobRef(ctx, a.ID, sum, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BlobRef(ctx, b.ID, sum); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BlobRef of another tenant: error = %v, want ErrNotFound", err)
	}
	got, _ := s.Run(ctx, a.ID, e.ID, "c", 1)
	if got.Classification != "" {
		t.Errorf("another tenant changed the run: %+v", got)
	}
}

func testRunOutcomes(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	e := mustExperiment(t, s, tn.ID)
	score, zero, lat := 0.75, 0.0, 1234.5
	answer := "42"
	sha := fmt.Sprintf("%x", sha256.Sum256([]byte("trajectory")))
	// Written out of order, every shape a report meets: in flight, each
	// classification, a timeout, a model holding NUL, absent and zero
	// numbers, usage or none, a trajectory or none.
	records := []store.RunRecord{
		{CaseID: "b", Repetition: 2, RunID: "r1", Classification: "passed", Model: "m-1", Score: &score, LatencyMS: &lat,
			Usage: json.RawMessage(`{"prompt_tokens":10,"completion_tokens":2,"cost_usd":0.5}`), TrajectorySHA256: sha,
			Answer: &answer, Output: json.RawMessage(`{"big":"document"}`), Verdicts: json.RawMessage(`[{"grader":"g","pass":true}]`),
			Blobs: []store.BlobRef{{SHA256: sha, Size: 10}}},
		{CaseID: "b", Repetition: 1, RunID: "r2", Classification: "failed", TimedOut: true, Model: "m\x00nul", Score: &zero},
		{CaseID: "a", Repetition: 10, Classification: "unscored", Usage: json.RawMessage(`{}`)},
		{CaseID: "a", Repetition: 2, Classification: "error", Model: "m-2"},
		{CaseID: "a", Repetition: 1},
		{CaseID: "c", Repetition: 1, Classification: "passed", Score: &zero, LatencyMS: &zero},
	}
	for _, r := range records {
		r.TenantID, r.ExperimentID = tn.ID, e.ID
		if _, err := s.PutRun(ctx, r); err != nil {
			t.Fatalf("PutRun(%s/%d): %v", r.CaseID, r.Repetition, err)
		}
	}
	var want []store.RunOutcome
	for cursor := ""; ; {
		page, next, err := s.ListRuns(ctx, tn.ID, e.ID, store.Page{Limit: 500, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		for _, r := range page {
			want = append(want, store.OutcomeOf(r))
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if len(want) != len(records) {
		t.Fatalf("ListRuns gave %d records, want %d", len(want), len(records))
	}
	var got []store.RunOutcome
	cursor, pages := "", 0
	for ; ; pages++ {
		page, next, err := s.ListRunOutcomes(ctx, tn.ID, e.ID, store.Page{Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListRunOutcomes: %v", err)
		}
		got = append(got, page...)
		if cursor = next; cursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("too many pages")
		}
	}
	if pages != 1 {
		t.Errorf("%d outcomes in pages of 4 took %d more pages, want 1", len(got), pages)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListRunOutcomes differs from the records ListRuns reads (-want +got):\n%s", diff)
	}
	if got[0].CaseID != "a" || got[0].Repetition != 1 || got[2].Repetition != 10 {
		t.Errorf("outcomes not by case id, then repetition: %+v", got[:3])
	}
	if got[0].Classification != "" || got[1].Classification != "error" || got[2].Classification != "unscored" {
		t.Errorf("in flight, error and unscored must stay distinct: %q %q %q", got[0].Classification, got[1].Classification, got[2].Classification)
	}
	if b := got[4]; !b.HasTrajectory || b.Score == nil || *b.Score != 0.75 || b.Model != "m-1" || b.LatencyMS == nil || *b.LatencyMS != lat {
		t.Errorf("outcome b/2 = %+v", b)
	}
	if b := got[3]; b.HasTrajectory || !b.TimedOut || b.Model != "m\x00nul" || b.Usage != nil || b.LatencyMS != nil {
		t.Errorf("outcome b/1 = %+v", b)
	}

	all, next, err := s.ListRunOutcomes(ctx, tn.ID, e.ID, store.Page{Limit: store.MaxRunOutcomes + 1})
	if err != nil || next != "" || len(all) != len(records) {
		t.Errorf("ListRunOutcomes(one large page) = %d outcomes, next %q, %v", len(all), next, err)
	}
	runsPage, runsNext, err := s.ListRuns(ctx, tn.ID, e.ID, store.Page{Limit: 2})
	if err != nil || runsNext == "" || len(runsPage) != 2 {
		t.Fatalf("ListRuns(2) = %d, %q, %v", len(runsPage), runsNext, err)
	}
	for _, bad := range []string{"bogus", runsNext} {
		if _, _, err := s.ListRunOutcomes(ctx, tn.ID, e.ID, store.Page{Cursor: bad}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("cursor %q (not one of ListRunOutcomes): error = %v, want ErrInvalidCursor", bad, err)
		}
	}
	if _, _, err := s.ListRunOutcomes(ctx, other.ID, e.ID, store.Page{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListRunOutcomes(another tenant's experiment) error = %v, want ErrNotFound", err)
	}
	if _, _, err := s.ListRunOutcomes(ctx, tn.ID, uuid.Must(uuid.NewV7()).String(), store.Page{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListRunOutcomes(unknown experiment) error = %v, want ErrNotFound", err)
	}
}
