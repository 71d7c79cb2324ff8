package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
)

// TestGateway_UnsupportedProtocolIsRefusedNamingWhatTheUpstreamSpeaks: a
// call on a protocol the policy's upstream does not declare is 400
// unsupported_protocol naming the protocols it speaks, is recorded not
// counted, and never reaches the upstream (no silent translation).
func TestGateway_UnsupportedProtocolIsRefusedNamingWhatTheUpstreamSpeaks(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{gw: gateway.Config{Upstreams: []gateway.Upstream{{Name: "resp-only",
			BaseURL: "http://127.0.0.1:1/v1", AllowPrivate: true, Protocols: []gateway.Protocol{gateway.ProtocolResponses}}}}})
		h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"p2","upstream":"resp-only","model":"m"}`, http.StatusCreated)
		rr := h.rollout(`,"policy":"p2"`)
		r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
			[]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		wantOpenAIError(t, r, http.StatusBadRequest, gateway.CodeUnsupportedProtocol)
		if !strings.Contains(string(r.body), `speaks responses, not chat`) {
			t.Errorf("the error does not name what the upstream speaks: %s", r.body)
		}
		if n := h.up.count(); n != 0 {
			t.Errorf("the upstream received %d requests", n)
		}
		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 0 || len(v.Gateway.Calls) != 1 {
			t.Fatalf("gateway = %+v", v.Gateway)
		}
		if c := v.Gateway.Calls[0]; c.Counted || c.Status != 400 || c.Reason == nil || *c.Reason != gateway.ReasonUnsupportedProtocol ||
			c.Protocol != "chat" {
			t.Errorf("call = %+v", c)
		}
	})
}

// TestGateway_CallsShowTheirProtocol: GET /rollouts/{id} and
// /rollouts/{id}/calls show each call's protocol.
func TestGateway_CallsShowTheirProtocol(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"p1"`)
	h.mustJSON(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`, http.StatusOK)
	h.flush()
	if v := h.view(rr.RolloutID); len(v.Gateway.Calls) != 1 || v.Gateway.Calls[0].Protocol != "chat" {
		t.Errorf("calls = %+v", v.Gateway.Calls)
	}
	r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/calls", h.admin, "", http.StatusOK)
	if !strings.Contains(string(r.body), `"protocol":"chat"`) {
		t.Errorf("calls: %s", r.body)
	}
}

// TestConfig_UpstreamProtocols: an upstream speaks chat unless it
// declares its protocols; an unknown, repeated or empty list is a
// configuration error naming the field.
func TestConfig_UpstreamProtocols(t *testing.T) {
	t.Parallel()
	if u := (gateway.Upstream{Name: "u"}); !u.Speaks(gateway.ProtocolChat) || u.Speaks(gateway.ProtocolResponses) {
		t.Errorf("an upstream without protocols must speak chat only")
	}
	if u := (gateway.Upstream{Name: "u", Protocols: []gateway.Protocol{gateway.ProtocolResponses}}); u.Speaks(gateway.ProtocolChat) ||
		!u.Speaks(gateway.ProtocolResponses) {
		t.Errorf("an upstream declaring [responses] must speak responses only")
	}
	for _, tc := range []struct {
		protocols []gateway.Protocol
		want      string
	}{
		{nil, ""},
		{[]gateway.Protocol{"chat", "responses", "messages"}, ""},
		{[]gateway.Protocol{}, "upstreams[0] (u): protocols: list at least one of chat, responses, messages"},
		{[]gateway.Protocol{"chat", "completions"}, `upstreams[0] (u): protocols[1]: unknown protocol "completions"`},
		{[]gateway.Protocol{"chat", "chat"}, "upstreams[0] (u): protocols[1]: chat is listed twice"},
	} {
		err := gateway.Config{Upstreams: []gateway.Upstream{{Name: "u", BaseURL: "http://x/v1", Protocols: tc.protocols}}}.WithDefaults().Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.protocols, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.protocols, err, tc.want)
		}
	}
}
