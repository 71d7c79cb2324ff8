package store

import (
	"context"
	"time"
)

// JobWaker wakes a job consumer: its Wake makes the consumer look for due
// jobs now instead of at its next tick. The zero value is not usable; use
// NewJobWaker.
type JobWaker struct{ c chan struct{} }

// NewJobWaker returns a waker.
func NewJobWaker() JobWaker { return JobWaker{c: make(chan struct{}, 1)} }

// Wake asks for a look at due jobs now; it never blocks.
func (w JobWaker) Wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// DrainJobs is the loop of a durable job queue's consumer: every `every`,
// and whenever woken, it calls once until once takes no job or fails, and
// it returns when ctx ends. once reports how many jobs it took; its errors
// go to failed (never while ctx is ending), and the next look comes at the
// next tick or wake, so a failing store is not hammered.
func DrainJobs(ctx context.Context, every time.Duration, w JobWaker, once func(context.Context) (int, error), failed func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := once(ctx)
			if err != nil && ctx.Err() == nil {
				failed(err)
			}
			if n == 0 || err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.c:
		}
	}
}
