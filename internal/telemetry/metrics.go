package telemetry

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one server's Prometheus registry and the metrics gyre's
// HTTP layer records into it.
type Metrics struct {
	// Registry holds every collector of this server. Other packages
	// register their own metrics here, never in the global registry.
	Registry *prometheus.Registry

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
}

// NewMetrics returns a fresh registry with the Go runtime and process
// collectors and gyre's HTTP metrics:
//
//   - gyre_http_requests_total{method,route,status}
//   - gyre_http_request_duration_seconds{method,route}
//   - gyre_http_requests_in_flight
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gyre",
			Subsystem: "http",
			Name:      "requests_total",
			Help:      "HTTP requests answered, by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gyre",
			Subsystem: "http",
			Name:      "request_duration_seconds",
			Help:      "Time to answer HTTP requests, by method and route template.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"method", "route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gyre",
			Subsystem: "http",
			Name:      "requests_in_flight",
			Help:      "HTTP requests being served.",
		}),
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.inflight,
	)
	return m
}

// RequestStarted counts a request in flight; call RequestDone when it ends.
func (m *Metrics) RequestStarted() { m.inflight.Inc() }

// RequestDone records one answered request. route must be a route
// template (or a fixed placeholder for unmatched paths), never a raw path.
func (m *Metrics) RequestDone(method, route string, status int, d time.Duration) {
	m.inflight.Dec()
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(method, route).Observe(d.Seconds())
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
