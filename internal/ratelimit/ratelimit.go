// Package ratelimit holds the per-key and per-tenant token buckets of
// SPEC §2: each surface (/turns, claims, the gateway, the admin API) may
// carry a bucket per API key and one per tenant, configured per tenant in
// gyre.yaml's limits: section and off unless configured. A request takes
// one token from every bucket that applies, or from none: a refusal never
// spends a token, so a client that waits out Retry-After gets in.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gyrehq/gyre/internal/clock"
)

// Surface is a group of routes that share buckets.
type Surface string

// The surfaces SPEC §2 names.
const (
	// Turns is POST /turns.
	Turns Surface = "turns"
	// Claims is POST /agents/{agent_id}/claim. Heartbeats, releases and
	// outputs are never limited: refusing them would lose leases and work
	// already done.
	Claims Surface = "claims"
	// Gateway is the LLM gateway (per rollout credential) and the policy
	// endpoint (per API key).
	Gateway Surface = "gateway"
	// Admin is every /api/v1/ route.
	Admin Surface = "admin"
)

// Surfaces lists every surface, in the order messages name them.
var Surfaces = []Surface{Turns, Claims, Gateway, Admin}

// AllTenants is the limits: entry that applies to every tenant without an
// entry of its own.
const AllTenants = "*"

// Rate is a token bucket: Burst tokens at most, refilled at Events per
// Per.
type Rate struct {
	Events int
	Per    time.Duration
	Burst  int
}

// perSecond is r's refill rate in tokens per second.
func (r Rate) perSecond() float64 { return float64(r.Events) / r.Per.Seconds() }

// String writes r as ParseRate reads it.
func (r Rate) String() string {
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[r.Per]
	s := fmt.Sprintf("%d/%s", r.Events, unit)
	if r.Burst != r.Events {
		s += fmt.Sprintf(" burst %d", r.Burst)
	}
	return s
}

// ParseRate reads "N/s", "N/m" or "N/h" (also /second, /minute, /hour),
// optionally followed by " burst M". Without a burst the bucket holds N
// tokens: "600/m" admits 600 requests at once, then 10 a second.
func ParseRate(s string) (Rate, error) {
	spec, burst, hasBurst := strings.Cut(strings.TrimSpace(s), " burst ")
	n, unit, ok := strings.Cut(strings.TrimSpace(spec), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/s, N/m or N/h, optionally followed by \" burst M\"", s)
	}
	events, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || events < 1 {
		return Rate{}, fmt.Errorf("rate %q: the number of requests must be a whole number of at least 1", s)
	}
	r := Rate{Events: events, Burst: events}
	switch strings.TrimSpace(unit) {
	case "s", "sec", "second":
		r.Per = time.Second
	case "m", "min", "minute":
		r.Per = time.Minute
	case "h", "hour":
		r.Per = time.Hour
	default:
		return Rate{}, fmt.Errorf("rate %q: the unit must be s, m or h", s)
	}
	if hasBurst {
		b, err := strconv.Atoi(strings.TrimSpace(burst))
		if err != nil || b < 1 {
			return Rate{}, fmt.Errorf("rate %q: burst must be a whole number of at least 1", s)
		}
		r.Burst = b
	}
	return r, nil
}

// MustParseRate is ParseRate for rates fixed in code; it panics on an
// invalid one.
func MustParseRate(s string) Rate {
	r, err := ParseRate(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Limit is what one surface allows one tenant: a bucket per API key, one
// for the whole tenant, or both. A nil Rate is no bucket.
type Limit struct {
	PerKey    *Rate
	PerTenant *Rate
}

// Config maps tenant names (or AllTenants) to their limits by surface.
// A tenant with an entry of its own takes nothing from the AllTenants
// entry.
type Config map[string]map[Surface]Limit

// Decision is the answer to one request.
type Decision struct {
	// Allowed is true when the request may go ahead.
	Allowed bool
	// RetryAfter is how long a refused request should wait before the
	// buckets that refused it hold a token again.
	RetryAfter time.Duration
	// Scope names the bucket that refused: "key" or "tenant".
	Scope string
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up and at
// least 1, as the Retry-After header carries it.
func (d Decision) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(d.RetryAfter.Seconds())))
}

// TenantNamer returns a tenant's name from its id; names never change.
type TenantNamer func(ctx context.Context, tenantID string) (string, error)

// sweepEvery is how often buckets that have refilled are forgotten: a
// full bucket behaves exactly as a fresh one, so forgetting it is
// lossless and keeps memory bounded by the keys recently active.
const sweepEvery = time.Minute

// Limiter applies a Config. A nil *Limiter allows everything.
type Limiter struct {
	cfg   Config
	clock clock.Clock
	name  TenantNamer

	names sync.Map // tenant id → name

	mu        sync.Mutex
	buckets   map[bucketKey]*bucket
	lastSweep time.Time

	refused *prometheus.CounterVec
}

type bucketKey struct {
	surface Surface
	tenant  bool   // a tenant bucket, else a key bucket
	id      string // tenant id or key id
}

type bucket struct {
	rate   Rate
	tokens float64
	at     time.Time
}

// refill brings b's tokens up to now.
func (b *bucket) refill(now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = math.Min(float64(b.rate.Burst), b.tokens+el.Seconds()*b.rate.perSecond())
		b.at = now
	}
}

// wait is how long b needs to hold one token.
func (b *bucket) wait() time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.rate.perSecond() * float64(time.Second))
}

