package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// getBatchView reads GET /api/v1/batches/{id}.
func (e *env) getBatchView(id string) batchView {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/v1/batches/"+id, e.admin, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET batch: %d %s", r.status, r.body)
	}
	var b batchView
	if err := json.Unmarshal(r.body, &b); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// TestBatches_ResultsFromGradedRollouts: a batch's pass rate counts graded
// rollouts without an exclusion, with its Wilson interval; its mean reward
// is the mean of their rewards (SPEC §9); its yield is training grade ÷
// finished; its reasons are counted.
func TestBatches_ResultsFromGradedRollouts(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batchID, _ := e.batch(e.tasks(2), `,"group_size":2,"max_attempts":1`)
		good := `{"final_text":"refund issued","tool_calls":[{"name":"issue_refund","outcome":"ok","status_code":200}],"llm_call_count":0}`
		// contains fails, tool_called and all_tools_ok pass: reward 2/3.
		declined := `{"final_text":"declined","tool_calls":[{"name":"issue_refund","outcome":"ok","status_code":200}],"llm_call_count":0}`
		excluded := `{"final_text":"refund issued","tool_calls":[],"llm_call_count":0,"exclusion":{"reason":"capacity"}}`
		for _, body := range []string{good, good, declined, excluded} {
			r := e.claimOne()
			if o := e.output(r.RolloutID, leaseOf(r), body); o.status != http.StatusOK {
				t.Fatalf("output: %d %s", o.status, o.body)
			}
		}
		if b := e.getBatchView(batchID); b.State != gyre.BatchRunning || b.PassRate != nil || b.MeanReward != nil {
			t.Fatalf("before grading: state %s pass rate %+v mean reward %+v, want running and no results", b.State, b.PassRate, b.MeanReward)
		}
		if n, err := e.svc.Grader().RunOnce(context.Background(), "replica-test", time.Minute); err != nil || n != 4 {
			t.Fatalf("RunOnce = %d, %v", n, err)
		}
		b := e.getBatchView(batchID)
		if b.State != gyre.BatchFinished || b.Groups != 2 || b.GroupsComplete != 2 || b.GroupsCancelled != 0 {
			t.Errorf("state %s groups %d complete %d cancelled %d, want finished 2 2 0", b.State, b.Groups, b.GroupsComplete, b.GroupsCancelled)
		}
		if b.Outcomes != (outcomesView{Passed: 2, Failed: 1, Excluded: 1}) {
			t.Errorf("outcomes = %+v, want 2 passed, 1 failed, 1 excluded", b.Outcomes)
		}
		lo, hi := grade.Wilson(2, 3)
		if b.PassRate == nil || b.PassRate.N != 3 || b.PassRate.Value != 2.0/3 || b.PassRate.Interval.Low != lo || b.PassRate.Interval.High != hi {
			t.Errorf("pass rate = %+v, want 2/3 over 3 with Wilson [%v, %v]", b.PassRate, lo, hi)
		}
		if b.MeanReward == nil || b.MeanReward.N != 3 || math.Abs(b.MeanReward.Value-(1+1+2.0/3)/3) > 1e-12 {
			t.Errorf("mean reward = %+v, want (1 + 1 + 2/3)/3 over 3", b.MeanReward)
		}
		// No rollout used the gateway, so none is training grade.
		if b.Finished != 4 || b.TrainingGrade != 0 || b.TrainingGradeYield == nil || *b.TrainingGradeYield != 0 {
			t.Errorf("finished %d training grade %d yield %v, want 4, 0 and 0", b.Finished, b.TrainingGrade, b.TrainingGradeYield)
		}
		if b.NotTrainingGradeReasons["no_completions"] != 4 || b.NotTrainingGradeReasons["excluded:capacity"] != 1 {
			t.Errorf("reasons = %v, want no_completions 4 and excluded:capacity 1", b.NotTrainingGradeReasons)
		}
	})
}

