package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// pager lists one page of a list of the store for a tenant, under the
// list's usual filter or, with other, another filter of the same list.
type pager struct {
	name string
	// hasFilter says whether other changes the filter.
	hasFilter bool
	list      func(t *testing.T, tenant string, other bool, p store.Page) (next string, err error)
}

// cursorFixture is what each tenant holds for the pagers: two or more
// items in every list.
type cursorFixture struct {
	suite       string
	experiments map[string][2]string // tenant → two experiment ids
	rollouts    map[string][2]string // tenant → two rollouts with two gateway calls each
}

// seedCursorTenant gives tenant two or more items in every list.
func seedCursorTenant(t *testing.T, s store.Store, f *cursorFixture, tenantID string) {
	t.Helper()
	ctx := t.Context()
	for i := range 2 {
		mustKey(t, s, store.NewKey{TenantID: tenantID, Role: gyre.RoleReader, Hash: Hash(tenantID + fmt.Sprint(i))})
		mustPutFixture(t, s, tenantID, fmt.Sprintf("f%d.txt", i), fmt.Sprint(i))
		if _, _, err := s.CreatePolicy(ctx, newPolicy(tenantID, fmt.Sprintf("p%d", i), fmt.Sprintf(`{"model":"m%d"}`, i))); err != nil {
			t.Fatalf("CreatePolicy: %v", err)
		}
	}
	var taskIDs []string
	for _, name := range []string{f.suite, "other-suite"} {
		sv, _ := mustPutSuite(t, s, newSuiteVersion(t, tenantID, name, "", 2))
		tasks, err := s.CreateSuiteTasks(ctx, suiteTasks(tenantID, sv, 2))
		if err != nil {
			t.Fatalf("CreateSuiteTasks: %v", err)
		}
		for _, tk := range tasks {
			taskIDs = append(taskIDs, tk.ID)
		}
	}
	if _, _, _, err := s.CreateBatch(ctx, store.NewBatch{TenantID: tenantID, AgentID: "agent-1", TaskIDs: taskIDs,
		GroupSize: 1, DeadlineS: 600, MaxAttempts: 1, RetryOn: gyre.DefaultRetryOn}); err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	claimed, err := s.Claim(ctx, store.ClaimRequest{TenantID: tenantID, AgentID: "agent-1", Max: 2, Lease: time.Minute,
		WorkerID: "w1", Secrets: secretsN(tenantID, 2)})
	if err != nil || len(claimed.Rollouts) != 2 {
		t.Fatalf("Claim: %d rollouts, %v", len(claimed.Rollouts), err)
	}
	var rollouts [2]string
	var recs []store.GatewayRecord
	for i, c := range claimed.Rollouts {
		rollouts[i] = c.Rollout.ID
		for range 2 {
			recs = append(recs, gwRecord(uuid.Must(uuid.NewV7()).String(), tenantID, c.Rollout.ID, true))
		}
	}
	for i := range 2 {
		recs = append(recs, prodRecord(0, tenantID, "agent-1", Start.Add(time.Duration(i)*time.Second), uint64(i)))
		recs[len(recs)-1].ID = uuid.Must(uuid.NewV7()).String()
	}
	if err := s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: recs}); err != nil {
		t.Fatalf("RecordGateway: %v", err)
	}
	f.rollouts[tenantID] = rollouts
	mustInsertTurns(t, s, tenantID, "agent-1", simpleTurn(t, "t1"), simpleTurn(t, "t2"), simpleTurn(t, "t3"))
	var exps [2]string
	for i := range exps {
		e := mustExperiment(t, s, tenantID)
		exps[i] = e.ID
		for rep := 1; rep <= 2; rep++ {
			if _, err := s.PutRun(ctx, store.RunRecord{TenantID: tenantID, ExperimentID: e.ID, CaseID: "c1", Repetition: rep,
				RunID: fmt.Sprint("run-", rep), Status: "queued"}); err != nil {
				t.Fatalf("PutRun: %v", err)
			}
		}
	}
	f.experiments[tenantID] = exps
}

