package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus metrics. Labels carry route names,
// upstream names, statuses and reason codes only: never a token, key or
// raw path.
type metrics struct {
	requests     *prometheus.CounterVec
	authRejected *prometheus.CounterVec
	completions  *prometheus.CounterVec
	upstream     *prometheus.HistogramVec
	added        *prometheus.HistogramVec
	pending      prometheus.GaugeFunc
	flushes      *prometheus.HistogramVec
	cuts         prometheus.Counter
}

// Route names of the metrics' route label.
const (
	routeChat       = "/gw/{token}/v1/chat/completions"
	routeModels     = "/gw/{token}/v1/models"
	routeProduction = "/agents/{agent_id}/v1/chat/completions"
)

// latencyBuckets resolve the sub-millisecond overhead the gateway adds as
// well as slow upstreams.
var latencyBuckets = []float64{
	0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
	5, 10, 30, 60, 120,
}

func newMetrics(reg prometheus.Registerer, pending func() float64) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "requests_total",
			Help: "Gateway requests answered, by route template and status.",
		}, []string{"route", "status"}),
		authRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "auth_rejected_total",
			Help: "Gateway requests refused at authentication (never recorded on a rollout), by code.",
		}, []string{"code"}),
		completions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "completions_total",
			Help: "Recorded gateway calls, by whether they counted and the reason when not.",
		}, []string{"counted", "reason"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "upstream_latency_seconds",
			Help:    "Time from sending a request upstream to the upstream's answer headers, by upstream.",
			Buckets: latencyBuckets,
		}, []string{"upstream", "stream"}),
		added: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "added_latency_seconds",
			Help:    "Time a request spent in the gateway outside the upstream call, by route template.",
			Buckets: latencyBuckets,
		}, []string{"route", "stream"}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "records_pending",
			Help: "Gateway records waiting in memory for a flush.",
		}, pending),
		flushes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "flush_seconds",
			Help:    "Time to flush a batch of gateway records, by result.",
			Buckets: prometheus.DefBuckets,
		}, []string{"result"}),
		cuts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gyre", Subsystem: "gateway", Name: "revocation_cuts_total",
			Help: "Requests in flight cut because their rollout's credential was revoked.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.authRejected, m.completions, m.upstream, m.added, m.pending, m.flushes, m.cuts)
	}
	return m
}

func (m *metrics) answered(route string, status int) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

func (m *metrics) recorded(counted bool, reason *string) {
	r := ""
	if reason != nil {
		r = *reason
	}
	m.completions.WithLabelValues(strconv.FormatBool(counted), r).Inc()
}

func (m *metrics) latency(route, upstream string, stream bool, toHeaders, added time.Duration) {
	s := strconv.FormatBool(stream)
	if upstream != "" {
		m.upstream.WithLabelValues(upstream, s).Observe(toHeaders.Seconds())
	}
	m.added.WithLabelValues(route, s).Observe(added.Seconds())
}

// rolloutRoute is the route template of a rollout's calls on protocol p.
func rolloutRoute(p Protocol) string {
	if p == ProtocolChat {
		return routeChat
	}
	return "/gw/{token}/v1" + p.Path()
}

// productionRoute is the route template of the policy endpoint on
// protocol p.
func productionRoute(p Protocol) string {
	if p == ProtocolChat {
		return routeProduction
	}
	return "/agents/{agent_id}/v1" + p.Path()
}
