package storetest

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// UI sessions (SPEC §3, §11): a session lives while it is unexpired, not
// signed out, and its key is live.
func runUISessions(t *testing.T, open Opener) {
	t.Run("UISessionStandsForItsKeyUntilExpiry", func(t *testing.T) { t.Parallel(); testUISessionExpiry(t, open) })
	t.Run("UISessionDiesWithItsKey", func(t *testing.T) { t.Parallel(); testUISessionDiesWithKey(t, open) })
	t.Run("UISessionSignOut", func(t *testing.T) { t.Parallel(); testUISessionSignOut(t, open) })
	t.Run("UISessionNeedsALiveKeyOfTheTenant", func(t *testing.T) { t.Parallel(); testUISessionNeedsLiveKey(t, open) })
}

type sessionFixture struct {
	s      store.Store
	clk    *clock.Fake
	tenant gyre.Tenant
	key    gyre.APIKey
}

func newSessionFixture(t *testing.T, open Opener) *sessionFixture {
	t.Helper()
	clk := clock.NewFake(Start)
	s := open(t, clk)
	tn := mustTenant(t, s, "acme")
	k := mustKey(t, s, store.NewKey{TenantID: tn.ID, Role: gyre.RoleReader, Hash: sha256.Sum256([]byte("reader"))})
	return &sessionFixture{s: s, clk: clk, tenant: tn, key: k}
}

func (f *sessionFixture) create(t *testing.T, token string, ttl time.Duration) store.UISession {
	t.Helper()
	u, err := f.s.CreateUISession(t.Context(), store.NewUISession{
		TokenHash: sha256.Sum256([]byte(token)), TenantID: f.tenant.ID, KeyID: f.key.ID, TTL: ttl})
	if err != nil {
		t.Fatalf("CreateUISession: %v", err)
	}
	return u
}

func (f *sessionFixture) lookup(t *testing.T, token string) (store.UISession, error) {
	return f.s.UISessionByHash(t.Context(), sha256.Sum256([]byte(token)))
}

func testUISessionExpiry(t *testing.T, open Opener) {
	f := newSessionFixture(t, open)
	created := f.create(t, "tok", 12*time.Hour)
	want := store.UISession{TenantID: f.tenant.ID, KeyID: f.key.ID, Role: gyre.RoleReader,
		CreatedAt: Start.Truncate(time.Microsecond), ExpiresAt: Start.Add(12 * time.Hour).Truncate(time.Microsecond)}
	if created != want {
		t.Errorf("CreateUISession = %+v, want %+v", created, want)
	}
	f.clk.Advance(12*time.Hour - time.Microsecond)
	got, err := f.lookup(t, "tok")
	if err != nil || got != want {
		t.Errorf("UISessionByHash just before expiry = %+v, %v; want %+v", got, err, want)
	}
	f.clk.Advance(time.Microsecond)
	if _, err := f.lookup(t, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UISessionByHash at expiry: %v, want ErrNotFound", err)
	}
	if _, err := f.lookup(t, "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UISessionByHash(unknown): %v, want ErrNotFound", err)
	}
	// An expired session is swept by a later sign-in, and a swept token
	// stays dead.
	f.create(t, "tok2", time.Hour)
	if _, err := f.lookup(t, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UISessionByHash after sweep: %v, want ErrNotFound", err)
	}
}

func testUISessionDiesWithKey(t *testing.T, open Opener) {
	f := newSessionFixture(t, open)
	f.create(t, "tok", time.Hour)
	if _, err := f.lookup(t, "tok"); err != nil {
		t.Fatalf("UISessionByHash: %v", err)
	}
	if err := f.s.RevokeKey(t.Context(), f.tenant.ID, f.key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lookup(t, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UISessionByHash after the key was revoked: %v, want ErrNotFound", err)
	}
}

func testUISessionSignOut(t *testing.T, open Opener) {
	f := newSessionFixture(t, open)
	f.create(t, "a", time.Hour)
	f.create(t, "b", time.Hour)
	if err := f.s.DeleteUISession(t.Context(), sha256.Sum256([]byte("a"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lookup(t, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("signed-out session: %v, want ErrNotFound", err)
	}
	if _, err := f.lookup(t, "b"); err != nil {
		t.Errorf("another session of the same key after a sign-out: %v, want it live", err)
	}
	if err := f.s.DeleteUISession(t.Context(), sha256.Sum256([]byte("a"))); err != nil {
		t.Errorf("deleting a deleted session: %v, want nil", err)
	}
}

func testUISessionNeedsLiveKey(t *testing.T, open Opener) {
	f := newSessionFixture(t, open)
	other := mustTenant(t, f.s, "other")
	revoked := mustKey(t, f.s, store.NewKey{TenantID: f.tenant.ID, Role: gyre.RoleAdmin, Hash: sha256.Sum256([]byte("revoked"))})
	if err := f.s.RevokeKey(t.Context(), f.tenant.ID, revoked.ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tenant, key string
	}{
		{"revoked key", f.tenant.ID, revoked.ID},
		{"another tenant's key", other.ID, f.key.ID},
		{"unknown key", f.tenant.ID, "0190b7a1-0000-7000-8000-000000000000"},
	} {
		_, err := f.s.CreateUISession(t.Context(), store.NewUISession{
			TokenHash: sha256.Sum256([]byte(tc.name)), TenantID: tc.tenant, KeyID: tc.key, TTL: time.Hour})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: CreateUISession: %v, want ErrNotFound", tc.name, err)
		}
	}
}
