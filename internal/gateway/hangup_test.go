package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// An agent that cancels its request (a closed tab, a worker stopping, a
// timeout of its own) is no failure of the gateway's or the upstream's:
// nothing is logged at ERROR or with code internal, the access log shows
// 499 when no status line went out, and the call is recorded counted
// false, reason client_disconnected, never as an upstream or internal
// failure (SPEC §6.3).

const chatRoute = "/gw/{token}/v1/chat/completions"

// cancelDuring sends body to path with key and cancels the request once
// ready is closed, then waits for the client to give up.
func cancelDuring(t *testing.T, h *harness, path, key, body string, ready <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		resp, err := h.ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-ready
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
}

// logLines is the server's log so far, one map per JSON line.
func logLines(t *testing.T, h *harness) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// accessStatus waits for route's access log line and returns its status.
// The line is written when the handler has returned, which may trail the
// client.
func accessStatus(t *testing.T, h *harness, route string) int {
	t.Helper()
	for range 500 {
		for _, l := range logLines(t, h) {
			if l["msg"] == "http request" && l["route"] == route {
				return int(l["status"].(float64))
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no access log line for %s:\n%s", route, h.logs.String())
	return 0
}

// wantNoServerError fails on a log line at ERROR or with code internal.
func wantNoServerError(t *testing.T, h *harness) {
	t.Helper()
	for _, l := range logLines(t, h) {
		if l["level"] == "ERROR" || l["code"] == gateway.CodeInternal || l["code"] == gyre.CodeInternal {
			t.Errorf("log line %v: an agent that went away is no server error", l)
		}
	}
}

// wantDisconnected waits for the rollout's only call and checks it is
// recorded with status, counted false, reason client_disconnected.
func wantDisconnected(t *testing.T, h *harness, rolloutID string, status int) {
	t.Helper()
	v := waitCall(t, h, rolloutID, func(v view) bool { return len(v.Gateway.Calls) == 1 })
	c := v.Gateway.Calls[0]
	if c.Counted || c.Reason == nil || *c.Reason != gateway.ReasonClientDisconnected || c.Status != status {
		t.Errorf("call: status %d counted %v reason %v, want %d, not counted, %s",
			c.Status, c.Counted, deref(c.Reason), status, gateway.ReasonClientDisconnected)
	}
	if v.Gateway.Completions != 0 {
		t.Errorf("completions = %d, want 0", v.Gateway.Completions)
	}
}

func TestGateway_AgentCancellingBeforeTheUpstreamAnswersIsNoServerError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	waiting := make(chan struct{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		close(waiting)
		<-r.Context().Done() // until the gateway cancels the upstream request
	})
	rr := h.rollout(`,"policy":"p1"`)
	cancelDuring(t, h, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, string(chatBody), waiting)
	if got := accessStatus(t, h, chatRoute); got != 499 {
		t.Errorf("access log status %d, want 499 (client closed request)", got)
	}
	wantDisconnected(t, h, rr.RolloutID, 499)
	wantNoServerError(t, h)
}

func TestGateway_AgentCancellingMidStreamIsNoServerError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		sse(w, chunkJSON(`{"role":"assistant","content":"first"}`, ""))
		<-r.Context().Done()
	})
	rr := h.rollout(`,"policy":"p1"`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.ts.URL+"/gw/"+gatewayToken(rr)+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+rr.APIKey)
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	cancel() // mid-stream, after the first event
	if _, err := io.Copy(io.Discard, rd); !errors.Is(err, context.Canceled) {
		t.Fatalf("reading on: %v, want context.Canceled", err)
	}
	// The status line went out with the first event: the access log keeps
	// the 200 the agent saw.
	if got := accessStatus(t, h, chatRoute); got != http.StatusOK {
		t.Errorf("access log status %d, want 200", got)
	}
	wantDisconnected(t, h, rr.RolloutID, http.StatusOK)
	wantNoServerError(t, h)
}

// blockingPolicyStore holds the gateway's policy read until the request's
// context ends, and fails as database/sql does then.
type blockingPolicyStore struct {
	gateway.Store
	reading chan struct{}
	once    *sync.Once
}

func (s blockingPolicyStore) GetPolicy(ctx context.Context, tenantID, name string) (store.Policy, error) {
	s.once.Do(func() { close(s.reading) })
	<-ctx.Done()
	return store.Policy{}, ctx.Err()
}

func TestGateway_AgentCancellingDuringAStoreReadIsNoServerError(t *testing.T) {
	t.Parallel()
	reading := make(chan struct{})
	h := newHarness(t, sqliteEngine, harnessOpts{gatewayStore: func(s gateway.Store) gateway.Store {
		return blockingPolicyStore{Store: s, reading: reading, once: &sync.Once{}}
	}})
	rr := h.rollout(`,"policy":"p1"`)
	cancelDuring(t, h, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, string(chatBody), reading)
	if got := accessStatus(t, h, chatRoute); got != 499 {
		t.Errorf("access log status %d, want 499 (client closed request)", got)
	}
	// Recorded as the agent leaving, not as a policy the gateway could
	// not read (no_policy, 503).
	wantDisconnected(t, h, rr.RolloutID, 499)
	wantNoServerError(t, h)
	if h.up.count() != 0 {
		t.Errorf("the upstream saw %d requests for a call whose agent left first", h.up.count())
	}
}

func TestPolicyEndpoint_AgentCancellingBeforeTheUpstreamAnswersIsNoServerError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: "p1"}})
	waiting := make(chan struct{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		close(waiting)
		<-r.Context().Done()
	})
	cancelDuring(t, h, "/agents/agent-1/v1/chat/completions", h.key(gyre.RoleInference), string(chatBody), waiting)
	if got := accessStatus(t, h, "/agents/{agent_id}/v1/chat/completions"); got != 499 {
		t.Errorf("access log status %d, want 499 (client closed request)", got)
	}
	wantNoServerError(t, h)
}
