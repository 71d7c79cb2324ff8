// Package jcs implements the JSON Canonicalization Scheme of RFC 8785 and the
// content hash gyre derives from it.
//
// Every hash gyre names (turn identity, output replay, suite versions) is the
// lowercase hex SHA-256 of the canonical bytes Canonicalize returns. The
// input must be I-JSON (RFC 7493): UTF-8, no duplicate object keys, no
// unpaired surrogates, numbers within the IEEE 754 double range. Numbers are
// read at full precision, converted to the nearest double and written as
// ECMAScript writes them; strings are compared and written exactly as sent,
// escaping only what RFC 8785 requires and never normalizing Unicode; object
// members are sorted by the UTF-16 code units of their names.
package jcs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Canonicalize parses raw (see Parse for what it accepts) and returns its
// RFC 8785 canonical form.
func Canonicalize(raw []byte) ([]byte, error) {
	v, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return Append(make([]byte, 0, len(raw)), v)
}

// Hash returns the lowercase hex SHA-256 of raw's canonical form.
func Hash(raw []byte) (string, error) {
	c, err := Canonicalize(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// Marshal encodes v with encoding/json and returns the canonical form of the
// result.
func Marshal(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("jcs: marshal: %w", err)
	}
	return Canonicalize(raw)
}

// Equal reports whether a and b have the same canonical form. It returns an
// error when either is not I-JSON.
func Equal(a, b []byte) (bool, error) {
	ca, err := Canonicalize(a)
	if err != nil {
		return false, err
	}
	cb, err := Canonicalize(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ca, cb), nil
}

// Append appends the canonical form of a value tree as Parse returns it
// (map[string]any, []any, string, json.Number, float64, bool, nil) to dst.
// Strings must be valid UTF-8.
func Append(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if v {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return appendString(dst, v)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return dst, fmt.Errorf("jcs: number %q: %w", string(v), ErrNumberRange)
		}
		return AppendNumber(dst, f)
	case float64:
		return AppendNumber(dst, v)
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = Append(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, CompareKeys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendString(dst, k); err != nil {
				return dst, err
			}
			dst = append(dst, ':')
			if dst, err = Append(dst, v[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	default:
		return dst, fmt.Errorf("jcs: unsupported value of type %T", v)
	}
}

const hexDigits = "0123456789abcdef"

// appendString writes s as RFC 8785 §3.2.2.2 requires: '"' and '\' escaped,
// U+0008, U+0009, U+000A, U+000C, U+000D as \b \t \n \f \r, other C0
// controls as \u00xx with lowercase hex, every other character verbatim.
func appendString(dst []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return dst, fmt.Errorf("jcs: string: %w", ErrInvalidUTF8)
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), nil
}

// CompareKeys orders object member names as RFC 8785 §3.2.3 requires: by
// their UTF-16 code units, compared as unsigned integers. It differs from
// byte (code point) order only between supplementary characters and
// U+E000–U+FFFF.
func CompareKeys(a, b string) int {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		ca, cb := a[i], b[j]
		if ca < utf8.RuneSelf && cb < utf8.RuneSelf {
			if ca != cb {
				return int(ca) - int(cb)
			}
			i++
			j++
			continue
		}
		ra, na := utf8.DecodeRuneInString(a[i:])
		rb, nb := utf8.DecodeRuneInString(b[j:])
		if ra != rb {
			return utf16Rank(ra) - utf16Rank(rb)
		}
		i += na
		j += nb
	}
	// One is a prefix of the other; the shorter sorts first.
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// utf16Rank maps a code point to a key whose order is the order of the
// code point's UTF-16 encoding: supplementary characters (encoded from
// U+D800 up) sort after U+D7FF and before U+E000.
func utf16Rank(r rune) int {
	if r >= 0xE000 && r <= 0xFFFF {
		return int(r) + 0x200000
	}
	return int(r)
}
