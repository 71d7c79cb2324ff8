package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// fakeModel stands in for the judge's model: it answers each chat
// completion with the next scripted content (the last one repeats).
func fakeModel(t *testing.T, contents ...string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var (
		mu    sync.Mutex
		calls atomic.Int64
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c := contents[0]
		if len(contents) > 1 {
			contents = contents[1:]
		}
		mu.Unlock()
		calls.Add(1)
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": c}}},
			"usage": map[string]any{"total_tokens": 30}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(ts.Close)
	return ts, &calls
}

// uploadJudged uploads the suite "judged" of one case with graders.
func (e *env) uploadJudged(graders string) {
	e.t.Helper()
	doc := fmt.Sprintf(`{"name":"judged","cases":[{"id":"c0","input":{"question":"refund?"},"graders":%s}]}`, graders)
	if r := e.json(http.MethodPost, "/api/v1/suites", e.admin, doc); r.status != http.StatusCreated {
		e.t.Fatalf("upload suite: %d %s", r.status, r.body)
	}
}

// judgedRollout runs one rollout of the suite "judged" through output and
// grading, and returns the rollout id and its verdicts.
func (e *env) judgedRollout() (string, []grade.Verdict) {
	e.t.Helper()
	r := e.json(http.MethodPost, "/api/v1/tasks", e.admin, `{"suite":"judged"}`)
	var items struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &items); err != nil || len(items.Items) != 1 {
		e.t.Fatalf("create tasks: %d %s", r.status, r.body)
	}
	// A budget of one completion: grading calls must not touch it.
	e.batch([]string{items.Items[0].TaskID}, `,"limits":{"max_completions":1}`)
	ro := e.claimOne()
	if o := e.output(ro.RolloutID, leaseOf(ro), `{"final_text":"Refunded 20 EUR.","tool_calls":[],"llm_call_count":0}`); o.status != http.StatusOK {
		e.t.Fatal(string(o.body))
	}
	if n, err := e.svc.Grader().RunOnce(context.Background(), "replica-test", time.Minute); err != nil || n != 1 {
		e.t.Fatalf("RunOnce = %d, %v", n, err)
	}
	v := e.rolloutView(ro.RolloutID)
	var verdicts []grade.Verdict
	if err := json.Unmarshal(v["verdicts"], &verdicts); err != nil {
		e.t.Fatalf("verdicts %s: %v", v["verdicts"], err)
	}
	return ro.RolloutID, verdicts
}

func outcome(v grade.Verdict) string {
	switch {
	case v.Pass == nil:
		return "abstain:" + v.Reason
	case *v.Pass:
		return "pass"
	}
	return "fail"
}

// TestGrading_JudgeCallsAreRecordedApartLinkedAndNeverCounted: in gyre
// serve a judge calls the tenant's policy on the operator's upstream
// (SPEC §8); each call is a grading call linked from the verdict, and
// none is one of the rollout's gateway calls, counted or charged to its
// budget.
func TestGrading_JudgeCallsAreRecordedApartLinkedAndNeverCounted(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		model, calls := fakeModel(t, "Looks fine to me.", `{"score":0.9,"reason":"confirms the refund"}`)
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}),
			withGradeEnv(func(st store.Store) grade.Env {
				j, err := gateway.NewJudge(gateway.JudgeConfig{Upstreams: []gateway.Upstream{{Name: "stub", BaseURL: model.URL + "/v1", AllowPrivate: true}}},
					gateway.JudgeDeps{Policy: gateway.StorePolicies(st), Record: st.RecordGradingCall})
				if err != nil {
					t.Fatal(err)
				}
				return grade.Env{Judge: j}
			}))
		body, sum, err := gateway.Policy{Name: "judge", Upstream: "stub", Model: "judge-model"}.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.st.CreatePolicy(t.Context(), store.Policy{TenantID: e.tenant.ID, Name: "judge", Body: body, SHA256: sum}); err != nil {
			t.Fatal(err)
		}
		e.uploadJudged(`[{"judge":{"rubric":"Confirms the refund.","policy":"judge"}},{"judge":"Names no policy; there is no default."}]`)
		id, verdicts := e.judgedRollout()
		if len(verdicts) != 2 || outcome(verdicts[0]) != "pass" || outcome(verdicts[1]) != "abstain:judge_unavailable" {
			t.Fatalf("verdicts = %+v, want a pass (after one retry) and judge_unavailable", verdicts)
		}
		if calls.Load() != 2 {
			t.Errorf("the model was called %d times, want 2 (a malformed answer, then a good one)", calls.Load())
		}
		recorded, err := e.st.GradingCalls(t.Context(), e.tenant.ID, "rollout", id)
		if err != nil || len(recorded) != 2 {
			t.Fatalf("grading calls = %+v, %v", recorded, err)
		}
		ids := []string{recorded[0].ID, recorded[1].ID}
		if !slices.Equal(verdicts[0].GradingCallIDs, ids) || len(verdicts[1].GradingCallIDs) != 0 {
			t.Errorf("verdicts link %v and %v, want %v and nothing", verdicts[0].GradingCallIDs, verdicts[1].GradingCallIDs, ids)
		}
		if r := recorded[1]; r.Policy != "judge" || r.Model != "judge-model" || r.Upstream != "stub" || r.Status != 200 || r.Attempt != 2 {
			t.Errorf("recorded call = %+v", r)
		}
		// Never a gateway call of the rollout, never counted, never spent.
		gw, err := e.st.GatewayCalls(t.Context(), e.tenant.ID, id)
		if err != nil || len(gw) != 0 {
			t.Errorf("gateway calls = %d, %v; want none", len(gw), err)
		}
		if u, err := e.st.GatewayUsage(t.Context(), id); err != nil || u != (store.GatewayUsage{}) {
			t.Errorf("gateway usage = %+v, %v; want nothing spent", u, err)
		}
		view := e.rolloutView(id)
		var g struct {
			Completions int   `json:"completions"`
			Calls       []any `json:"calls"`
		}
		if err := json.Unmarshal(view["gateway"], &g); err != nil || g.Completions != 0 || len(g.Calls) != 0 {
			t.Errorf("rollout gateway = %s, want no completions and no calls", view["gateway"])
		}
	})
}

