package eval

import (
	"context"
	"sync"
)

// growAfter is how many successes grow a halved limit back by one (SPEC
// §7.2).
const growAfter = 10

// limiter is the runner's adaptive concurrency limit: at most limit runs
// hold a slot at once. Backpressure halves the limit (never below 1); every
// growAfter successes grow it back by one, up to max. A run holds its slot
// until it reaches a terminal status, so the harness never sees more runs
// than the limit.
type limiter struct {
	mu        sync.Mutex
	max       int
	limit     int
	inflight  int
	successes int
	peak      int
	changed   chan struct{}
}

func newLimiter(max int) *limiter {
	if max < 1 {
		max = 1
	}
	return &limiter{max: max, limit: max, changed: make(chan struct{})}
}

// broadcast wakes every waiter; the caller holds mu.
func (l *limiter) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// acquire takes a slot, waiting while the limit is reached.
func (l *limiter) acquire(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.inflight < l.limit {
			l.inflight++
			l.peak = max(l.peak, l.inflight)
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives a slot back.
func (l *limiter) release() {
	l.mu.Lock()
	l.inflight--
	l.broadcast()
	l.mu.Unlock()
}

// backpressure halves the limit.
func (l *limiter) backpressure() {
	l.mu.Lock()
	l.limit = max(1, l.limit/2)
	l.successes = 0
	l.mu.Unlock()
}

// success counts a successful run creation; every growAfter of them grow
// a reduced limit by one.
func (l *limiter) success() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit >= l.max {
		return
	}
	l.successes++
	if l.successes >= growAfter {
		l.successes = 0
		l.limit++
		l.broadcast()
	}
}

// state returns the current limit and the most slots ever held at once.
func (l *limiter) state() (limit, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.peak
}