// TestBatches_CancelledBatchReportsGroupsCancelledNotComplete: cancelling
// every rollout of a batch completes none of its groups.
func TestBatches_CancelledBatchReportsGroupsCancelledNotComplete(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batchID, _ := e.batch(e.tasks(2), "")
		if c := e.do(http.MethodPost, "/api/v1/batches/"+batchID+"/cancel", e.admin, nil); c.status != http.StatusOK {
			t.Fatalf("cancel: %d %s", c.status, c.body)
		}
		r := e.do(http.MethodGet, "/api/v1/batches/"+batchID, e.admin, nil)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		if string(m["groups_complete"]) != "0" || string(m["groups_cancelled"]) != "2" || string(m["state"]) != `"cancelled"` {
			t.Errorf("cancelled batch: groups_complete %s groups_cancelled %s state %s, want 0, 2, cancelled",
				m["groups_complete"], m["groups_cancelled"], m["state"])
		}
		if string(m["pass_rate"]) != "null" || string(m["training_grade_yield"]) != "null" || string(m["finished"]) != "0" {
			t.Errorf("a cancelled batch has no results: pass_rate %s yield %s finished %s", m["pass_rate"], m["training_grade_yield"], m["finished"])
		}
	})
}

// TestBatches_ListNewestFirstFilteredAndPaged: GET /api/v1/batches is a
// reader's list of summaries, newest first, filtered by agent and state,
// paged; bad filters are 400 invalid_query.
func TestBatches_ListNewestFirstFilteredAndPaged(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		tasks := e.tasks(1)
		first, _ := e.batch(tasks, "")
		second, _ := e.batch(tasks, "")
		if c := e.do(http.MethodPost, "/api/v1/batches/"+second+"/cancel", e.admin, nil); c.status != http.StatusOK {
			t.Fatal(string(c.body))
		}
		ids, _ := json.Marshal(tasks)
		r := e.json(http.MethodPost, "/api/v1/batches", e.admin, fmt.Sprintf(`{"agent_id":"agent-2","task_ids":%s}`, ids))
		var third createdBatch
		if err := json.Unmarshal(r.body, &third); err != nil || r.status != http.StatusCreated {
			t.Fatalf("third batch: %d %s", r.status, r.body)
		}
		reader := e.key(gyre.RoleReader)
		list := func(query string) ([]string, *string) {
			t.Helper()
			r := e.do(http.MethodGet, "/api/v1/batches"+query, reader, nil)
			if r.status != http.StatusOK {
				t.Fatalf("GET /api/v1/batches%s: %d %s", query, r.status, r.body)
			}
			var l list[batchSummaryView]
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, it := range l.Items {
				if it.Counts == nil || it.NotTrainingGradeReasons == nil {
					t.Errorf("summary %s lacks counts or reasons: %+v", it.BatchID, it)
				}
				out = append(out, it.BatchID)
			}
			return out, l.NextCursor
		}
		cases := []struct {
			query string
			want  []string
		}{
			{"", []string{third.BatchID, second, first}},
			{"?agent_id=agent-1", []string{second, first}},
			{"?state=running", []string{third.BatchID, first}},
			{"?state=cancelled", []string{second}},
			{"?state=finished", []string{}},
			{"?agent_id=agent-2&state=running", []string{third.BatchID}},
		}
		for _, c := range cases {
			if got, _ := list(c.query); !slices.Equal(got, c.want) {
				t.Errorf("%q = %v, want %v", c.query, got, c.want)
			}
		}
		page1, next := list("?limit=2")
		if !slices.Equal(page1, []string{third.BatchID, second}) || next == nil {
			t.Fatalf("page 1 = %v next %v", page1, next)
		}
		if page2, next := list("?limit=2&cursor=" + *next); !slices.Equal(page2, []string{first}) || next != nil {
			t.Fatalf("page 2 = %v next %v", page2, next)
		}
		for _, q := range []string{"?state=done", "?state=", "?agent_id=a%2Fb", "?agent_id=%FF", "?cursor=junk", "?limit=0", "?batch_id=x"} {
			e.do(http.MethodGet, "/api/v1/batches"+q, reader, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
		}
		e.do(http.MethodGet, "/api/v1/batches", e.agent, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		_, stranger := e.newTenant("stranger")
		if r := e.do(http.MethodGet, "/api/v1/batches", stranger, nil); r.status != http.StatusOK || string(r.body) != `{"items":[],"next_cursor":null}`+"\n" {
			t.Errorf("another tenant's list: %d %s", r.status, r.body)
		}
	})
}

