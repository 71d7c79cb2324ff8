package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gyrehq/gyre/internal/store"
)

const suiteVersionColumns = `name, version, content_sha256, cases, created_us`

// PutSuiteVersion stores a suite version and makes it the suite's latest.
// created is false when (name, version) existed with the same content
// hash; a different content hash is store.ErrConflict and changes nothing.
// Every referenced fixture revision must be stored for the tenant (else
// store.ErrNotFound), so a version never points at bytes gyre lacks.
func (s *Store) PutSuiteVersion(ctx context.Context, v store.NewSuiteVersion) (store.SuiteVersion, bool, error) {
	if err := checkSuiteVersion(v); err != nil {
		return store.SuiteVersion{}, false, fmt.Errorf("put suite version: %w", err)
	}
	var (
		out     store.SuiteVersion
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tenantByID(ctx, tx, v.TenantID); err != nil {
			return notFound("tenant", err)
		}
		if err := s.lockName(ctx, tx, "suite", v.TenantID, v.Name); err != nil {
			return err
		}
		seq, err := nextPutSeq(ctx, tx, "suite_versions", v.TenantID, v.Name)
		if err != nil {
			return err
		}
		var putSeq int64
		existing, err := scanSuiteVersion(tx.QueryRowContext(ctx,
			`SELECT `+suiteVersionColumns+`, document, put_seq FROM suite_versions
			 WHERE tenant_id = $1 AND name = $2 AND version = $3`,
			v.TenantID, v.Name, v.Version), true, &putSeq)
		switch {
		case err == nil:
			if existing.ContentSHA256 != v.ContentSHA256 {
				return fmt.Errorf("suite %q version %q has content %s, not %s: %w",
					v.Name, v.Version, existing.ContentSHA256, v.ContentSHA256, store.ErrConflict)
			}
			out, created = existing, false
			if putSeq == seq-1 {
				return nil
			}
			_, err = tx.ExecContext(ctx,
				`UPDATE suite_versions SET put_seq = $4 WHERE tenant_id = $1 AND name = $2 AND version = $3`,
				v.TenantID, v.Name, v.Version, seq)
			if err != nil {
				return fmt.Errorf("make version latest: %w", err)
			}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read version: %w", err)
		}
		names := make([]string, 0, len(v.Fixtures))
		for name := range v.Fixtures {
			names = append(names, name)
		}
		slices.Sort(names) // report the same missing fixture every time
		for _, name := range names {
			var one int
			err := tx.QueryRowContext(ctx,
				`SELECT 1 FROM fixtures WHERE tenant_id = $1 AND name = $2 AND sha256 = $3`,
				v.TenantID, name, v.Fixtures[name]).Scan(&one)
			if err != nil {
				return notFound(fmt.Sprintf("fixture %q revision %s", name, v.Fixtures[name]), err)
			}
		}
		now := s.now()
		_, err = tx.ExecContext(ctx,
			`INSERT INTO suite_versions (tenant_id, name, version, content_sha256, document, cases, created_us, put_seq)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			v.TenantID, v.Name, v.Version, v.ContentSHA256, string(v.Document), v.Cases, now, seq)
		if err != nil {
			return fmt.Errorf("insert version: %w", err)
		}
		out = store.SuiteVersion{
			Name: v.Name, Version: v.Version, ContentSHA256: v.ContentSHA256,
			Document: append(json.RawMessage(nil), v.Document...), Cases: v.Cases, CreatedAt: store.FromMicros(now),
		}
		created = true
		return nil
	})
	if err != nil {
		return store.SuiteVersion{}, false, fmt.Errorf("put suite version: %w", err)
	}
	return out, created, nil
}

func checkSuiteVersion(v store.NewSuiteVersion) error {
	if err := checkCatalogName("suite name", v.Name); err != nil {
		return err
	}
	if err := checkCatalogName("suite version", v.Version); err != nil {
		return err
	}
	if err := checkSHA256("content sha256", v.ContentSHA256); err != nil {
		return err
	}
	if !json.Valid(v.Document) {
		return errors.New("suite document is not JSON")
	}
	if v.Cases < 1 {
		return fmt.Errorf("a suite version needs at least one case, not %d", v.Cases)
	}
	for name, sum := range v.Fixtures {
		if err := checkCatalogName("fixture name", name); err != nil {
			return err
		}
		if err := checkSHA256("fixture sha256", sum); err != nil {
			return err
		}
	}
	return nil
}

// SuiteVersion returns one version of a tenant's suite;
// store.ErrNotFound if there is none.
func (s *Store) SuiteVersion(ctx context.Context, tenantID, name, version string) (store.SuiteVersion, error) {
	v, err := scanSuiteVersion(s.reader.QueryRowContext(ctx,
		`SELECT `+suiteVersionColumns+`, document FROM suite_versions
		 WHERE tenant_id = $1 AND name = $2 AND version = $3`,
		tenantID, name, version), true)
	if err != nil {
		return store.SuiteVersion{}, notFound("suite version", err)
	}
	return v, nil
}

// LatestSuiteVersion returns the latest version of a tenant's suite;
// store.ErrNotFound if the suite does not exist.
func (s *Store) LatestSuiteVersion(ctx context.Context, tenantID, name string) (store.SuiteVersion, error) {
	v, err := scanSuiteVersion(s.reader.QueryRowContext(ctx,
		`SELECT `+suiteVersionColumns+`, document FROM suite_versions
		 WHERE tenant_id = $1 AND name = $2
		 ORDER BY put_seq DESC
		 LIMIT 1`,
		tenantID, name), true)
	if err != nil {
		return store.SuiteVersion{}, notFound("latest suite version", err)
	}
	return v, nil
}

// ListSuites lists a tenant's suites by name, one page at a time, each
// with every version (latest first, documents left out).
func (s *Store) ListSuites(ctx context.Context, tenantID string, p store.Page) ([]store.Suite, string, error) {
	cur := listCursor(tenantID, "suites")
	after, err := decodeNameCursor(cur, "suite", p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list suites: %w", err)
	}
	n := limit(p)
	// One statement, so that names and versions come from one snapshot.
	rows, err := s.reader.QueryContext(ctx,
		`SELECT `+suiteVersionColumns+` FROM suite_versions
		 WHERE tenant_id = $1 AND name IN (
		     SELECT DISTINCT name FROM suite_versions
		     WHERE tenant_id = $1 AND name > $2
		     ORDER BY name
		     LIMIT $3)
		 ORDER BY name, put_seq DESC`,
		tenantID, after, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("list suites: %w", err)
	}
	defer rows.Close()
	var out []store.Suite
	for rows.Next() {
		v, err := scanSuiteVersion(rows, false)
		if err != nil {
			return nil, "", fmt.Errorf("list suites: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Name != v.Name {
			out = append(out, store.Suite{Name: v.Name})
		}
		last := &out[len(out)-1]
		last.Versions = append(last.Versions, v)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list suites: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].Name)
	}
	return out, next, nil
}

// scanSuiteVersion scans suiteVersionColumns, then the document when
// withDoc, then extra destinations.
func scanSuiteVersion(r scanner, withDoc bool, extra ...any) (store.SuiteVersion, error) {
	var (
		v       store.SuiteVersion
		created int64
		doc     string
	)
	dest := []any{&v.Name, &v.Version, &v.ContentSHA256, &v.Cases, &created}
	if withDoc {
		dest = append(dest, &doc)
	}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return store.SuiteVersion{}, err
	}
	v.CreatedAt = store.FromMicros(created)
	if withDoc {
		v.Document = json.RawMessage(doc)
	}
	return v, nil
}
