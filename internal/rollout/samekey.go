package rollout

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClaimPending is the answer to a claim that waited for another claim
// with the same Idempotency-Key longer than that claim's long-poll plus
// Config.SameKeySlack. It is not the client's fault: the API answers 503 with
// Retry-After, never a 4xx, which a worker would take as fatal.
var ErrClaimPending = errors.New("a claim with this Idempotency-Key is still running")

// sameKeyClaims lets exactly one claim per (tenant, agent, Idempotency-Key)
// run on this replica at a time; the others wait for it and answer what
// it answered, byte for byte. (Across replicas the store serialises claims
// sharing a key, so only one leases; a claim answered by the store from
// another replica's lease carries rotated secrets.)
type sameKeyClaims struct {
	mu      sync.Mutex
	running map[string]*keyedClaim
	slack   time.Duration // Config.SameKeySlack
	// waiting is called each time a claim starts waiting for another
	// with its key (Deps.Waiting).
	waiting func()
}

// keyedClaim is a running claim that others with its key wait for.
type keyedClaim struct {
	done chan struct{}
	// bound is how long a claim arriving now waits: the running claim's
	// long-poll plus the slack.
	bound time.Duration
	res   Claimed
	err   error
}

func newSameKeyClaims(slack time.Duration) *sameKeyClaims {
	return &sameKeyClaims{running: map[string]*keyedClaim{}, slack: slack}
}

// do runs claim unless a claim with key is running, in which case it waits
// for that one's answer, up to its wait plus the slack. A running claim
// that ends because its own caller went away answers no one: the next
// waiter runs its claim instead.
func (s *sameKeyClaims) do(ctx context.Context, key string, wait time.Duration, claim func() (Claimed, error)) (Claimed, error) {
	var expired <-chan time.Time
	for {
		s.mu.Lock()
		running, ok := s.running[key]
		if !ok {
			mine := &keyedClaim{done: make(chan struct{}), bound: wait + s.slack}
			s.running[key] = mine
			s.mu.Unlock()
			s.run(key, mine, claim)
			return mine.res, mine.err
		}
		s.mu.Unlock()
		if expired == nil {
			t := time.NewTimer(running.bound)
			defer t.Stop()
			expired = t.C
		}
		s.waiting()
		select {
		case <-running.done:
			if errors.Is(running.err, errClaimAborted) || errors.Is(running.err, context.Canceled) || errors.Is(running.err, context.DeadlineExceeded) {
				continue // its caller left; this one claims instead
			}
			return running.res, running.err
		case <-expired:
			return Claimed{}, ErrClaimPending
		case <-ctx.Done():
			return Claimed{}, ctx.Err()
		}
	}
}

// errClaimAborted is the answer of a running claim that ended without one
// (it panicked): claims waiting for it claim themselves instead.
var errClaimAborted = errors.New("the claim with this Idempotency-Key ended without an answer")

// run runs the claim registered under key and, however it ends, releases
// the key and hands its answer to the claims waiting for it.
func (s *sameKeyClaims) run(key string, mine *keyedClaim, claim func() (Claimed, error)) {
	mine.err = errClaimAborted
	defer func() {
		s.mu.Lock()
		delete(s.running, key)
		s.mu.Unlock()
		close(mine.done)
	}()
	mine.res, mine.err = claim()
}
