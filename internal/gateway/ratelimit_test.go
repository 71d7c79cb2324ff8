package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/ratelimit"
)

func rate(s string) *ratelimit.Rate { r := ratelimit.MustParseRate(s); return &r }

// TestGateway_RateLimitedPerRolloutAndTenant: SPEC §2 — the gateway has
// a bucket per rollout credential and per tenant; a request past either
// is 429 rate_limited in the OpenAI shape with Retry-After, never reaches
// the upstream and is not recorded; the real OpenAI client sees a 429
// APIError with that code.
func TestGateway_RateLimitedPerRolloutAndTenant(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{limits: ratelimit.Config{ratelimit.AllTenants: {
			ratelimit.Gateway: {PerKey: rate("2/s"), PerTenant: rate("3/s")},
		}}})
		a := h.rollout(`,"policy":"p1"`)
		b := h.rollout(`,"policy":"p1"`)
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		chat := func(rr string, key string) response {
			return h.do(http.MethodPost, "/gw/"+rr+"/v1/chat/completions", key, body)
		}
		for i := range 2 {
			if r := chat(gatewayToken(a), a.APIKey); r.status != http.StatusOK {
				t.Fatalf("rollout a, request %d: %d %s", i+1, r.status, r.body)
			}
		}
		r := chat(gatewayToken(a), a.APIKey)
		wantOpenAIError(t, r, http.StatusTooManyRequests, gateway.CodeRateLimited)
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q, want 1 (a token every 0.5 s, rounded up)", got)
		}
		if got := r.header.Get("X-Should-Retry"); got != "true" {
			t.Errorf("X-Should-Retry = %q: a rate-limited client may retry after waiting", got)
		}
		// Rollout b has its own bucket but the tenant's holds one more.
		if r := chat(gatewayToken(b), b.APIKey); r.status != http.StatusOK {
			t.Fatalf("rollout b within the tenant's burst: %d %s", r.status, r.body)
		}
		_, err := h.client(b).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:    "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != gateway.CodeRateLimited {
			t.Fatalf("OpenAI client past the tenant's bucket: %v, want a 429 rate_limited", err)
		}
		if n := h.up.count(); n != 3 {
			t.Errorf("the upstream received %d requests, want only the 3 admitted", n)
		}
		// A refused request is not a call of the rollout.
		h.flush()
		if v := h.view(a.RolloutID); len(v.Gateway.Calls) != 2 {
			t.Errorf("rollout a has %d recorded calls, want its 2 admitted ones", len(v.Gateway.Calls))
		}
		h.clk.Advance(time.Second) // a refills to 2 tokens, the tenant to 3
		for i := range 2 {
			if r := chat(gatewayToken(a), a.APIKey); r.status != http.StatusOK {
				t.Fatalf("after Retry-After, request %d: %d %s", i+1, r.status, r.body)
			}
		}
		// The models listing is the same surface.
		wantOpenAIError(t, h.do(http.MethodGet, "/gw/"+gatewayToken(a)+"/v1/models", a.APIKey, nil),
			http.StatusTooManyRequests, gateway.CodeRateLimited)
	})
}

// TestGateway_WrongKeyNeverSpendsTheRolloutsTokens: authentication comes
// first, so nobody without the rollout's key can exhaust its bucket.
func TestGateway_WrongKeyNeverSpendsTheRolloutsTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{limits: ratelimit.Config{ratelimit.AllTenants: {
		ratelimit.Gateway: {PerKey: rate("1/h")},
	}}})
	rr := h.rollout(`,"policy":"p1"`)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for range 5 {
		wantOpenAIError(t, h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", "sk-wrong", body),
			http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
	}
	if r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, body); r.status != http.StatusOK {
		t.Fatalf("the rollout's own first request: %d %s", r.status, r.body)
	}
}

// TestGateway_PolicyEndpointRateLimitedPerKey: the policy endpoint's
// bucket is per API key.
func TestGateway_PolicyEndpointRateLimitedPerKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: "p1"}, limits: ratelimit.Config{"acme": {
		ratelimit.Gateway: {PerKey: rate("1/m")},
	}}})
	h.rollout("") // agent-1 exists
	one, two := h.key(gyre.RoleInference, "agent-1"), h.key(gyre.RoleInference, "agent-1")
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	h.mustJSON(http.MethodPost, "/agents/agent-1/v1/chat/completions", one, body, http.StatusOK)
	r := h.do(http.MethodPost, "/agents/agent-1/v1/chat/completions", one, []byte(body))
	wantOpenAIError(t, r, http.StatusTooManyRequests, gateway.CodeRateLimited)
	if got := r.header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
	}
	h.mustJSON(http.MethodPost, "/agents/agent-1/v1/chat/completions", two, body, http.StatusOK)
}
