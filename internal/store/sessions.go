package store

import (
	"context"
	"time"

	"github.com/gyrehq/gyre"
)

// UISession is a web UI sign-in (SPEC §3, §11): a session token, known to
// the store only by its SHA-256, standing for one live key of one tenant
// until it expires, is signed out, or its key is revoked.
type UISession struct {
	TenantID string
	KeyID    string
	// Role is the role of the key the session stands for.
	Role      gyre.Role
	CreatedAt time.Time
	ExpiresAt time.Time
}

// NewUISession is what CreateUISession stores.
type NewUISession struct {
	// TokenHash is the SHA-256 of the session token; the token itself is
	// never given to the store.
	TokenHash [32]byte
	TenantID  string
	KeyID     string
	// TTL is the session's lifetime from its creation.
	TTL time.Duration
}

// UISessionStore keeps the web UI's sessions server-side, so signing out
// and revoking the key end a session at once on every replica.
type UISessionStore interface {
	// CreateUISession stores a session for a live key of the tenant;
	// ErrNotFound when the key is unknown, revoked or another tenant's.
	// It also deletes a bounded number of expired sessions.
	CreateUISession(ctx context.Context, s NewUISession) (UISession, error)
	// UISessionByHash finds a session by the SHA-256 of its token;
	// ErrNotFound when it is unknown, expired, or its key was revoked.
	UISessionByHash(ctx context.Context, tokenHash [32]byte) (UISession, error)
	// DeleteUISession ends a session (sign-out); deleting an unknown one
	// is not an error.
	DeleteUISession(ctx context.Context, tokenHash [32]byte) error
}