// TestGrading_CommandAllowListCheckedAgainWhenGrading: a suite accepted
// while its executable was allow-listed does not run it once the operator
// removes the entry; it abstains with grader_not_allowed.
func TestGrading_CommandAllowListCheckedAgainWhenGrading(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		allow = grade.CommandAllowList{{Path: "/bin/sh", Tenants: []string{"acme"}}}
	)
	allows := func(tenant, argv0 string) bool {
		mu.Lock()
		defer mu.Unlock()
		return allow.Allows(tenant, argv0)
	}
	e := newEnv(t, sqliteEngine, Config{AllowCommand: allows}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}),
		withGradeEnv(func(store.Store) grade.Env {
			return grade.Env{AllowCommand: func(s grade.Subject, argv []string) bool { return allows(s.TenantName, argv[0]) }}
		}))
	// Another tenant may not declare it at all.
	_, otherAdmin := e.newTenant("globex")
	e.json(http.MethodPost, "/api/v1/suites", otherAdmin, `{"name":"x","cases":[{"id":"c","input":{},"graders":[{"command":["/bin/sh","-c","true"]}]}]}`).
		wantError(t, http.StatusUnprocessableEntity, "grader_not_allowed", "/cases/0/graders/0/command")
	// Accepted for acme and run while allowed; then removed.
	e.uploadJudged(`[{"command":["/bin/sh","-c","echo '{\"pass\":true}'"]}]`)
	if _, verdicts := e.judgedRollout(); len(verdicts) != 1 || outcome(verdicts[0]) != "pass" {
		t.Fatalf("while allowed: verdicts = %+v, want a pass", verdicts)
	}
	mu.Lock()
	allow = nil
	mu.Unlock()
	_, verdicts := e.judgedRollout()
	if len(verdicts) != 1 || outcome(verdicts[0]) != "abstain:grader_not_allowed" {
		t.Errorf("verdicts = %+v, want abstain:grader_not_allowed", verdicts)
	}
}

// TestGrading_WithAJudgeOneJobPerRound: a grader that may call a judge
// takes one job under a lease at a time, so jobs waiting behind slow
// model calls are never held past their lease and graded twice by
// another replica. (Without a judge a round takes many: see
// TestGrading_AcceptedOutputIsGradedFromTheDurableQueue.)
func TestGrading_WithAJudgeOneJobPerRound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}),
		withGradeEnv(func(store.Store) grade.Env {
			return grade.Env{Judge: grade.JudgeFunc(func(context.Context, grade.JudgeRequest) (grade.JudgeAnswer, error) {
				return grade.JudgeAnswer{Text: `{"score":1}`}, nil
			})}
		}))
	e.batch(e.tasks(2), "")
	for range 2 {
		r := e.claimOne()
		if o := e.output(r.RolloutID, leaseOf(r), `{"final_text":"refund issued","tool_calls":[],"llm_call_count":0}`); o.status != http.StatusOK {
			t.Fatal(string(o.body))
		}
	}
	for round := 1; round <= 2; round++ {
		if n, err := e.svc.Grader().RunOnce(context.Background(), "replica-test", time.Minute); err != nil || n != 1 {
			t.Fatalf("round %d: RunOnce = %d, %v; want 1 job", round, n, err)
		}
	}
}
