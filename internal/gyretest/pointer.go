package gyretest

import (
	"strconv"
	"strings"
)

// SplitPointer splits an RFC 6901 JSON Pointer into its unescaped tokens;
// false when p is malformed (no leading "/", or a "~" not followed by 0
// or 1). The empty pointer, the whole document, has no tokens.
func SplitPointer(p string) ([]string, bool) {
	if p == "" {
		return nil, true
	}
	if p[0] != '/' {
		return nil, false
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(s, "~0", ""), "~1", ""), "~") {
			return nil, false
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, true
}

// ResolvePointer walks toks from v, a decoded JSON value (maps, slices,
// scalars), and returns the value they name; false when one does not
// resolve. Array indexes must be canonical decimals.
func ResolvePointer(v any, toks []string) (any, bool) {
	for _, tok := range toks {
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
