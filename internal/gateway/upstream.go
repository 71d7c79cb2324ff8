package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/gyrehq/gyre/internal/telemetry"
)

// upstream is a configured Upstream with its HTTP client.
type upstream struct {
	Upstream
	base   string // BaseURL without a trailing slash
	client *http.Client
}

// errPrivateTarget is the dial error for a refused address.
var errPrivateTarget = errors.New("upstream address is loopback, private or link-local and the upstream does not set allow_private")

func newUpstream(u Upstream, headerTimeout time.Duration) (*upstream, error) {
	if err := CheckBaseURL(u.BaseURL); err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
	}
	base, _ := url.Parse(u.BaseURL)
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawPath = ""
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !u.AllowPrivate {
		// Control runs for the address actually dialled, after DNS
		// resolution, so a name that resolves (or rebinds) to a private
		// address is refused too.
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("upstream address %q: %w", address, err)
			}
			if !PublicAddr(ap.Addr()) {
				return errPrivateTarget
			}
			return nil
		}
	}
	tr := &http.Transport{
		Proxy:                 nil, // an environment proxy would hide the target from the address check
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: headerTimeout,
		// Compression would make the transport buffer streamed events.
		DisableCompression: true,
	}
	client := &http.Client{
		Transport: tr,
		// The gateway never follows a redirect: it could lead anywhere,
		// with the upstream's key.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &upstream{Upstream: u, base: base.String(), client: client}, nil
}

// cgnat is the shared address space of RFC 6598, reachable only inside a
// carrier's or cloud's network.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// PublicAddr reports whether an upstream may be dialled at a without
// allow_private: not loopback, private, link-local (cloud metadata
// services live there), unspecified, multicast or shared address space.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	switch {
	case !a.IsValid(), a.IsLoopback(), a.IsPrivate(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(),
		a.IsInterfaceLocalMulticast(), a.IsMulticast(), a.IsUnspecified(), cgnat.Contains(a):
		return false
	case a.Is4() && a.As4()[0] == 0: // 0.0.0.0/8, "this network"
		return false
	}
	return true
}

// post sends a request of protocol p upstream, to its path under the
// base URL.
func (u *upstream) post(ctx context.Context, p Protocol, body []byte, stream bool) (*http.Response, error) {
	return u.postFor(ctx, p, body, stream, nil)
}

// postFor is post for an agent's request, whose headers (agent) carry
// what the protocol passes upstream: for Messages, anthropic-version and
// anthropic-beta (setMessagesHeaders).
func (u *upstream) postFor(ctx context.Context, p Protocol, body []byte, stream bool, agent http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.base+p.Path(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("User-Agent", "gyre-gateway")
	telemetry.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	switch {
	case p == ProtocolMessages:
		setMessagesHeaders(req.Header, agent, u.APIKey)
	case u.APIKey != "":
		req.Header.Set("Authorization", "Bearer "+u.APIKey)
	}
	return u.client.Do(req)
}

// upstreamErrorText describes a failed upstream call without the request
// URL's details beyond the upstream's name.
func upstreamErrorText(name string, err error) string {
	switch {
	case errors.Is(err, errPrivateTarget):
		return fmt.Sprintf("upstream %s resolves to a private address and is not allowed to", name)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("upstream %s did not answer in time", name)
	}
	return fmt.Sprintf("upstream %s could not be reached", name)
}