// New returns a Limiter for cfg, or nil when cfg configures no bucket.
// name resolves tenant ids to the names cfg uses; it is only called when
// cfg names a tenant other than AllTenants.
func New(cfg Config, c clock.Clock, name TenantNamer) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.configured() {
		return nil, nil
	}
	if c == nil {
		c = clock.Real{}
	}
	if !cfg.namesTenants() {
		name = nil // every tenant has the AllTenants limits: no name to read
	} else if name == nil {
		return nil, errors.New("ratelimit: limits name tenants but no tenant namer was given")
	}
	return &Limiter{cfg: cfg, clock: c, name: name, buckets: map[bucketKey]*bucket{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gyre",
			Name:      "rate_limited_total",
			Help:      "Requests refused 429 rate_limited, by surface and by the bucket (key or tenant) that refused them.",
		}, []string{"surface", "scope"}),
	}, nil
}

// Register adds the limiter's metric, gyre_rate_limited_total{surface,
// scope}, to reg. A nil limiter registers nothing.
func (l *Limiter) Register(reg prometheus.Registerer) error {
	if l == nil || reg == nil {
		return nil
	}
	return reg.Register(l.refused)
}

// Validate reports the first entry of c that cannot work.
func (c Config) Validate() error {
	for tenant, bySurface := range c {
		if tenant == "" {
			return errors.New("limits: a tenant name must not be empty")
		}
		for s, l := range bySurface {
			if !knownSurface(s) {
				return fmt.Errorf("limits: %s: unknown surface %q (known: turns, claims, gateway, admin)", tenant, s)
			}
			for _, r := range []*Rate{l.PerKey, l.PerTenant} {
				if r != nil && (r.Events < 1 || r.Per <= 0 || r.Burst < 1) {
					return fmt.Errorf("limits: %s.%s: a rate needs at least one request per period and a burst of at least 1", tenant, s)
				}
			}
		}
	}
	return nil
}

func knownSurface(s Surface) bool {
	for _, k := range Surfaces {
		if s == k {
			return true
		}
	}
	return false
}

func (c Config) configured() bool {
	for _, bySurface := range c {
		for _, l := range bySurface {
			if l.PerKey != nil || l.PerTenant != nil {
				return true
			}
		}
	}
	return false
}

func (c Config) namesTenants() bool {
	for t := range c {
		if t != AllTenants {
			return true
		}
	}
	return false
}

// limit returns the limit of tenant (by name) on s.
func (c Config) limit(tenant string, s Surface) Limit {
	if bySurface, ok := c[tenant]; ok {
		return bySurface[s]
	}
	return c[AllTenants][s]
}

// Allow takes a token for one request on s by key (an API key id, or a
// rollout for the gateway) of tenantID from every bucket that applies, or
// refuses it without taking any. An error (the tenant's name could not be
// read) leaves the request to the caller's judgement.
func (l *Limiter) Allow(ctx context.Context, s Surface, tenantID, key string) (Decision, error) {
	if l == nil {
		return Decision{Allowed: true}, nil
	}
	name := AllTenants
	if l.name != nil {
		var err error
		if name, err = l.tenantName(ctx, tenantID); err != nil {
			return Decision{}, fmt.Errorf("rate limit: %w", err)
		}
	}
	lim := l.cfg.limit(name, s)
	if lim.PerKey == nil && lim.PerTenant == nil {
		return Decision{Allowed: true}, nil
	}
	now := l.clock.Now()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	var kb, tb *bucket
	if lim.PerKey != nil {
		kb = l.bucket(bucketKey{surface: s, id: key}, *lim.PerKey, now)
	}
	if lim.PerTenant != nil {
		tb = l.bucket(bucketKey{surface: s, tenant: true, id: tenantID}, *lim.PerTenant, now)
	}
	d := Decision{Allowed: true}
	if kb != nil {
		if w := kb.wait(); w > 0 {
			d = Decision{RetryAfter: w, Scope: "key"}
		}
	}
	if tb != nil {
		if w := tb.wait(); w > d.RetryAfter {
			d = Decision{RetryAfter: w, Scope: "tenant"}
		}
	}
	if !d.Allowed {
		l.refused.WithLabelValues(string(s), d.Scope).Inc()
		return d, nil
	}
	if kb != nil {
		kb.tokens--
	}
	if tb != nil {
		tb.tokens--
	}
	return d, nil
}

// bucket returns the bucket of k, refilled to now, made full when new.
// A bucket whose configured rate changed starts again full at the new
// rate.
func (l *Limiter) bucket(k bucketKey, r Rate, now time.Time) *bucket {
	b, ok := l.buckets[k]
	if !ok || b.rate != r {
		b = &bucket{rate: r, tokens: float64(r.Burst), at: now}
		l.buckets[k] = b
		return b
	}
	b.refill(now)
	return b
}

// sweep forgets the buckets that are full again; l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		b.refill(now)
		if b.tokens >= float64(b.rate.Burst) {
			delete(l.buckets, k)
		}
	}
}

// Buckets reports how many buckets are held, for tests and metrics.
func (l *Limiter) Buckets() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

func (l *Limiter) tenantName(ctx context.Context, id string) (string, error) {
	if v, ok := l.names.Load(id); ok {
		return v.(string), nil
	}
	n, err := l.name(ctx, id)
	if err != nil {
		return "", err
	}
	l.names.Store(id, n)
	return n, nil
}
