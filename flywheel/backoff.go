package flywheel

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is exponential backoff with full jitter for transport errors:
// the n-th consecutive failure waits a random delay in [d/2, d] with
// d = min(base·2ⁿ, max). A Retry-After from the server wins when longer.
type backoff struct {
	base, max time.Duration
	failures  int
}

// next returns the delay before the next attempt after a failure whose
// server asked for retryAfter (0 when it did not).
func (b *backoff) next(retryAfter time.Duration) time.Duration {
	d := b.base
	for i := 0; i < b.failures && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.failures++
	j := d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	return max(j, retryAfter)
}

// reset forgets past failures after a success.
func (b *backoff) reset() { b.failures = 0 }

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
