// Package runner drives promotions (SPEC §10) from the store's durable
// job queue: it waits, without holding anything between looks, until
// every rollout of a promotion's two batches has ended, tallies each
// task's rollouts per side, lets promotion.Decide judge them and stores
// the decision exactly once. A promotion still open at its deadline ends
// failed (deadline) and its batches are cancelled.
//
// Every replica of gyre serve runs a Runner. A look at a promotion is
// one claim of its job under a lease that is renewed while the look
// lasts, so one replica at a time drives a promotion; a replica killed
// mid-look lets the lease lapse and another takes the job over. Between
// looks the job is due again after Poll, so a waiting promotion costs a
// few queries per look and no goroutine. Even if two replicas ever
// looked at once, the store's compare-and-set on the running state keeps
// the decision single.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// Store is what the runner needs from persistence.
type Store interface {
	ClaimJobs(ctx context.Context, owner string, kinds []string, n int, lease time.Duration) ([]store.Job, error)
	FinishJob(ctx context.Context, j store.Job) error
	RetryJob(ctx context.Context, j store.Job, after time.Duration, cause string) error
	RenewJob(ctx context.Context, j store.Job, lease time.Duration) error
	PromotionByID(ctx context.Context, id string) (store.Promotion, error)
	TallyPromotion(ctx context.Context, id string) (store.PromotionTally, error)
	EndPromotion(ctx context.Context, tenantID, id string, e store.PromotionEnd) (store.Promotion, error)
}

// Defaults of Config.
const (
	DefaultPoll  = 2 * time.Second
	DefaultLease = time.Minute
	// claimBatch is how many due promotions one look claims.
	claimBatch = 8
)

// Config tunes a Runner. Zero fields take their defaults.
type Config struct {
	// Poll is how long a promotion waiting for rollouts waits before its
	// next look (default 2 s).
	Poll time.Duration
	// Lease is how long a look holds a promotion's job before another
	// replica may take it; renewed every Lease/3 while the look runs
	// (default 1 min).
	Lease time.Duration
}

// Deps are a Runner's collaborators.
type Deps struct {
	Store Store
	// Clock decides deadlines; nil is the wall clock. It must be the
	// store's clock, so a job's due time and a promotion's deadline agree.
	Clock  clock.Clock
	Logger *slog.Logger
	// Failed is called after a promotion ended failed and its batches
	// were cancelled (the gateway forgets cached credentials then).
	Failed func()
}

// Runner drives promotions.
type Runner struct {
	cfg    Config
	st     Store
	clk    clock.Clock
	log    *slog.Logger
	failed func()
	wake   store.JobWaker
}

// New returns a Runner.
func New(cfg Config, d Deps) *Runner {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Failed == nil {
		d.Failed = func() {}
	}
	return &Runner{cfg: cfg, st: d.Store, clk: d.Clock, log: d.Logger, failed: d.Failed, wake: store.NewJobWaker()}
}

// Wake makes the runner look for due promotions now.
func (r *Runner) Wake() { r.wake.Wake() }

// Run drives due promotions until ctx ends, looking every `every` and
// whenever woken. owner names this replica in the job leases.
func (r *Runner) Run(ctx context.Context, owner string, every time.Duration) {
	store.DrainJobs(ctx, every, r.wake,
		func(ctx context.Context) (int, error) { return r.RunOnce(ctx, owner) },
		func(err error) { r.log.LogAttrs(ctx, slog.LevelError, "promotion jobs", slog.Any("error", err)) })
}

// RunOnce claims the due promotion jobs and takes one look at each; it
// reports how many it claimed.
func (r *Runner) RunOnce(ctx context.Context, owner string) (int, error) {
	jobs, err := r.st.ClaimJobs(ctx, owner, []string{store.JobPromotion}, claimBatch, r.cfg.Lease)
	if err != nil {
		return 0, err
	}
	for _, j := range jobs {
		if err := r.run(ctx, j); err != nil {
			return len(jobs), err
		}
	}
	return len(jobs), nil
}

