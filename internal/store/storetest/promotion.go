package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

func runPromotion(t *testing.T, open Opener) {
	t.Run("SetPromotedPolicyIsCompareAndSet", func(t *testing.T) { t.Parallel(); testSetPromotedPolicyCAS(t, open) })
	t.Run("ConcurrentCompareAndSetOneWins", func(t *testing.T) { t.Parallel(); testConcurrentCAS(t, open) })
	t.Run("RollbackPopsOneEntry", func(t *testing.T) { t.Parallel(); testRollbackPopsOneEntry(t, open) })
	t.Run("ConcurrentRollbacksPopOneEntryEach", func(t *testing.T) { t.Parallel(); testConcurrentRollbacks(t, open) })
	t.Run("PromotedPolicyIsPerTenant", func(t *testing.T) { t.Parallel(); testPromotedPolicyIsPerTenant(t, open) })
}

// promotionFixture is a store with a tenant, an agent gyre has seen (one
// turn) and policies p1, p2, p3.
func promotionFixture(t *testing.T, s store.Store, tenant string) string {
	t.Helper()
	tn := mustTenant(t, s, tenant)
	mustInsertTurns(t, s, tn.ID, "agent-1", simpleTurn(t, "t1"))
	for _, n := range []string{"p1", "p2", "p3"} {
		if _, _, err := s.CreatePolicy(t.Context(), newPolicy(tn.ID, n, `{"name":"`+n+`"}`)); err != nil {
			t.Fatalf("CreatePolicy: %v", err)
		}
	}
	return tn.ID
}

func strp(s string) *string { return &s }

func mustSetPolicy(t *testing.T, s store.Store, c promotion.Change) promotion.Entry {
	t.Helper()
	e, err := s.SetPromotedPolicy(t.Context(), c)
	if err != nil {
		t.Fatalf("SetPromotedPolicy(%+v): %v", c, err)
	}
	return e
}

func wantAgentPolicy(t *testing.T, s store.Store, tenantID string, want *string) {
	t.Helper()
	got, err := s.AgentPolicy(t.Context(), tenantID, "agent-1")
	if err != nil || !cmp.Equal(got, want) {
		t.Fatalf("AgentPolicy = %v (%v), want %v", deref(got), err, deref(want))
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func testSetPromotedPolicyCAS(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tid := promotionFixture(t, s, "acme")
	if h, err := s.PolicyHistory(ctx, tid, "agent-1"); err != nil || len(h) != 0 {
		t.Fatalf("history of an agent never promoted = %v (%v), want empty", h, err)
	}
	e1 := mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Policy: "p1", SetBy: "key k1"})
	wantAgentPolicy(t, s, tid, strp("p1"))
	clk.Advance(time.Second)
	e2 := mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p1"), Policy: "p2",
		SetBy: "promotion 0190", PromotionID: strp("0190")})
	wantAgentPolicy(t, s, tid, strp("p2"))

	for _, tc := range []struct {
		name string
		c    promotion.Change
		want error
	}{
		{"expected none but one is set", promotion.Change{TenantID: tid, AgentID: "agent-1", Policy: "p3", SetBy: "x"}, promotion.ErrPolicyChanged},
		{"expected a stale policy", promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p1"), Policy: "p3", SetBy: "x"}, promotion.ErrPolicyChanged},
		{"unknown policy", promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p2"), Policy: "nope", SetBy: "x"}, promotion.ErrPolicyNotFound},
		{"agent never seen", promotion.Change{TenantID: tid, AgentID: "ghost", Policy: "p1", SetBy: "x"}, promotion.ErrAgentNotFound},
		{"NUL in set_by", promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p2"), Policy: "p3", SetBy: "a\x00b"}, store.ErrNUL},
	} {
		if _, err := s.SetPromotedPolicy(ctx, tc.c); !errors.Is(err, tc.want) {
			t.Errorf("%s: SetPromotedPolicy = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A refused change changed nothing.
	wantAgentPolicy(t, s, tid, strp("p2"))
	h, err := s.PolicyHistory(ctx, tid, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []promotion.Entry{
		{Seq: 1, Policy: "p1", SetBy: "key k1", SetAt: us(Start)},
		{Seq: 2, Policy: "p2", SetBy: "promotion 0190", SetAt: us(Start.Add(time.Second)), PromotionID: strp("0190")},
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, []promotion.Entry{e1, e2}); diff != "" {
		t.Errorf("returned entries (-want +got):\n%s", diff)
	}
}

func testConcurrentCAS(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tid := promotionFixture(t, s, "acme")
	mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Policy: "p1", SetBy: "key k"})
	const n = 8
	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		wins, conflict int
		winner         string
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pol := []string{"p2", "p3"}[i%2]
			_, err := s.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: tid, AgentID: "agent-1",
				Expected: strp("p1"), Policy: pol, SetBy: "key k"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
				winner = pol
			case errors.Is(err, promotion.ErrPolicyChanged):
				conflict++
			default:
				t.Errorf("SetPromotedPolicy: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflict != n-1 {
		t.Fatalf("%d won and %d conflicted, want exactly 1 and %d", wins, conflict, n-1)
	}
	wantAgentPolicy(t, s, tid, &winner)
	if h, err := s.PolicyHistory(t.Context(), tid, "agent-1"); err != nil || len(h) != 2 || h[1].Policy != winner {
		t.Errorf("history = %+v (%v), want p1 then %s", h, err, winner)
	}
}

func testRollbackPopsOneEntry(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tid := promotionFixture(t, s, "acme")
	if _, err := s.RollbackPolicy(ctx, tid, "ghost", "key k"); !errors.Is(err, promotion.ErrAgentNotFound) {
		t.Errorf("rollback of an agent never seen = %v, want ErrAgentNotFound", err)
	}
	if _, err := s.RollbackPolicy(ctx, tid, "agent-1", "key k"); !errors.Is(err, promotion.ErrNoPreviousPolicy) {
		t.Errorf("rollback with no history = %v, want ErrNoPreviousPolicy", err)
	}
	mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Policy: "p1", SetBy: "key k"})
	if _, err := s.RollbackPolicy(ctx, tid, "agent-1", "key k"); !errors.Is(err, promotion.ErrNoPreviousPolicy) {
		t.Errorf("rollback with one entry = %v, want ErrNoPreviousPolicy", err)
	}
	mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p1"), Policy: "p2", SetBy: "key k"})
	mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p2"), Policy: "p3", SetBy: "key k"})
	clk.Advance(time.Minute)
	restored, err := s.RollbackPolicy(ctx, tid, "agent-1", "key r")
	if err != nil || restored.Seq != 2 || restored.Policy != "p2" {
		t.Fatalf("rollback = %+v (%v), want entry 2 (p2)", restored, err)
	}
	wantAgentPolicy(t, s, tid, strp("p2"))
	// A compare-and-set after a rollback expects the restored policy.
	if _, err := s.SetPromotedPolicy(ctx, promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p3"), Policy: "p1", SetBy: "x"}); !errors.Is(err, promotion.ErrPolicyChanged) {
		t.Errorf("CAS against the popped policy = %v, want ErrPolicyChanged", err)
	}
	if _, err := s.RollbackPolicy(ctx, tid, "agent-1", "key r"); err != nil {
		t.Fatalf("second rollback: %v", err)
	}
	wantAgentPolicy(t, s, tid, strp("p1"))
	if _, err := s.RollbackPolicy(ctx, tid, "agent-1", "key r"); !errors.Is(err, promotion.ErrNoPreviousPolicy) {
		t.Errorf("rollback past the first entry = %v, want ErrNoPreviousPolicy", err)
	}
	wantAgentPolicy(t, s, tid, strp("p1"))
	// The history keeps every entry; popped ones say who and when.
	h, err := s.PolicyHistory(ctx, tid, "agent-1")
	if err != nil || len(h) != 3 {
		t.Fatalf("history = %+v (%v), want 3 entries", h, err)
	}
	at := us(Start.Add(time.Minute))
	for i, want := range []struct {
		live bool
		by   string
	}{{true, ""}, {false, "key r"}, {false, "key r"}} {
		if h[i].Live() != want.live || (!want.live && (deref(h[i].RolledBackBy) != want.by || !h[i].RolledBackAt.Equal(at))) {
			t.Errorf("entry %d = %+v, want live=%v rolled back by %q at %v", i+1, h[i], want.live, want.by, at)
		}
	}
	// A new promotion after rollbacks continues the sequence.
	e := mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: strp("p1"), Policy: "p3", SetBy: "key k"})
	if e.Seq != 4 {
		t.Errorf("entry after rollbacks has seq %d, want 4", e.Seq)
	}
}

