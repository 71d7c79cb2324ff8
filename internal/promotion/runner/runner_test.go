package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/promotion/runner"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// engines open a fresh migrated store on each engine; PostgreSQL skips
// without scripts/testenv.sh.
var engines = []struct {
	name string
	open func(t *testing.T, clk clock.Clock) store.Store
}{
	{"sqlite", func(t *testing.T, clk clock.Clock) store.Store {
		return openStore(t, storeopen.Options{DataDir: t.TempDir(), Clock: clk})
	}},
	{"postgres", func(t *testing.T, clk clock.Clock) store.Store {
		u := storetest.PostgresURL(t)
		schema := storetest.NewPostgresSchema(t, u)
		return openStore(t, storeopen.Options{DB: storetest.SearchPathURL(t, u, schema), Clock: clk, InjectedLeaseClock: true})
	}},
}

func openStore(t *testing.T, o storeopen.Options) store.Store {
	t.Helper()
	o.Migrate = true
	st, err := storeopen.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// forEngine runs f on every engine.
func forEngine(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(storetest.Start)
			st := e.open(t, clk)
			tid, tasks := storetest.SeedPromotionAgent(t, st, nTasks)
			f(t, &harness{st: st, clk: clk, tid: tid, tasks: tasks})
		})
	}
}

const (
	nTasks = 10
	reps   = 3
	poll   = 2 * time.Second
	lease  = time.Minute
)

// harness is a seeded store and a fake clock.
type harness struct {
	st     store.Store
	clk    *clock.Fake
	tid    string
	tasks  []string
	failed atomic.Int32
}

func (h *harness) runner() *runner.Runner {
	return runner.New(runner.Config{Poll: poll, Lease: lease},
		runner.Deps{Store: h.st, Clock: h.clk, Failed: func() { h.failed.Add(1) }})
}

// start creates a promotion of p2 against the promoted p1 over the ten
// tasks, three rollouts per task and side.
func (h *harness) start(t *testing.T, deadlineS float64) store.Promotion {
	t.Helper()
	p, err := h.st.CreatePromotion(t.Context(), store.NewPromotion{
		ID: uuid.Must(uuid.NewV7()).String(), TenantID: h.tid, AgentID: "agent-1", Candidate: "p2", Baseline: "p1",
		ExpectedPolicy: ptr("p1"), TaskIDs: h.tasks, Repetitions: reps, MinDelta: 0.02, MaxExcludedRate: 0.05,
		DeadlineS: deadlineS, Seed: 7, CreatedBy: "key k", BatchDeadlineS: 600, MaxAttempts: 2, RetryOn: gyre.DefaultRetryOn,
	})
	if err != nil {
		t.Fatalf("CreatePromotion: %v", err)
	}
	return p
}

func ptr(s string) *string { return &s }

