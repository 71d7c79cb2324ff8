package telemetry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestParseLevel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want slog.Level
		ok   bool
	}{
		{"debug", slog.LevelDebug, true},
		{"INFO", slog.LevelInfo, true},
		{"", slog.LevelInfo, true},
		{"warn", slog.LevelWarn, true},
		{"warning", slog.LevelWarn, true},
		{"error", slog.LevelError, true},
		{"loud", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseLevel(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseLevel(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	NewLogger(&buf, slog.LevelWarn, LogAuto).Info("hidden")
	NewLogger(&buf, slog.LevelWarn, LogAuto).Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("a non-terminal writer gets JSON records: %q (%v)", buf.String(), err)
	}
	if rec["msg"] != "shown" {
		t.Fatalf("record %v", rec)
	}
	buf.Reset()
	NewLogger(&buf, slog.LevelInfo, LogText).Info("plain")
	if !strings.Contains(buf.String(), "msg=plain") {
		t.Fatalf("text record %q", buf.String())
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	a, b := NewMetrics(), NewMetrics() // separate registries: no duplicate registration
	a.RequestStarted()
	a.RequestDone("GET", "/x/{id}", 200, 5*time.Millisecond)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`gyre_http_requests_total{method="GET",route="/x/{id}",status="200"} 1`,
		`gyre_http_requests_in_flight 0`,
		`gyre_http_request_duration_seconds_count{method="GET",route="/x/{id}"} 1`,
		"go_goroutines",
		"process_start_time_seconds",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	rec = httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if strings.Contains(rec.Body.String(), `route="/x/{id}"`) {
		t.Fatal("two servers share a registry")
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "gyre_") {
			t.Fatalf("%s is in the global registry", mf.GetName())
		}
	}
}