// A cursor pages only the list, tenant and filter it was issued for: sent
// to another tenant, another list or the same list under another filter,
// it is refused with ErrInvalidCursor, never answered with a page of
// something else (issue 11, defect 7).
func testCursorsAreBoundToTenantListAndFilter(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	f := &cursorFixture{suite: "refunds", experiments: map[string][2]string{}, rollouts: map[string][2]string{}}
	a, b := mustTenant(t, s, "acme"), mustTenant(t, s, "other")
	seedCursorTenant(t, s, f, a.ID)
	seedCursorTenant(t, s, f, b.ID)
	pagers := []pager{
		{"keys", false, func(t *testing.T, tn string, _ bool, p store.Page) (string, error) {
			_, next, err := s.ListKeys(ctx, tn, p)
			return next, err
		}},
		{"fixtures", false, func(t *testing.T, tn string, _ bool, p store.Page) (string, error) {
			_, next, err := s.ListFixtures(ctx, tn, p)
			return next, err
		}},
		{"suites", false, func(t *testing.T, tn string, _ bool, p store.Page) (string, error) {
			_, next, err := s.ListSuites(ctx, tn, p)
			return next, err
		}},
		{"policies", false, func(t *testing.T, tn string, _ bool, p store.Page) (string, error) {
			_, next, err := s.ListPolicies(ctx, tn, p)
			return next, err
		}},
		{"experiments", false, func(t *testing.T, tn string, _ bool, p store.Page) (string, error) {
			_, next, err := s.ListExperiments(ctx, tn, p)
			return next, err
		}},
		{"tasks", true, func(t *testing.T, tn string, other bool, p store.Page) (string, error) {
			filter := store.TaskFilter{}
			if other {
				filter.Suite = f.suite
			}
			_, next, err := s.ListTasks(ctx, tn, filter, p)
			return next, err
		}},
		{"rollouts", true, func(t *testing.T, tn string, other bool, p store.Page) (string, error) {
			filter := store.RolloutFilter{AgentID: "agent-1"}
			if other {
				filter.State = gyre.StateQueued
			}
			_, next, err := s.ListRollouts(ctx, tn, filter, p)
			return next, err
		}},
		{"turns", true, func(t *testing.T, tn string, other bool, p store.Page) (string, error) {
			filter := store.TurnFilter{AgentID: "agent-1"}
			if other {
				filter.Since = Start.Add(-1)
			}
			_, next, err := s.ListTurns(ctx, tn, filter, p)
			return next, err
		}},
		{"rollout calls", true, func(t *testing.T, tn string, other bool, p store.Page) (string, error) {
			r := f.rollouts[tn][0]
			if other {
				r = f.rollouts[tn][1]
			}
			_, next, err := s.RolloutCalls(ctx, tn, r, p)
			return next, err
		}},
		{"calls", true, func(t *testing.T, tn string, other bool, p store.Page) (string, error) {
			filter := store.CallFilter{AgentID: "agent-1"}
			if other {
				filter.Since = Start.Add(-1)
			}
			_, next, err := s.ProductionCalls(ctx, tn, filter, p)
			return next, err
		}},
		{"runs", true, func(t *testing.T, tn string, other bool, p store.Page) (string, error) {
			exp := f.experiments[tn][0]
			if other {
				exp = f.experiments[tn][1]
			}
			_, next, err := s.ListRuns(ctx, tn, exp, p)
			return next, err
		}},
	}
	for _, pg := range pagers {
		t.Run(pg.name, func(t *testing.T) {
			next, err := pg.list(t, a.ID, false, store.Page{Limit: 1})
			if err != nil || next == "" {
				t.Fatalf("first page: next %q, %v; want a next cursor", next, err)
			}
			if _, err := pg.list(t, a.ID, false, store.Page{Limit: 1, Cursor: next}); err != nil {
				t.Fatalf("next page with its own cursor: %v", err)
			}
			refused := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, store.ErrInvalidCursor) {
					t.Errorf("%s: error = %v, want ErrInvalidCursor", what, err)
				}
			}
			_, err = pg.list(t, b.ID, false, store.Page{Limit: 1, Cursor: next})
			refused("another tenant", err)
			if pg.hasFilter {
				_, err = pg.list(t, a.ID, true, store.Page{Limit: 1, Cursor: next})
				refused("another filter", err)
			}
			for _, other := range pagers {
				if other.name != pg.name {
					_, err = other.list(t, a.ID, false, store.Page{Limit: 1, Cursor: next})
					refused("the "+other.name+" list", err)
				}
			}
		})
	}
}
