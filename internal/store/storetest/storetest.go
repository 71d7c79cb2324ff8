// Package storetest is the conformance suite of store.Store, written once
// and run against every engine (sqlitestore, pgstore), plus the engine-level
// tests (migrations, concurrency, crashes) and the PostgreSQL test
// environment helpers other packages' tests reuse.
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// Opener opens a fresh, empty, migrated store for one test, whose stored
// times come from clk. It closes the store when t ends.
type Opener func(t *testing.T, clk clock.Clock) store.Store

// Start is the fake time every conformance test begins at. It has
// sub-microsecond digits, so tests see that stored times are truncated to
// microseconds.
var Start = time.Date(2031, 3, 14, 15, 9, 26, 535897932, time.UTC)

// Run runs the conformance suite: every method and rule of store.Store.
// Each subtest opens its own store.
func Run(t *testing.T, open Opener) {
	t.Run("Engine", func(t *testing.T) {
		t.Parallel()
		s := open(t, clock.NewFake(Start))
		if e := s.Engine(); e != "sqlite" && e != "postgres" {
			t.Errorf("Engine() = %q, want sqlite or postgres", e)
		}
		if err := s.Ping(t.Context()); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})
	t.Run("Tenants", func(t *testing.T) { t.Parallel(); testTenants(t, open) })
	t.Run("TenantNotFound", func(t *testing.T) { t.Parallel(); testTenantNotFound(t, open) })
	t.Run("ListTenants", func(t *testing.T) { t.Parallel(); testListTenants(t, open) })
	t.Run("Keys", func(t *testing.T) { t.Parallel(); testKeys(t, open) })
	t.Run("KeyRejects", func(t *testing.T) { t.Parallel(); testKeyRejects(t, open) })
	t.Run("RevokeKey", func(t *testing.T) { t.Parallel(); testRevokeKey(t, open) })
	t.Run("TenantIsolation", func(t *testing.T) { t.Parallel(); testTenantIsolation(t, open) })
	t.Run("ListKeysPages", func(t *testing.T) { t.Parallel(); testListKeysPages(t, open) })
	t.Run("ListKeysBadCursor", func(t *testing.T) { t.Parallel(); testListKeysBadCursor(t, open) })
	t.Run("CursorsAreBoundToTenantListAndFilter", func(t *testing.T) {
		t.Parallel()
		testCursorsAreBoundToTenantListAndFilter(t, open)
	})
	t.Run("Bootstrap", func(t *testing.T) { t.Parallel(); testBootstrap(t, open) })
	t.Run("BootstrapConcurrent", func(t *testing.T) { t.Parallel(); testBootstrapConcurrent(t, open) })
	t.Run("BootstrapAtomic", func(t *testing.T) { t.Parallel(); testBootstrapAtomic(t, open) })
	t.Run("ConcurrentCreates", func(t *testing.T) { t.Parallel(); testConcurrentCreates(t, open) })
	t.Run("CanceledContext", func(t *testing.T) { t.Parallel(); testCanceledContext(t, open) })
	t.Run("TextHoldingNUL", func(t *testing.T) { t.Parallel(); testTextHoldingNUL(t, open) })

	// Each concept's conformance tests live in their own file.
	t.Run("Turns", func(t *testing.T) { t.Parallel(); runTurns(t, open) })
	t.Run("Catalog", func(t *testing.T) { t.Parallel(); runCatalog(t, open) })
	t.Run("TurnTasks", func(t *testing.T) { t.Parallel(); runTurnTasks(t, open) })
	t.Run("Rollouts", func(t *testing.T) { t.Parallel(); runRollouts(t, open) })
	t.Run("Batches", func(t *testing.T) { t.Parallel(); runBatches(t, open) })
	t.Run("Groups", func(t *testing.T) { t.Parallel(); runGroups(t, open) })
	t.Run("Gateway", func(t *testing.T) { t.Parallel(); runGateway(t, open) })
	t.Run("Experiments", func(t *testing.T) { t.Parallel(); runExperiments(t, open) })
	t.Run("Grading", func(t *testing.T) { t.Parallel(); runGrading(t, open) })
	t.Run("Promotion", func(t *testing.T) { t.Parallel(); runPromotion(t, open) })
	t.Run("Promotions", func(t *testing.T) { t.Parallel(); runPromotions(t, open) })
	t.Run("Recorded", func(t *testing.T) { t.Parallel(); runRecorded(t, open) })
	t.Run("Datasets", func(t *testing.T) { t.Parallel(); runDatasets(t, open) })
	t.Run("Holdout", func(t *testing.T) { t.Parallel(); runHoldout(t, open) })
	t.Run("JobLeases", func(t *testing.T) { t.Parallel(); runJobLeases(t, open) })
	t.Run("Regrade", func(t *testing.T) { t.Parallel(); runRegrade(t, open) })
	t.Run("RolloutFilters", func(t *testing.T) { t.Parallel(); runRolloutFilters(t, open) })
	t.Run("UIStats", func(t *testing.T) { t.Parallel(); runUIStats(t, open) })
	t.Run("UISessions", func(t *testing.T) { t.Parallel(); runUISessions(t, open) })
	t.Run("Harnesses", func(t *testing.T) { t.Parallel(); runHarnesses(t, open) })
}