// TestBatches_IdempotencyKeyReusedWithAnotherBodyIs409: the same key with
// a different body is refused and creates nothing; the same body, however
// spaced and ordered, returns the original batch (SPEC §4.2).
func TestBatches_IdempotencyKeyReusedWithAnotherBodyIs409(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		tasks := e.tasks(2)
		ids, _ := json.Marshal(tasks)
		body := fmt.Sprintf(`{"agent_id":"agent-1","task_ids":%s,"group_size":2}`, ids)
		r := e.json(http.MethodPost, "/api/v1/batches", e.admin, body, "Idempotency-Key", "k-1")
		var orig createdBatch
		if err := json.Unmarshal(r.body, &orig); err != nil || r.status != http.StatusCreated {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		for _, other := range []string{
			fmt.Sprintf(`{"agent_id":"agent-1","task_ids":%s,"group_size":3}`, ids),
			fmt.Sprintf(`{"agent_id":"agent-1","task_ids":%s}`, ids),
			fmt.Sprintf(`{"agent_id":"agent-2","task_ids":%s,"group_size":2}`, ids),
		} {
			e.json(http.MethodPost, "/api/v1/batches", e.admin, other, "Idempotency-Key", "k-1").
				wantError(t, http.StatusConflict, gyre.CodeIdempotencyKeyReused, "")
		}
		same := fmt.Sprintf("{ \"group_size\" : 2,\n \"task_ids\":%s, \"agent_id\":\"agent-1\" }", ids)
		r = e.json(http.MethodPost, "/api/v1/batches", e.admin, same, "Idempotency-Key", "k-1")
		var again createdBatch
		if err := json.Unmarshal(r.body, &again); err != nil || r.status != http.StatusOK || again.BatchID != orig.BatchID ||
			!slices.Equal(again.RolloutIDs, orig.RolloutIDs) {
			t.Fatalf("same body reordered: %d %s, want 200 with the original batch %s", r.status, r.body, orig.BatchID)
		}
		rs, _, err := e.st.ListRollouts(context.Background(), e.tenant.ID, store.RolloutFilter{}, store.Page{})
		if err != nil || len(rs) != 4 {
			t.Errorf("%d rollouts exist (%v), want only the original batch's 4", len(rs), err)
		}
	})
}

// TestBatches_NoPolicyWarning: a batch whose rollouts will find no policy
// is created with the warning no_policy; one naming a policy is not.
func TestBatches_NoPolicyWarning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	tasks := e.tasks(1)
	ids, _ := json.Marshal(tasks)
	if _, _, err := e.st.CreatePolicy(context.Background(), store.Policy{TenantID: e.tenant.ID, Name: "p1",
		Body: json.RawMessage(`{"model":"m","name":"p1","upstream":"stub"}`), SHA256: "00"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, extra string
		want        string // the warnings member, "" when absent
	}{
		{"no policy and no default", "", `["no_policy"]`},
		{"a named policy", `,"policy":"p1"`, ""},
	}
	for _, c := range cases {
		r := e.json(http.MethodPost, "/api/v1/batches", e.admin, fmt.Sprintf(`{"agent_id":"agent-1","task_ids":%s%s}`, ids, c.extra))
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &m); err != nil || r.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", c.name, r.status, r.body)
		}
		if string(m["warnings"]) != c.want {
			t.Errorf("%s: warnings = %s, want %q", c.name, m["warnings"], c.want)
		}
	}
}
