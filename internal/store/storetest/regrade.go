package storetest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// runRegrade checks the regrade rules of SPEC §8 on the store: a new
// verdict set becomes current, every earlier one is kept with its time,
// grader versions and source, and only graded subjects are regraded.
func runRegrade(t *testing.T, open Opener) {
	t.Run("RegradeKeepsEveryVerdictSet", func(t *testing.T) { t.Parallel(); testRegradeKeepsHistory(t, open) })
	t.Run("BatchResultsFollowTheLatestSet", func(t *testing.T) { t.Parallel(); testRegradeBatchResults(t, open) })
	t.Run("RegradeNeedsAGradedRollout", func(t *testing.T) { t.Parallel(); testRegradeNotGraded(t, open) })
	t.Run("RunRegradeKeepsTheFirstGrading", func(t *testing.T) { t.Parallel(); testRunRegrade(t, open) })
	t.Run("RunKeepsItsGradersAndInput", func(t *testing.T) { t.Parallel(); testRunKeepsGraders(t, open) })
}

// gradedRollout returns a submitted rollout graded once with verdicts v1
// and reconciled off_policy.
func gradedRollout(t *testing.T, f *rolloutFixture) store.Rollout {
	t.Helper()
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "rg")
	if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.s.SaveGrade(ctx, store.GradeResult{RolloutID: r.ID, Verdicts: json.RawMessage(`[{"grader":"a","pass":null}]`),
		GraderVersions: json.RawMessage(`[{"grader":"a","name":"judge","version":"1"}]`), Reasons: []string{"reconciliation_pending"},
		Outcome: "unscored"}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.FinishReconciliation(ctx, store.ReconcileResult{RolloutID: r.ID, Reconciliation: "off_policy",
		ReconciliationReason: ptr("agent reported 2"), TrainingGrade: false, Reasons: []string{"off_policy", "no_verdict"}}); err != nil {
		t.Fatal(err)
	}
	return mustGet(t, f.s, f.tenant.ID, r.ID)
}