// run takes one look at a claimed job under its renewed lease, then
// finishes it, or makes it due again for the next look.
func (r *Runner) run(ctx context.Context, j store.Job) error {
	lctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() { defer close(renewed); r.keepLease(lctx, j) }()
	wait, err := r.Look(lctx, j.SubjectID)
	stop()
	<-renewed
	switch {
	case err != nil:
		r.log.LogAttrs(ctx, slog.LevelWarn, "promotion look failed, will retry", slog.String("promotion_id", j.SubjectID),
			slog.Any("error", err))
		backoff := min(time.Duration(1<<min(j.Attempts, 8))*time.Second, time.Minute)
		return r.st.RetryJob(ctx, j, max(backoff, r.cfg.Poll), err.Error())
	case wait > 0:
		return r.st.RetryJob(ctx, j, wait, "waiting for rollouts to end")
	}
	return r.st.FinishJob(ctx, j)
}

// keepLease renews j's lease every Lease/3 until ctx ends.
func (r *Runner) keepLease(ctx context.Context, j store.Job) {
	t := time.NewTicker(r.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.st.RenewJob(ctx, j, r.cfg.Lease); err != nil && ctx.Err() == nil {
				r.log.LogAttrs(ctx, slog.LevelWarn, "promotion job lease not renewed", slog.String("promotion_id", j.SubjectID),
					slog.Any("error", err))
			}
		}
	}
}

// Look takes one look at a promotion: it decides it once every rollout
// of both batches ended, fails it when its deadline passed first, and
// otherwise reports how long to wait before the next look (0 when the
// promotion needs no more looks).
func (r *Runner) Look(ctx context.Context, id string) (time.Duration, error) {
	p, err := r.st.PromotionByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if p.State != promotion.StateRunning {
		return 0, nil
	}
	tally, err := r.st.TallyPromotion(ctx, id)
	if err != nil {
		return 0, err
	}
	now := r.clk.Now()
	if tally.Open > 0 {
		if now.Before(p.DeadlineAt) {
			return min(r.cfg.Poll, p.DeadlineAt.Sub(now)), nil
		}
		ended, err := r.end(ctx, p, store.PromotionEnd{State: promotion.StateFailed, Reasons: []string{promotion.ReasonDeadline}})
		if err == nil && ended {
			r.failed()
		}
		return 0, err
	}
	d := promotion.Decide(Outcomes(tally), promotion.Rules{MinDelta: p.MinDelta, MaxExcludedRate: p.MaxExcludedRate,
		Resamples: promotion.DefaultResamples, Seed: p.Seed})
	evidence, err := json.Marshal(d.Evidence)
	if err != nil {
		return 0, fmt.Errorf("promotion %s evidence: %w", id, err)
	}
	_, err = r.end(ctx, p, store.PromotionEnd{State: d.State, Reasons: d.Reasons, Evidence: evidence})
	return 0, err
}

// end stores how p ended and logs it; a promotion another look or an
// admin already ended is left as it is.
func (r *Runner) end(ctx context.Context, p store.Promotion, e store.PromotionEnd) (bool, error) {
	got, err := r.st.EndPromotion(ctx, p.TenantID, p.ID, e)
	if errors.Is(err, promotion.ErrDecided) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.log.LogAttrs(ctx, slog.LevelInfo, "promotion ended", slog.String("promotion_id", p.ID),
		slog.String("agent_id", p.AgentID), slog.String("state", got.State), slog.Any("reasons", got.Reasons))
	return true, nil
}

// Outcomes turns a tally into the decision's input.
func Outcomes(t store.PromotionTally) []promotion.TaskOutcome {
	out := make([]promotion.TaskOutcome, len(t.Tasks))
	for i, tt := range t.Tasks {
		out[i] = promotion.TaskOutcome{TaskID: tt.TaskID, CaseID: tt.CaseID,
			Baseline: sideCounts(tt.Baseline), Candidate: sideCounts(tt.Candidate)}
	}
	return out
}

func sideCounts(s store.SideTally) promotion.SideCounts {
	return promotion.SideCounts{Total: s.Total, Passed: s.Passed, Failed: s.Failed, Unscored: s.Unscored,
		Excluded: s.Excluded, Abandoned: s.Abandoned}
}
