package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gyrehq/gyre/internal/store"
)

// refuseNUL checks text fields gyre defines, given as (pointer, value)
// pairs, and refuses the first holding U+0000 with a *store.FieldError
// wrapping store.ErrNUL. PostgreSQL cannot keep U+0000 in text and SQLite
// can: checking here makes both engines answer alike. Text a contract
// defines is never checked: it is stored losslessly (as JSON text).
func refuseNUL(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.IndexByte(fields[i+1], 0) >= 0 {
			return &store.FieldError{Pointer: fields[i], Err: store.ErrNUL}
		}
	}
	return nil
}

// derefOr is *p, or "" for nil.
func derefOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// jsonText is how text a contract defines is kept in a plain text column
// (migration 00013): as a JSON string literal, which escapes U+0000, so
// every engine stores it losslessly. "" is NULL.
func jsonText(s string) any {
	if s == "" {
		return nil
	}
	return jsonTextPtr(&s)
}

// jsonTextPtr is jsonText keeping "" apart from absent (nil is NULL).
func jsonTextPtr(s *string) any {
	if s == nil {
		return nil
	}
	b, err := json.Marshal(*s)
	if err != nil { // a string always marshals
		panic(err)
	}
	return string(b)
}

// plainJSONString is the text of a JSON string literal that holds no
// escape, no control character and only valid UTF-8 — most stored text
// (model names, run ids) — which json.Unmarshal would decode to exactly
// what lies between its quotes; ok is false for any other literal.
func plainJSONString(lit string) (string, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", false
	}
	inner := lit[1 : len(lit)-1]
	if strings.ContainsAny(inner, `"\`) || hasControl(inner) || !utf8.ValidString(inner) {
		return "", false
	}
	return inner, true
}

// hasControl reports whether s holds a byte below 0x20.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			return true
		}
	}
	return false
}

// fromJSONText reads a column written by jsonText: nil for NULL.
func fromJSONText(ns sql.NullString) (*string, error) {
	if !ns.Valid {
		return nil, nil
	}
	if s, ok := plainJSONString(ns.String); ok {
		return &s, nil
	}
	var s string
	if err := json.Unmarshal([]byte(ns.String), &s); err != nil {
		return nil, fmt.Errorf("stored text is not a JSON string: %w", err)
	}
	return &s, nil
}
