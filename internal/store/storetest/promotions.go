package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// The promotion job's store (SPEC §10).
func runPromotions(t *testing.T, open Opener) {
	t.Run("CreateMakesTasksOnceAndOneBatchPerSide", func(t *testing.T) { t.Parallel(); testCreatePromotion(t, open) })
	t.Run("OneRunningPromotionPerAgent", func(t *testing.T) { t.Parallel(); testOneRunningPromotion(t, open) })
	t.Run("ConcurrentCreatesOneWins", func(t *testing.T) { t.Parallel(); testConcurrentPromotionCreates(t, open) })
	t.Run("CreateRefusesBadFields", func(t *testing.T) { t.Parallel(); testCreatePromotionRejects(t, open) })
	t.Run("EndIsExactlyOnceUnderConcurrentDeciders", func(t *testing.T) { t.Parallel(); testEndPromotionExactlyOnce(t, open) })
	t.Run("PromotedComparesAndSetsTheMeasuredBaseline", func(t *testing.T) { t.Parallel(); testPromotionBaselineChanged(t, open) })
	t.Run("FailedCancelsBothBatches", func(t *testing.T) { t.Parallel(); testFailedPromotionCancelsBatches(t, open) })
	t.Run("TallyCountsEndedUnreplacedRollouts", func(t *testing.T) { t.Parallel(); testTallyPromotion(t, open) })
	t.Run("ListNewestFirstWithFilters", func(t *testing.T) { t.Parallel(); testListPromotions(t, open) })
	t.Run("ListByStartWindow", func(t *testing.T) { t.Parallel(); testListPromotionsByWindow(t, open) })
	t.Run("RenewJobKeepsTheLease", func(t *testing.T) { t.Parallel(); testRenewJob(t, open) })
}

// promoFixture is a tenant with agent-1 (seen through a turn), policies
// p1, p2, p3, agent-1's promoted policy p1, and a suite of n cases.
type promoFixture struct {
	s     store.Store
	clk   *clock.Fake
	tid   string
	suite store.SuiteVersion
	n     int
}

func newPromoFixture(t *testing.T, open Opener, n int) *promoFixture {
	t.Helper()
	clk := clock.NewFake(Start)
	s := open(t, clk)
	f := &promoFixture{s: s, clk: clk, tid: promotionFixture(t, s, "acme"), n: n}
	mustSetPolicy(t, s, promotion.Change{TenantID: f.tid, AgentID: "agent-1", Policy: "p1", SetBy: "key k"})
	f.suite, _ = mustPutSuite(t, s, newSuiteVersion(t, f.tid, "gate", "", n))
	return f
}

// newPromotion is a promotion of p2 against p1 over the suite's cases.
func (f *promoFixture) newPromotion(t *testing.T) store.NewPromotion {
	t.Helper()
	st := suiteTasks(f.tid, f.suite, f.n)
	return store.NewPromotion{
		ID: uuid.Must(uuid.NewV7()).String(), TenantID: f.tid, AgentID: "agent-1", Candidate: "p2", Baseline: "p1",
		ExpectedPolicy: strp("p1"), SuiteTasks: &st, Repetitions: 2, MinDelta: 0.02, MaxExcludedRate: 0.05,
		DeadlineS: 3600, Seed: 42, CreatedBy: "key k", BatchDeadlineS: 600, MaxAttempts: 2, RetryOn: gyre.DefaultRetryOn,
	}
}

func (f *promoFixture) create(t *testing.T, np store.NewPromotion) store.Promotion {
	t.Helper()
	p, err := f.s.CreatePromotion(t.Context(), np)
	if err != nil {
		t.Fatalf("CreatePromotion: %v", err)
	}
	return p
}