// Hash returns a distinct key hash for a test-chosen secret.
func Hash(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

func us(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// checkID fails unless id is a UUIDv7 string.
func checkID(t *testing.T, what, id string) {
	t.Helper()
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 || u.String() != id {
		t.Errorf("%s id %q is not a canonical UUIDv7", what, id)
	}
}

func mustTenant(t *testing.T, s store.Store, name string) gyre.Tenant {
	t.Helper()
	tn, err := s.CreateTenant(t.Context(), name)
	if err != nil {
		t.Fatalf("CreateTenant(%q): %v", name, err)
	}
	return tn
}

func mustKey(t *testing.T, s store.Store, k store.NewKey) gyre.APIKey {
	t.Helper()
	key, err := s.CreateKey(t.Context(), k)
	if err != nil {
		t.Fatalf("CreateKey(%+v): %v", k, err)
	}
	return key
}

func testTenants(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()

	tn := mustTenant(t, s, "acme")
	checkID(t, "tenant", tn.ID)
	want := gyre.Tenant{ID: tn.ID, Name: "acme", CreatedAt: us(Start)}
	if diff := cmp.Diff(want, tn); diff != "" {
		t.Errorf("CreateTenant (-want +got):\n%s", diff)
	}
	if tn.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt location = %v, want UTC", tn.CreatedAt.Location())
	}
	got, err := s.TenantByID(ctx, tn.ID)
	if err != nil {
		t.Fatalf("TenantByID: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TenantByID (-want +got):\n%s", diff)
	}
	got, err = s.TenantByName(ctx, "acme")
	if err != nil {
		t.Fatalf("TenantByName: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TenantByName (-want +got):\n%s", diff)
	}

	clk.Advance(time.Second)
	if _, err := s.CreateTenant(ctx, "acme"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateTenant(duplicate) error = %v, want ErrConflict", err)
	}
	// Names are exact: case and surrounding space make other names.
	for _, name := range []string{"Acme", "ACME", "acme "} {
		if _, err := s.CreateTenant(ctx, name); err != nil {
			t.Errorf("CreateTenant(%q): %v", name, err)
		}
	}
	if _, err := s.CreateTenant(ctx, ""); err == nil || errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateTenant(\"\") error = %v, want a validation error", err)
	}
	all, err := s.ListTenants(ctx)
	if err != nil {
		t.Fatalf("ListTenants: %v", err)
	}
	if len(all) != 4 {
		t.Errorf("ListTenants has %d tenants, want 4 (acme, Acme, ACME, \"acme \")", len(all))
	}
}

