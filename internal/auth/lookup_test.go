package auth

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// gatedKeys is a key store whose lookups wait at a gate, so a test can
// hold one in flight. revoked flips the key's state for lookups that
// start afterwards.
type gatedKeys struct {
	gate    chan struct{}
	started chan struct{}
	calls   atomic.Int64
	revoked atomic.Bool
}

func (g *gatedKeys) KeyByHash(ctx context.Context, _ [32]byte) (gyre.APIKey, error) {
	g.calls.Add(1)
	revoked := g.revoked.Load() // the state as of the lookup's start
	g.started <- struct{}{}
	<-g.gate
	if revoked {
		return gyre.APIKey{}, store.ErrNotFound
	}
	return gyre.APIKey{ID: "k1", TenantID: "t1", Role: gyre.RoleAgent}, nil
}

// TestAuthenticate_RevocationIsSeenByEveryLaterRequest: requests that
// arrive while a lookup of their key is in flight never take its answer
// (read before they arrived), so a key revoked before they arrived is
// refused; they share the one lookup that starts after them.
func TestAuthenticate_RevocationIsSeenByEveryLaterRequest(t *testing.T) {
	t.Parallel()
	keys := &gatedKeys{gate: make(chan struct{}), started: make(chan struct{}, 16)}
	a := NewAuthenticator(keys)
	secret, _, _ := NewKey()
	auth := func() error {
		r := httptest.NewRequest("POST", "/agents/a/claim", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		_, err := a.Authenticate(r)
		return err
	}

	first := make(chan error, 1)
	go func() { first <- auth() }()
	<-keys.started // the first lookup read the key live and is in flight
	keys.revoked.Store(true)

	const later = 8
	var wg sync.WaitGroup
	errs := make([]error, later)
	for i := range later {
		wg.Go(func() { errs[i] = auth() })
	}
	// Let the later requests queue behind the lookup in flight.
	for queued := 0; queued < later; time.Sleep(time.Millisecond) {
		a.keys.mu.Lock()
		if next := a.keys.lines[Hash(secret)]; next != nil {
			queued = next.waiters
		}
		a.keys.mu.Unlock()
	}
	close(keys.gate)
	if err := <-first; err != nil {
		t.Fatalf("the request whose lookup began before the revocation: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if e, ok := errors.AsType[*gyre.Error](err); !ok || e.Code != gyre.CodeUnauthorized {
			t.Fatalf("request %d, arrived after the revocation: err = %v, want 401 unauthorized", i, err)
		}
	}
	if n := keys.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2: the one in flight and one shared by the %d that queued behind it", n, later)
	}
}

// TestAuthenticate_GivingUpWhileQueuedReturnsAtOnce: a request cancelled
// while its lookup waits behind another returns its context's error.
func TestAuthenticate_GivingUpWhileQueuedReturnsAtOnce(t *testing.T) {
	t.Parallel()
	keys := &gatedKeys{gate: make(chan struct{}), started: make(chan struct{}, 16)}
	a := NewAuthenticator(keys)
	secret, _, _ := NewKey()
	go func() {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		_, _ = a.Authenticate(r)
	}()
	<-keys.started
	defer close(keys.gate)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	if _, err := a.Authenticate(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
