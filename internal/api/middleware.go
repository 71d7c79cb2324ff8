package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// reqInfo is what the outer layers learn about a request from the inner
// ones: the route template matched and the key that authenticated.
type reqInfo struct {
	id     string
	route  string
	keyID  string
	w      *statusWriter
	public bool // a probe or metrics scrape: logged at debug level
}

func (i *reqInfo) wroteHeader() bool { return i.w != nil && i.w.status != 0 }

type infoKey struct{}

// infoFrom returns the request's reqInfo; requests that did not pass
// through ServeHTTP get an empty one.
func infoFrom(ctx context.Context) *reqInfo {
	if i, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{route: routeUnmatched}
}

// routeUnmatched is the route label of requests that matched no route.
const routeUnmatched = "unmatched"

// maxRequestIDLen bounds an incoming X-Request-Id that is kept as is.
const maxRequestIDLen = 64

// requestID keeps a safe incoming X-Request-Id (saneRequestID) and mints a
// UUIDv7 otherwise. The id is echoed and logged, so a client must not be
// able to put anything there a log reader could mistake or misuse.
func requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); saneRequestID(v) {
		return v
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// saneRequestID reports whether s may be kept as a request id: 1–64
// characters of A-Z a-z 0-9 . _ -, and not shaped like a secret gyre
// issues — nothing containing the API key prefix (a client that pastes
// its key there would have it logged) and no 43-character base64url
// string, the shape of lease tokens, gateway tokens and gateway keys.
func saneRequestID(s string) bool {
	if len(s) == 0 || len(s) > maxRequestIDLen || len(s) == secretLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return !strings.Contains(strings.ToLower(s), auth.KeyPrefix)
}

// secretLen is the length of the rollout secrets gyre mints: 256 bits in
// unpadded base64url.
const secretLen = 43

// statusWriter records the status and size of a response. It unwraps for
// http.ResponseController, so flushes and deadlines reach the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// knownMethods bounds the method label of metrics; anything else is OTHER.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	return "OTHER"
}

// ServeHTTP is the outermost layer: request id, panic recovery, access
// log and metrics around the route table. The log, metrics and span of a
// stream whose last write the gateway left to net/http are recorded once
// that write is done (gateway.AfterResponse), not before it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.clock.Now()
	sw := &statusWriter{ResponseWriter: w}
	info := &reqInfo{id: requestID(r), route: routeUnmatched, w: sw}
	sw.Header().Set("X-Request-Id", info.id)
	// The span is named once the route is known: a route template,
	// never the raw path, which may carry a gateway token.
	ctx := telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, methodLabel(r.Method), trace.WithSpanKind(trace.SpanKindServer))
	r = r.WithContext(context.WithValue(ctx, infoKey{}, info))
	s.metrics.RequestStarted()

	defer func() {
		p := recover()
		if p != nil && p != http.ErrAbortHandler {
			s.log.LogAttrs(r.Context(), slog.LevelError, "panic serving request",
				slog.String("request_id", info.id),
				slog.String("route", info.route),
				slog.String("panic", fmt.Sprint(p)),
				slog.String("stack", string(debug.Stack())))
			if !info.wroteHeader() {
				s.writeError(sw, r, fmt.Errorf("panic: %v", p))
			}
		}
		if p != nil || !gateway.AfterResponse(r, func() { s.requestDone(r, sw, info, span, start) }) {
			s.requestDone(r, sw, info, span, start)
		}
		if p == http.ErrAbortHandler {
			panic(p)
		}
	}()

	s.dispatch(sw, r)
}

// requestDone records a finished request: metrics, access log, span.
func (s *Server) requestDone(r *http.Request, sw *statusWriter, info *reqInfo, span trace.Span, start time.Time) {
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	d := s.clock.Now().Sub(start)
	s.metrics.RequestDone(methodLabel(r.Method), info.route, status, d)
	level := slog.LevelInfo
	if info.public && status < 400 {
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{
		slog.String("method", methodLabel(r.Method)),
		slog.String("route", info.route),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.Int64("bytes", sw.bytes),
		slog.String("request_id", info.id),
	}
	if info.keyID != "" {
		attrs = append(attrs, slog.String("key_id", info.keyID))
	}
	if sc := span.SpanContext(); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	s.log.LogAttrs(r.Context(), level, "http request", attrs...)
	endSpan(span, methodLabel(r.Method), info, status)
}

// dispatch refuses unclean paths, answers unknown paths and wrong methods
// in gyre's error shape, and hands everything else to the mux.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != cleanPath(r.URL.Path) {
		s.writeError(w, r, errUncleanPath)
		return
	}
	h, pattern := s.mux.Handler(r)
	if s.patterns[pattern] {
		s.mux.ServeHTTP(w, r)
		return
	}
	// No route: ask the mux whether another method would have matched,
	// without letting it write its plain-text answer.
	rec := &probeWriter{header: http.Header{}}
	if pattern == "" {
		h.ServeHTTP(rec, r)
	}
	if rec.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", rec.header.Get("Allow"))
		s.writeError(w, r, errMethodNotAllowed(r.Method))
		return
	}
	s.writeError(w, r, errNoRoute)
}

// probeWriter captures what the mux's fallback handlers would answer.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header { return p.header }
func (p *probeWriter) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *probeWriter) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}

// bodyLimit caps the request body of a route handler at max bytes and
// refuses a declared length over it before reading anything.
func bodyLimit(w http.ResponseWriter, r *http.Request, max int64) error {
	if r.ContentLength > max {
		return errBodyTooLarge(max)
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, max)
	}
	return nil
}

// requestTimeout bounds a handler's context.
func requestTimeout(r *http.Request, d time.Duration) (*http.Request, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), d)
	return r.WithContext(ctx), cancel
}

// endSpan names a request's server span after its route template and
// ends it, with the attributes an operator filters on: never a raw path,
// header or body.
func endSpan(span trace.Span, method string, info *reqInfo, status int) {
	if !span.IsRecording() {
		return
	}
	span.SetName(method + " " + info.route)
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", method),
		attribute.String("http.route", info.route),
		attribute.Int("http.response.status_code", status),
		attribute.String("gyre.request_id", info.id),
	}
	if info.keyID != "" {
		attrs = append(attrs, attribute.String("gyre.key_id", info.keyID))
	}
	span.SetAttributes(attrs...)
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}
