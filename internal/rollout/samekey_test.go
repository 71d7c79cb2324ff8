package rollout

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

// claimStore is a store whose Claim blocks until release is closed (or
// the claim's context ends) and then leases one fresh rollout.
type claimStore struct {
	store.Store
	release chan struct{}
	calls   atomic.Int32
}

func (s *claimStore) Claim(ctx context.Context, c store.ClaimRequest) (store.ClaimResult, error) {
	s.calls.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return store.ClaimResult{}, ctx.Err()
	}
	now := time.Now()
	deadline, expires := now.Add(10*time.Minute), now.Add(c.Lease)
	r := store.Rollout{ID: uuid.NewString(), TaskID: uuid.NewString(), BatchID: uuid.NewString(), GroupID: uuid.NewString(),
		Attempt: 1, TurnInput: "q", Deadline: &deadline, LeaseExpiresAt: &expires, ClaimedAt: &now}
	return store.ClaimResult{Rollouts: []store.Claimed{{Rollout: r}}, Now: now}, nil
}

func newSameKeyService(t *testing.T, st store.Store) *Service {
	t.Helper()
	s, err := New(Config{PublicURL: "https://gyre.example.com"}, Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sameKeyParams(wait time.Duration) ClaimParams {
	return ClaimParams{TenantID: "t", AgentID: "agent-1", KeyID: "k", Wait: wait, IdempotencyKey: "same"}
}

// While a claim runs, claims with its Idempotency-Key wait for it and
// answer exactly what it answered; the store is asked once.
func TestSameKeyClaimsWaitForTheRunningOneAndShareItsAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &claimStore{release: make(chan struct{})}
		s := newSameKeyService(t, st)
		var waiting atomic.Int32
		s.sameKey.waiting = func() { waiting.Add(1) }
		const claims = 16
		answers := make([]Claimed, claims)
		errs := make([]error, claims)
		var wg sync.WaitGroup
		wg.Go(func() { answers[0], errs[0] = s.Claim(t.Context(), sameKeyParams(30*time.Second)) })
		synctest.Wait() // the first claim is in the store
		for i := 1; i < claims; i++ {
			wg.Go(func() { answers[i], errs[i] = s.Claim(t.Context(), sameKeyParams(0)) })
		}
		synctest.Wait()
		if n := waiting.Load(); n != claims-1 {
			t.Fatalf("%d claims wait for the running one, want %d", n, claims-1)
		}
		close(st.release)
		wg.Wait()
		if n := st.calls.Load(); n != 1 {
			t.Fatalf("the store was asked %d times, want once", n)
		}
		for i := range claims {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if !bytes.Equal(answers[i].Body, answers[0].Body) || len(answers[i].Response.Rollouts) != 1 {
				t.Fatalf("claim %d answered %s, want the running claim's %s", i, answers[i].Body, answers[0].Body)
			}
		}
		// Once it has answered, the key no longer holds anyone back.
		if _, ok := s.sameKey.running["t\x00agent-1\x00same"]; ok {
			t.Fatal("the finished claim is still registered as running")
		}
	})
}

// A claim waits for the running one with its key no longer than that
// claim's long-poll plus SameKeySlack, then answers ErrClaimPending.
func TestSameKeyClaimWaitsTheRunningPollPlusSlackThenPending(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &claimStore{release: make(chan struct{})}
		s := newSameKeyService(t, st)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _, _ = s.Claim(ctx, sameKeyParams(2*time.Second)) }()
		synctest.Wait()
		start := time.Now()
		_, err := s.Claim(t.Context(), sameKeyParams(0))
		if !errors.Is(err, ErrClaimPending) {
			t.Fatalf("err = %v, want ErrClaimPending", err)
		}
		if waited, want := time.Since(start), 2*time.Second+s.cfg.SameKeySlack; waited != want {
			t.Fatalf("waited %v, want the running claim's wait plus the slack, %v", waited, want)
		}
		if n := st.calls.Load(); n != 1 {
			t.Fatalf("the store was asked %d times, want once", n)
		}
	})
}

// A running claim whose caller went away answers no one: a claim waiting
// with its key claims instead.
func TestSameKeyClaimTakesOverWhenTheRunningCallerLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &claimStore{release: make(chan struct{})}
		s := newSameKeyService(t, st)
		ctx, cancel := context.WithCancel(t.Context())
		go func() { _, _ = s.Claim(ctx, sameKeyParams(0)) }()
		synctest.Wait()
		done := make(chan error, 1)
		var got Claimed
		go func() {
			var err error
			got, err = s.Claim(t.Context(), sameKeyParams(0))
			done <- err
		}()
		synctest.Wait()
		cancel()
		synctest.Wait() // the second claim is now in the store
		close(st.release)
		if err := <-done; err != nil {
			t.Fatalf("the waiting claim: %v", err)
		}
		if n := st.calls.Load(); n != 2 || len(got.Response.Rollouts) != 1 {
			t.Fatalf("store asked %d times, answer %s: want the waiting claim to lease itself", n, got.Body)
		}
	})
}

// A running claim that panics releases its key: a claim waiting for it
// claims itself, and later claims with the key are not held back.
func TestSameKeyClaimTakesOverWhenTheRunningOnePanics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSameKeyService(t, &claimStore{release: make(chan struct{})})
		release := make(chan struct{})
		go func() {
			defer func() { _ = recover() }()
			_, _ = s.sameKey.do(t.Context(), "k", 0, func() (Claimed, error) {
				<-release
				panic("boom")
			})
		}()
		synctest.Wait()
		done := make(chan error, 1)
		go func() {
			_, err := s.sameKey.do(t.Context(), "k", 0, func() (Claimed, error) { return Claimed{Body: []byte("mine")}, nil })
			done <- err
		}()
		synctest.Wait()
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("the waiting claim after a panic: %v", err)
		}
		if _, ok := s.sameKey.running["k"]; ok {
			t.Fatal("the key is still held after the claims ended")
		}
	})
}
