package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// sessionSweep bounds how many expired sessions one sign-in deletes, so
// that a sign-in never waits on a large cleanup.
const sessionSweep = 100

// CreateUISession stores a session for a live key of the tenant;
// store.ErrNotFound when the key is unknown, revoked or another tenant's.
// It deletes up to sessionSweep expired sessions in the same transaction.
func (s *Store) CreateUISession(ctx context.Context, n store.NewUISession) (store.UISession, error) {
	if n.TTL <= 0 {
		return store.UISession{}, fmt.Errorf("create ui session: ttl must be positive, not %s", n.TTL)
	}
	now := s.now()
	expires := now + n.TTL.Microseconds()
	var out store.UISession
	err := s.write(ctx, func(tx *sql.Tx) error {
		var role string
		err := tx.QueryRowContext(ctx,
			`SELECT role FROM api_keys WHERE tenant_id = $1 AND id = $2 AND revoked_us IS NULL`,
			n.TenantID, n.KeyID).Scan(&role)
		if err != nil {
			return notFound("key", err)
		}
		if _, err := tx.ExecContext(ctx,
			`DELETE FROM ui_sessions WHERE token_hash IN (
			   SELECT token_hash FROM ui_sessions WHERE expires_us <= $1 ORDER BY expires_us LIMIT $2)`,
			now, sessionSweep); err != nil {
			return fmt.Errorf("delete expired sessions: %w", err)
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO ui_sessions (token_hash, tenant_id, key_id, created_us, expires_us)
			 VALUES ($1, $2, $3, $4, $5)`,
			n.TokenHash[:], n.TenantID, n.KeyID, now, expires); err != nil {
			if s.d.IsUniqueViolation(err) {
				return fmt.Errorf("session token exists: %w", store.ErrConflict)
			}
			return fmt.Errorf("insert session: %w", err)
		}
		out = store.UISession{TenantID: n.TenantID, KeyID: n.KeyID, Role: gyre.Role(role),
			CreatedAt: store.FromMicros(now), ExpiresAt: store.FromMicros(expires)}
		return nil
	})
	if err != nil {
		return store.UISession{}, fmt.Errorf("create ui session: %w", err)
	}
	return out, nil
}

// UISessionByHash finds a live session: unexpired, with an unrevoked key.
func (s *Store) UISessionByHash(ctx context.Context, tokenHash [32]byte) (store.UISession, error) {
	var (
		out              store.UISession
		role             string
		created, expires int64
	)
	err := s.reader.QueryRowContext(s.pointRead(ctx),
		`SELECT u.tenant_id, u.key_id, k.role, u.created_us, u.expires_us
		 FROM ui_sessions u JOIN api_keys k ON k.id = u.key_id AND k.tenant_id = u.tenant_id
		 WHERE u.token_hash = $1 AND u.expires_us > $2 AND k.revoked_us IS NULL`,
		tokenHash[:], s.now()).Scan(&out.TenantID, &out.KeyID, &role, &created, &expires)
	if err != nil {
		return store.UISession{}, notFound("ui session", err)
	}
	out.Role = gyre.Role(role)
	out.CreatedAt, out.ExpiresAt = store.FromMicros(created), store.FromMicros(expires)
	return out, nil
}

// DeleteUISession ends a session; an unknown one is not an error.
func (s *Store) DeleteUISession(ctx context.Context, tokenHash [32]byte) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM ui_sessions WHERE token_hash = $1`, tokenHash[:])
		return err
	})
	if err != nil {
		return fmt.Errorf("delete ui session: %w", err)
	}
	return nil
}
