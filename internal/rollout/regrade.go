package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// RegradeConcurrency is how many rollouts of one batch are regraded at
// once: enough to overlap judge calls, few enough to leave the store and
// the judge's upstream to everything else.
const RegradeConcurrency = 8

// Regraded is the outcome of regrading one rollout: its new current
// verdict set and the training-grade decision recomputed from it.
type Regraded struct {
	RolloutID string
	Set       store.VerdictSet
	Verdicts  []grade.Verdict
	Graders   []grade.GraderRef
	// Reward is the set's reward (SPEC §9), nil when every non-optional
	// grader abstained.
	Reward *float64
	// TrainingGrade is nil while reconciliation is pending.
	TrainingGrade *bool
	Reasons       []string
}

// RegradeRollout grades a graded rollout's stored output again (SPEC §8):
// with graders when it is non-nil, else with its task's frozen graders,
// which a regrade never changes. The agent is never run again. It grades
// through the same Env as the grading of every accepted output. The new
// verdict set becomes current and earlier ones are kept; the training
// grade follows the new set with the reconciliation unchanged, and a
// pending reconciliation is queued again so it decides from the new set.
// Errors: store.ErrNotFound (not the tenant's), store.ErrNotGraded (no
// output, or never graded).
func (g *Grader) RegradeRollout(ctx context.Context, tenantID, rolloutID string, graders *grade.Suite) (Regraded, error) {
	r, err := g.store.GetRollout(ctx, tenantID, rolloutID)
	if err != nil {
		return Regraded{}, err
	}
	if r.Output == nil {
		return Regraded{}, fmt.Errorf("rollout %s has no output: %w", rolloutID, store.ErrNotGraded)
	}
	sets, err := g.store.VerdictSets(ctx, tenantID, store.SubjectRollout, rolloutID)
	if err != nil {
		return Regraded{}, err
	}
	if len(sets) == 0 {
		return Regraded{}, fmt.Errorf("rollout %s: %w", rolloutID, store.ErrNotGraded)
	}
	in, err := g.store.GradingInput(ctx, rolloutID)
	if err != nil {
		return Regraded{}, err
	}
	var out flywheel.RolloutOutput
	if err := json.Unmarshal(in.Rollout.Output, &out); err != nil {
		return Regraded{}, fmt.Errorf("stored output: %w", err)
	}
	item, err := g.gradedItem(ctx, in, out)
	if err != nil {
		return Regraded{}, err
	}
	source, requested := store.VerdictsFromTask, json.RawMessage(nil)
	suite := graders
	if suite == nil {
		s, err := taskSuite(in.Graders)
		if err != nil {
			return Regraded{}, err
		}
		suite = &s
	} else {
		source = store.VerdictsFromRequest
		if requested, err = json.Marshal(suite); err != nil {
			return Regraded{}, err
		}
	}
	env, err := g.EnvFor(ctx, in.Rollout)
	if err != nil {
		return Regraded{}, err
	}
	set, err := suite.Grade(ctx, item, env)
	if err != nil {
		return Regraded{}, fmt.Errorf("grade: %w", err)
	}
	res := Regraded{RolloutID: rolloutID, Verdicts: set.Verdicts, Graders: set.Graders, Reward: set.Reward()}
	res.TrainingGrade, res.Reasons, err = g.regradeDecision(ctx, in.Rollout, out, set)
	if err != nil {
		return Regraded{}, err
	}
	verdicts, err := json.Marshal(set.Verdicts)
	if err != nil {
		return Regraded{}, err
	}
	versions, err := json.Marshal(set.Graders)
	if err != nil {
		return Regraded{}, err
	}
	res.Set, err = g.store.SaveRegrade(ctx, store.RegradeResult{
		TenantID: tenantID, RolloutID: rolloutID, Verdicts: verdicts, GraderVersions: versions,
		Source: source, Graders: requested, TrainingGrade: res.TrainingGrade, Reasons: res.Reasons,
		Outcome: string(set.Classify()), Reward: res.Reward,
	})
	if err != nil {
		return Regraded{}, err
	}
	if res.TrainingGrade == nil {
		// A reconciliation that reads the set this regrade replaced must
		// decide again from the new one.
		if err := g.store.EnqueueJob(ctx, store.JobReconcile, rolloutID); err != nil {
			return Regraded{}, err
		}
		g.Wake()
	}
	return res, nil
}

