package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/gateway"
)

// TestEveryProtocolRunsThroughTheGatewayAndIsCounted: for each protocol,
// non-streaming and streaming, the load sent directly to the stub and
// through an in-process gyre completes without failures (each stream up to
// its protocol's final event), and every gateway call is recorded and
// counted.
func TestEveryProtocolRunsThroughTheGatewayAndIsCounted(t *testing.T) {
	const rate, perPhase = 50, 200 * time.Millisecond
	for name := range benchProtocols(3) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := benchProtocols(3)[name]
			st, err := startStub(3)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			g, err := startGyre(st.url, options{rollouts: 2, cache: gateway.DefaultGrantCacheTTL, flush: gateway.DefaultFlushInterval, batch: gateway.DefaultFlushBatch})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			client := &http.Client{}
			targets := map[string]func(int) (string, string){
				"direct": func(int) (string, string) { return st.url + "/v1" + p.path, "" },
				"gateway": func(i int) (string, string) {
					rr := g.Rollouts()[i%2]
					return rr.LLMURL + p.path, rr.APIKey
				},
			}
			sent := 0
			for _, stream := range []bool{false, true} {
				for via, target := range targets {
					lat, first, fails := phase(client, p, target, stream, rate, perPhase)
					if fails != 0 || len(lat) != 10 || len(first) != 10 {
						t.Fatalf("%s %s: %d answered, %d failed; want 10 answered", mode(stream), via, len(lat), fails)
					}
					if via == "gateway" {
						sent += len(lat)
					}
				}
			}
			recorded, counted, err := g.Records()
			if err != nil {
				t.Fatal(err)
			}
			if recorded != sent || counted != sent {
				t.Errorf("gateway recorded %d, counted %d; want both %d", recorded, counted, sent)
			}
		})
	}
}

// TestStreamsEndAtTheProtocolsFinalEvent: the load generator stops
// reading a stream at the event its protocol's SDK ends on, and at no
// other.
func TestStreamsEndAtTheProtocolsFinalEvent(t *testing.T) {
	t.Parallel()
	ps := benchProtocols(2)
	cases := []struct {
		protocol, line string
		final          bool
	}{
		{"chat", "data: [DONE]", true},
		{"chat", `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","choices":[]}`, false},
		{"responses", `data: {"type":"response.completed","sequence_number":5,"response":{}}`, true},
		{"responses", `data: {"type":"response.output_text.delta","sequence_number":2,"delta":"response.completed"}`, false},
		{"responses", "event: response.completed", false},
		{"messages", `data: {"type":"message_stop"}`, true},
		{"messages", `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}`, false},
		{"messages", "data: [DONE]", false},
	}
	for _, tc := range cases {
		if got := ps[tc.protocol].final(tc.line); got != tc.final {
			t.Errorf("%s: final(%q) = %v, want %v", tc.protocol, tc.line, got, tc.final)
		}
	}
}
