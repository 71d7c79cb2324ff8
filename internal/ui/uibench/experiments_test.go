package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// The benchmark seeds two finished experiments and a running one with
// runs in flight, finds them again in a kept store, and measures the
// running one's page, its live fragment and the first views.
func TestBenchMeasuresARunningExperiment(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	tn, err := st.CreateTenant(ctx, "bench")
	if err != nil {
		t.Fatal(err)
	}
	exps, err := seedExperiments(ctx, st, blobs, tn.ID, 400)
	if err != nil {
		t.Fatal(err)
	}
	running, err := st.Experiment(ctx, tn.ID, exps.Running)
	if err != nil || running.FinishedAt != nil {
		t.Fatalf("running experiment: %+v, %v", running, err)
	}
	outcomes, _, err := st.ListRunOutcomes(ctx, tn.ID, exps.Running, store.Page{Limit: store.MaxRunOutcomes})
	if err != nil {
		t.Fatal(err)
	}
	inFlight := 0
	for _, o := range outcomes {
		if o.Classification == "" {
			inFlight++
		}
	}
	if len(outcomes) != 200 || inFlight != 10 {
		t.Errorf("running experiment has %d runs, %d in flight; want 200 and 10", len(outcomes), inFlight)
	}
	kept, err := keptExperiments(ctx, st, tn.ID)
	if err != nil || kept != exps {
		t.Errorf("keptExperiments = %+v, %v; seeded %+v", kept, err, exps)
	}
	pages := experimentPages(exps)
	for _, p := range []string{"/ui/experiments/" + exps.Running, "/ui/experiments/" + exps.Running + "/live"} {
		if !slices.Contains(pages, p) {
			t.Errorf("%s is not measured", p)
		}
	}
	var out strings.Builder
	if err := measureFirstViews(&out, st, blobs, nil, exps, 1); err == nil || !strings.Contains(err.Error(), "status") {
		t.Errorf("first views without a session: %v, want a status error", err)
	}
}
