package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// BootstrapIfEmpty creates the bootstrap tenant (gyre.DefaultTenant when
// b.TenantName is empty) and its key when the store holds no tenant, in
// one transaction, and reports whether it did. Concurrent callers, in any
// number of processes, create exactly one: on PostgreSQL the transaction
// first takes an advisory lock, so a second caller waits and then sees the
// first one's tenant; on SQLite write transactions already exclude each
// other.
func (s *Store) BootstrapIfEmpty(ctx context.Context, b store.Bootstrap) (bool, gyre.APIKey, error) {
	name := b.TenantName
	if name == "" {
		name = gyre.DefaultTenant
	}
	var (
		created bool
		key     gyre.APIKey
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		created, key = false, gyre.APIKey{}
		if err := s.lockTx(ctx, tx, "bootstrap"); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRowContext(ctx,
			`SELECT EXISTS (SELECT 1 FROM tenants)`).Scan(&exists); err != nil {
			return fmt.Errorf("count tenants: %w", err)
		}
		if exists {
			return nil
		}
		t, err := s.insertTenant(ctx, tx, name)
		if err != nil {
			return err
		}
		k := b.Key
		k.TenantID = t.ID
		if key, err = s.insertKey(ctx, tx, k); err != nil {
			return err
		}
		created = true
		return nil
	})
	if err != nil {
		return false, gyre.APIKey{}, fmt.Errorf("bootstrap: %w", err)
	}
	return created, key, nil
}
