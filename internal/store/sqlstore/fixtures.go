package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre/internal/store"
)

const fixtureColumns = `name, sha256, size_bytes, created_us`

// PutFixture records the (name, sha256) revision of a tenant's fixture and
// makes it the name's latest; created is false when the revision existed.
// store.ErrNotFound if the tenant does not exist.
func (s *Store) PutFixture(ctx context.Context, f store.NewFixture) (store.Fixture, bool, error) {
	if err := checkCatalogName("fixture name", f.Name); err != nil {
		return store.Fixture{}, false, fmt.Errorf("put fixture: %w", err)
	}
	if err := checkSHA256("fixture sha256", f.SHA256); err != nil {
		return store.Fixture{}, false, fmt.Errorf("put fixture: %w", err)
	}
	if f.SizeBytes < 0 {
		return store.Fixture{}, false, fmt.Errorf("put fixture: negative size %d", f.SizeBytes)
	}
	var (
		out     store.Fixture
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tenantByID(ctx, tx, f.TenantID); err != nil {
			return notFound("tenant", err)
		}
		if err := s.lockName(ctx, tx, "fixture", f.TenantID, f.Name); err != nil {
			return err
		}
		seq, err := nextPutSeq(ctx, tx, "fixtures", f.TenantID, f.Name)
		if err != nil {
			return err
		}
		var putSeq int64
		existing, err := scanFixture(tx.QueryRowContext(ctx,
			`SELECT `+fixtureColumns+`, put_seq FROM fixtures WHERE tenant_id = $1 AND name = $2 AND sha256 = $3`,
			f.TenantID, f.Name, f.SHA256), &putSeq)
		switch {
		case err == nil:
			if existing.SizeBytes != f.SizeBytes {
				// Same digest, another length: the caller measured wrong.
				return fmt.Errorf("fixture %q revision %s is stored with %d bytes, not %d",
					f.Name, f.SHA256, existing.SizeBytes, f.SizeBytes)
			}
			out, created = existing, false
			if putSeq == seq-1 {
				return nil // already the latest
			}
			_, err = tx.ExecContext(ctx,
				`UPDATE fixtures SET put_seq = $4 WHERE tenant_id = $1 AND name = $2 AND sha256 = $3`,
				f.TenantID, f.Name, f.SHA256, seq)
			if err != nil {
				return fmt.Errorf("make revision latest: %w", err)
			}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read revision: %w", err)
		}
		now := s.now()
		_, err = tx.ExecContext(ctx,
			`INSERT INTO fixtures (tenant_id, name, sha256, size_bytes, created_us, put_seq)
			 VALUES ($1, $2, $3, $4, $5, $6)`,
			f.TenantID, f.Name, f.SHA256, f.SizeBytes, now, seq)
		if err != nil {
			return fmt.Errorf("insert revision: %w", err)
		}
		out = store.Fixture{Name: f.Name, SHA256: f.SHA256, SizeBytes: f.SizeBytes, CreatedAt: store.FromMicros(now)}
		created = true
		return nil
	})
	if err != nil {
		return store.Fixture{}, false, fmt.Errorf("put fixture: %w", err)
	}
	return out, created, nil
}

// LatestFixture returns the latest revision of a tenant's fixture;
// store.ErrNotFound if the name has none.
func (s *Store) LatestFixture(ctx context.Context, tenantID, name string) (store.Fixture, error) {
	f, err := scanFixture(s.reader.QueryRowContext(ctx,
		`SELECT `+fixtureColumns+` FROM fixtures
		 WHERE tenant_id = $1 AND name = $2
		 ORDER BY put_seq DESC
		 LIMIT 1`,
		tenantID, name))
	if err != nil {
		return store.Fixture{}, notFound("latest fixture", err)
	}
	return f, nil
}

// FixtureRevision returns one (name, sha256) revision of a tenant's
// fixture; store.ErrNotFound if there is none.
func (s *Store) FixtureRevision(ctx context.Context, tenantID, name, sha256 string) (store.Fixture, error) {
	f, err := scanFixture(s.reader.QueryRowContext(ctx,
		`SELECT `+fixtureColumns+` FROM fixtures WHERE tenant_id = $1 AND name = $2 AND sha256 = $3`,
		tenantID, name, sha256))
	if err != nil {
		return store.Fixture{}, notFound("fixture revision", err)
	}
	return f, nil
}

// ListFixtures lists the latest revision of each of the tenant's fixture
// names, by name, one page at a time.
func (s *Store) ListFixtures(ctx context.Context, tenantID string, p store.Page) ([]store.Fixture, string, error) {
	cur := listCursor(tenantID, "fixtures")
	after, err := decodeNameCursor(cur, "fixture", p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list fixtures: %w", err)
	}
	n := limit(p)
	rows, err := s.reader.QueryContext(ctx,
		`SELECT `+fixtureColumns+` FROM fixtures f
		 WHERE tenant_id = $1 AND name > $2
		   AND put_seq = (SELECT MAX(put_seq) FROM fixtures g WHERE g.tenant_id = f.tenant_id AND g.name = f.name)
		 ORDER BY name
		 LIMIT $3`,
		tenantID, after, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("list fixtures: %w", err)
	}
	defer rows.Close()
	out := make([]store.Fixture, 0, n)
	for rows.Next() {
		f, err := scanFixture(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list fixtures: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list fixtures: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].Name)
	}
	return out, next, nil
}

// scanFixture scans fixtureColumns followed by extra destinations.
func scanFixture(r scanner, extra ...any) (store.Fixture, error) {
	var (
		f       store.Fixture
		created int64
	)
	dest := append([]any{&f.Name, &f.SHA256, &f.SizeBytes, &created}, extra...)
	if err := r.Scan(dest...); err != nil {
		return store.Fixture{}, err
	}
	f.CreatedAt = store.FromMicros(created)
	return f, nil
}
