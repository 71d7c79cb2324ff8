package harness

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/secret"
	"github.com/gyrehq/gyre/internal/store"
)

// Defaults of the zero fields of Config.
const (
	DefaultCallTimeout        = 15 * time.Second
	DefaultMaxAnswerBytes     = 8 << 20
	DefaultMaxTrajectoryBytes = 64 << 20
)

// Config tunes the registry. The zero value of a field means its default.
type Config struct {
	// AllowPrivate lets harnesses be registered at, and dialled on,
	// loopback, private and link-local addresses (gyre serve
	// --harness-allow-private). Off, such targets are refused.
	AllowPrivate bool
	// CallTimeout bounds one call to a harness, its answer included
	// (default 15 s).
	CallTimeout time.Duration
	// MaxAnswerBytes caps a capabilities, listing or run status answer
	// (default 8 MiB).
	MaxAnswerBytes int64
	// MaxTrajectoryBytes caps a trajectory (default 64 MiB).
	MaxTrajectoryBytes int64
}

func (c Config) withDefaults() Config {
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if c.MaxTrajectoryBytes <= 0 {
		c.MaxTrajectoryBytes = DefaultMaxTrajectoryBytes
	}
	return c
}

// Registry registers harnesses and calls them for the sessions browser.
// It is safe for concurrent use.
type Registry struct {
	st  store.HarnessStore
	key *secret.Key
	cfg Config
	hc  *http.Client
}

// New returns a registry over st. key seals harness API keys; nil (no
// GYRE_SECRET_KEY) refuses harnesses with a key.
func New(st store.HarnessStore, key *secret.Key, cfg Config) *Registry {
	cfg = cfg.withDefaults()
	return &Registry{st: st, key: key, cfg: cfg, hc: &http.Client{Transport: newTransport(cfg.AllowPrivate)}}
}

// errPrivateTarget is the dial error for a refused address.
var errPrivateTarget = errors.New("harness address is loopback, private or link-local and the server does not allow private harnesses")

