package sqlstore

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

// Page sizes when the caller's API did not clamp (it should: default 50,
// max 500).
const (
	defaultLimit = 50
	maxLimit     = 500
)

// limit returns p's page size, clamped to [1, maxLimit].
func limit(p store.Page) int {
	switch {
	case p.Limit <= 0:
		return defaultLimit
	case p.Limit > maxLimit:
		return maxLimit
	}
	return p.Limit
}

// Cursors are opaque to clients: base64url of "<kind>:<last id>", where
// the id is a gyre UUID. The kind keeps a cursor of one list from being
// replayed against another.
func encodeCursor(kind, lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + lastID))
}

// decodeCursor returns the last id a cursor of the given kind carries, ""
// for an empty cursor, or an error wrapping store.ErrInvalidCursor.
func decodeCursor(kind, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", fmt.Errorf("decode cursor: %w", store.ErrInvalidCursor)
	}
	k, id, ok := strings.Cut(string(raw), ":")
	if u, err := uuid.Parse(id); !ok || k != kind || err != nil || u.String() != id {
		return "", fmt.Errorf("cursor is not a %s cursor: %w", kind, store.ErrInvalidCursor)
	}
	return id, nil
}