func testRegradeKeepsHistory(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	before := gradedRollout(t, f)
	first := f.clk.Now()

	f.clk.Advance(time.Minute)
	yes := true
	set, err := f.s.SaveRegrade(ctx, store.RegradeResult{TenantID: f.tenant.ID, RolloutID: before.ID,
		Verdicts: json.RawMessage(`[{"grader":"b","pass":true}]`), GraderVersions: json.RawMessage(`[{"grader":"b","name":"exact","version":"1"}]`),
		Source: store.VerdictsFromRequest, Graders: json.RawMessage(`[{"exact":"x"}]`), TrainingGrade: &yes, Reasons: []string{}})
	if err != nil {
		t.Fatalf("SaveRegrade: %v", err)
	}
	checkID(t, "verdict set", set.ID)
	if !set.CreatedAt.Equal(us(f.clk.Now())) || set.Source != store.VerdictsFromRequest {
		t.Errorf("stored set = %+v, want created now from the request", set)
	}
	sets, err := f.s.VerdictSets(ctx, f.tenant.ID, store.SubjectRollout, before.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 {
		t.Fatalf("VerdictSets = %d sets, want both", len(sets))
	}
	old, cur := sets[0], sets[1]
	if old.Source != store.VerdictsFromTask || old.Graders != nil || !old.CreatedAt.Equal(us(first)) ||
		string(old.Verdicts) != `[{"grader":"a","pass":null}]` || string(old.GraderVersions) != `[{"grader":"a","name":"judge","version":"1"}]` {
		t.Errorf("first set = %+v, want the task's grading kept as it was", old)
	}
	if cur.ID != set.ID || cur.Source != store.VerdictsFromRequest || string(cur.Graders) != `[{"exact":"x"}]` ||
		string(cur.Verdicts) != `[{"grader":"b","pass":true}]` || !cur.CreatedAt.After(old.CreatedAt) {
		t.Errorf("latest set = %+v, want the regrade", cur)
	}
	after := mustGet(t, f.s, f.tenant.ID, before.ID)
	if after.TrainingGrade == nil || !*after.TrainingGrade || len(after.NotTrainingGradeReasons) != 0 {
		t.Errorf("training grade after regrade = %v %v, want true with no reasons", after.TrainingGrade, after.NotTrainingGradeReasons)
	}
	// A regrade changes neither the state nor the reconciliation.
	if after.State != gyre.StateGraded || *after.Reconciliation != "off_policy" || *after.ReconciliationReason != "agent reported 2" {
		t.Errorf("after regrade: state %s, reconciliation %v %v; want them unchanged", after.State, *after.Reconciliation, *after.ReconciliationReason)
	}

	// A pending decision is stored as null.
	f.clk.Advance(time.Minute)
	if _, err := f.s.SaveRegrade(ctx, store.RegradeResult{TenantID: f.tenant.ID, RolloutID: before.ID, Verdicts: json.RawMessage(`[]`),
		GraderVersions: json.RawMessage(`[]`), Source: store.VerdictsFromTask, Reasons: []string{"reconciliation_pending"}}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, before.ID); got.TrainingGrade != nil ||
		!slices.Equal(got.NotTrainingGradeReasons, []string{"reconciliation_pending"}) {
		t.Errorf("pending regrade: training grade %v %v, want null", got.TrainingGrade, got.NotTrainingGradeReasons)
	}
	if sets, _ := f.s.VerdictSets(ctx, f.tenant.ID, store.SubjectRollout, before.ID); len(sets) != 3 {
		t.Errorf("after a second regrade: %d sets, want 3", len(sets))
	}

	// Another tenant's rollout is not found, and stores nothing.
	other := mustTenant(t, f.s, "other")
	_, err = f.s.SaveRegrade(ctx, store.RegradeResult{TenantID: other.ID, RolloutID: before.ID, Verdicts: json.RawMessage(`[]`),
		GraderVersions: json.RawMessage(`[]`), Source: store.VerdictsFromTask})
	wantErr(t, "foreign regrade", err, store.ErrNotFound)
	if sets, _ := f.s.VerdictSets(ctx, f.tenant.ID, store.SubjectRollout, before.ID); len(sets) != 3 {
		t.Errorf("a foreign regrade stored a set: %d sets", len(sets))
	}
	_, err = f.s.SaveRegrade(ctx, store.RegradeResult{TenantID: f.tenant.ID, RolloutID: before.ID, Verdicts: json.RawMessage(`[]`),
		GraderVersions: json.RawMessage(`[]`), Source: "elsewhere"})
	if err == nil {
		t.Error("SaveRegrade accepted an unknown source")
	}
}

func testRegradeBatchResults(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	r := gradedRollout(t, f)
	sum, err := f.s.BatchSummary(t.Context(), f.tenant.ID, r.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Unscored != 1 || sum.Passed != 0 || sum.MeanReward != nil {
		t.Fatalf("before the regrade: unscored %d passed %d reward %v, want the abstaining set's", sum.Unscored, sum.Passed, sum.MeanReward)
	}
	f.clk.Advance(time.Minute)
	no, reward := false, 0.5
	if _, err := f.s.SaveRegrade(t.Context(), store.RegradeResult{TenantID: f.tenant.ID, RolloutID: r.ID,
		Verdicts: json.RawMessage(`[{"grader":"a","pass":true,"score":0.5}]`), GraderVersions: json.RawMessage(`[]`),
		Source: store.VerdictsFromTask, TrainingGrade: &no, Reasons: []string{"off_policy"}, Outcome: "passed", Reward: &reward}); err != nil {
		t.Fatal(err)
	}
	sum, err = f.s.BatchSummary(t.Context(), f.tenant.ID, r.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Passed != 1 || sum.Unscored != 0 || sum.MeanReward == nil || *sum.MeanReward != 0.5 {
		t.Errorf("after the regrade: passed %d unscored %d reward %v, want the latest set's pass and reward 0.5", sum.Passed, sum.Unscored, sum.MeanReward)
	}
}

func testRegradeNotGraded(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "ng")
	regrade := func() error {
		_, err := f.s.SaveRegrade(ctx, store.RegradeResult{TenantID: f.tenant.ID, RolloutID: r.ID, Verdicts: json.RawMessage(`[]`),
			GraderVersions: json.RawMessage(`[]`), Source: store.VerdictsFromTask})
		return err
	}
	wantErr(t, "leased rollout", regrade(), store.ErrNotGraded)
	if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "submitted, not yet graded", regrade(), store.ErrNotGraded)
	if sets, _ := f.s.VerdictSets(ctx, f.tenant.ID, store.SubjectRollout, r.ID); len(sets) != 0 {
		t.Errorf("refused regrades stored %d sets", len(sets))
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); got.State != gyre.StateSubmitted || got.GradedAt != nil {
		t.Errorf("refused regrade changed the rollout: %+v", got)
	}
}

func testRunRegrade(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	e := mustExperiment(t, s, tn.ID)
	finished := Start.Add(time.Second)
	rec := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "c1", Repetition: 2, RunID: "run-1",
		Status: "completed", Classification: "unscored", Model: "m", Verdicts: json.RawMessage(`[{"grader":"j","pass":null}]`),
		GraderVersions: json.RawMessage(`[{"grader":"j","name":"judge","version":"1"}]`), FinishedAt: &finished}
	if _, err := s.PutRun(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if sets, err := s.RunVerdictSets(ctx, tn.ID, e.ID, "c1", 2); err != nil || len(sets) != 0 {
		t.Fatalf("RunVerdictSets before a regrade = %v, %v; want none", sets, err)
	}
	clk.Advance(time.Hour)
	score := 1.0
	set, err := s.SaveRunRegrade(ctx, store.RunRegrade{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "c1", Repetition: 2,
		Verdicts: json.RawMessage(`[{"grader":"j","pass":true}]`), GraderVersions: json.RawMessage(`[{"grader":"j","name":"judge","version":"1"}]`),
		Source: store.VerdictsFromTask, Classification: "passed", Score: &score})
	if err != nil {
		t.Fatalf("SaveRunRegrade: %v", err)
	}
	sets, err := s.RunVerdictSets(ctx, tn.ID, e.ID, "c1", 2)
	if err != nil || len(sets) != 2 {
		t.Fatalf("RunVerdictSets = %d, %v; want the first grading and the regrade", len(sets), err)
	}
	if !sets[0].CreatedAt.Equal(us(finished)) || string(sets[0].Verdicts) != `[{"grader":"j","pass":null}]` ||
		string(sets[0].GraderVersions) != `[{"grader":"j","name":"judge","version":"1"}]` || sets[0].Source != store.VerdictsFromTask {
		t.Errorf("first set = %+v, want the run's own grading at its finish", sets[0])
	}
	if sets[1].ID != set.ID || !sets[1].CreatedAt.Equal(us(clk.Now())) {
		t.Errorf("second set = %+v, want the regrade now", sets[1])
	}
	got, err := s.Run(ctx, tn.ID, e.ID, "c1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Classification != "passed" || got.Score == nil || *got.Score != 1 || string(got.Verdicts) != `[{"grader":"j","pass":true}]` ||
		got.RunID != "run-1" || got.Model != "m" {
		t.Errorf("run after regrade = %+v, want the new verdicts current and the rest unchanged", got)
	}
	clk.Advance(time.Minute)
	if _, err := s.SaveRunRegrade(ctx, store.RunRegrade{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "c1", Repetition: 2,
		Verdicts: json.RawMessage(`[]`), GraderVersions: json.RawMessage(`[]`), Source: store.VerdictsFromRequest,
		Graders: json.RawMessage(`[]`), Classification: "unscored"}); err != nil {
		t.Fatal(err)
	}
	if sets, _ := s.RunVerdictSets(ctx, tn.ID, e.ID, "c1", 2); len(sets) != 3 || sets[2].Source != store.VerdictsFromRequest {
		t.Errorf("after a second regrade: %+v, want 3 sets, the last from the request", sets)
	}
	other := mustTenant(t, s, "other")
	_, err = s.SaveRunRegrade(ctx, store.RunRegrade{TenantID: other.ID, ExperimentID: e.ID, CaseID: "c1", Repetition: 2,
		Verdicts: json.RawMessage(`[]`), GraderVersions: json.RawMessage(`[]`), Source: store.VerdictsFromTask, Classification: "passed"})
	wantErr(t, "foreign run regrade", err, store.ErrNotFound)
	if sets, _ := s.RunVerdictSets(ctx, other.ID, e.ID, "c1", 2); len(sets) != 0 {
		t.Errorf("another tenant sees %d verdict sets of the run", len(sets))
	}
}

func testRunKeepsGraders(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	e := mustExperiment(t, s, tn.ID)
	rec := store.RunRecord{TenantID: tn.ID, ExperimentID: e.ID, CaseID: "c1", Repetition: 1, Classification: "passed",
		Graders: json.RawMessage(`[{"contains":"refund"}]`), Input: json.RawMessage(`{"question":"q"}`),
		GraderVersions: json.RawMessage(`[{"grader":"contains","name":"contains","version":"1"}]`)}
	if _, err := s.PutRun(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Run(ctx, tn.ID, e.ID, "c1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Graders) != string(rec.Graders) || string(got.Input) != string(rec.Input) || string(got.GraderVersions) != string(rec.GraderVersions) {
		t.Errorf("run read back graders %s input %s versions %s; want them as written", got.Graders, got.Input, got.GraderVersions)
	}
	rec.Graders = json.RawMessage(`{not json`)
	if _, err := s.PutRun(ctx, rec); err == nil {
		t.Error("PutRun accepted graders that are not JSON")
	}
}
