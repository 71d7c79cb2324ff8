package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// seedLists gives the env's tenant two or more items in every list.
func (e *env) seedLists() (experimentID string) {
	e.t.Helper()
	ctx := e.t.Context()
	e.key(gyre.RoleReader)
	for i := range 2 {
		if r := e.putFixture(e.admin, fmt.Sprintf("f%d.txt", i), fmt.Sprint(i)); r.status != http.StatusCreated {
			e.t.Fatalf("put fixture: %d %s", r.status, r.body)
		}
		body := fmt.Sprintf(`{"model":"m","name":"p%d","upstream":"openai"}`, i)
		if _, _, err := e.st.CreatePolicy(ctx, store.Policy{TenantID: e.tenant.ID, Name: fmt.Sprintf("p%d", i),
			Body: json.RawMessage(body), SHA256: fmt.Sprint(i)}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.batch(append(e.tasks(2), e.tasks(2)...), "")
	e.batch(e.tasks(2), "") // a second batch pages the batch list
	e.insertTurns(e.tenant.ID, "agent-1", []string{"t1", "t2", "t3"}, nil)
	promotionTasks := e.tasks(1)
	for i := range 2 { // one promotion runs per agent: the first ends
		id := uuid.Must(uuid.NewV7()).String()
		if _, err := e.st.CreatePromotion(ctx, store.NewPromotion{ID: id, TenantID: e.tenant.ID, AgentID: "agent-1",
			Candidate: "p1", Baseline: "p0", TaskIDs: promotionTasks, Repetitions: 1, DeadlineS: 60, CreatedBy: "key k",
			BatchDeadlineS: 600, MaxAttempts: 1}); err != nil {
			e.t.Fatal(err)
		}
		if i == 0 {
			if _, err := e.st.EndPromotion(ctx, e.tenant.ID, id, store.PromotionEnd{State: promotion.StateFailed,
				Reasons: []string{promotion.ReasonCancelled}}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	for i := range 2 {
		if _, _, err := e.st.CreateHarness(ctx, store.Harness{ID: uuid.Must(uuid.NewV7()).String(), TenantID: e.tenant.ID,
			Name: fmt.Sprintf("h%d", i), BaseURL: "https://h.example.com", CreatedBy: "key k"}); err != nil {
			e.t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := e.st.CreateDataset(ctx, store.NewDataset{ID: uuid.Must(uuid.NewV7()).String(), TenantID: e.tenant.ID,
			AgentID: "agent-1", Format: "sft", Filters: json.RawMessage(`{}`)}); err != nil {
			e.t.Fatal(err)
		}
	}
	var calls []store.GatewayRecord // production calls, for GET /api/v1/calls
	for i := range 2 {
		calls = append(calls, store.GatewayRecord{ID: uuid.Must(uuid.NewV7()).String(), TenantID: e.tenant.ID, AgentID: "agent-1",
			ReplicaID: "replica-a", Status: 200, Counted: true, ReceivedAt: rolloutStart, Arrival: uint64(i + 1)})
	}
	if err := e.st.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: calls}); err != nil {
		e.t.Fatal(err)
	}
	for range 2 {
		exp, err := e.st.CreateExperiment(ctx, store.NewExperiment{TenantID: e.tenant.ID, Suite: "s", SuiteVersion: "1",
			Harness: "http://h.test", Capabilities: json.RawMessage(`{}`), Config: json.RawMessage(`{}`)})
		if err != nil {
			e.t.Fatal(err)
		}
		experimentID = exp.ID
		for rep := 1; rep <= 2; rep++ {
			if _, err := e.st.PutRun(ctx, store.RunRecord{TenantID: e.tenant.ID, ExperimentID: exp.ID, CaseID: "c1",
				Repetition: rep, RunID: fmt.Sprint("run-", rep), Status: "queued"}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return experimentID
}

// nextCursor reads next_cursor from a list answer; ok is false when the
// answer is not a list.
func nextCursor(t *testing.T, r response) (next string, ok bool) {
	t.Helper()
	var l struct {
		Items      json.RawMessage `json:"items"`
		NextCursor *string         `json:"next_cursor"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil || l.Items == nil {
		return "", false
	}
	if l.NextCursor == nil {
		return "", true
	}
	return *l.NextCursor, true
}

// Every list route answers a cursor issued for another tenant, another
// list or another filter with 400 invalid_query, on both stores (issue
// 11, defect 7). The test walks the route table for the lists.
func TestListCursorsAreBoundToTenantListAndFilter(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withBlobs(fileBlobs), withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		_, otherAdmin := e.newTenant("other")
		experimentID := e.seedLists()
		cursors := map[string]string{} // list route → a next cursor of the tenant
		for pattern := range e.srv.patterns {
			method, route := routeMethod(pattern)
			if method != http.MethodGet || gatewayPattern(pattern) {
				continue
			}
			path := strings.ReplaceAll(routePath(route, "", ""), "0192f0c4-0000-7000-8000-000000000001", experimentID)
			r := e.do(http.MethodGet, path+"?limit=1", e.admin, nil)
			next, isList := nextCursor(t, r)
			switch {
			case !isList:
				continue
			case next == "":
				t.Errorf("GET %s?limit=1 gave no next_cursor: seed its list with two items", path)
				continue
			}
			cursors[path] = next
		}
		if len(cursors) < 9 {
			t.Fatalf("only %d list routes paged (%v): the route table was not walked", len(cursors), cursors)
		}
		for path, next := range cursors {
			q := "?limit=1&cursor=" + url.QueryEscape(next)
			if r := e.do(http.MethodGet, path+q, e.admin, nil); r.status != http.StatusOK {
				t.Errorf("GET %s with its own cursor: %d %s", path, r.status, r.body)
			}
			if strings.Contains(path, experimentID) {
				// The other tenant cannot name this list at all.
				e.do(http.MethodGet, path+q, otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			} else {
				e.do(http.MethodGet, path+q, otherAdmin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			}
			for other := range cursors {
				if other != path {
					r := e.do(http.MethodGet, other+q, e.admin, nil)
					if r.status != http.StatusBadRequest || errorCode(t, r) != gyre.CodeInvalidQuery {
						t.Errorf("GET %s with a cursor of %s: %d %s, want 400 invalid_query", other, path, r.status, r.body)
					}
				}
			}
		}
		// The same list under another filter.
		for _, tc := range []struct{ list, filtered string }{
			{"/api/v1/rollouts", "/api/v1/rollouts?agent_id=agent-1"},
			{"/api/v1/rollouts?agent_id=agent-1", "/api/v1/rollouts?agent_id=agent-1&state=queued"},
			{"/api/v1/turns", "/api/v1/turns?agent_id=agent-1"},
			{"/api/v1/turns?agent_id=agent-1", "/api/v1/turns?agent_id=agent-2"},
			{"/api/v1/tasks", "/api/v1/tasks?suite=x"},
		} {
			sep := func(p string) string {
				if strings.Contains(p, "?") {
					return "&"
				}
				return "?"
			}
			next, _ := nextCursor(t, e.do(http.MethodGet, tc.list+sep(tc.list)+"limit=1", e.admin, nil))
			if next == "" {
				t.Fatalf("GET %s gave no next_cursor", tc.list)
			}
			e.do(http.MethodGet, tc.filtered+sep(tc.filtered)+"limit=1&cursor="+url.QueryEscape(next), e.admin, nil).
				wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
		}
	})
}
