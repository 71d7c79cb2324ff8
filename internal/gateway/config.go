package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"time"
)

// Defaults of the zero fields of Config.
const (
	DefaultMaxBodyBytes          = 32 << 20
	DefaultMaxResponseBytes      = 64 << 20
	DefaultFlushInterval         = 200 * time.Millisecond
	DefaultReplicaTTL            = 10 * time.Second
	DefaultRevokeCheckEvery      = 500 * time.Millisecond
	DefaultGrantCacheTTL         = 250 * time.Millisecond
	DefaultMaxPending            = 100_000
	DefaultFlushBatch            = 32
	DefaultResponseHeaderTimeout = 10 * time.Minute
)

// Upstream is an LLM server the operator lets policies route to
// (gyre.yaml upstreams:, SPEC §6.1). Upstreams are operator configuration
// only, never tenant input, because they carry secrets.
type Upstream struct {
	// Name is how policies refer to the upstream.
	Name string
	// BaseURL is the API root, e.g. http://10.0.0.5:8000/v1; the gateway
	// posts to BaseURL + "/chat/completions", "/responses" or "/messages"
	// by the call's protocol.
	BaseURL string
	// Protocols are the protocols the upstream speaks; nil means
	// DefaultProtocols ([chat]). A call on any other is refused with 400
	// unsupported_protocol: the gateway never translates.
	Protocols []Protocol
	// APIKey is sent as a bearer token to this upstream only; empty sends
	// none. It never appears in logs, errors or records.
	APIKey string
	// Tenants allow-lists tenant names; nil or a "*" entry allows all.
	Tenants []string
	// AllowPrivate lets the upstream resolve to loopback, private and
	// link-local addresses, which are refused otherwise.
	AllowPrivate bool
}

// Speaks reports whether u speaks protocol p.
func (u Upstream) Speaks(p Protocol) bool { return slices.Contains(u.speaks(), p) }

// speaks returns the protocols u speaks, the default when it declares
// none.
func (u Upstream) speaks() []Protocol {
	if u.Protocols == nil {
		return DefaultProtocols
	}
	return u.Protocols
}

// AllowsTenant reports whether a tenant of that name may use u.
func (u Upstream) AllowsTenant(name string) bool {
	return u.Tenants == nil || slices.Contains(u.Tenants, "*") || slices.Contains(u.Tenants, name)
}

// Config tunes the gateway. The zero value of a field means its default.
type Config struct {
	// Upstreams are the servers policies may route to.
	Upstreams []Upstream
	// DefaultPolicy names the policy a tenant's rollouts use when neither
	// their batch nor their agent's promotion names one; empty means none
	// (the gateway then answers 503 no_policy).
	DefaultPolicy string
	// ReplicaID prefixes this process's replica id; a random suffix makes
	// each process a new replica, so a restart never vouches for records a
	// crashed predecessor lost.
	ReplicaID string
	// MaxBodyBytes caps a request body (default 32 MiB).
	MaxBodyBytes int64
	// MaxResponseBytes caps a non-streaming answer and a reassembled
	// stream (default 64 MiB).
	MaxResponseBytes int64
	// FlushInterval bounds how long a record waits in memory (default
	// 200 ms).
	FlushInterval time.Duration
	// ReplicaTTL is how long a replica counts as alive after its last
	// heartbeat (default 10 s); a dead replica that touched a rollout and
	// had not flushed makes it unreconciled.
	ReplicaTTL time.Duration
	// RevokeCheckEvery is how often the state of rollouts with requests
	// in flight is re-read (default 500 ms).
	RevokeCheckEvery time.Duration
	// GrantCacheTTL lets one credential read admit further requests of
	// the rollout for that long without another read (default 250 ms;
	// negative: read on every request). A revocation made through this
	// process (output accepted, rollout or batch cancelled) empties the
	// cache at once; one made elsewhere (another replica, the watchdog)
	// reaches it at the next revocation check, and new requests at most
	// GrantCacheTTL after it. RevokeCheckEvery + GrantCacheTTL must stay
	// under a second (SPEC §6.1). Rollouts with limits are always read
	// fresh, since budgets need current totals.
	GrantCacheTTL time.Duration
	// FlushBatch starts a flush as soon as this many records wait, before
	// FlushInterval is up (default 32). Small, frequent flushes keep each
	// one's CPU burst short, so requests arriving meanwhile are not held
	// up behind it: the added p99 latency depends on it (docs/benchmarks.md).
	FlushBatch int
	// MaxPending bounds records waiting for a flush; past it requests are
	// refused with 503 rather than recorded late or lost.
	MaxPending int
	// ResponseHeaderTimeout bounds the wait for an upstream's answer
	// headers (default 10 min).
	ResponseHeaderTimeout time.Duration
	// NoFlush disables the background flush: records stay in memory.
	// Only for tests that simulate a crash before a flush.
	NoFlush bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.FlushInterval, DefaultFlushInterval)
	def(&c.ReplicaTTL, DefaultReplicaTTL)
	def(&c.RevokeCheckEvery, DefaultRevokeCheckEvery)
	def(&c.GrantCacheTTL, DefaultGrantCacheTTL)
	def(&c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.FlushBatch == 0 {
		c.FlushBatch = DefaultFlushBatch
	}
	if c.ReplicaID == "" {
		c.ReplicaID = "gw"
	}
	return c
}