// finishAll claims every queued rollout and grades it with the outcome
// outcome(side, task index) gives.
func (h *harness) finishAll(t *testing.T, p store.Promotion, outcome func(side string, task int) string) {
	t.Helper()
	ctx := t.Context()
	n := 2 * nTasks * reps
	secrets := make([]store.RolloutSecrets, n)
	for i := range secrets {
		secrets[i] = store.RolloutSecrets{LeaseToken: sha256.Sum256(fmt.Appendf(nil, "lease/%d", i)),
			GatewayToken: sha256.Sum256(fmt.Appendf(nil, "gw/%d", i)), GatewayKey: sha256.Sum256(fmt.Appendf(nil, "key/%d", i))}
	}
	res, err := h.st.Claim(ctx, store.ClaimRequest{TenantID: h.tid, AgentID: "agent-1", Max: n, Lease: time.Hour,
		WorkerID: "w", Secrets: secrets})
	if err != nil || len(res.Rollouts) != n {
		t.Fatalf("Claim = %d rollouts (%v), want %d", len(res.Rollouts), err, n)
	}
	for _, c := range res.Rollouts {
		side := promotion.SideBaseline
		if c.Rollout.BatchID == *p.CandidateBatchID {
			side = promotion.SideCandidate
		}
		out := `{"final_text":"` + c.Rollout.ID + `"}`
		if _, err := h.st.SubmitOutput(ctx, store.OutputSubmission{TenantID: h.tid, RolloutID: c.Rollout.ID,
			LeaseToken: secrets[c.Secrets].LeaseToken, Output: json.RawMessage(out),
			OutputHash: fmt.Sprintf("%x", sha256.Sum256([]byte(out))), Grace: 30 * time.Second}); err != nil {
			t.Fatalf("SubmitOutput: %v", err)
		}
		if err := h.st.SaveGrade(ctx, store.GradeResult{RolloutID: c.Rollout.ID, Verdicts: json.RawMessage(`[]`),
			GraderVersions: json.RawMessage(`[]`), Outcome: outcome(side, slices.Index(h.tasks, c.Rollout.TaskID))}); err != nil {
			t.Fatalf("SaveGrade: %v", err)
		}
	}
}

// better: the baseline passes the first six tasks and fails the other
// four; the candidate passes them all.
func better(side string, task int) string {
	if side == promotion.SideCandidate || task < 6 {
		return "passed"
	}
	return "failed"
}

