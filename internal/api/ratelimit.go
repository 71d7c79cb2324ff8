package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/ratelimit"
)

// surfaceOf names the rate-limit surface of a route pattern (SPEC §2), or
// "" for routes no limit applies to: probes, heartbeats, releases and
// outputs, whose refusal would lose leases and finished work.
func surfaceOf(pattern string) ratelimit.Surface {
	_, route, _ := strings.Cut(pattern, " ")
	switch {
	case pattern == "POST /turns":
		return ratelimit.Turns
	case pattern == "POST /agents/{agent_id}/claim":
		return ratelimit.Claims
	case strings.HasPrefix(route, "/api/v1/"):
		return ratelimit.Admin
	}
	return ""
}

// rateLimit takes a token for a request of key (an API key id) in
// tenantID on surface, or answers why not: 429 rate_limited with
// Retry-After. A failure to read the tenant's limits is a 503, never a
// silent pass.
func (s *Server) rateLimit(w http.ResponseWriter, r *http.Request, surface ratelimit.Surface, tenantID, key string) error {
	d, err := s.limiter.Allow(r.Context(), surface, tenantID, key)
	if err != nil {
		return gyre.Errorf(gyre.CodeUnavailable, "the server cannot check rate limits right now")
	}
	if d.Allowed {
		return nil
	}
	w.Header().Set("Retry-After", strconv.Itoa(d.RetryAfterSeconds()))
	return gyre.Errorf(gyre.CodeRateLimited, "too many requests for this %s on %s: retry after %d s", d.Scope, surface, d.RetryAfterSeconds())
}

// gatewayRateLimit is rateLimit for the policy endpoint, answered in the
// error shape of its protocol; it reports whether the request may go
// ahead.
func (s *Server) gatewayRateLimit(w http.ResponseWriter, r *http.Request, proto gateway.Protocol, tenantID, key string) bool {
	d, err := s.limiter.Allow(r.Context(), ratelimit.Gateway, tenantID, key)
	switch {
	case clientGone(r.Context(), err):
		s.writeError(w, r, err) // a client that hung up: debug log, 499
		return false
	case err != nil:
		gateway.WriteProtocolError(w, proto, http.StatusServiceUnavailable, gateway.CodeInternal, "The server cannot check rate limits right now.")
		return false
	case !d.Allowed:
		gateway.WriteProtocolRateLimited(w, proto, d.RetryAfterSeconds())
		return false
	}
	return true
}
