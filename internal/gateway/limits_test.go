package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// chatBody is a minimal chat completion request.
var chatBody = []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)

// wantBudgetExhausted checks the refusal of SPEC §6.1: 429, OpenAI-shaped,
// code rollout_budget_exhausted, no Retry-After.
func wantBudgetExhausted(t *testing.T, r response) {
	t.Helper()
	wantOpenAIError(t, r, http.StatusTooManyRequests, gateway.CodeBudgetExhausted)
	if r.header.Get("Retry-After") != "" {
		t.Errorf("a budget refusal carries Retry-After %q", r.header.Get("Retry-After"))
	}
}

// TestGateway_EachUsageLimitRefusesTheRequestPastIt: through a claimed
// rollout's gateway, each usage limit lets requests through while the
// rollout's spending is under it and refuses the first one at or past it.
// Each call of the fake upstream spends 18 tokens and, at policy p1's
// prices, 23.5 µUSD.
func TestGateway_EachUsageLimitRefusesTheRequestPastIt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		limit   string
		allowed int // requests answered before the refusal
	}{
		{`"max_completions":2`, 2},
		{`"max_completions":0`, 0},
		{`"max_total_tokens":30`, 2}, // 0, 18 < 30; 36 ≥ 30
		{`"max_total_tokens":18`, 1},
		{`"max_cost_usd":0.00003525`, 2}, // 1.5 calls' cost
		{`"max_cost_usd":0`, 0},
	}
	forEachEngine(t, func(t *testing.T, eng engine) {
		for _, c := range cases {
			t.Run(c.limit, func(t *testing.T) {
				h := newHarness(t, eng, harnessOpts{})
				rr := h.rollout(`,"policy":"p1","limits":{` + c.limit + `}`)
				path := "/gw/" + gatewayToken(rr) + "/v1/chat/completions"
				for i := range c.allowed {
					if r := h.do(http.MethodPost, path, rr.APIKey, chatBody); r.status != http.StatusOK {
						t.Fatalf("request %d: %d %s, want 200", i+1, r.status, r.body)
					}
				}
				wantBudgetExhausted(t, h.do(http.MethodPost, path, rr.APIKey, chatBody))
				if n := h.up.count(); n != c.allowed {
					t.Errorf("the upstream saw %d requests, want %d: the refused one must not reach it", n, c.allowed)
				}
				h.flush()
				v := h.view(rr.RolloutID)
				last := v.Gateway.Calls[len(v.Gateway.Calls)-1]
				if v.Gateway.Completions != c.allowed || last.Reason == nil || *last.Reason != gateway.ReasonBudgetExhausted {
					t.Errorf("gateway = %+v, want %d completions and the refusal recorded", v.Gateway, c.allowed)
				}
			})
		}
	})
}

// TestGateway_MaxConcurrentRequestsRefusesTheRequestPastIt: with
// max_concurrent_requests 1, a second request while the first is in
// flight is refused; once the first is answered, the next goes through.
func TestGateway_MaxConcurrentRequestsRefusesTheRequestPastIt(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		arrived, release := make(chan struct{}, 8), make(chan struct{})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			arrived <- struct{}{}
			<-release
			answerText(w, body, "hello")
		})
		rr := h.rollout(`,"policy":"p1","limits":{"max_concurrent_requests":1}`)
		url := h.ts.URL + "/gw/" + gatewayToken(rr) + "/v1/chat/completions"
		first := make(chan int, 1)
		go func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(string(chatBody)))
			req.Header.Set("Authorization", "Bearer "+rr.APIKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := h.ts.Client().Do(req)
			if err != nil {
				first <- 0
				return
			}
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		<-arrived // the first request is in flight at the upstream
		wantBudgetExhausted(t, h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, chatBody))
		close(release)
		if status := <-first; status != http.StatusOK {
			t.Fatalf("the request in flight ended %d, want 200", status)
		}
		if r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, chatBody); r.status != http.StatusOK {
			t.Fatalf("a request after the first was answered: %d %s, want 200", r.status, r.body)
		}
		if n := h.up.count(); n != 2 {
			t.Errorf("the upstream saw %d requests, want 2", n)
		}
	})
}

// limitsStore serves the gateway a rollout's access with other limits, as
// if the stored object had drifted from what the gateway reads.
type limitsStore struct {
	gateway.Store
	limits json.RawMessage
}

func (s limitsStore) GatewayAccess(ctx context.Context, h [32]byte) (store.GatewayAccess, error) {
	a, err := s.Store.GatewayAccess(ctx, h)
	a.Limits = s.limits
	return a, err
}

// TestGateway_UnreadableLimitsFailClosed: limits the gateway cannot read
// refuse the request with a server error; they never switch budgets off.
func TestGateway_UnreadableLimitsFailClosed(t *testing.T) {
	t.Parallel()
	for _, limits := range []string{
		`{"max_completion":1}`,
		`{"max_completions":"1"}`,
		`{"max_completions":1.5}`,
		`{"max_cost_usd":-1}`,
		`{"max_completions":1,"max_completions":2}`,
		`[1]`,
		`{`,
	} {
		t.Run(limits, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, sqliteEngine, harnessOpts{gatewayStore: func(s gateway.Store) gateway.Store {
				return limitsStore{Store: s, limits: json.RawMessage(limits)}
			}})
			rr := h.rollout(`,"policy":"p1"`)
			r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, chatBody)
			wantOpenAIError(t, r, http.StatusInternalServerError, gateway.CodeInternal)
			if !strings.Contains(string(r.body), "limits") {
				t.Errorf("the refusal does not say why: %s", r.body)
			}
			if h.up.count() != 0 {
				t.Errorf("a request with unreadable limits reached the upstream")
			}
		})
	}
}

// TestBatch_NoPolicyWarningFollowsTheServerDefault: a batch naming no
// policy is warned no_policy unless the server's default policy exists in
// the tenant (SPEC §6.1: its gateway would answer 503 no_policy).
func TestBatch_NoPolicyWarningFollowsTheServerDefault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, defaultPolicy, extra, want string
	}{
		{"default exists", "p1", "", ""},
		{"default missing in the tenant", "ghost", "", `["no_policy"]`},
		{"no default", "", "", `["no_policy"]`},
		{"batch names a policy", "", `,"policy":"p1"`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: c.defaultPolicy}})
			h.mustJSON(http.MethodPost, "/api/v1/suites", h.admin, `{"name":"s","cases":[{"id":"c0","input":{"q":"x"},"graders":[{"contains":"x"}]}]}`, http.StatusCreated)
			var tasks struct {
				Items []struct {
					TaskID string `json:"task_id"`
				} `json:"items"`
			}
			if err := json.Unmarshal(h.do(http.MethodPost, "/api/v1/tasks", h.admin, []byte(`{"suite":"s"}`)).body, &tasks); err != nil || len(tasks.Items) != 1 {
				t.Fatalf("tasks: %v", err)
			}
			r := h.mustJSON(http.MethodPost, "/api/v1/batches", h.admin,
				`{"agent_id":"agent-1","task_ids":["`+tasks.Items[0].TaskID+`"]`+c.extra+`}`, http.StatusCreated)
			var m map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &m); err != nil {
				t.Fatal(err)
			}
			if string(m["warnings"]) != c.want {
				t.Errorf("warnings = %s, want %q", m["warnings"], c.want)
			}
		})
	}
}