func (h *harness) get(t *testing.T, id string) store.Promotion {
	t.Helper()
	p, err := h.st.GetPromotion(t.Context(), h.tid, id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (h *harness) runOnce(t *testing.T, r *runner.Runner, owner string) int {
	t.Helper()
	n, err := r.RunOnce(t.Context(), owner)
	if err != nil {
		t.Fatalf("RunOnce(%s): %v", owner, err)
	}
	return n
}

// promotionEntries counts the agent's history entries set by a promotion.
func (h *harness) promotionEntries(t *testing.T) int {
	t.Helper()
	hist, err := h.st.PolicyHistory(t.Context(), h.tid, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range hist {
		if e.PromotionID != nil {
			n++
		}
	}
	return n
}

// promotionBatches counts the tenant's batches tagged with a promotion.
func (h *harness) promotionBatches(t *testing.T) int {
	t.Helper()
	sums, _, err := h.st.ListBatches(t.Context(), h.tid, store.BatchFilter{}, store.Page{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range sums {
		if b.PromotionID != nil {
			n++
		}
	}
	return n
}

func (h *harness) agentPolicy(t *testing.T) string {
	t.Helper()
	p, err := h.st.AgentPolicy(t.Context(), h.tid, "agent-1")
	if err != nil || p == nil {
		t.Fatalf("AgentPolicy = %v (%v)", p, err)
	}
	return *p
}

func TestRunner_DecidesOnceAfterEveryRolloutEnds(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, h *harness) {
		r := h.runner()
		p := h.start(t, 3600)
		if n := h.runOnce(t, r, "r1"); n != 1 {
			t.Fatalf("the new promotion's job was not due: claimed %d", n)
		}
		if got := h.get(t, p.ID); got.State != promotion.StateRunning {
			t.Fatalf("decided %s with every rollout queued", got.State)
		}
		if n := h.runOnce(t, r, "r1"); n != 0 {
			t.Errorf("a waiting promotion was looked at again before its poll interval: %d", n)
		}
		h.finishAll(t, p, better)
		h.clk.Advance(poll)
		if n := h.runOnce(t, r, "r1"); n != 1 {
			t.Fatalf("claimed %d jobs after the poll interval, want the promotion's", n)
		}
		got := h.get(t, p.ID)
		if got.State != promotion.StatePromoted || len(got.Reasons) != 0 || got.DecidedAt == nil {
			t.Fatalf("a clearly better candidate ended %s %v", got.State, got.Reasons)
		}
		var ev promotion.Evidence
		if err := json.Unmarshal(got.Evidence, &ev); err != nil {
			t.Fatalf("evidence %s: %v", got.Evidence, err)
		}
		if ev.Seed != 7 || ev.Resamples != promotion.DefaultResamples || len(ev.Tasks) != nTasks ||
			ev.MeanDifference == nil || *ev.MeanDifference < 0.39 || *ev.MeanDifference > 0.41 {
			t.Errorf("evidence = %s; want seed 7, 10,000 resamples, 10 tasks, mean difference 0.4", got.Evidence)
		}
		if h.agentPolicy(t) != "p2" || h.promotionEntries(t) != 1 {
			t.Errorf("after promotion: policy %s, %d promotion entries; want p2 and one", h.agentPolicy(t), h.promotionEntries(t))
		}
		// The job is done: nothing is due any more, and another look
		// changes nothing.
		h.clk.Advance(time.Hour)
		if n := h.runOnce(t, r, "r1"); n != 0 {
			t.Errorf("the decided promotion's job is still due: %d", n)
		}
		if _, err := r.Look(t.Context(), p.ID); err != nil {
			t.Fatal(err)
		}
		if again := h.get(t, p.ID); again.State != promotion.StatePromoted || !again.DecidedAt.Equal(*got.DecidedAt) ||
			h.promotionEntries(t) != 1 {
			t.Errorf("a second look changed the decision: %+v", again)
		}
	})
}

func TestRunner_WorseCandidateIsRejectedAndNothingChanges(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, h *harness) {
		r := h.runner()
		p := h.start(t, 3600)
		h.finishAll(t, p, func(side string, task int) string {
			if side == promotion.SideBaseline || task < 6 {
				return "passed"
			}
			return "failed"
		})
		h.runOnce(t, r, "r1")
		got := h.get(t, p.ID)
		if got.State != promotion.StateRejected || !slices.Contains(got.Reasons, promotion.ReasonDeltaBelowMin) {
			t.Fatalf("a worse candidate ended %s %v, want rejected delta_below_min", got.State, got.Reasons)
		}
		if h.agentPolicy(t) != "p1" || h.promotionEntries(t) != 0 {
			t.Errorf("a rejection changed the promoted policy: %s", h.agentPolicy(t))
		}
	})
}

func TestRunner_DeadlineFailsAndCancelsBothBatches(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, h *harness) {
		r := h.runner()
		p := h.start(t, 60)
		h.runOnce(t, r, "r1") // no worker ever comes
		for range 29 {
			h.clk.Advance(poll)
			h.runOnce(t, r, "r1")
		}
		if got := h.get(t, p.ID); got.State != promotion.StateRunning {
			t.Fatalf("ended %s %v before its deadline", got.State, got.Reasons)
		}
		h.clk.Advance(poll) // the deadline
		if n := h.runOnce(t, r, "r1"); n != 1 {
			t.Fatalf("the job was not due at the deadline: %d", n)
		}
		got := h.get(t, p.ID)
		if got.State != promotion.StateFailed || !slices.Equal(got.Reasons, []string{promotion.ReasonDeadline}) || got.Evidence != nil {
			t.Fatalf("at the deadline: %s %v evidence %s; want failed [deadline] without evidence", got.State, got.Reasons, got.Evidence)
		}
		for _, id := range []string{*p.BaselineBatchID, *p.CandidateBatchID} {
			b, err := h.st.BatchSummary(t.Context(), h.tid, id)
			if err != nil {
				t.Fatal(err)
			}
			if b.State != gyre.BatchCancelled || b.Counts[gyre.StateCancelled] != nTasks*reps {
				t.Errorf("batch %s: %s %v, want cancelled", id, b.State, b.Counts)
			}
		}
		if h.agentPolicy(t) != "p1" || h.failed.Load() != 1 {
			t.Errorf("policy %s, failed hook called %d times; want p1 and once", h.agentPolicy(t), h.failed.Load())
		}
	})
}

