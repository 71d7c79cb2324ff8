package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Principal is who a request acts as: one live key of one tenant.
type Principal struct {
	TenantID string
	KeyID    string
	Role     gyre.Role
	// AgentIDs is the key's allow-list; nil means every agent of the tenant.
	AgentIDs []string
}

// Permits reports whether p may use a surface open to any of roles. An
// admin key may do everything in its tenant.
func (p Principal) Permits(roles ...gyre.Role) bool {
	return p.Role == gyre.RoleAdmin || slices.Contains(roles, p.Role)
}

// AllowsAgent reports whether p may act for agentID: keys without an
// allow-list may act for every agent of their tenant.
func (p Principal) AllowsAgent(agentID string) bool {
	return p.AgentIDs == nil || slices.Contains(p.AgentIDs, agentID)
}

type principalKey struct{}

// WithPrincipal returns a context that carries p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal that Middleware stored in ctx.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Errors answered for missing, malformed and unknown keys. They never
// contain the key that was sent.
var (
	errMissing   = gyre.Errorf(gyre.CodeUnauthorized, "missing API key: send the header Authorization: Bearer <key>")
	errMalformed = gyre.Errorf(gyre.CodeUnauthorized, "malformed Authorization header: want Bearer <key> with a gyre API key")
	errUnknown   = gyre.Errorf(gyre.CodeUnauthorized, "unknown or revoked API key")
)

// KeyFinder finds a live key by the SHA-256 of its secret. store.Store
// satisfies it.
type KeyFinder interface {
	KeyByHash(ctx context.Context, hash [32]byte) (gyre.APIKey, error)
}

// Authenticator resolves request keys through a KeyFinder for every
// request (no cache: concurrent requests with one key share only a
// lookup that starts after they arrive), so that revocation takes effect
// at once.
type Authenticator struct {
	keys *freshLookups
}

// NewAuthenticator returns an Authenticator that looks keys up in keys.
func NewAuthenticator(keys KeyFinder) *Authenticator {
	return &Authenticator{keys: newFreshLookups(keys)}
}

// Authenticate resolves r's bearer key into a Principal. It answers a
// *gyre.Error with code unauthorized for a missing, malformed, unknown or
// revoked key, and a wrapped store error when the lookup itself failed.
func (a *Authenticator) Authenticate(r *http.Request) (Principal, error) {
	values := r.Header.Values("Authorization")
	switch len(values) {
	case 0:
		return Principal{}, errMissing
	case 1:
	default:
		return Principal{}, errMalformed
	}
	if strings.TrimSpace(values[0]) == "" {
		return Principal{}, errMissing
	}
	secret, ok := ParseBearer(values[0])
	if !ok {
		return Principal{}, errMalformed
	}
	k, err := a.keys.find(r.Context(), Hash(secret))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, errUnknown
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up api key: %w", err)
	}
	if k.Revoked() {
		// KeyByHash answers only live keys; refuse a revoked one anyway.
		return Principal{}, errUnknown
	}
	return Principal{TenantID: k.TenantID, KeyID: k.ID, Role: k.Role, AgentIDs: k.AgentIDs}, nil
}

// Middleware authenticates every request before next runs and stores the
// Principal in the request context. A failure goes to onError (the
// server's one error writer) and next does not run.
func (a *Authenticator) Middleware(onError func(http.ResponseWriter, *http.Request, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := a.Authenticate(r)
			if err != nil {
				onError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		})
	}
}

// Require checks that the request's Principal may use a surface open to
// any of roles (admin may use every surface). It answers 401 unauthorized
// when ctx carries no Principal and 403 forbidden for another role.
func Require(ctx context.Context, roles ...gyre.Role) error {
	p, ok := FromContext(ctx)
	if !ok {
		return errMissing
	}
	if !p.Permits(roles...) {
		return gyre.Errorf(gyre.CodeForbidden, "an API key with role %s may not use this endpoint (it needs %s)", p.Role, roleList(roles))
	}
	return nil
}

// RequireAgent checks that the request's Principal may act for agentID.
// It answers 401 unauthorized when ctx carries no Principal and 403
// forbidden when agentID is outside the key's allow-list.
func RequireAgent(ctx context.Context, agentID string) error {
	p, ok := FromContext(ctx)
	if !ok {
		return errMissing
	}
	if !p.AllowsAgent(agentID) {
		return gyre.Errorf(gyre.CodeForbidden, "this API key may not act for agent_id %q", agentID)
	}
	return nil
}

func roleList(roles []gyre.Role) string {
	names := []string{string(gyre.RoleAdmin)}
	for _, r := range roles {
		if r != gyre.RoleAdmin {
			names = append(names, string(r))
		}
	}
	return strings.Join(names, " or ")
}