func testTenantNotFound(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	mustTenant(t, s, "acme")
	for _, id := range []string{"", "not-a-uuid", uuid.Must(uuid.NewV7()).String(), "acme"} {
		if _, err := s.TenantByID(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("TenantByID(%q) error = %v, want ErrNotFound", id, err)
		}
	}
	for _, name := range []string{"", "Acme", "nope", "acme%", "acm_"} {
		if _, err := s.TenantByName(ctx, name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("TenantByName(%q) error = %v, want ErrNotFound", name, err)
		}
	}
}

func testListTenants(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	got, err := s.ListTenants(t.Context())
	if err != nil || len(got) != 0 {
		t.Fatalf("ListTenants on an empty store = %v, %v; want none", got, err)
	}
	var want []gyre.Tenant
	for _, name := range []string{"zeta", "alpha", "mid"} {
		want = append(want, mustTenant(t, s, name))
		clk.Advance(time.Millisecond)
	}
	got, err = s.ListTenants(t.Context())
	if err != nil {
		t.Fatalf("ListTenants: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListTenants is not oldest first (-want +got):\n%s", diff)
	}
}

func testKeys(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")

	tests := []struct {
		name   string
		role   gyre.Role
		agents []string
	}{
		{"admin", gyre.RoleAdmin, nil},
		{"reader", gyre.RoleReader, nil},
		{"evaluator", gyre.RoleEvaluator, nil},
		{"agent-any", gyre.RoleAgent, nil},
		{"agent-one", gyre.RoleAgent, []string{"support-bot"}},
		{"agent-many", gyre.RoleAgent, []string{"zeta", "alpha", "mid", "alpha.v2_x-1"}},
		{"inference", gyre.RoleInference, []string{"b", "a"}},
		{"unicode name ✓", gyre.RoleReader, nil},
	}
	var created []gyre.APIKey
	for _, tc := range tests {
		clk.Advance(time.Second)
		key := mustKey(t, s, store.NewKey{
			TenantID: tn.ID, Name: tc.name, Role: tc.role, AgentIDs: tc.agents, Hash: Hash(tc.name),
		})
		checkID(t, "key", key.ID)
		want := gyre.APIKey{
			ID: key.ID, TenantID: tn.ID, Name: tc.name, Role: tc.role,
			AgentIDs: tc.agents, CreatedAt: us(clk.Now()),
		}
		if diff := cmp.Diff(want, key); diff != "" {
			t.Errorf("CreateKey %s (-want +got):\n%s", tc.name, diff)
		}
		got, err := s.KeyByHash(ctx, Hash(tc.name))
		if err != nil {
			t.Fatalf("KeyByHash %s: %v", tc.name, err)
		}
		// cmp tells nil from empty: nil must stay nil (every agent).
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("KeyByHash %s (-want +got):\n%s", tc.name, diff)
		}
		created = append(created, key)
	}
	listed, next, err := s.ListKeys(ctx, tn.ID, store.Page{Limit: 100})
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	if next != "" {
		t.Errorf("ListKeys next = %q after the only page, want empty", next)
	}
	if diff := cmp.Diff(created, listed); diff != "" {
		t.Errorf("ListKeys (-want +got):\n%s", diff)
	}
	if _, err := s.KeyByHash(ctx, Hash("never issued")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KeyByHash(unknown) error = %v, want ErrNotFound", err)
	}
}

