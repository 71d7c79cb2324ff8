package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

const tenantColumns = `id, name, created_us`

// CreateTenant creates a tenant; store.ErrConflict if the name exists.
// Names are compared byte for byte.
func (s *Store) CreateTenant(ctx context.Context, name string) (gyre.Tenant, error) {
	if err := refuseNUL("/name", name); err != nil {
		return gyre.Tenant{}, fmt.Errorf("create tenant: %w", err)
	}
	var t gyre.Tenant
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = s.insertTenant(ctx, tx, name)
		return err
	})
	if err != nil {
		return gyre.Tenant{}, fmt.Errorf("create tenant: %w", err)
	}
	return t, nil
}

func (s *Store) insertTenant(ctx context.Context, tx *sql.Tx, name string) (gyre.Tenant, error) {
	if name == "" {
		return gyre.Tenant{}, errors.New("empty tenant name")
	}
	id, err := newID()
	if err != nil {
		return gyre.Tenant{}, err
	}
	now := s.now()
	_, err = tx.ExecContext(ctx,
		`INSERT INTO tenants (id, name, created_us) VALUES ($1, $2, $3)`,
		id, name, now)
	if err != nil {
		if s.d.IsUniqueViolation(err) {
			return gyre.Tenant{}, fmt.Errorf("tenant %q exists: %w", name, store.ErrConflict)
		}
		return gyre.Tenant{}, fmt.Errorf("insert tenant: %w", err)
	}
	return gyre.Tenant{ID: id, Name: name, CreatedAt: store.FromMicros(now)}, nil
}

// TenantByName finds a tenant; store.ErrNotFound if none.
func (s *Store) TenantByName(ctx context.Context, name string) (gyre.Tenant, error) {
	row := s.reader.QueryRowContext(ctx,
		`SELECT `+tenantColumns+` FROM tenants WHERE name = $1`, name)
	t, err := scanTenant(row)
	if err != nil {
		return gyre.Tenant{}, notFound("tenant by name", err)
	}
	return t, nil
}

// TenantByID finds a tenant; store.ErrNotFound if none.
func (s *Store) TenantByID(ctx context.Context, id string) (gyre.Tenant, error) {
	t, err := tenantByID(ctx, s.reader, id)
	if err != nil {
		return gyre.Tenant{}, notFound("tenant by id", err)
	}
	return t, nil
}

func tenantByID(ctx context.Context, q querier, id string) (gyre.Tenant, error) {
	return scanTenant(q.QueryRowContext(ctx,
		`SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
}

// ListTenants lists every tenant, oldest first (UUIDv7 id order).
func (s *Store) ListTenants(ctx context.Context) ([]gyre.Tenant, error) {
	rows, err := s.reader.QueryContext(ctx,
		`SELECT `+tenantColumns+` FROM tenants ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	var out []gyre.Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, fmt.Errorf("list tenants: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanTenant(r scanner) (gyre.Tenant, error) {
	var (
		t       gyre.Tenant
		created int64
	)
	if err := r.Scan(&t.ID, &t.Name, &created); err != nil {
		return gyre.Tenant{}, err
	}
	t.CreatedAt = store.FromMicros(created)
	return t, nil
}
