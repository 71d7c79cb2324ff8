package sqlstore

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

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

// A cursor is opaque to clients: base64url of "<list>:<binding>:<position>".
// The position is where the next page starts (an id, a name, …; each list
// writes and parses its own). The binding is a hash of the tenant, the
// list, its filter and the position, so a cursor issued for one tenant,
// list or filter — or edited — is refused with store.ErrInvalidCursor
// instead of paging something else. Every list builds its cursors with
// listCursor; nothing else encodes one.
type cursorScope struct {
	tenantID, list, filter string
}

// listCursor is the cursor scope of one page request: the tenant, the
// list's name and the values of its filter, in a fixed order ("" for an
// absent filter).
func listCursor(tenantID, list string, filter ...string) cursorScope {
	var f strings.Builder
	for _, v := range filter {
		f.WriteString(strconv.Quote(v))
	}
	return cursorScope{tenantID: tenantID, list: list, filter: f.String()}
}

// windowScope is a time window's part of a cursor scope: nothing when
// the window is open at both ends, so a list that gained a window filter
// keeps its unfiltered cursors.
func windowScope(since, until time.Time) []string {
	if since.IsZero() && until.IsZero() {
		return nil
	}
	return []string{strconv.FormatInt(micros(since), 10), strconv.FormatInt(micros(until), 10)}
}

// bindingLen is how many bytes of SHA-256 a cursor's binding keeps: it
// detects a cursor sent to the wrong list, not an attacker, who could
// only page through what the query lets them read anyway.
const bindingLen = 12

func (c cursorScope) binding(pos string) string {
	h := sha256.New()
	for _, v := range []string{c.tenantID, c.list, c.filter, pos} {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:bindingLen])
}

// encode returns the cursor of position pos.
func (c cursorScope) encode(pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.list + ":" + c.binding(pos) + ":" + pos))
}

// decode returns the position a cursor of this scope carries, "" for an
// empty cursor, or an error wrapping store.ErrInvalidCursor.
func (c cursorScope) decode(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", fmt.Errorf("decode cursor: %w", store.ErrInvalidCursor)
	}
	list, rest, ok1 := strings.Cut(string(raw), ":")
	bind, pos, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || list != c.list || pos == "" || bind != c.binding(pos) {
		return "", fmt.Errorf("cursor was not issued for this %s list, tenant and filter: %w", c.list, store.ErrInvalidCursor)
	}
	return pos, nil
}

// decodeID is decode for lists positioned by a gyre id (a UUID).
func (c cursorScope) decodeID(cursor string) (string, error) {
	id, err := c.decode(cursor)
	if err != nil || id == "" {
		return id, err
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return "", fmt.Errorf("cursor of the %s list holds no id: %w", c.list, store.ErrInvalidCursor)
	}
	return id, nil
}