func testKeyRejects(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	mustKey(t, s, store.NewKey{TenantID: tn.ID, Role: gyre.RoleAdmin, Hash: Hash("taken")})

	tests := []struct {
		name     string
		key      store.NewKey
		sentinel error // nil: any error that is neither ErrConflict nor ErrNotFound
	}{
		{"empty allow-list", store.NewKey{TenantID: tn.ID, Role: gyre.RoleAgent, AgentIDs: []string{}, Hash: Hash("a")}, nil},
		{"unknown role", store.NewKey{TenantID: tn.ID, Role: "root", Hash: Hash("b")}, nil},
		{"empty role", store.NewKey{TenantID: tn.ID, Hash: Hash("c")}, nil},
		{"unknown tenant", store.NewKey{TenantID: uuid.Must(uuid.NewV7()).String(), Role: gyre.RoleAdmin, Hash: Hash("d")}, store.ErrNotFound},
		{"no tenant", store.NewKey{Role: gyre.RoleAdmin, Hash: Hash("e")}, store.ErrNotFound},
		{"duplicate hash", store.NewKey{TenantID: tn.ID, Role: gyre.RoleReader, Hash: Hash("taken")}, store.ErrConflict},
		{"duplicate hash in another tenant", store.NewKey{TenantID: other.ID, Role: gyre.RoleReader, Hash: Hash("taken")}, store.ErrConflict},
	}
	for _, tc := range tests {
		_, err := s.CreateKey(ctx, tc.key)
		switch {
		case err == nil:
			t.Errorf("%s: CreateKey succeeded, want an error", tc.name)
		case tc.sentinel != nil && !errors.Is(err, tc.sentinel):
			t.Errorf("%s: CreateKey error = %v, want %v", tc.name, err, tc.sentinel)
		case tc.sentinel == nil && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)):
			t.Errorf("%s: CreateKey error = %v, want a validation error", tc.name, err)
		}
	}
	for _, tid := range []string{tn.ID, other.ID} {
		keys, _, err := s.ListKeys(ctx, tid, store.Page{})
		if err != nil {
			t.Fatalf("ListKeys: %v", err)
		}
		if want := map[string]int{tn.ID: 1, other.ID: 0}[tid]; len(keys) != want {
			t.Errorf("tenant %s has %d keys after refused creates, want %d", tid, len(keys), want)
		}
	}
}

func testRevokeKey(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	key := mustKey(t, s, store.NewKey{TenantID: tn.ID, Name: "ci", Role: gyre.RoleAgent, AgentIDs: []string{"bot"}, Hash: Hash("ci")})
	keep := mustKey(t, s, store.NewKey{TenantID: tn.ID, Name: "keep", Role: gyre.RoleReader, Hash: Hash("keep")})

	clk.Advance(time.Hour)
	revokedAt := us(clk.Now())
	if err := s.RevokeKey(ctx, tn.ID, key.ID); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if _, err := s.KeyByHash(ctx, Hash("ci")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KeyByHash(revoked) error = %v, want ErrNotFound", err)
	}
	if _, err := s.KeyByHash(ctx, Hash("keep")); err != nil {
		t.Errorf("KeyByHash(other key) after revoking one: %v", err)
	}
	// Revoking again is not an error and keeps the first revocation time.
	clk.Advance(time.Hour)
	if err := s.RevokeKey(ctx, tn.ID, key.ID); err != nil {
		t.Errorf("RevokeKey again: %v", err)
	}
	keys, _, err := s.ListKeys(ctx, tn.ID, store.Page{})
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	key.RevokedAt = &revokedAt
	if diff := cmp.Diff([]gyre.APIKey{key, keep}, keys); diff != "" {
		t.Errorf("ListKeys after revoking (-want +got):\n%s", diff)
	}
	if len(keys) == 2 && !keys[0].Revoked() {
		t.Error("revoked key does not report Revoked()")
	}
	for _, id := range []string{"", "nope", uuid.Must(uuid.NewV7()).String()} {
		if err := s.RevokeKey(ctx, tn.ID, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("RevokeKey(%q) error = %v, want ErrNotFound", id, err)
		}
	}
}

