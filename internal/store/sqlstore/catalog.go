package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/internal/store"
)

// The catalog (fixtures.go, suites.go, tasks.go) keeps fixture revisions,
// suite versions and tasks. Fixture revisions and suite versions are keyed
// by (tenant, name, content); each name's latest is the row with the
// highest put_seq, which every put of the name raises by one under a
// per-name lock, so "latest" is exact even when two puts share a
// microsecond.

// maxNameLen bounds the names the catalog stores (the name grammar of
// SPEC §2 allows 255 bytes).
const maxNameLen = 255

// checkCatalogName refuses names outside the name grammar of SPEC §2
// (^[A-Za-z0-9._-]{1,255}$, not "." or ".."), which the API has already
// enforced: a bad name fails loudly instead of being stored.
func checkCatalogName(what, name string) error {
	if name == "" || len(name) > maxNameLen || name == "." || name == ".." || !validNameBytes(name) {
		return fmt.Errorf("%s %q does not follow the name grammar", what, name)
	}
	return nil
}

// checkSHA256 refuses anything but a lowercase hex SHA-256.
func checkSHA256(what, sum string) error {
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return fmt.Errorf("%s %q is not a lowercase hex sha-256", what, sum)
	}
	return nil
}

// nextPutSeq returns the put_seq the next put of (tenant, name) in table
// gets. The caller holds the name's lock (lockName).
func nextPutSeq(ctx context.Context, tx *sql.Tx, table, tenantID, name string) (int64, error) {
	var top int64
	err := tx.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(put_seq), 0) FROM `+table+` WHERE tenant_id = $1 AND name = $2`,
		tenantID, name).Scan(&top)
	if err != nil {
		return 0, fmt.Errorf("read %s put sequence: %w", table, err)
	}
	return top + 1, nil
}

// lockName serialises the puts of one catalog name (on PostgreSQL; SQLite
// write transactions already exclude each other).
func (s *Store) lockName(ctx context.Context, tx *sql.Tx, kind, tenantID, name string) error {
	return s.lockTx(ctx, tx, "catalog\x00"+kind+"\x00"+tenantID+"\x00"+name)
}

// decodeNameCursor reads the position of a list ordered by catalog name
// (kind "fixture" or "suite"), "" for the first page, or an error wrapping
// store.ErrInvalidCursor.
func decodeNameCursor(cur cursorScope, kind, cursor string) (string, error) {
	name, err := cur.decode(cursor)
	if err != nil || name == "" {
		return name, err
	}
	if checkCatalogName(kind, name) != nil {
		return "", fmt.Errorf("cursor is not a %s cursor: %w", kind, store.ErrInvalidCursor)
	}
	return name, nil
}

// validNameBytes reports whether s holds only the bytes of the name
// grammar ([A-Za-z0-9._-]).
func validNameBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// placeholders returns "$from, $from+1, …" for n values.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(from + i))
	}
	return b.String()
}