// A replica that claimed the job and died holds it until the lease
// lapses; then another replica decides, once, over the same two batches.
func TestRunner_ResumesAfterTheDrivingReplicaIsLost(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, h *harness) {
		p := h.start(t, 3600)
		dead, err := h.st.ClaimJobs(t.Context(), "dead-replica", []string{store.JobPromotion}, 8, lease)
		if err != nil || len(dead) != 1 {
			t.Fatalf("the doomed replica's claim: %+v (%v)", dead, err)
		}
		h.finishAll(t, p, better)
		b, c := h.runner(), h.runner()
		h.clk.Advance(lease / 2)
		if n := h.runOnce(t, b, "r-b"); n != 0 {
			t.Fatalf("another replica took a job whose lease is live: %d", n)
		}
		h.clk.Advance(lease / 2)
		// Two replicas look at once after the lapse: one claims the job.
		var wg sync.WaitGroup
		for _, rr := range []struct {
			r     *runner.Runner
			owner string
		}{{b, "r-b"}, {c, "r-c"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := rr.r.RunOnce(context.Background(), rr.owner); err != nil {
					t.Errorf("RunOnce(%s): %v", rr.owner, err)
				}
			}()
		}
		wg.Wait()
		got := h.get(t, p.ID)
		if got.State != promotion.StatePromoted {
			t.Fatalf("after the takeover: %s %v, want promoted", got.State, got.Reasons)
		}
		// The dead replica comes back and finishes its stale look.
		if _, err := b.Look(t.Context(), p.ID); err != nil {
			t.Fatal(err)
		}
		if err := h.st.FinishJob(t.Context(), dead[0]); err != nil {
			t.Fatal(err)
		}
		if h.promotionEntries(t) != 1 || h.promotionBatches(t) != 2 {
			t.Errorf("%d decisions recorded in the history, %d promotion batches; want exactly one and two",
				h.promotionEntries(t), h.promotionBatches(t))
		}
		if d := h.get(t, p.ID); !d.DecidedAt.Equal(*got.DecidedAt) {
			t.Errorf("the decision was rewritten: %v then %v", got.DecidedAt, d.DecidedAt)
		}
	})
}

// slowTally is a store whose tally waits until the look's lease was
// renewed, as a look over a huge promotion would outlast a renewal period.
type slowTally struct {
	runner.Store
	renewed chan struct{}
	once    sync.Once
}

func (s *slowTally) RenewJob(ctx context.Context, j store.Job, lease time.Duration) error {
	err := s.Store.RenewJob(ctx, j, lease)
	if err == nil {
		s.once.Do(func() { close(s.renewed) })
	}
	return err
}

func (s *slowTally) TallyPromotion(ctx context.Context, id string) (store.PromotionTally, error) {
	select {
	case <-s.renewed:
	case <-ctx.Done():
		return store.PromotionTally{}, ctx.Err()
	}
	return s.Store.TallyPromotion(ctx, id)
}

// A look that outlasts a third of the lease renews it, so no other
// replica takes the promotion while it is being decided.
func TestRunner_ALongLookRenewsItsLease(t *testing.T) {
	t.Parallel()
	forEngine(t, func(t *testing.T, h *harness) {
		p := h.start(t, 3600)
		h.finishAll(t, p, better)
		slow := &slowTally{Store: h.st, renewed: make(chan struct{})}
		r := runner.New(runner.Config{Poll: poll, Lease: 30 * time.Millisecond}, runner.Deps{Store: slow, Clock: h.clk})
		if n := h.runOnce(t, r, "r1"); n != 1 {
			t.Fatalf("claimed %d jobs, want the promotion's", n)
		}
		if got := h.get(t, p.ID); got.State != promotion.StatePromoted {
			t.Errorf("after a look that renewed its lease: %s %v, want promoted", got.State, got.Reasons)
		}
	})
}
