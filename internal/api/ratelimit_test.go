package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/rollout"
)

func rate(s string) *ratelimit.Rate { r := ratelimit.MustParseRate(s); return &r }

// wantRateLimited checks a 429 rate_limited answer and its Retry-After.
func (r response) wantRateLimited(t *testing.T, retryAfter string) {
	t.Helper()
	r.wantError(t, http.StatusTooManyRequests, gyre.CodeRateLimited, "")
	if got := r.header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("Retry-After = %q, want %q", got, retryAfter)
	}
}

// TestRateLimit_TurnsPerKey: SPEC §2 — a key past its /turns bucket gets
// 429 rate_limited with Retry-After, and the refused batch changes
// nothing; other keys have buckets of their own; waiting Retry-After is
// enough.
func TestRateLimit_TurnsPerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart), withLimits(ratelimit.Config{
		ratelimit.AllTenants: {ratelimit.Turns: {PerKey: rate("2/s")}},
	}))
	a, b := e.key(gyre.RoleAgent), e.key(gyre.RoleAgent)
	for i := range 2 {
		e.postTurns(a, turnBatchJSON("bot", turnJSON(fmt.Sprint("a", i)))).wantTurnsAccepted(t, 1, 0)
	}
	e.postTurns(a, turnBatchJSON("bot", turnJSON("refused"))).wantRateLimited(t, "1")
	if got := e.listTurns(e.admin, "agent_id=bot"); len(got) != 2 {
		t.Fatalf("%d turns stored, want 2: a refused batch must store nothing", len(got))
	}
	e.postTurns(b, turnBatchJSON("bot", turnJSON("b0"))).wantTurnsAccepted(t, 1, 0)
	e.clk.Advance(499 * time.Millisecond)
	e.postTurns(a, turnBatchJSON("bot", turnJSON("refused"))).wantRateLimited(t, "1")
	e.clk.Advance(time.Millisecond)
	e.postTurns(a, turnBatchJSON("bot", turnJSON("refused"))).wantTurnsAccepted(t, 1, 0)
}

// TestRateLimit_AdminPerTenant: the admin surface (every /api/v1/ route)
// shares one bucket across a tenant's keys; another tenant, probes and
// unconfigured surfaces are untouched.
func TestRateLimit_AdminPerTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart), withLimits(ratelimit.Config{
		ratelimit.AllTenants: {ratelimit.Admin: {PerTenant: rate("3/m")}},
	}))
	reader := e.key(gyre.RoleReader)
	_, otherAdmin := e.newTenant("beta")
	for i, key := range []string{e.admin, reader, e.admin} {
		if r := e.do(http.MethodGet, "/api/v1/tasks", key, nil); r.status != http.StatusOK {
			t.Fatalf("request %d within the tenant's burst: %d %s", i+1, r.status, r.body)
		}
	}
	e.do(http.MethodGet, "/api/v1/keys", e.admin, nil).wantRateLimited(t, "20")
	e.do(http.MethodGet, "/api/v1/tasks", reader, nil).wantRateLimited(t, "20")
	if r := e.do(http.MethodGet, "/api/v1/keys", otherAdmin, nil); r.status != http.StatusOK {
		t.Fatalf("another tenant shares acme's bucket: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("/healthz: %d", r.status)
	}
	e.postTurns(e.key(gyre.RoleAgent), turnBatchJSON("bot", turnJSON("t0"))).wantTurnsAccepted(t, 1, 0)
	// A key that fails authentication is refused before any bucket.
	if r := e.do(http.MethodGet, "/api/v1/keys", "gyre_nope", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("bad key: %d %s", r.status, r.body)
	}
}

// TestRateLimit_TenantEntryByName: a tenant's own limits: entry, found
// by its name, replaces the "*" entry.
func TestRateLimit_TenantEntryByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart), withLimits(ratelimit.Config{
		ratelimit.AllTenants: {ratelimit.Turns: {PerKey: rate("1/h")}},
		"beta":               {ratelimit.Turns: {PerKey: rate("3/h")}},
	}))
	beta, _ := e.newTenant("beta")
	_, betaAgent := e.newKey(beta.ID, auth.KeyRequest{Role: gyre.RoleAgent})
	acmeAgent := e.key(gyre.RoleAgent)
	e.postTurns(acmeAgent, turnBatchJSON("bot", turnJSON("a0"))).wantTurnsAccepted(t, 1, 0)
	e.postTurns(acmeAgent, turnBatchJSON("bot", turnJSON("a1"))).wantRateLimited(t, "3600")
	for i := range 3 {
		e.postTurns(betaAgent, turnBatchJSON("bot", turnJSON(fmt.Sprint("b", i)))).wantTurnsAccepted(t, 1, 0)
	}
	e.postTurns(betaAgent, turnBatchJSON("bot", turnJSON("b3"))).wantRateLimited(t, "1200")
}

// TestRateLimit_ClaimsButNeverLeaseTraffic: claims are limited; the
// heartbeats and the output of a rollout already claimed never are, so a
// limit cannot cost a lease or finished work.
func TestRateLimit_ClaimsButNeverLeaseTraffic(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}), withLimits(ratelimit.Config{
				ratelimit.AllTenants: {ratelimit.Claims: {PerKey: rate("1/h"), PerTenant: rate("10/h")}},
			}))
			e.batch(e.tasks(2), "")
			rr := e.claimOne()
			e.claim("").response.wantRateLimited(t, "3600")
			for range 5 {
				if r := e.heartbeat(rr.RolloutID, leaseOf(rr)); r.status != http.StatusOK {
					t.Fatalf("heartbeat under a claim limit: %d %s", r.status, r.body)
				}
			}
			if r := e.output(rr.RolloutID, leaseOf(rr), `{"final_text":"refund issued","tool_calls":null}`); r.status != http.StatusOK {
				t.Fatalf("output under a claim limit: %d %s", r.status, r.body)
			}
			// Another agent key has its own bucket; the tenant's still holds.
			if c := e.claimAs(e.key(gyre.RoleAgent), "agent-1", "", ""); c.status != http.StatusOK || len(c.claim.Rollouts) != 1 {
				t.Fatalf("another key's claim: %d %s", c.status, c.body)
			}
		})
	}
}