// regradeDecision recomputes a rollout's training grade (SPEC §9) from a
// new verdict set with the facts the reconciler uses; the decision is nil
// while reconciliation is pending.
func (g *Grader) regradeDecision(ctx context.Context, r store.Rollout, out flywheel.RolloutOutput, set grade.VerdictSet) (*bool, []string, error) {
	calls, err := g.store.GatewayCalls(ctx, r.TenantID, r.ID)
	if err != nil {
		return nil, nil, err
	}
	counted, bodies := countedCalls(calls)
	facts := trainingFacts(r, out, set.Verdicts, set.Flags(), counted, bodies)
	if r.Reconciliation != nil {
		facts.Reconciliation = *r.Reconciliation
		if r.ReconciliationReason != nil {
			facts.ReconciliationReason = *r.ReconciliationReason
		}
	}
	ok, reasons := grade.TrainingGrade(facts)
	if r.Reconciliation == nil {
		return nil, reasons, nil
	}
	return &ok, reasons, nil
}

// taskSuite compiles a task's frozen graders.
func taskSuite(raw json.RawMessage) (grade.Suite, error) {
	specs, err := grade.ParseSpecs(raw)
	if err != nil {
		return grade.Suite{}, fmt.Errorf("task graders: %w", err)
	}
	s, err := grade.Compile(specs)
	if err != nil {
		return grade.Suite{}, fmt.Errorf("task graders: %w", err)
	}
	return s, nil
}

// BatchRegrade is what one page of a batch regrade did.
type BatchRegrade struct {
	// Regraded lists the page's regraded rollouts, in list order (newest
	// first).
	Regraded []Regraded
	// NotGraded lists the page's rollouts that have nothing to regrade:
	// no output, or not graded yet.
	NotGraded []string
	// Next continues with the next page; "" after the last.
	Next string
}

// RegradeBatch regrades one page of a batch's rollouts (SPEC §8), at most
// RegradeConcurrency at a time, with graders or each rollout's task
// graders. Rollouts that were never graded are listed, not failed. Each
// rollout's new set is stored as soon as it is graded, so a page cut short
// keeps what it finished. ErrNotFound if the batch is not the tenant's.
func (g *Grader) RegradeBatch(ctx context.Context, tenantID, batchID string, graders *grade.Suite, p store.Page) (BatchRegrade, error) {
	if _, err := g.store.BatchSummary(ctx, tenantID, batchID); err != nil {
		return BatchRegrade{}, err
	}
	rs, next, err := g.store.ListRollouts(ctx, tenantID, store.RolloutFilter{BatchID: batchID}, p)
	if err != nil {
		return BatchRegrade{}, err
	}
	results := make([]Regraded, len(rs))
	errs := make([]error, len(rs))
	sem := make(chan struct{}, RegradeConcurrency)
	var wg sync.WaitGroup
	for i, r := range rs {
		if r.Output == nil || r.GradedAt == nil {
			errs[i] = store.ErrNotGraded
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = g.RegradeRollout(ctx, tenantID, r.ID, graders)
		})
	}
	wg.Wait()
	out := BatchRegrade{Regraded: []Regraded{}, NotGraded: []string{}, Next: next}
	for i, r := range rs {
		switch {
		case errs[i] == nil:
			out.Regraded = append(out.Regraded, results[i])
		case errors.Is(errs[i], store.ErrNotGraded):
			out.NotGraded = append(out.NotGraded, r.ID)
		default:
			return BatchRegrade{}, fmt.Errorf("regrade rollout %s: %w", r.ID, errs[i])
		}
	}
	return out, nil
}

// RegradeRollout regrades one rollout; see Grader.RegradeRollout.
func (s *Service) RegradeRollout(ctx context.Context, tenantID, rolloutID string, graders *grade.Suite) (Regraded, error) {
	return s.grader.RegradeRollout(ctx, tenantID, rolloutID, graders)
}

// RegradeBatch regrades one page of a batch; see Grader.RegradeBatch.
func (s *Service) RegradeBatch(ctx context.Context, tenantID, batchID string, graders *grade.Suite, p store.Page) (BatchRegrade, error) {
	return s.grader.RegradeBatch(ctx, tenantID, batchID, graders, p)
}

// Env is the Env every grading of this grader uses, without a subject;
// regrades of eval runs on the server grade through it too.
func (g *Grader) Env() grade.Env { return g.env }
