// Package jsonpointer splits RFC 6901 JSON Pointers and resolves them in
// decoded JSON values (maps, slices, scalars): graders read a value at a
// pointer, and fuzz tests check that error pointers name real fields.
package jsonpointer

import (
	"fmt"
	"strconv"
	"strings"
)

// Split parses a pointer into its unescaped tokens. The empty pointer,
// the whole document, has none.
func Split(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("JSON pointer %q must be empty or start with /", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, t := range parts {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 >= len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("JSON pointer %q has a bad ~ escape", p)
			}
		}
		t = strings.ReplaceAll(t, "~1", "/")
		parts[i] = strings.ReplaceAll(t, "~0", "~")
	}
	return parts, nil
}

// Resolve walks tokens from v and returns the value they name; false when
// one does not resolve. An array index must be a canonical decimal ("0"
// or no leading zero, no sign), as RFC 6901 requires.
func Resolve(v any, tokens []string) (any, bool) {
	for _, tok := range tokens {
		switch c := v.(type) {
		case map[string]any:
			x, ok := c[tok]
			if !ok {
				return nil, false
			}
			v = x
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != tok {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}