func testConcurrentRollbacks(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tid := promotionFixture(t, s, "acme")
	prev := (*string)(nil)
	for _, p := range []string{"p1", "p2", "p3"} {
		mustSetPolicy(t, s, promotion.Change{TenantID: tid, AgentID: "agent-1", Expected: prev, Policy: p, SetBy: "key k"})
		prev = strp(p)
	}
	const n = 6
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		ok, refuse int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.RollbackPolicy(t.Context(), tid, "agent-1", "key k")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, promotion.ErrNoPreviousPolicy):
				refuse++
			default:
				t.Errorf("RollbackPolicy: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok != 2 || refuse != n-2 {
		t.Fatalf("%d rollbacks succeeded and %d were refused, want 2 and %d", ok, refuse, n-2)
	}
	wantAgentPolicy(t, s, tid, strp("p1"))
}

func testPromotedPolicyIsPerTenant(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	acme := promotionFixture(t, s, "acme")
	other := promotionFixture(t, s, "other")
	mustSetPolicy(t, s, promotion.Change{TenantID: acme, AgentID: "agent-1", Policy: "p1", SetBy: "key k"})
	mustSetPolicy(t, s, promotion.Change{TenantID: acme, AgentID: "agent-1", Expected: strp("p1"), Policy: "p2", SetBy: "key k"})
	wantAgentPolicy(t, s, other, nil)
	if h, err := s.PolicyHistory(t.Context(), other, "agent-1"); err != nil || len(h) != 0 {
		t.Errorf("other tenant's history = %+v (%v), want empty", h, err)
	}
	if _, err := s.RollbackPolicy(t.Context(), other, "agent-1", "key k"); !errors.Is(err, promotion.ErrNoPreviousPolicy) {
		t.Errorf("other tenant's rollback = %v, want ErrNoPreviousPolicy", err)
	}
	wantAgentPolicy(t, s, acme, strp("p2"))
}