// nameRE is the grammar of names gyre defines (SPEC §2): upstreams and
// policies.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)

// ValidName reports whether s is a valid upstream or policy name.
func ValidName(s string) bool { return nameRE.MatchString(s) && s != "." && s != ".." }

// Validate reports every setting of c that cannot work.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, u := range c.Upstreams {
		where := fmt.Sprintf("upstreams[%d]", i)
		if u.Name != "" {
			where += " (" + u.Name + ")"
		}
		if !ValidName(u.Name) {
			errs = append(errs, fmt.Errorf("%s: name must match [A-Za-z0-9._-]{1,255}", where))
		} else if seen[u.Name] {
			errs = append(errs, fmt.Errorf("%s: name is used twice", where))
		}
		seen[u.Name] = true
		if err := CheckBaseURL(u.BaseURL); err != nil {
			errs = append(errs, fmt.Errorf("%s: base_url: %w", where, err))
		}
		for _, t := range u.Tenants {
			if t == "" {
				errs = append(errs, fmt.Errorf("%s: tenants: an entry is empty", where))
			}
		}
		if u.Protocols != nil && len(u.Protocols) == 0 {
			errs = append(errs, fmt.Errorf("%s: protocols: list at least one of %s", where, protocolList(Protocols)))
		}
		for j, p := range u.Protocols {
			if _, err := ParseProtocol(string(p)); err != nil {
				errs = append(errs, fmt.Errorf("%s: protocols[%d]: %w", where, j, err))
			} else if slices.Index(u.Protocols, p) != j {
				errs = append(errs, fmt.Errorf("%s: protocols[%d]: %s is listed twice", where, j, p))
			}
		}
	}
	if c.DefaultPolicy != "" && !ValidName(c.DefaultPolicy) {
		errs = append(errs, fmt.Errorf("default policy %q must match [A-Za-z0-9._-]{1,255}", c.DefaultPolicy))
	}
	for name, d := range map[string]time.Duration{
		"flush interval": c.FlushInterval, "replica TTL": c.ReplicaTTL, "revocation check period": c.RevokeCheckEvery,
		"upstream response header timeout": c.ResponseHeaderTimeout,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, not %s", name, d))
		}
	}
	if c.RevokeCheckEvery+max(c.GrantCacheTTL, 0) >= time.Second {
		errs = append(errs, errors.New("revocation check period + credential cache TTL must stay under 1s (SPEC §6.1)"))
	}
	if c.ReplicaTTL > 0 && c.ReplicaTTL <= 2*c.FlushInterval {
		errs = append(errs, errors.New("replica TTL must exceed two flush intervals"))
	}
	if c.MaxBodyBytes < 0 || c.MaxResponseBytes < 0 || c.MaxPending < 0 || c.FlushBatch < 0 {
		errs = append(errs, errors.New("size limits must be positive"))
	}
	return errors.Join(errs...)
}

// CheckBaseURL checks an upstream base URL: absolute http(s), with a host,
// without credentials (keys go in api_key_env), query or fragment.
func CheckBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "" || err != nil:
		return fmt.Errorf("%q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want an http:// or https:// URL, not %q", s)
	case u.Host == "":
		return fmt.Errorf("URL %q has no host", s)
	case u.User != nil:
		return errors.New("URL must not carry credentials: put the key in the environment variable api_key_env names")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("URL %q must not have a query or fragment", s)
	}
	return nil
}
