package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// GraderDeps are what grading may use.
type GraderDeps struct {
	Logger *slog.Logger
	// Env is passed to every grader (judge, command allow-list), with
	// each rollout as its Subject (see Grader.EnvFor).
	Env grade.Env
	// Blobs reads the gateway's recorded bodies, from which the graded
	// item's emitted_tool_calls come; nil leaves them unknown (null).
	Blobs gateway.BlobReader
}

// Grader grades accepted outputs from the store's durable job queue, so a
// restart never skips one: a job is removed only after its verdicts are
// committed, and a job whose holder died is due again when its lease
// lapses.
type Grader struct {
	store store.Store
	log   *slog.Logger
	env   grade.Env
	blobs gateway.BlobReader
	wake  store.JobWaker
	// batch is how many jobs a round claims under one lease.
	batch int
}

// Jobs claimed per round: many when grading is local and quick, one when
// a judge may spend minutes on model calls, so that the jobs waiting
// behind it are not held under a lease that lapses before their turn
// (another replica would then grade them twice).
const (
	gradeBatch      = 16
	gradeBatchJudge = 1
)

// NewGrader returns a Grader over st.
func NewGrader(st store.Store, d GraderDeps) *Grader {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Env.Logger == nil {
		d.Env.Logger = d.Logger
	}
	batch := gradeBatch
	if d.Env.Judge != nil {
		batch = gradeBatchJudge
	}
	return &Grader{store: st, log: d.Logger, env: d.Env, blobs: d.Blobs, wake: store.NewJobWaker(), batch: batch}
}

// Wake makes the grader look for due jobs now.
func (g *Grader) Wake() { g.wake.Wake() }

// run grades due jobs until ctx ends.
func (g *Grader) run(ctx context.Context, owner string, every, lease time.Duration) {
	store.DrainJobs(ctx, every, g.wake,
		func(ctx context.Context) (int, error) { return g.RunOnce(ctx, owner, lease) },
		func(err error) { g.log.LogAttrs(ctx, slog.LevelError, "grading jobs", slog.Any("error", err)) })
}

// RunOnce claims and runs one round of due grading and reconciliation
// jobs and returns how many it took.
func (g *Grader) RunOnce(ctx context.Context, owner string, lease time.Duration) (int, error) {
	jobs, err := g.store.ClaimJobs(ctx, owner, []string{store.JobGrade, store.JobReconcile}, g.batch, lease)
	if err != nil {
		return 0, err
	}
	defer g.holdLeases(ctx, jobs, lease)()
	for _, j := range jobs {
		done := true
		switch j.Kind {
		case store.JobReconcile:
			done, err = g.ReconcileRollout(ctx, j.SubjectID)
		default:
			if done, err = g.recordsSettled(ctx, j.SubjectID); err == nil && done {
				err = g.GradeRollout(ctx, j.SubjectID)
			}
		}
		if err != nil {
			g.log.LogAttrs(ctx, slog.LevelError, "rollout job failed", slog.String("job", j.Kind),
				slog.String("rollout_id", j.SubjectID), slog.Int("attempt", j.Attempts), slog.Any("error", err))
			backoff := min(time.Duration(1<<min(j.Attempts, 10))*time.Second, 10*time.Minute)
			if rerr := g.store.RetryJob(ctx, j, backoff, err.Error()); rerr != nil {
				return len(jobs), rerr
			}
			continue
		}
		if !done {
			// The gateway records are not all durable yet: look again
			// soon. A replica that never flushes dies within its TTL,
			// which decides the rollout, so this ends.
			wait := min(time.Duration(j.Attempts)*reconcileWait, 5*time.Second)
			if rerr := g.store.RetryJob(ctx, j, wait, "waiting for gateway records"); rerr != nil {
				return len(jobs), rerr
			}
			continue
		}
		if err := g.store.FinishJob(ctx, j); err != nil {
			return len(jobs), err
		}
	}
	return len(jobs), nil
}

