package rollout

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Run starts the replica's background work — the watchdog and the grader —
// and blocks until ctx ends and both have stopped. Every replica runs
// both: the store makes them safe to run concurrently.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.watchdog(ctx) })
	wg.Go(func() { s.grader.run(ctx, s.cfg.ReplicaID, s.cfg.GradeEvery, s.cfg.GradeLease) })
	wg.Wait()
}

// Grader returns the service's grader.
func (s *Service) Grader() *Grader { return s.grader }

// watchdog sweeps every SweepEvery until ctx ends.
func (s *Service) watchdog(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelError, "watchdog sweep", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SweepResult counts what one watchdog pass ended.
type SweepResult struct {
	Abandoned, DeadlineExceeded, Retried int
}

// Sweep runs watchdog passes until one finds nothing more to end: leased
// rollouts past deadline + grace end deadline_exceeded, lapsed leases end
// abandoned with their gateway tokens revoked, and abandoned rollouts are
// retried while attempts remain.
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	var total SweepResult
	for {
		res, err := s.store.Sweep(ctx, s.cfg.Grace, s.cfg.SweepLimit)
		if err != nil {
			return total, err
		}
		total.Abandoned += len(res.Abandoned)
		total.DeadlineExceeded += len(res.DeadlineExceeded)
		total.Retried += len(res.Retries)
		for _, r := range res.Retries {
			s.WorkQueued(r.TenantID, r.AgentID)
		}
		if len(res.Abandoned) < s.cfg.SweepLimit && len(res.DeadlineExceeded) < s.cfg.SweepLimit {
			break
		}
	}
	if total.Abandoned+total.DeadlineExceeded > 0 {
		s.log.LogAttrs(ctx, slog.LevelInfo, "watchdog ended rollouts",
			slog.Int("abandoned", total.Abandoned), slog.Int("deadline_exceeded", total.DeadlineExceeded),
			slog.Int("retried", total.Retried))
	}
	return total, nil
}
