package storetest

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
)

// Migration 00013 re-encodes what a harness reported of a run (run_id,
// model, answer, error) and an experiment's model, stored as plain text
// before it, as JSON string literals: rows written before it read back
// unchanged after it.
func testMigrateRunTextToJSON(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	ctx := t.Context()
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatal(err)
	}
	s := open(t, e, loc, false)
	tn, err := s.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	exp := mustExperiment(t, s, tn.ID)
	if _, err := s.PutRun(ctx, store.RunRecord{TenantID: tn.ID, ExperimentID: exp.ID, CaseID: "c1", Repetition: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutRun(ctx, store.RunRecord{TenantID: tn.ID, ExperimentID: exp.ID, CaseID: "c2", Repetition: 1}); err != nil {
		t.Fatal(err)
	}
	// The schema before 00013, and rows as gyre wrote them then.
	if err := e.DownTo(ctx, loc, 12); err != nil {
		t.Fatalf("migrate down to 12: %v", err)
	}
	db := raw(t, e, loc)
	for _, q := range []string{
		`UPDATE runs SET run_id = 'run "1"', model = 'gpt-x', answer = 'refund issued ✓', error = 'partial' WHERE case_id = 'c1'`,
		`UPDATE runs SET answer = '' WHERE case_id = 'c2'`,
		`UPDATE experiments SET model = 'gpt-x'`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatalf("migrate to 00013: %v", err)
	}
	s2 := open(t, e, loc, false)
	got, err := s2.Run(ctx, tn.ID, exp.ID, "c1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.RunID != `run "1"` || got.Model != "gpt-x" || got.Answer == nil || *got.Answer != "refund issued ✓" || got.Error != "partial" {
		b, _ := json.Marshal(got)
		t.Errorf("run after 00013 = %s", b)
	}
	if got, err := s2.Run(ctx, tn.ID, exp.ID, "c2", 1); err != nil || got.Answer == nil || *got.Answer != "" || got.RunID != "" || got.Model != "" {
		t.Errorf("run c2 after 00013 = %+v, %v; want an empty answer and nothing else", got, err)
	}
	if got, err := s2.Experiment(ctx, tn.ID, exp.ID); err != nil || got.Model != "gpt-x" {
		t.Errorf("experiment model after 00013 = %q, %v", got.Model, err)
	}
}