// holdLeases renews the leases of a round's jobs every third of the
// lease until the returned stop is called, so the lease can stay short: a
// replica that dies mid-round leaves its jobs to another within one lease,
// not after the longest a round could take (a judge's model calls). A job
// already finished or retried is no longer held; its renewal fails with
// ErrLeaseLost, which is expected and ignored.
func (g *Grader) holdLeases(ctx context.Context, jobs []store.Job, lease time.Duration) (stop func()) {
	if len(jobs) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, j := range jobs {
					if err := g.store.RenewJob(ctx, j, lease); err != nil && !errors.Is(err, store.ErrLeaseLost) && ctx.Err() == nil {
						g.log.LogAttrs(ctx, slog.LevelWarn, "renew grading job lease", slog.String("rollout_id", j.SubjectID), slog.Any("error", err))
					}
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// reconcileWait is the first wait before a rollout's reconciliation is
// tried again: about one gateway flush interval.
const reconcileWait = 200 * time.Millisecond

// GradeWait bounds how long grading waits for a rollout's gateway records
// to be durable. Verdicts read the gateway's count of completions
// (max_llm_calls, max_steps), so they wait for it, but no longer than
// this: a replica slow to flush delays only the reconciliation, which a
// reconcile job finishes later.
const GradeWait = 3 * time.Second

// recordsSettled reports whether a rollout's grading may start: every
// gateway replica that served it is done with it, or GradeWait has passed
// since it was sealed.
func (g *Grader) recordsSettled(ctx context.Context, rolloutID string) (bool, error) {
	seal, err := g.store.SealGateway(ctx, rolloutID)
	if err != nil {
		return false, err
	}
	if seal.Ready {
		return true, nil
	}
	now, err := g.store.LeaseClock(ctx)
	if err != nil {
		return false, err
	}
	return now.Sub(seal.SealedAt) >= GradeWait, nil
}

// GradeRollout grades one accepted rollout with its task's frozen
// verifier suite and stores the verdicts, then reconciles its LLM calls
// and decides its training grade when the gateway records allow;
// otherwise a reconcile job finishes that (SPEC §6.3). The job queue calls
// it once the records are durable or GradeWait has passed.
func (g *Grader) GradeRollout(ctx context.Context, rolloutID string) error {
	in, err := g.store.GradingInput(ctx, rolloutID)
	if err != nil {
		return err
	}
	r := in.Rollout
	if r.Output == nil {
		return fmt.Errorf("rollout %s has no output to grade", rolloutID)
	}
	var out flywheel.RolloutOutput
	if err := json.Unmarshal(r.Output, &out); err != nil {
		return fmt.Errorf("stored output: %w", err)
	}
	item, err := g.gradedItem(ctx, in, out)
	if err != nil {
		return err
	}
	suite, err := taskSuite(in.Graders)
	if err != nil {
		return err
	}
	env, err := g.EnvFor(ctx, r)
	if err != nil {
		return err
	}
	set, err := suite.Grade(ctx, item, env)
	if err != nil {
		return fmt.Errorf("grade: %w", err)
	}
	verdicts, err := json.Marshal(set.Verdicts)
	if err != nil {
		return err
	}
	versions, err := json.Marshal(set.Graders)
	if err != nil {
		return err
	}
	// Until reconciliation decides, the decision is pending (null).
	_, reasons := grade.TrainingGrade(trainingFacts(r, out, set.Verdicts, set.Flags(), in.Completions, in.Recorded >= in.Completions))
	if err := g.store.SaveGrade(ctx, store.GradeResult{
		RolloutID: rolloutID, Verdicts: verdicts, GraderVersions: versions, Reasons: reasons,
		Outcome: string(set.Classify()), Reward: set.Reward(),
	}); err != nil {
		return err
	}
	done, err := g.ReconcileRollout(ctx, rolloutID)
	if err != nil {
		g.log.LogAttrs(ctx, slog.LevelWarn, "reconciliation deferred", slog.String("rollout_id", rolloutID), slog.Any("error", err))
	}
	if err != nil || !done {
		return g.store.EnqueueJob(ctx, store.JobReconcile, rolloutID)
	}
	return nil
}

// EnvFor is the grading environment of one rollout: the Grader's, with
// the rollout as its subject, so that a judge calls its tenant's policy
// and records the call against it, and a command grader is checked
// against the tenant's allow-list. Regrading a rollout uses it too.
func (g *Grader) EnvFor(ctx context.Context, r store.Rollout) (grade.Env, error) {
	t, err := g.store.TenantByID(ctx, r.TenantID)
	if err != nil {
		return grade.Env{}, fmt.Errorf("rollout tenant: %w", err)
	}
	env := g.env
	env.Subject = grade.Subject{TenantID: r.TenantID, TenantName: t.Name, Kind: grade.SubjectRollout, ID: r.ID}
	return env, nil
}

// ReconcileRollout decides a graded rollout's reconciliation once every
// gateway replica that served it has made its records durable or is known
// dead (SPEC §6.3), then its training grade. It reports false, without an
// error, while records may still arrive. A dead replica that had not
// flushed makes the rollout unreconciled (gateway_records_lost): a crash
// never leaves a rollout wrongly on_policy.
func (g *Grader) ReconcileRollout(ctx context.Context, rolloutID string) (bool, error) {
	seal, err := g.store.SealGateway(ctx, rolloutID)
	if err != nil {
		return false, err
	}
	if !seal.Ready {
		return false, nil
	}
	in, err := g.store.GradingInput(ctx, rolloutID)
	if err != nil {
		return false, err
	}
	r := in.Rollout
	var out flywheel.RolloutOutput
	if err := json.Unmarshal(r.Output, &out); err != nil {
		return false, fmt.Errorf("stored output: %w", err)
	}
	calls, err := g.store.GatewayCalls(ctx, r.TenantID, rolloutID)
	if err != nil {
		return false, err
	}
	counted, bodies := countedCalls(calls)
	sets, err := g.store.VerdictSets(ctx, r.TenantID, "rollout", rolloutID)
	if err != nil {
		return false, err
	}
	if len(sets) == 0 {
		return false, fmt.Errorf("rollout %s has no verdicts to reconcile with", rolloutID)
	}
	last := sets[len(sets)-1]
	var (
		verdicts []grade.Verdict
		graders  []grade.GraderRef
	)
	if err := json.Unmarshal(last.Verdicts, &verdicts); err != nil {
		return false, fmt.Errorf("stored verdicts: %w", err)
	}
	if err := json.Unmarshal(last.GraderVersions, &graders); err != nil {
		return false, fmt.Errorf("stored grader versions: %w", err)
	}
	flags := grade.VerdictSet{Verdicts: verdicts, Graders: graders}.Flags()
	var (
		rec    string
		reason *string
	)
	if seal.Lost {
		rec, reason = grade.Unreconciled, ptr(ReasonRecordsLost)
	} else {
		rec, reason = Reconcile(out.LLMCallCount, counted)
	}
	facts := trainingFacts(r, out, verdicts, flags, counted, bodies)
	facts.Reconciliation = rec
	if reason != nil {
		facts.ReconciliationReason = *reason
	}
	ok, reasons := grade.TrainingGrade(facts)
	if err := g.store.FinishReconciliation(ctx, store.ReconcileResult{
		RolloutID: rolloutID, Reconciliation: rec, ReconciliationReason: reason,
		ServerFingerprint: gateway.ServerFingerprint(calls), TrainingGrade: ok, Reasons: reasons,
	}); err != nil {
		return false, err
	}
	return true, nil
}

// countedCalls counts a rollout's counted completions and reports
// whether the bodies of all of them were captured.
func countedCalls(calls []store.GatewayCall) (counted int, bodies bool) {
	bodies = true
	for _, c := range calls {
		if c.Counted {
			counted++
			bodies = bodies && c.RequestBlob != nil && c.ResponseBlob != nil
		}
	}
	return counted, bodies
}

// ReasonRecordsLost is the unreconciled reason when a gateway replica
// that served the rollout died before its records were durable.
const ReasonRecordsLost = "gateway_records_lost"

func ptr[T any](v T) *T { return &v }

// trainingFacts are the facts of SPEC §9 for a rollout, reconciliation
// aside (the caller sets it, or leaves it pending).
func trainingFacts(r store.Rollout, out flywheel.RolloutOutput, verdicts []grade.Verdict, flags []grade.Flags,
	counted int, bodies bool) grade.TrainingFacts {
	_, reported := out.ToolCalls.Get()
	f := grade.TrainingFacts{
		State:                   string(gyre.StateGraded),
		ToolCallsReported:       reported,
		ToolCallsOmittedCount:   out.OmittedCount(),
		SubmittedBeforeDeadline: r.SubmittedAt != nil && r.Deadline != nil && !r.SubmittedAt.After(*r.Deadline),
		LeaseLiveAtSubmit:       r.SubmittedAt != nil, // accepted outputs came under a live lease
		Verdicts:                verdicts,
		Flags:                   flags,
		CountedCompletions:      counted,
		BodiesCaptured:          bodies,
	}
	if r.ExclusionReason != nil {
		f.Exclusion = *r.ExclusionReason
	}
	return f
}

// Reconcile compares the agent's llm_call_count with the gateway's counted
// completions (SPEC §6.3): equal is on_policy; not reported is
// unreconciled (llm_call_count_not_reported); anything else is off_policy,
// traffic that escaped the wire.
func Reconcile(reported flywheel.Optional[int], counted int) (string, *string) {
	n, ok := reported.Get()
	switch {
	case !ok:
		reason := "llm_call_count_not_reported"
		return "unreconciled", &reason
	case n == counted:
		return "on_policy", nil
	default:
		reason := fmt.Sprintf("agent reported %d completions, gateway counted %d", n, counted)
		return "off_policy", &reason
	}
}

// gradedItem builds the graded item of a rollout with the tool calls the
// gateway saw the model emit.
func (g *Grader) gradedItem(ctx context.Context, in store.GradingInput, out flywheel.RolloutOutput) (*grade.Item, error) {
	item, err := gradedItem(in, out)
	if err != nil {
		return nil, err
	}
	if item.EmittedToolCalls, err = g.emittedToolCalls(ctx, in.Rollout); err != nil {
		return nil, fmt.Errorf("emitted tool calls: %w", err)
	}
	return item, nil
}

// gradedItem builds the gyre.graded-item/1 of a rollout. The advisory
// reward, success and agent_fingerprint never reach it.
func gradedItem(in store.GradingInput, out flywheel.RolloutOutput) (*grade.Item, error) {
	final := out.FinalText
	item := &grade.Item{
		Schema:                grade.ItemSchema,
		Kind:                  grade.KindRollout,
		Input:                 in.Input,
		FinalText:             &final,
		ToolCallsOmittedCount: out.OmittedCount(),
	}
	if calls, ok := out.ToolCalls.Get(); ok {
		raw, err := json.Marshal(calls)
		if err != nil {
			return nil, err
		}
		item.ToolCalls = []grade.ToolCall{}
		if err := json.Unmarshal(raw, &item.ToolCalls); err != nil {
			return nil, fmt.Errorf("tool calls: %w", err)
		}
	}
	if out.Artifacts != nil {
		raw, err := json.Marshal(out.Artifacts)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &item.Artifacts); err != nil {
			return nil, fmt.Errorf("artifacts: %w", err)
		}
	}
	// The gateway's count is the evidence; each counted completion is one
	// agent step, as in the ATIF conversion.
	llm, steps := in.Completions, in.Completions
	item.LLMCalls, item.Steps = &llm, &steps
	if err := item.Validate(); err != nil {
		return nil, errors.Join(errors.New("graded item"), err)
	}
	return item, nil
}
