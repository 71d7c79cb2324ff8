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
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// GraderDeps are what grading may use.
type GraderDeps struct {
	Logger *slog.Logger
	// Env is passed to every grader (judge, command allow-list).
	Env grade.Env
}

// Grader grades accepted outputs from the store's durable job queue, so a
// restart never skips one: a job is removed only after its verdicts are
// committed, and a job whose holder died is due again when its lease
// lapses.
type Grader struct {
	store store.Store
	log   *slog.Logger
	env   grade.Env
	wake  chan struct{}
}

// NewGrader returns a Grader over st.
func NewGrader(st store.Store, d GraderDeps) *Grader {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Env.Logger == nil {
		d.Env.Logger = d.Logger
	}
	return &Grader{store: st, log: d.Logger, env: d.Env, wake: make(chan struct{}, 1)}
}

// Wake makes the grader look for due jobs now.
func (g *Grader) Wake() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run grades due jobs until ctx ends.
func (g *Grader) run(ctx context.Context, owner string, every, lease time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := g.RunOnce(ctx, owner, lease)
			if err != nil && ctx.Err() == nil {
				g.log.LogAttrs(ctx, slog.LevelError, "grading jobs", slog.Any("error", err))
			}
			if n == 0 || err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.wake:
		}
	}
}

// RunOnce claims and grades one round of due jobs and returns how many it
// took.
func (g *Grader) RunOnce(ctx context.Context, owner string, lease time.Duration) (int, error) {
	jobs, err := g.store.ClaimJobs(ctx, owner, []string{store.JobGrade}, 16, lease)
	if err != nil {
		return 0, err
	}
	for _, j := range jobs {
		if err := g.GradeRollout(ctx, j.SubjectID); err != nil {
			g.log.LogAttrs(ctx, slog.LevelError, "grading rollout failed",
				slog.String("rollout_id", j.SubjectID), slog.Int("attempt", j.Attempts), slog.Any("error", err))
			backoff := min(time.Duration(1<<min(j.Attempts, 10))*time.Second, 10*time.Minute)
			if rerr := g.store.RetryJob(ctx, j, backoff, err.Error()); rerr != nil {
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

// GradeRollout grades one accepted rollout with its task's frozen
// verifier suite, reconciles its LLM calls and decides its training grade.
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
	item, err := gradedItem(in, out)
	if err != nil {
		return err
	}
	specs, err := grade.ParseSpecs(in.Graders)
	if err != nil {
		return fmt.Errorf("task graders: %w", err)
	}
	suite, err := grade.Compile(specs)
	if err != nil {
		return fmt.Errorf("task graders: %w", err)
	}
	set, err := suite.Grade(ctx, item, g.env)
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
	rec, reason := Reconcile(out.LLMCallCount, in.Completions)
	facts := grade.TrainingFacts{
		State:                   string(gyre.StateGraded),
		ToolCallsReported:       item.ToolCalls != nil,
		ToolCallsOmittedCount:   out.OmittedCount(),
		Reconciliation:          rec,
		SubmittedBeforeDeadline: r.SubmittedAt != nil && r.Deadline != nil && !r.SubmittedAt.After(*r.Deadline),
		LeaseLiveAtSubmit:       r.SubmittedAt != nil, // accepted outputs came under a live lease
		Verdicts:                set.Verdicts,
		Flags:                   set.Flags(),
		CountedCompletions:      in.Completions,
		BodiesCaptured:          in.Recorded >= in.Completions,
	}
	if reason != nil {
		facts.ReconciliationReason = *reason
	}
	if r.ExclusionReason != nil {
		facts.Exclusion = *r.ExclusionReason
	}
	ok, reasons := grade.TrainingGrade(facts)
	return g.store.SaveGrade(ctx, store.GradeResult{
		RolloutID: rolloutID, Verdicts: verdicts, GraderVersions: versions,
		Reconciliation: &rec, ReconciliationReason: reason, TrainingGrade: ok, Reasons: reasons,
	})
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
