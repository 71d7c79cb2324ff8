package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

const keyColumns = `id, tenant_id, name, role, agent_ids, created_us, revoked_us`

// CreateKey stores a new key and returns it with its id;
// store.ErrNotFound if the tenant does not exist, store.ErrConflict if a
// key with the same hash exists.
func (s *Store) CreateKey(ctx context.Context, k store.NewKey) (gyre.APIKey, error) {
	if err := refuseNUL("/name", k.Name); err != nil {
		return gyre.APIKey{}, fmt.Errorf("create key: %w", err)
	}
	var key gyre.APIKey
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tenantByID(ctx, tx, k.TenantID); err != nil {
			return notFound("tenant", err)
		}
		var err error
		key, err = s.insertKey(ctx, tx, k)
		return err
	})
	if err != nil {
		return gyre.APIKey{}, fmt.Errorf("create key: %w", err)
	}
	return key, nil
}

// insertKey inserts k into its tenant, which the caller has checked exists.
func (s *Store) insertKey(ctx context.Context, tx *sql.Tx, k store.NewKey) (gyre.APIKey, error) {
	if !k.Role.Valid() {
		return gyre.APIKey{}, fmt.Errorf("invalid role %q", k.Role)
	}
	agents, err := encodeAgentIDs(k.AgentIDs)
	if err != nil {
		return gyre.APIKey{}, err
	}
	id, err := newID()
	if err != nil {
		return gyre.APIKey{}, err
	}
	now := s.now()
	_, err = tx.ExecContext(ctx,
		`INSERT INTO api_keys (id, tenant_id, name, role, agent_ids, key_hash, created_us)
		 VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		id, k.TenantID, k.Name, string(k.Role), agents, k.Hash[:], now)
	if err != nil {
		if s.d.IsUniqueViolation(err) {
			return gyre.APIKey{}, fmt.Errorf("key hash exists: %w", store.ErrConflict)
		}
		return gyre.APIKey{}, fmt.Errorf("insert key: %w", err)
	}
	return gyre.APIKey{
		ID:        id,
		TenantID:  k.TenantID,
		Name:      k.Name,
		Role:      k.Role,
		AgentIDs:  cloneAgentIDs(k.AgentIDs),
		CreatedAt: store.FromMicros(now),
	}, nil
}

// KeyByHash finds a live (unrevoked) key by the SHA-256 of its secret;
// store.ErrNotFound for unknown or revoked keys.
func (s *Store) KeyByHash(ctx context.Context, hash [32]byte) (gyre.APIKey, error) {
	row := s.reader.QueryRowContext(s.pointRead(ctx),
		`SELECT `+keyColumns+` FROM api_keys WHERE key_hash = $1 AND revoked_us IS NULL`,
		hash[:])
	k, err := scanKey(row)
	if err != nil {
		return gyre.APIKey{}, notFound("key by hash", err)
	}
	return k, nil
}

// ListKeys lists a tenant's keys (revoked ones too), oldest first, one
// page at a time. next is empty after the last page. A tenant id that is
// unknown or foreign simply has no keys.
func (s *Store) ListKeys(ctx context.Context, tenantID string, p store.Page) ([]gyre.APIKey, string, error) {
	cur := listCursor(tenantID, "keys")
	after, err := cur.decodeID(p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list keys: %w", err)
	}
	n := limit(p)
	rows, err := s.reader.QueryContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys
		 WHERE tenant_id = $1 AND id > $2
		 ORDER BY id
		 LIMIT $3`,
		tenantID, after, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	keys := make([]gyre.APIKey, 0, n)
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list keys: %w", err)
	}
	var next string
	if len(keys) > n {
		keys = keys[:n]
		next = cur.encode(keys[n-1].ID)
	}
	return keys, next, nil
}

// RevokeKey revokes a key of the tenant; store.ErrNotFound if it is not
// the tenant's. Revoking a revoked key keeps its first revocation time.
func (s *Store) RevokeKey(ctx context.Context, tenantID, keyID string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE api_keys SET revoked_us = COALESCE(revoked_us, $3)
			 WHERE tenant_id = $1 AND id = $2`,
			tenantID, keyID, s.now())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	return nil
}

func scanKey(r scanner) (gyre.APIKey, error) {
	var (
		k       gyre.APIKey
		role    string
		agents  sql.NullString
		created int64
		revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.TenantID, &k.Name, &role, &agents, &created, &revoked); err != nil {
		return gyre.APIKey{}, err
	}
	k.Role = gyre.Role(role)
	k.CreatedAt = store.FromMicros(created)
	if revoked.Valid {
		t := store.FromMicros(revoked.Int64)
		k.RevokedAt = &t
	}
	if agents.Valid {
		if err := json.Unmarshal([]byte(agents.String), &k.AgentIDs); err != nil {
			return gyre.APIKey{}, fmt.Errorf("key %s: decode agent ids: %w", k.ID, err)
		}
		if k.AgentIDs == nil {
			k.AgentIDs = []string{} // "null" was never written; keep a list a list
		}
	}
	return k, nil
}

// encodeAgentIDs returns the stored form of an allow-list: NULL for nil
// (every agent), a JSON array otherwise. An empty non-nil list is refused:
// storing it as NULL would widen the key to every agent.
func encodeAgentIDs(ids []string) (any, error) {
	if ids == nil {
		return nil, nil
	}
	if len(ids) == 0 {
		return nil, errors.New("empty agent allow-list")
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("encode agent ids: %w", err)
	}
	return string(b), nil
}

func cloneAgentIDs(ids []string) []string {
	if ids == nil {
		return nil
	}
	return append([]string(nil), ids...)
}
