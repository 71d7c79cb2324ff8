package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// Concurrent claims sharing one Idempotency-Key lease once between them:
// every one answers 200 with the same rollouts and nothing else leaves the
// queue, on both stores (issue 11, defect 3: on PostgreSQL six such claims
// with max_rollouts 2 leased up to eight, all but the last answer's
// orphaned until the watchdog abandoned them, spending an attempt).
func TestClaim_ConcurrentSameKeyClaimsLeaseOnce(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		const rounds, claims = 5, 16
		e.batch(e.tasks(rounds*claims*2), "")
		// Each round is 16 claims racing with one key; several rounds
		// give a race on the old code more than one chance to show.
		for round := range rounds {
			key := fmt.Sprintf("same-key-%d", round)
			answers := make([]claimResp, claims)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range claims {
				wg.Go(func() {
					<-start
					answers[i] = e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":2}`, "Idempotency-Key", key)
				})
			}
			close(start)
			wg.Wait()
			var want []string
			for i, a := range answers {
				if a.status != http.StatusOK {
					t.Fatalf("round %d claim %d: %d %s, want 200", round, i, a.status, a.body)
				}
				var got []string
				for _, ro := range a.claim.Rollouts {
					got = append(got, ro.RolloutID)
				}
				if want == nil {
					want = got
				}
				if len(got) != 2 || !slices.Equal(got, want) {
					t.Errorf("round %d claim %d answered %v, want the same two rollouts as the others, %v", round, i, got, want)
				}
			}
			r := e.do(http.MethodGet, "/api/v1/rollouts?state=leased&limit=500", e.admin, nil)
			var leased list[map[string]any]
			if err := json.Unmarshal(r.body, &leased); r.status != http.StatusOK || err != nil {
				t.Fatalf("list leased rollouts: %d %s %v", r.status, r.body, err)
			}
			if want := 2 * (round + 1); len(leased.Items) != want {
				t.Fatalf("after round %d, %d rollouts are leased by claims sharing a key per round, want %d", round, len(leased.Items), want)
			}
		}
	})
}

// heldClaims is a store whose claims signal entered, then wait until
// release is closed.
type heldClaims struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (h heldClaims) Claim(ctx context.Context, c store.ClaimRequest) (store.ClaimResult, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return store.ClaimResult{}, ctx.Err()
	}
	return h.Store.Claim(ctx, c)
}

// A claim that waited for a running claim with its Idempotency-Key longer
// than that claim's long-poll plus the slack answers 503 with Retry-After
// — never a 4xx, which gyre's worker would take as fatal — and a retry
// with the key, once the running claim answered, returns its rollouts.
func TestClaim_SameKeyClaimPendingIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		held := heldClaims{entered: make(chan struct{}, 1), release: make(chan struct{})}
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart),
			withRollouts(rollout.Config{SameKeySlack: time.Millisecond}),
			withRolloutStore(func(st store.Store) store.Store { held.Store = st; return held }))
		e.batch(e.tasks(3), "")
		first := make(chan claimResp, 1)
		go func() { first <- e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":2}`, "Idempotency-Key", "k") }()
		<-held.entered // the first claim runs, held in the store until release
		second := e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":2}`, "Idempotency-Key", "k")
		second.wantError(t, http.StatusServiceUnavailable, gyre.CodeUnavailable, "")
		if ra := second.header.Get("Retry-After"); ra != "1" {
			t.Fatalf("Retry-After = %q, want 1", ra)
		}
		close(held.release)
		a := <-first
		if a.status != http.StatusOK || len(a.claim.Rollouts) != 2 {
			t.Fatalf("the held claim: %d %s", a.status, a.body)
		}
		go func() { <-held.entered }()
		b := e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":2}`, "Idempotency-Key", "k")
		if b.status != http.StatusOK || len(b.claim.Rollouts) != 2 || b.claim.Rollouts[0].RolloutID != a.claim.Rollouts[0].RolloutID {
			t.Fatalf("the retry: %d %s, want the held claim's rollouts", b.status, b.body)
		}
	})
}