func testTenantIsolation(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	b := mustTenant(t, s, "b")
	ka := mustKey(t, s, store.NewKey{TenantID: a.ID, Role: gyre.RoleAdmin, Hash: Hash("a-admin")})
	kb := mustKey(t, s, store.NewKey{TenantID: b.ID, Role: gyre.RoleAdmin, Hash: Hash("b-admin")})

	// A foreign tenant cannot revoke the key, nor learn that it exists.
	if err := s.RevokeKey(ctx, b.ID, ka.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeKey(foreign tenant) error = %v, want ErrNotFound", err)
	}
	if err := s.RevokeKey(ctx, uuid.Must(uuid.NewV7()).String(), ka.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeKey(unknown tenant) error = %v, want ErrNotFound", err)
	}
	if got, err := s.KeyByHash(ctx, Hash("a-admin")); err != nil || got.Revoked() {
		t.Errorf("key after a foreign revoke = %+v, %v; want it live", got, err)
	}
	for tid, want := range map[string][]gyre.APIKey{a.ID: {ka}, b.ID: {kb}, "unknown": nil, "": nil} {
		keys, next, err := s.ListKeys(ctx, tid, store.Page{})
		if err != nil || next != "" {
			t.Errorf("ListKeys(%q) = next %q, err %v", tid, next, err)
		}
		if diff := cmp.Diff(want, keys, cmpEmptyIsNil); diff != "" {
			t.Errorf("ListKeys(%q) (-want +got):\n%s", tid, diff)
		}
	}
}

// cmpEmptyIsNil compares slices of keys without telling nil from empty
// (for whole lists, not for allow-lists).
var cmpEmptyIsNil = cmp.FilterPath(func(p cmp.Path) bool { return len(p) == 1 }, cmp.Transformer("nilKeys", func(ks []gyre.APIKey) []gyre.APIKey {
	if len(ks) == 0 {
		return nil
	}
	return ks
}))

