package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of gyre's spans.
const TracerName = "github.com/gyrehq/gyre"

// Tracing is a process's OpenTelemetry tracing (SPEC §2): spans exported
// over OTLP/HTTP when enabled, or a tracer that records nothing.
type Tracing struct {
	provider trace.TracerProvider
	shutdown func(context.Context) error
}

// NoTracing records nothing.
func NoTracing() *Tracing {
	return &Tracing{provider: noop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}
}

// StartTracing exports spans over OTLP/HTTP, configured by the standard
// OTEL_EXPORTER_OTLP_* environment variables (endpoint, headers,
// certificates, timeout), batched off the request path. service.name is
// "gyre" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. The caller decides whether to call it: gyre serve does when
// OTEL_EXPORTER_OTLP_ENDPOINT (or its traces-only twin) is set.
func StartTracing(ctx context.Context, version string) (*Tracing, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "gyre"), attribute.String("service.version", version)),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: tp, shutdown: tp.Shutdown}, nil
}

// NewTracing wraps a provider, such as a test's span recorder.
func NewTracing(tp trace.TracerProvider) *Tracing {
	shutdown := func(context.Context) error { return nil }
	if s, ok := tp.(interface{ Shutdown(context.Context) error }); ok {
		shutdown = s.Shutdown
	}
	return &Tracing{provider: tp, shutdown: shutdown}
}

// Tracer is gyre's tracer. A nil Tracing gives one that records nothing.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer(TracerName)
	}
	return t.provider.Tracer(TracerName)
}

// Shutdown exports what is buffered and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Propagator reads and writes W3C trace context (traceparent,
// tracestate); a caller's baggage is not taken in.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}
