package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gyrehq/gyre/internal/store"
)

const harnessCols = `id, tenant_id, name, base_url, api_key_sealed, api_key_kid, created_us, created_by`

// CreateHarness inserts h unless the tenant has a harness of that name,
// and returns the one it has. The insert and the read share a transaction,
// so of concurrent registrations of one name exactly one creates and the
// others read what it created.
func (s *Store) CreateHarness(ctx context.Context, h store.Harness) (store.Harness, bool, error) {
	if err := refuseNUL("/name", h.Name, "/base_url", h.BaseURL, "/created_by", h.CreatedBy); err != nil {
		return store.Harness{}, false, fmt.Errorf("create harness: %w", err)
	}
	if err := checkCatalogName("harness name", h.Name); err != nil {
		return store.Harness{}, false, fmt.Errorf("create harness: %w", err)
	}
	if (h.APIKeySealed == nil) != (h.APIKeyKID == "") {
		return store.Harness{}, false, fmt.Errorf("create harness: a sealed key and its key id go together")
	}
	var (
		out     store.Harness
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tenantByID(ctx, tx, h.TenantID); err != nil {
			return notFound("tenant", err)
		}
		var kid any
		if h.APIKeyKID != "" {
			kid = h.APIKeyKID
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO harnesses (`+harnessCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, name) DO NOTHING`,
			h.ID, h.TenantID, h.Name, h.BaseURL, h.APIKeySealed, kid, s.now(), h.CreatedBy)
		if err != nil {
			return fmt.Errorf("insert harness: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("insert harness: %w", err)
		}
		created = n == 1
		out, err = scanHarness(tx.QueryRowContext(ctx, `SELECT `+harnessCols+` FROM harnesses
			WHERE tenant_id = $1 AND name = $2`, h.TenantID, h.Name))
		if err != nil {
			return notFound("harness", err)
		}
		return nil
	})
	if err != nil {
		return store.Harness{}, false, fmt.Errorf("create harness: %w", err)
	}
	return out, created, nil
}

// HarnessByID finds a harness of the tenant.
func (s *Store) HarnessByID(ctx context.Context, tenantID, id string) (store.Harness, error) {
	h, err := scanHarness(s.reader.QueryRowContext(ctx, `SELECT `+harnessCols+` FROM harnesses
		WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if err != nil {
		return store.Harness{}, notFound("harness", err)
	}
	return h, nil
}

// ListHarnesses lists the tenant's harnesses by name, a page at a time.
func (s *Store) ListHarnesses(ctx context.Context, tenantID string, p store.Page) ([]store.Harness, string, error) {
	cur := listCursor(tenantID, "harnesses")
	after, err := decodeNameCursor(cur, "harness", p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list harnesses: %w", err)
	}
	n := limit(p)
	rows, err := s.reader.QueryContext(ctx, `SELECT `+harnessCols+` FROM harnesses
		WHERE tenant_id = $1 AND name > $2 ORDER BY name LIMIT $3`, tenantID, after, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("list harnesses: %w", err)
	}
	defer rows.Close()
	hs := make([]store.Harness, 0, n)
	for rows.Next() {
		h, err := scanHarness(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list harnesses: %w", err)
		}
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list harnesses: %w", err)
	}
	var next string
	if len(hs) > n {
		hs = hs[:n]
		next = cur.encode(hs[n-1].Name)
	}
	return hs, next, nil
}

// DeleteHarness removes a harness of the tenant.
func (s *Store) DeleteHarness(ctx context.Context, tenantID, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM harnesses WHERE tenant_id = $1 AND id = $2`, tenantID, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete harness: %w", err)
	}
	return nil
}

func scanHarness(r scanner) (store.Harness, error) {
	var (
		h       store.Harness
		kid     sql.NullString
		created int64
	)
	if err := r.Scan(&h.ID, &h.TenantID, &h.Name, &h.BaseURL, &h.APIKeySealed, &kid, &created, &h.CreatedBy); err != nil {
		return store.Harness{}, err
	}
	if len(h.APIKeySealed) == 0 {
		h.APIKeySealed = nil
	}
	h.APIKeyKID = kid.String
	h.CreatedAt = store.FromMicros(created)
	return h, nil
}