// newTransport dials harnesses; without allowPrivate it refuses, at each
// dial and after DNS resolution, the addresses the gateway refuses its
// upstreams (gateway.PublicAddr), so a name that resolves or rebinds to a
// private address is refused too.
func newTransport(allowPrivate bool) *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("harness address %q: %w", address, err)
			}
			if !gateway.PublicAddr(ap.Addr()) {
				return errPrivateTarget
			}
			return nil
		}
	}
	return &http.Transport{
		Proxy:                 nil, // an environment proxy would hide the target from the address check
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Input is the body of POST /api/v1/harnesses; nil members are absent.
type Input struct {
	Name    *string `json:"name"`
	BaseURL *string `json:"base_url"`
	// APIKey is the harness's x-api-key (text:"secret": never echoed).
	APIKey *string `json:"api_key"`
}

// maxKeyLen and maxURLLen bound what a registration stores.
const (
	maxKeyLen = 4096
	maxURLLen = 2048
)

// Register registers a harness in the tenant on behalf of by ("key <id>")
// and reports whether it created it: a harness of that name with the same
// base URL and key is returned as it is; one that differs is 409
// harness_exists.
func (r *Registry) Register(ctx context.Context, tenantID, by string, in Input) (store.Harness, bool, error) {
	name, base, key, err := r.check(in)
	if err != nil {
		return store.Harness{}, false, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return store.Harness{}, false, fmt.Errorf("mint harness id: %w", err)
	}
	h := store.Harness{ID: id.String(), TenantID: tenantID, Name: name, BaseURL: base, CreatedBy: by}
	if key != nil {
		h.APIKeySealed, err = r.key.Seal([]byte(*key), keyContext(tenantID, h.ID))
		if err != nil {
			return store.Harness{}, false, fmt.Errorf("seal harness key: %w", err)
		}
		h.APIKeyKID = r.key.ID()
	}
	out, created, err := r.st.CreateHarness(ctx, h)
	if err != nil || created {
		return out, created, err
	}
	if same, why := r.same(out, base, key); !same {
		return store.Harness{}, false, gyre.Errorf(gyre.CodeHarnessExists,
			"harness %q is registered with %s; delete it first to register it again", name, why).AtPointer("/name")
	}
	return out, false, nil
}

// same reports whether the registered harness h has base URL base and
// key key, and if not, says what differs.
func (r *Registry) same(h store.Harness, base string, key *string) (bool, string) {
	if h.BaseURL != base {
		return false, "another base_url"
	}
	switch {
	case key == nil && h.APIKeySealed == nil:
		return true, ""
	case key == nil:
		return false, "an API key"
	case h.APIKeySealed == nil:
		return false, "no API key"
	}
	old, err := r.key.Open(h.APIKeySealed, h.APIKeyKID, keyContext(h.TenantID, h.ID))
	if err != nil {
		return false, "a key this server cannot compare (sealed under another GYRE_SECRET_KEY)"
	}
	if subtle.ConstantTimeCompare(old, []byte(*key)) != 1 {
		return false, "another API key"
	}
	return true, ""
}

// keyContext binds a sealed key to its tenant and harness.
func keyContext(tenantID, harnessID string) []byte {
	return []byte("gyre harness api key\x00" + tenantID + "\x00" + harnessID)
}

// check applies the registration rules and returns the name, the
// normalised base URL and the key (nil when none).
func (r *Registry) check(in Input) (string, string, *string, error) {
	bad := func(ptr, format string, args ...any) (string, string, *string, error) {
		return "", "", nil, gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	if in.Name == nil {
		return bad("/name", "name is required")
	}
	if n := *in.Name; !gateway.ValidName(n) || n == "." || n == ".." {
		return bad("/name", "name must be 1 to 255 characters from [A-Za-z0-9._-], not . or ..")
	}
	if in.BaseURL == nil {
		return bad("/base_url", "base_url is required")
	}
	base, err := checkBaseURL(*in.BaseURL)
	if err != nil {
		return bad("/base_url", "base_url: %v", err)
	}
	if !r.cfg.AllowPrivate && privateHost(base) {
		return "", "", nil, gyre.Errorf(gyre.CodeHarnessNotAllowed,
			"base_url is a loopback, private or link-local address; the operator allows those only with gyre serve --harness-allow-private").AtPointer("/base_url")
	}
	if in.APIKey == nil {
		return *in.Name, base, nil, nil
	}
	k := *in.APIKey
	if k == "" || len(k) > maxKeyLen || strings.TrimSpace(k) != k {
		return bad("/api_key", "api_key must be 1 to %d characters without surrounding spaces", maxKeyLen)
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return bad("/api_key", "api_key must be printable ASCII: it is sent as the x-api-key header")
		}
	}
	if r.key == nil {
		return "", "", nil, gyre.Errorf(gyre.CodeSecretKeyUnset,
			"this server has no GYRE_SECRET_KEY to encrypt the harness's API key with, and never stores one in clear; the operator must set it (see docs/harness.md), or register the harness without api_key").AtPointer("/api_key")
	}
	return *in.Name, base, &k, nil
}

// checkBaseURL checks a harness root and returns it without a trailing
// slash.
func checkBaseURL(s string) (string, error) {
	if len(s) > maxURLLen {
		return "", fmt.Errorf("longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(s)
	switch {
	case s == "" || err != nil:
		return "", errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("want an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return "", errors.New("the URL has no host")
	case u.User != nil:
		return "", errors.New("the URL must not carry credentials: send the key as api_key")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("the URL must not have a query or fragment")
	case strings.ContainsFunc(s, func(r rune) bool { return r <= 0x20 || r == 0x7f }):
		return "", errors.New("the URL holds spaces or control characters")
	}
	return strings.TrimRight(s, "/"), nil
}

// privateHost reports whether a checked URL names a host that is
// loopback, private or link-local without a DNS lookup: an IP literal
// gateway.PublicAddr refuses, or localhost. Names that resolve to such
// addresses are refused when dialled.
func privateHost(base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return true
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return !gateway.PublicAddr(a)
	}
	return false
}

// Get finds a harness of the tenant.
func (r *Registry) Get(ctx context.Context, tenantID, id string) (store.Harness, error) {
	return r.st.HarnessByID(ctx, tenantID, id)
}

// List lists the tenant's harnesses by name.
func (r *Registry) List(ctx context.Context, tenantID string, p store.Page) ([]store.Harness, string, error) {
	return r.st.ListHarnesses(ctx, tenantID, p)
}

// Delete removes a harness of the tenant and its sealed key.
func (r *Registry) Delete(ctx context.Context, tenantID, id string) error {
	return r.st.DeleteHarness(ctx, tenantID, id)
}