func testListKeysPages(t *testing.T, open Opener) {
	tests := []struct {
		keys, limit int
		pageSize    int // what each full page holds
	}{
		{keys: 0, limit: 5, pageSize: 5},
		{keys: 1, limit: 1, pageSize: 1},
		{keys: 6, limit: 3, pageSize: 3}, // exact multiple: no empty trailing page
		{keys: 7, limit: 3, pageSize: 3},
		{keys: 7, limit: 0, pageSize: 50}, // zero limit: the default page
		{keys: 7, limit: -1, pageSize: 50},
		{keys: 52, limit: 0, pageSize: 50},
	}
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	for i, tc := range tests {
		// Two tenants with interleaved keys: pages must hold only their own.
		mine := mustTenant(t, s, fmt.Sprintf("mine-%d", i))
		theirs := mustTenant(t, s, fmt.Sprintf("theirs-%d", i))
		var want []gyre.APIKey
		for j := range tc.keys {
			clk.Advance(time.Microsecond) // several keys may share a millisecond
			want = append(want, mustKey(t, s, store.NewKey{
				TenantID: mine.ID, Name: fmt.Sprint(j), Role: gyre.RoleReader, Hash: Hash(fmt.Sprintf("mine-%d-%d", i, j)),
			}))
			mustKey(t, s, store.NewKey{TenantID: theirs.ID, Role: gyre.RoleReader, Hash: Hash(fmt.Sprintf("theirs-%d-%d", i, j))})
		}
		if tc.keys > 2 {
			if err := s.RevokeKey(ctx, mine.ID, want[1].ID); err != nil { // revoked keys are listed too
				t.Fatal(err)
			}
			want[1].RevokedAt = new(us(clk.Now()))
		}

		var got []gyre.APIKey
		cursor, pages := "", 0
		for {
			page, next, err := s.ListKeys(ctx, mine.ID, store.Page{Limit: tc.limit, Cursor: cursor})
			if err != nil {
				t.Fatalf("%d keys, limit %d: ListKeys page %d: %v", tc.keys, tc.limit, pages, err)
			}
			pages++
			if len(page) > tc.pageSize {
				t.Errorf("%d keys, limit %d: page %d has %d keys, want at most %d", tc.keys, tc.limit, pages, len(page), tc.pageSize)
			}
			if next != "" && len(page) != tc.pageSize {
				t.Errorf("%d keys, limit %d: page %d has %d keys and a next cursor, want a full page", tc.keys, tc.limit, pages, len(page))
			}
			// The same cursor gives the same page.
			again, next2, err := s.ListKeys(ctx, mine.ID, store.Page{Limit: tc.limit, Cursor: cursor})
			if err != nil || next2 != next {
				t.Errorf("%d keys, limit %d: repeating page %d: next %q vs %q, err %v", tc.keys, tc.limit, pages, next2, next, err)
			}
			if diff := cmp.Diff(page, again); diff != "" {
				t.Errorf("%d keys, limit %d: repeating page %d (-first +second):\n%s", tc.keys, tc.limit, pages, diff)
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			if pages > tc.keys+1 {
				t.Fatalf("%d keys, limit %d: pagination does not end", tc.keys, tc.limit)
			}
			cursor = next
		}
		wantPages := max(1, (tc.keys+tc.pageSize-1)/tc.pageSize)
		if pages != wantPages {
			t.Errorf("%d keys, limit %d: %d pages, want %d", tc.keys, tc.limit, pages, wantPages)
		}
		if diff := cmp.Diff(want, got, cmpEmptyIsNil); diff != "" {
			t.Errorf("%d keys, limit %d: all pages (-want +got):\n%s", tc.keys, tc.limit, diff)
		}
	}
}

func testListKeysBadCursor(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	for i := range 3 {
		mustKey(t, s, store.NewKey{TenantID: tn.ID, Role: gyre.RoleReader, Hash: Hash(fmt.Sprint(i))})
	}
	_, next, err := s.ListKeys(t.Context(), tn.ID, store.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("ListKeys = next %q, %v; want a next cursor", next, err)
	}
	for _, c := range []string{"!!!", "a", next + "x", next[1:], "dGVuYW50OjEyMw", "Og"} {
		if _, _, err := s.ListKeys(t.Context(), tn.ID, store.Page{Limit: 1, Cursor: c}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListKeys(cursor %q) error = %v, want ErrInvalidCursor", c, err)
		}
	}
}

func adminKey(secret string) store.NewKey {
	return store.NewKey{Name: "bootstrap", Role: gyre.RoleAdmin, Hash: Hash(secret)}
}

func testBootstrap(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()

	created, key, err := s.BootstrapIfEmpty(ctx, store.Bootstrap{Key: adminKey("first")})
	if err != nil || !created {
		t.Fatalf("BootstrapIfEmpty on an empty store = %v, %v; want created", created, err)
	}
	tn, err := s.TenantByName(ctx, gyre.DefaultTenant)
	if err != nil {
		t.Fatalf("default tenant after bootstrap: %v", err)
	}
	want := gyre.APIKey{ID: key.ID, TenantID: tn.ID, Name: "bootstrap", Role: gyre.RoleAdmin, CreatedAt: us(Start)}
	if diff := cmp.Diff(want, key); diff != "" {
		t.Errorf("bootstrap key (-want +got):\n%s", diff)
	}
	if got, err := s.KeyByHash(ctx, Hash("first")); err != nil || got.ID != key.ID {
		t.Errorf("KeyByHash(bootstrap key) = %+v, %v", got, err)
	}

	created, key, err = s.BootstrapIfEmpty(ctx, store.Bootstrap{Key: adminKey("second")})
	if err != nil || created || key.ID != "" {
		t.Errorf("second BootstrapIfEmpty = %v, %+v, %v; want nothing created", created, key, err)
	}
	if _, err := s.KeyByHash(ctx, Hash("second")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second bootstrap key exists: %v", err)
	}

	// A store that already has any tenant is not empty.
	s2 := open(t, clk)
	mustTenant(t, s2, "acme")
	created, _, err = s2.BootstrapIfEmpty(ctx, store.Bootstrap{TenantName: "boot", Key: adminKey("third")})
	if err != nil || created {
		t.Errorf("BootstrapIfEmpty with a tenant = %v, %v; want nothing created", created, err)
	}
	if _, err := s2.TenantByName(ctx, "boot"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bootstrap tenant created in a non-empty store: %v", err)
	}

	// TenantName names the tenant.
	s3 := open(t, clk)
	created, key, err = s3.BootstrapIfEmpty(ctx, store.Bootstrap{TenantName: "boot", Key: adminKey("fourth")})
	if err != nil || !created {
		t.Fatalf("BootstrapIfEmpty(boot) = %v, %v", created, err)
	}
	if tn, err := s3.TenantByName(ctx, "boot"); err != nil || tn.ID != key.TenantID {
		t.Errorf("tenant boot = %+v, %v; want the key's tenant %s", tn, err, key.TenantID)
	}
}

func testBootstrapConcurrent(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	const n = 8
	type result struct {
		created bool
		key     gyre.APIKey
		err     error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			c, k, err := s.BootstrapIfEmpty(ctx, store.Bootstrap{Key: adminKey(fmt.Sprint("racer-", i))})
			results[i] = result{c, k, err}
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, r := range results {
		if r.err != nil {
			t.Errorf("racer %d: %v", i, r.err)
		}
		if r.created {
			if winner >= 0 {
				t.Errorf("racers %d and %d both created", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no racer created the bootstrap tenant")
	}
	tenants, err := s.ListTenants(ctx)
	if err != nil || len(tenants) != 1 || tenants[0].Name != gyre.DefaultTenant {
		t.Fatalf("tenants after the race = %+v, %v; want only %q", tenants, err, gyre.DefaultTenant)
	}
	keys, _, err := s.ListKeys(ctx, tenants[0].ID, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]gyre.APIKey{results[winner].key}, keys); diff != "" {
		t.Errorf("keys after the race (-want +got):\n%s", diff)
	}
	for i := range n {
		_, err := s.KeyByHash(ctx, Hash(fmt.Sprint("racer-", i)))
		if (i == winner) != (err == nil) {
			t.Errorf("racer %d key lookup: %v (winner %d)", i, err, winner)
		}
	}
}

func testBootstrapAtomic(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	bad := store.Bootstrap{Key: store.NewKey{Role: gyre.RoleAgent, AgentIDs: []string{}, Hash: Hash("bad")}}
	if created, _, err := s.BootstrapIfEmpty(ctx, bad); err == nil || created {
		t.Fatalf("BootstrapIfEmpty with an invalid key = %v, %v; want an error", created, err)
	}
	if tenants, err := s.ListTenants(ctx); err != nil || len(tenants) != 0 {
		t.Errorf("tenants after a failed bootstrap = %+v, %v; want none (one transaction)", tenants, err)
	}
	if created, _, err := s.BootstrapIfEmpty(ctx, store.Bootstrap{Key: adminKey("good")}); err != nil || !created {
		t.Errorf("BootstrapIfEmpty after a failed one = %v, %v; want created", created, err)
	}
}

func testConcurrentCreates(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*3)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tn, err := s.CreateTenant(ctx, fmt.Sprintf("t-%d-%d", w, i))
				if err != nil {
					errs <- err
					continue
				}
				if _, err := s.CreateKey(ctx, store.NewKey{TenantID: tn.ID, Role: gyre.RoleAdmin, Hash: Hash(tn.Name)}); err != nil {
					errs <- err
				}
				if _, err := s.KeyByHash(ctx, Hash(tn.Name)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if tenants, err := s.ListTenants(ctx); err != nil || len(tenants) != workers*each {
		t.Errorf("ListTenants = %d tenants, %v; want %d", len(tenants), err, workers*each)
	}
}

func testCanceledContext(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.CreateTenant(ctx, "acme"); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateTenant(canceled) error = %v, want context.Canceled", err)
	}
	if _, err := s.TenantByName(ctx, "acme"); err == nil {
		t.Error("TenantByName(canceled) succeeded")
	}
	if _, err := s.TenantByName(t.Context(), "acme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("tenant written under a canceled context: %v", err)
	}
}
