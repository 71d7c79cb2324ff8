package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestStartTracing_ExportsOverOTLPHTTP: with OTEL_EXPORTER_OTLP_ENDPOINT
// set, spans reach that collector as OTLP/HTTP protobuf by Shutdown, with
// the resource's service.name.
func TestStartTracing_ExportsOverOTLPHTTP(t *testing.T) {
	var (
		mu     sync.Mutex
		paths  []string
		bodies []string
		ctypes []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths, bodies, ctypes = append(paths, r.URL.Path), append(bodies, string(b)), append(ctypes, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")

	tr, err := StartTracing(context.Background(), "v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer().Start(context.Background(), "GET /api/v1/tasks")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/v1/traces" || ctypes[0] != "application/x-protobuf" {
		t.Fatalf("collector got %v (%v), want one POST /v1/traces in protobuf", paths, ctypes)
	}
	for _, want := range []string{"GET /api/v1/tasks", "service.name", "gyre", "v9.9.9", TracerName} {
		if !strings.Contains(bodies[0], want) {
			t.Errorf("exported spans do not carry %q", want)
		}
	}
}

func TestNoTracing_RecordsNothing(t *testing.T) {
	t.Parallel()
	for _, tr := range []*Tracing{nil, NoTracing()} {
		_, span := tr.Tracer().Start(context.Background(), "x")
		if span.IsRecording() || span.SpanContext().IsValid() {
			t.Error("a disabled tracer recorded a span")
		}
		span.End()
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
}
