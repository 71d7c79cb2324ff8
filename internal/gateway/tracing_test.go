package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// spanNamed returns the ended span named name. A server span ends just
// after its answer is written, so it may end after the client has read
// the answer: wait for it a little.
func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := rec.Ended()
		for _, s := range spans {
			if s.Name() == name {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span named %q among %s", name, spanText(spans))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestGateway_TraceContext: SPEC §2 tracing — a request's server span
// continues the caller's W3C trace, is named after the route template,
// and the gateway's upstream call is its child span, whose context
// reaches the upstream in traceparent.
func TestGateway_TraceContext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"p1"`)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
		[]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`),
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	server := spanNamed(t, h.spans, "POST /gw/{token}/v1/chat/completions")
	if server.SpanKind() != trace.SpanKindServer || server.SpanContext().TraceID().String() != traceID ||
		server.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("server span kind %v trace %s parent %s: it does not continue the caller's trace",
			server.SpanKind(), server.SpanContext().TraceID(), server.Parent().SpanID())
	}
	if got := attr(server, "http.route").AsString(); got != "/gw/{token}/v1/chat/completions" {
		t.Errorf("http.route = %q", got)
	}
	if got := attr(server, "http.response.status_code").AsInt64(); got != 200 {
		t.Errorf("http.response.status_code = %d", got)
	}
	up := spanNamed(t, h.spans, "gateway upstream")
	if up.SpanKind() != trace.SpanKindClient || up.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("upstream span kind %v parent %s, want a client span under the server span %s",
			up.SpanKind(), up.Parent().SpanID(), server.SpanContext().SpanID())
	}
	if attr(up, "gyre.upstream").AsString() != "stub" || attr(up, "gyre.policy").AsString() != "p1" ||
		attr(up, "gen_ai.request.model").AsString() != "served-model" || !attr(up, "gyre.counted").AsBool() {
		t.Errorf("upstream span attributes: %s", spanText([]sdktrace.ReadOnlySpan{up}))
	}
	h.up.mu.Lock()
	tp := h.up.headers[len(h.up.headers)-1].Get("traceparent")
	h.up.mu.Unlock()
	if !strings.HasPrefix(tp, "00-"+traceID+"-"+up.SpanContext().SpanID().String()) {
		t.Errorf("upstream traceparent = %q, want the upstream span's context", tp)
	}
	// A refused request is traced too, under its template.
	h.do(http.MethodGet, "/gw/"+gatewayToken(rr)+"/v1/files", rr.APIKey, nil)
	if s := spanNamed(t, h.spans, "GET /gw/{token}/"); attr(s, "http.response.status_code").AsInt64() != 404 {
		t.Errorf("unsupported endpoint span: %s", spanText([]sdktrace.ReadOnlySpan{s}))
	}
}