// promotionBatches lists the tenant's batches tagged with a promotion.
func (f *promoFixture) promotionBatches(t *testing.T) []store.BatchSummary {
	t.Helper()
	sums, _, err := f.s.ListBatches(t.Context(), f.tid, store.BatchFilter{}, store.Page{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.BatchSummary
	for _, b := range sums {
		if b.PromotionID != nil {
			out = append(out, b)
		}
	}
	return out
}

func (f *promoFixture) taskCount(t *testing.T) int {
	t.Helper()
	tasks, _, err := f.s.ListTasks(t.Context(), f.tid, store.TaskFilter{}, store.Page{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}

func testCreatePromotion(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 3)
	ctx := t.Context()
	np := f.newPromotion(t)
	p := f.create(t, np)
	if p.ID != np.ID || p.State != promotion.StateRunning || len(p.Reasons) != 0 || p.Evidence != nil || p.DecidedAt != nil {
		t.Fatalf("created promotion = %+v, want running without reasons or evidence", p)
	}
	if !p.CreatedAt.Equal(us(Start)) || !p.DeadlineAt.Equal(us(Start).Add(time.Hour)) {
		t.Errorf("created %v, deadline %v; want %v and an hour later", p.CreatedAt, p.DeadlineAt, us(Start))
	}
	if deref(p.Suite) != "gate" || deref(p.SuiteVersion) != f.suite.Version || p.Seed != 42 || p.Repetitions != 2 {
		t.Errorf("suite %s@%s seed %d repetitions %d", deref(p.Suite), deref(p.SuiteVersion), p.Seed, p.Repetitions)
	}
	if len(p.TaskIDs) != 3 || f.taskCount(t) != 3 {
		t.Fatalf("task ids %v, %d tasks stored; want the suite's 3 cases made once", p.TaskIDs, f.taskCount(t))
	}
	for side, id := range map[string]*string{promotion.SideBaseline: p.BaselineBatchID, promotion.SideCandidate: p.CandidateBatchID} {
		if id == nil {
			t.Fatalf("%s batch id is nil", side)
		}
		b, err := f.s.BatchSummary(ctx, f.tid, *id)
		if err != nil {
			t.Fatal(err)
		}
		policy := map[string]string{promotion.SideBaseline: "p1", promotion.SideCandidate: "p2"}[side]
		if deref(b.Policy) != policy || deref(b.PromotionID) != p.ID || deref(b.PromotionSide) != side ||
			b.GroupSize != 2 || !slices.Equal(b.TaskIDs, p.TaskIDs) || b.Counts[gyre.StateQueued] != 6 {
			t.Errorf("%s batch = policy %s promotion %s side %s group %d tasks %v counts %v; want policy %s, tagged, "+
				"group 2 over the promotion's tasks, 6 queued", side, deref(b.Policy), deref(b.PromotionID),
				deref(b.PromotionSide), b.GroupSize, b.TaskIDs, b.Counts, policy)
		}
	}
	if got, err := f.s.GetPromotion(ctx, f.tid, p.ID); err != nil || !cmp.Equal(got, p) {
		t.Errorf("GetPromotion = %+v (%v), want %+v", got, err, p)
	}
	if got, err := f.s.PromotionByID(ctx, p.ID); err != nil || !cmp.Equal(got, p) {
		t.Errorf("PromotionByID = %+v (%v)", got, err)
	}
	other := mustTenant(t, f.s, "other")
	if _, err := f.s.GetPromotion(ctx, other.ID, p.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPromotion from another tenant = %v, want ErrNotFound", err)
	}
	jobs, err := f.s.ClaimJobs(ctx, "r1", []string{store.JobPromotion}, 5, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].SubjectID != p.ID {
		t.Errorf("promotion jobs due = %+v (%v), want the promotion's", jobs, err)
	}

	// Given task ids, no task is made: both batches run them.
	if _, err := f.s.EndPromotion(ctx, f.tid, p.ID, store.PromotionEnd{State: promotion.StateFailed,
		Reasons: []string{promotion.ReasonCancelled}}); err != nil {
		t.Fatal(err)
	}
	np2 := f.newPromotion(t)
	np2.SuiteTasks, np2.TaskIDs = nil, p.TaskIDs[:2]
	p2 := f.create(t, np2)
	if p2.Suite != nil || p2.SuiteVersion != nil || !slices.Equal(p2.TaskIDs, p.TaskIDs[:2]) || f.taskCount(t) != 3 {
		t.Errorf("promotion over task ids = suite %v tasks %v (%d stored), want no suite, the given tasks, none made",
			p2.Suite, p2.TaskIDs, f.taskCount(t))
	}
}

func testOneRunningPromotion(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	ctx := t.Context()
	p := f.create(t, f.newPromotion(t))
	if _, err := f.s.CreatePromotion(ctx, f.newPromotion(t)); !errors.Is(err, promotion.ErrRunning) {
		t.Fatalf("a second promotion while one runs: %v, want ErrRunning", err)
	}
	if n := len(f.promotionBatches(t)); n != 2 || f.taskCount(t) != 2 {
		t.Fatalf("the refused promotion left %d promotion batches and %d tasks, want 2 and 2", n, f.taskCount(t))
	}
	// Another agent may run one meanwhile.
	mustInsertTurns(t, f.s, f.tid, "agent-2", simpleTurn(t, "t2"))
	np := f.newPromotion(t)
	np.AgentID, np.ExpectedPolicy = "agent-2", nil
	f.create(t, np)
	if _, err := f.s.EndPromotion(ctx, f.tid, p.ID, store.PromotionEnd{State: promotion.StateRejected,
		Reasons: []string{"delta_below_min"}, Evidence: json.RawMessage(`{"seed":42}`)}); err != nil {
		t.Fatal(err)
	}
	f.create(t, f.newPromotion(t)) // the first one ended
}

func testConcurrentPromotionCreates(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	const n = 6
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		wins, busy int
		unexpected []error
		nps        = make([]store.NewPromotion, n)
	)
	for i := range nps {
		nps[i] = f.newPromotion(t)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.s.CreatePromotion(t.Context(), nps[i])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, promotion.ErrRunning):
				busy++
			default:
				unexpected = append(unexpected, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || busy != n-1 || len(unexpected) > 0 {
		t.Fatalf("%d concurrent creates: %d won, %d refused running, unexpected %v; want exactly one winner",
			n, wins, busy, unexpected)
	}
	if got := len(f.promotionBatches(t)); got != 2 || f.taskCount(t) != 2 {
		t.Errorf("after the race: %d promotion batches and %d tasks, want 2 and 2", got, f.taskCount(t))
	}
}

func testCreatePromotionRejects(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	for _, tc := range []struct {
		name    string
		edit    func(*store.NewPromotion)
		pointer string
		want    error
	}{
		{"an agent gyre never saw", func(np *store.NewPromotion) { np.AgentID = "ghost" }, "/agent_id", promotion.ErrAgentNotFound},
		{"an unknown candidate", func(np *store.NewPromotion) { np.Candidate = "nope" }, "/candidate", store.ErrPolicyNotFound},
		{"an unknown baseline", func(np *store.NewPromotion) { np.Baseline = "nope" }, "/baseline", store.ErrPolicyNotFound},
		{"an unknown suite version", func(np *store.NewPromotion) { np.SuiteTasks.SuiteVersion = "nope" }, "/suite", store.ErrNotFound},
		{"an unknown task", func(np *store.NewPromotion) {
			np.SuiteTasks, np.TaskIDs = nil, []string{uuid.Must(uuid.NewV7()).String()}
		}, "/task_ids/0", store.ErrNotFound},
	} {
		np := f.newPromotion(t)
		tc.edit(&np)
		_, err := f.s.CreatePromotion(t.Context(), np)
		var fe *store.FieldError
		if !errors.As(err, &fe) || fe.Pointer != tc.pointer || !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want a field error at %s wrapping %v", tc.name, err, tc.pointer, tc.want)
		}
	}
	if _, _, err := f.s.ListPromotions(t.Context(), f.tid, store.PromotionFilter{}, store.Page{}); err != nil {
		t.Fatal(err)
	}
	if list, _, _ := f.s.ListPromotions(t.Context(), f.tid, store.PromotionFilter{}, store.Page{}); len(list) != 0 ||
		f.taskCount(t) != 0 || len(f.promotionBatches(t)) != 0 {
		t.Errorf("refused creates left %d promotions, %d tasks, %d batches", len(list), f.taskCount(t), len(f.promotionBatches(t)))
	}
}

func testEndPromotionExactlyOnce(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	p := f.create(t, f.newPromotion(t))
	const n = 8
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		wins, decided int
		unexpected    []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := store.PromotionEnd{State: promotion.StatePromoted, Evidence: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
			if i%2 == 1 {
				end = store.PromotionEnd{State: promotion.StateRejected, Reasons: []string{"delta_below_min"}}
			}
			_, err := f.s.EndPromotion(t.Context(), f.tid, p.ID, end)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, promotion.ErrDecided):
				decided++
			default:
				unexpected = append(unexpected, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || decided != n-1 || len(unexpected) > 0 {
		t.Fatalf("%d concurrent deciders: %d won, %d found it decided, unexpected %v", n, wins, decided, unexpected)
	}
	got, err := f.s.GetPromotion(t.Context(), f.tid, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.s.PolicyHistory(t.Context(), f.tid, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	promotedEntries := 0
	for _, e := range h {
		if e.PromotionID != nil {
			promotedEntries++
		}
	}
	switch got.State {
	case promotion.StatePromoted:
		if promotedEntries != 1 || h[len(h)-1].Policy != "p2" || deref(h[len(h)-1].PromotionID) != p.ID ||
			h[len(h)-1].SetBy != promotion.ByPromotion(p.ID) {
			t.Errorf("promoted once, history %+v; want one entry of p2 set by the promotion", h)
		}
		wantAgentPolicy(t, f.s, f.tid, strp("p2"))
	case promotion.StateRejected:
		if promotedEntries != 0 {
			t.Errorf("rejected, yet the history holds a promotion's entry: %+v", h)
		}
		wantAgentPolicy(t, f.s, f.tid, strp("p1"))
	default:
		t.Fatalf("state %s after the race", got.State)
	}
	if got.DecidedAt == nil || !got.DecidedAt.Equal(us(Start)) {
		t.Errorf("decided_at = %v, want %v", got.DecidedAt, us(Start))
	}
	// Cancelling a decided promotion is refused too.
	if _, err := f.s.EndPromotion(t.Context(), f.tid, p.ID, store.PromotionEnd{State: promotion.StateFailed,
		Reasons: []string{promotion.ReasonCancelled}}); !errors.Is(err, promotion.ErrDecided) {
		t.Errorf("failing a decided promotion: %v, want ErrDecided", err)
	}
	if _, err := f.s.EndPromotion(t.Context(), f.tid, uuid.Must(uuid.NewV7()).String(), store.PromotionEnd{
		State: promotion.StateFailed}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ending an unknown promotion: %v, want ErrNotFound", err)
	}
}

func testPromotionBaselineChanged(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	p := f.create(t, f.newPromotion(t))
	// Someone promotes p3 by hand while the promotion runs.
	mustSetPolicy(t, f.s, promotion.Change{TenantID: f.tid, AgentID: "agent-1", Expected: strp("p1"), Policy: "p3", SetBy: "key k"})
	got, err := f.s.EndPromotion(t.Context(), f.tid, p.ID, store.PromotionEnd{State: promotion.StatePromoted,
		Evidence: json.RawMessage(`{"seed":42}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != promotion.StateFailed || !slices.Equal(got.Reasons, []string{promotion.ReasonBaselineChanged}) ||
		string(got.Evidence) != `{"seed":42}` {
		t.Errorf("promoting over a changed baseline ended %s %v evidence %s; want failed [baseline_changed] with the evidence",
			got.State, got.Reasons, got.Evidence)
	}
	wantAgentPolicy(t, f.s, f.tid, strp("p3"))

	// With no promoted policy at the start, the compare is against none.
	mustInsertTurns(t, f.s, f.tid, "agent-2", simpleTurn(t, "t2"))
	np := f.newPromotion(t)
	np.AgentID, np.ExpectedPolicy = "agent-2", nil
	p2 := f.create(t, np)
	got, err = f.s.EndPromotion(t.Context(), f.tid, p2.ID, store.PromotionEnd{State: promotion.StatePromoted})
	if err != nil || got.State != promotion.StatePromoted || len(got.Reasons) != 0 {
		t.Fatalf("promoting an agent with no promoted policy: %+v (%v)", got, err)
	}
	if pol, _ := f.s.AgentPolicy(t.Context(), f.tid, "agent-2"); deref(pol) != "p2" {
		t.Errorf("agent-2's policy = %s, want p2", deref(pol))
	}
}

func testFailedPromotionCancelsBatches(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	p := f.create(t, f.newPromotion(t))
	f.clk.Advance(time.Minute)
	got, err := f.s.EndPromotion(t.Context(), f.tid, p.ID, store.PromotionEnd{State: promotion.StateFailed,
		Reasons: []string{promotion.ReasonDeadline}})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != promotion.StateFailed || !slices.Equal(got.Reasons, []string{"deadline"}) || got.Evidence != nil {
		t.Errorf("failed promotion = %s %v %s", got.State, got.Reasons, got.Evidence)
	}
	for _, id := range []string{*p.BaselineBatchID, *p.CandidateBatchID} {
		b, err := f.s.BatchSummary(t.Context(), f.tid, id)
		if err != nil {
			t.Fatal(err)
		}
		if b.State != gyre.BatchCancelled || b.Counts[gyre.StateCancelled] != 4 || b.Counts[gyre.StateQueued] != 0 {
			t.Errorf("batch %s after the promotion failed: %s %v, want cancelled with every rollout cancelled", id, b.State, b.Counts)
		}
	}
	wantAgentPolicy(t, f.s, f.tid, strp("p1"))
}

func testTallyPromotion(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 2)
	ctx := t.Context()
	p := f.create(t, f.newPromotion(t))
	res, err := f.s.Claim(ctx, store.ClaimRequest{TenantID: f.tid, AgentID: "agent-1", Max: 8, Lease: time.Minute,
		WorkerID: "w", Secrets: secretsN("tally", 8)})
	if err != nil || len(res.Rollouts) != 8 {
		t.Fatalf("Claim = %d rollouts (%v), want 8", len(res.Rollouts), err)
	}
	// Index the claimed rollouts by side, task and repetition.
	type key struct {
		side string
		task int
	}
	got := map[key][]store.Claimed{}
	for _, c := range res.Rollouts {
		side := promotion.SideBaseline
		if c.Rollout.BatchID == *p.CandidateBatchID {
			side = promotion.SideCandidate
		}
		k := key{side, slices.Index(p.TaskIDs, c.Rollout.TaskID)}
		got[k] = append(got[k], c)
	}
	secrets := secretsN("tally", 8)
	submit := func(c store.Claimed, exclusion *string) store.OutputResult {
		t.Helper()
		out := `{"final_text":"` + c.Rollout.ID + `"}`
		r, err := f.s.SubmitOutput(ctx, store.OutputSubmission{TenantID: f.tid, RolloutID: c.Rollout.ID,
			LeaseToken: secrets[c.Secrets].LeaseToken, Output: json.RawMessage(out),
			OutputHash: fmt.Sprintf("%x", Hash(out)), Exclusion: exclusion, Grace: 30 * time.Second})
		if err != nil {
			t.Fatalf("SubmitOutput: %v", err)
		}
		return r
	}
	grade := func(id, outcome string) {
		t.Helper()
		if err := f.s.SaveGrade(ctx, store.GradeResult{RolloutID: id, Verdicts: json.RawMessage(`[]`),
			GraderVersions: json.RawMessage(`[]`), Outcome: outcome}); err != nil {
			t.Fatalf("SaveGrade: %v", err)
		}
	}
	b0, c0 := got[key{promotion.SideBaseline, 0}], got[key{promotion.SideCandidate, 0}]
	b1, c1 := got[key{promotion.SideBaseline, 1}], got[key{promotion.SideCandidate, 1}]
	// Task 0: baseline passes once and fails once; the candidate passes
	// once and is excluded once.
	submit(b0[0], nil)
	grade(b0[0].Rollout.ID, "passed")
	submit(b0[1], nil)
	grade(b0[1].Rollout.ID, "failed")
	submit(c0[0], nil)
	grade(c0[0].Rollout.ID, "passed")
	submit(c0[1], strp("entrypoint_error"))
	grade(c0[1].Rollout.ID, "passed")
	// Task 1: the baseline abstains once and is cancelled once; the
	// candidate's first rollout is excluded for capacity (retried, so it
	// no longer counts) and its second is still leased.
	submit(b1[0], nil)
	grade(b1[0].Rollout.ID, "unscored")
	if _, err := f.s.CancelRollout(ctx, f.tid, b1[1].Rollout.ID); err != nil {
		t.Fatal(err)
	}
	retry := submit(c1[0], strp("capacity")).Retry
	if retry == "" {
		t.Fatal("a capacity exclusion with attempts left was not retried")
	}
	grade(c1[0].Rollout.ID, "passed")

	tally, err := f.s.TallyPromotion(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := store.PromotionTally{Open: 2, Tasks: []store.TaskTally{
		{TaskID: p.TaskIDs[0], CaseID: "c0",
			Baseline:  store.SideTally{Total: 2, Passed: 1, Failed: 1},
			Candidate: store.SideTally{Total: 2, Passed: 1, Excluded: 1}},
		{TaskID: p.TaskIDs[1], CaseID: "c1",
			Baseline:  store.SideTally{Total: 2, Unscored: 1, Abandoned: 1},
			Candidate: store.SideTally{}},
	}}
	if diff := cmp.Diff(want, tally); diff != "" {
		t.Errorf("tally with a retry queued and a rollout leased (-want +got):\n%s", diff)
	}

	// The retry fails; the leased rollout runs past its deadline.
	res, err = f.s.Claim(ctx, store.ClaimRequest{TenantID: f.tid, AgentID: "agent-1", Max: 1, Lease: time.Hour,
		WorkerID: "w", Secrets: secretsN("retry", 1)})
	if err != nil || len(res.Rollouts) != 1 || res.Rollouts[0].Rollout.ID != retry {
		t.Fatalf("claiming the retry: %+v (%v)", res.Rollouts, err)
	}
	secrets = secretsN("retry", 1)
	submit(res.Rollouts[0], nil)
	grade(retry, "failed")
	f.clk.Advance(11 * time.Minute)
	if _, err := f.s.Sweep(ctx, 30*time.Second, 100); err != nil {
		t.Fatal(err)
	}
	tally, err = f.s.TallyPromotion(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	want.Open = 0
	want.Tasks[1].Candidate = store.SideTally{Total: 2, Failed: 1, Excluded: 1}
	if diff := cmp.Diff(want, tally); diff != "" {
		t.Errorf("tally once every rollout ended (-want +got):\n%s", diff)
	}
}

func testListPromotions(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 1)
	ctx := t.Context()
	mustInsertTurns(t, f.s, f.tid, "agent-2", simpleTurn(t, "t2"))
	var ids []string
	for i := range 3 {
		np := f.newPromotion(t)
		if i == 1 {
			np.AgentID, np.ExpectedPolicy = "agent-2", nil
		}
		p := f.create(t, np)
		ids = append(ids, p.ID)
		if i != 1 {
			if _, err := f.s.EndPromotion(ctx, f.tid, p.ID, store.PromotionEnd{State: promotion.StateRejected,
				Reasons: []string{"no_graded_tasks"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	listIDs := func(flt store.PromotionFilter, limit int) []string {
		t.Helper()
		var out []string
		cursor := ""
		for {
			page, next, err := f.s.ListPromotions(ctx, f.tid, flt, store.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				out = append(out, p.ID)
			}
			if next == "" {
				return out
			}
			cursor = next
		}
	}
	for _, tc := range []struct {
		name string
		f    store.PromotionFilter
		want []string
	}{
		{"all, newest first", store.PromotionFilter{}, []string{ids[2], ids[1], ids[0]}},
		{"by agent", store.PromotionFilter{AgentID: "agent-1"}, []string{ids[2], ids[0]}},
		{"by state", store.PromotionFilter{State: promotion.StateRunning}, []string{ids[1]}},
		{"by agent and state", store.PromotionFilter{AgentID: "agent-2", State: promotion.StateRejected}, nil},
	} {
		if got := listIDs(tc.f, 1); !slices.Equal(got, tc.want) {
			t.Errorf("%s, one per page: %v, want %v", tc.name, got, tc.want)
		}
	}
	other := mustTenant(t, f.s, "other")
	if list, _, err := f.s.ListPromotions(ctx, other.ID, store.PromotionFilter{}, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("another tenant lists %d promotions (%v), want none", len(list), err)
	}
	_, next, _ := f.s.ListPromotions(ctx, f.tid, store.PromotionFilter{}, store.Page{Limit: 1})
	if _, _, err := f.s.ListPromotions(ctx, f.tid, store.PromotionFilter{AgentID: "agent-1"}, store.Page{Cursor: next}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("a cursor of another filter: %v, want ErrInvalidCursor", err)
	}
}

func testRenewJob(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	if err := s.EnqueueJob(ctx, store.JobPromotion, "p"); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.ClaimJobs(ctx, "r1", []string{store.JobPromotion}, 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs = %+v (%v)", jobs, err)
	}
	clk.Advance(50 * time.Second)
	if err := s.RenewJob(ctx, jobs[0], time.Minute); err != nil {
		t.Fatalf("RenewJob: %v", err)
	}
	clk.Advance(50 * time.Second) // past the first lease, within the renewed one
	if got, _ := s.ClaimJobs(ctx, "r2", []string{store.JobPromotion}, 1, time.Minute); len(got) != 0 {
		t.Fatalf("another replica claimed a renewed job: %+v", got)
	}
	clk.Advance(time.Minute) // the renewed lease lapses: another replica takes the job
	got, err := s.ClaimJobs(ctx, "r2", []string{store.JobPromotion}, 1, time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatalf("after the lease lapsed: %+v (%v), want the job", got, err)
	}
	if err := s.RenewJob(ctx, jobs[0], time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("renewing a claim another replica took over: %v, want ErrLeaseLost", err)
	}
	if err := s.RenewJob(ctx, got[0], time.Minute); err != nil {
		t.Errorf("the new holder renews: %v", err)
	}
}

// SeedPromotionAgent seeds a fresh store for promotion tests of other
// packages: tenant "acme" with agent "agent-1" (seen through a turn),
// policies p1, p2 and p3 with p1 promoted for the agent, and n tasks made
// from a suite of n cases (case ids c0, c1, …). It returns the tenant id
// and the task ids in case order.
func SeedPromotionAgent(t testing.TB, s store.Store, n int) (tenantID string, taskIDs []string) {
	t.Helper()
	ctx := context.Background()
	tn, err := s.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatalf("CreateTenant: %v", err)
	}
	body := `{"turn_id":"t1","input_text":"hi","final_text":null,"tool_calls":[],"tool_calls_omitted_count":0}`
	sum, err := jcs.Hash([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertTurns(ctx, tn.ID, "agent-1", []store.NewTurn{{TurnID: "t1", Body: []byte(body), SHA256: sum}}); err != nil {
		t.Fatalf("InsertTurns: %v", err)
	}
	for _, name := range []string{"p1", "p2", "p3"} {
		if _, _, err := s.CreatePolicy(ctx, newPolicy(tn.ID, name, `{"name":"`+name+`"}`)); err != nil {
			t.Fatalf("CreatePolicy: %v", err)
		}
	}
	if _, err := s.SetPromotedPolicy(ctx, promotion.Change{TenantID: tn.ID, AgentID: "agent-1", Policy: "p1", SetBy: "key k"}); err != nil {
		t.Fatalf("SetPromotedPolicy: %v", err)
	}
	cases := make([]any, n)
	for i := range cases {
		cases[i] = map[string]any{"id": fmt.Sprintf("c%d", i), "input": map[string]any{"question": fmt.Sprintf("q%d", i)}}
	}
	doc, err := jcs.Marshal(map[string]any{"name": "gate", "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	h, err := jcs.Hash(doc)
	if err != nil {
		t.Fatal(err)
	}
	sv, _, err := s.PutSuiteVersion(ctx, store.NewSuiteVersion{TenantID: tn.ID, Name: "gate", Version: h, ContentSHA256: h,
		Document: doc, Cases: n})
	if err != nil {
		t.Fatalf("PutSuiteVersion: %v", err)
	}
	tasks, err := s.CreateSuiteTasks(ctx, suiteTasks(tn.ID, sv, n))
	if err != nil {
		t.Fatalf("CreateSuiteTasks: %v", err)
	}
	for _, tk := range tasks {
		taskIDs = append(taskIDs, tk.ID)
	}
	return tn.ID, taskIDs
}

// The promotions list keeps the promotions started in a window (since
// inclusive, until exclusive), with the other filters and within pages.
func testListPromotionsByWindow(t *testing.T, open Opener) {
	f := newPromoFixture(t, open, 1)
	ctx := t.Context()
	t0 := f.clk.Now()
	var ids []string
	for i := range 3 {
		p := f.create(t, f.newPromotion(t))
		ids = append(ids, p.ID)
		if i < 2 {
			if _, err := f.s.EndPromotion(ctx, f.tid, p.ID, store.PromotionEnd{State: promotion.StateRejected,
				Reasons: []string{"no_graded_tasks"}}); err != nil {
				t.Fatal(err)
			}
		}
		f.clk.Advance(time.Hour)
	}
	list := func(flt store.PromotionFilter) []string {
		t.Helper()
		var out []string
		cursor := ""
		for {
			page, next, err := f.s.ListPromotions(ctx, f.tid, flt, store.Page{Limit: 1, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				out = append(out, p.ID)
			}
			if next == "" {
				return out
			}
			cursor = next
		}
	}
	for _, tc := range []struct {
		name string
		f    store.PromotionFilter
		want []string
	}{
		{"since is inclusive", store.PromotionFilter{Since: t0.Add(time.Hour)}, []string{ids[2], ids[1]}},
		{"until is exclusive", store.PromotionFilter{Until: t0.Add(time.Hour)}, []string{ids[0]}},
		{"window", store.PromotionFilter{Since: t0.Add(time.Minute), Until: t0.Add(2 * time.Hour)}, []string{ids[1]}},
		{"window and state", store.PromotionFilter{State: promotion.StateRejected, Since: t0}, []string{ids[1], ids[0]}},
		{"window and agent", store.PromotionFilter{AgentID: "agent-2", Since: t0}, nil},
		{"empty window", store.PromotionFilter{Since: t0.Add(3 * time.Hour)}, nil},
	} {
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
