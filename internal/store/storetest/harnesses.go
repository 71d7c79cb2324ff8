package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

func runHarnesses(t *testing.T, open Opener) {
	t.Run("HarnessNameIsRegisteredOnce", func(t *testing.T) { t.Parallel(); testHarnessNameRegisteredOnce(t, open) })
	t.Run("ConcurrentRegistrationsOneCreates", func(t *testing.T) { t.Parallel(); testConcurrentHarnessRegistrations(t, open) })
	t.Run("HarnessesArePerTenant", func(t *testing.T) { t.Parallel(); testHarnessesArePerTenant(t, open) })
	t.Run("ListHarnessesPagesByName", func(t *testing.T) { t.Parallel(); testListHarnessesPages(t, open) })
	t.Run("DeleteHarness", func(t *testing.T) { t.Parallel(); testDeleteHarness(t, open) })
}

func newHarness(tenantID, name string, sealed []byte, kid string) store.Harness {
	return store.Harness{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenantID, Name: name,
		BaseURL: "https://" + name + ".example.com/api", APIKeySealed: sealed, APIKeyKID: kid, CreatedBy: "key k1"}
}

func mustCreateHarness(t *testing.T, s store.Store, h store.Harness) store.Harness {
	t.Helper()
	out, created, err := s.CreateHarness(t.Context(), h)
	if err != nil || !created {
		t.Fatalf("CreateHarness(%s) = created %v, %v; want created", h.Name, created, err)
	}
	return out
}

// The sealed key is kept byte for byte with its key id; a second
// registration of the name creates nothing and returns the first.
func testHarnessNameRegisteredOnce(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	sealed := []byte{0, 1, 2, 0xff, 0xfe, 0}
	h := newHarness(tn.ID, "support", sealed, "v1:0011223344556677")
	got := mustCreateHarness(t, s, h)
	want := h
	want.CreatedAt = Start.Truncate(1000)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("created harness (-want +got):\n%s", diff)
	}
	again := newHarness(tn.ID, "support", nil, "")
	again.BaseURL = "https://elsewhere.example.com"
	out, created, err := s.CreateHarness(t.Context(), again)
	if err != nil || created {
		t.Fatalf("second CreateHarness = created %v, %v; want the existing one", created, err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("second CreateHarness returned (-want +got):\n%s", diff)
	}
	byID, err := s.HarnessByID(t.Context(), tn.ID, h.ID)
	if err != nil || !cmp.Equal(byID, want) {
		t.Fatalf("HarnessByID = %+v, %v; want %+v", byID, err, want)
	}
	// No key stays no key: nil, not an empty slice, and no key id.
	bare := mustCreateHarness(t, s, newHarness(tn.ID, "bare", nil, ""))
	if bare.APIKeySealed != nil || bare.APIKeyKID != "" {
		t.Fatalf("harness without a key reads back sealed %v kid %q", bare.APIKeySealed, bare.APIKeyKID)
	}
	// A sealed key without its key id (or the reverse) is refused.
	if _, _, err := s.CreateHarness(t.Context(), newHarness(tn.ID, "half", []byte{1}, "")); err == nil {
		t.Fatal("CreateHarness took a sealed key without a key id")
	}
}

func testConcurrentHarnessRegistrations(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		ids     = map[string]bool{}
	)
	for range n {
		wg.Go(func() {
			out, c, err := s.CreateHarness(t.Context(), newHarness(tn.ID, "race", nil, ""))
			if err != nil {
				t.Errorf("CreateHarness: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c {
				created++
			}
			ids[out.ID] = true
		})
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d concurrent registrations created %d and returned %d ids, want 1 and 1", n, created, len(ids))
	}
}

func testHarnessesArePerTenant(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	ha := mustCreateHarness(t, s, newHarness(a.ID, "support", nil, ""))
	// The same name in another tenant is another harness.
	hb := mustCreateHarness(t, s, newHarness(b.ID, "support", nil, ""))
	if ha.ID == hb.ID {
		t.Fatal("two tenants share a harness")
	}
	if _, err := s.HarnessByID(t.Context(), b.ID, ha.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("HarnessByID of a foreign harness: %v, want ErrNotFound", err)
	}
	if err := s.DeleteHarness(t.Context(), b.ID, ha.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteHarness of a foreign harness: %v, want ErrNotFound", err)
	}
	hs, _, err := s.ListHarnesses(t.Context(), b.ID, store.Page{})
	if err != nil || len(hs) != 1 || hs[0].ID != hb.ID {
		t.Fatalf("ListHarnesses(b) = %+v, %v; want only b's", hs, err)
	}
	if _, _, err := s.CreateHarness(t.Context(), newHarness(uuid.Must(uuid.NewV7()).String(), "x", nil, "")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CreateHarness in an unknown tenant: %v, want ErrNotFound", err)
	}
}

func testListHarnessesPages(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	var want []string
	for _, name := range []string{"e", "c", "a", "d", "b"} {
		mustCreateHarness(t, s, newHarness(tn.ID, name, nil, ""))
	}
	want = []string{"a", "b", "c", "d", "e"}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		hs, next, err := s.ListHarnesses(t.Context(), tn.ID, store.Page{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListHarnesses: %v", err)
		}
		for _, h := range hs {
			got = append(got, h.Name)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !cmp.Equal(got, want) {
		t.Fatalf("names = %v, want %v", got, want)
	}
	if _, _, err := s.ListHarnesses(t.Context(), tn.ID, store.Page{Cursor: "bm90IGEgY3Vyc29y"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Fatalf("ListHarnesses with a forged cursor: %v, want ErrInvalidCursor", err)
	}
}

func testDeleteHarness(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	h := mustCreateHarness(t, s, newHarness(tn.ID, "gone", []byte{9}, "v1:k"))
	if err := s.DeleteHarness(t.Context(), tn.ID, h.ID); err != nil {
		t.Fatalf("DeleteHarness: %v", err)
	}
	if _, err := s.HarnessByID(t.Context(), tn.ID, h.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("HarnessByID after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteHarness(t.Context(), tn.ID, h.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteHarness: %v, want ErrNotFound", err)
	}
	// The name is free again.
	again := mustCreateHarness(t, s, newHarness(tn.ID, "gone", nil, ""))
	if again.ID == h.ID {
		t.Fatal(fmt.Sprint("re-registration reused id ", h.ID))
	}
}
