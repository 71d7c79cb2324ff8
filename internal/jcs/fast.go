package jcs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
)

// AppendCanonical appends the RFC 8785 canonical form of raw, one JSON
// text, to dst: the bytes Canonicalize returns, written in one pass over
// raw without building a value tree. raw must already be known to be
// I-JSON (Parse, or a validator that parses, accepted it): AppendCanonical
// does not check it, and on other input it returns an error or bytes that
// are no canonical form. Use it on the hot path of an intake that has just
// validated its body; use Canonicalize on anything else.
func AppendCanonical(dst, raw []byte) ([]byte, error) {
	var c Canonicalizer
	dst, end, err := c.AppendValue(dst, raw, 0, nil)
	if err != nil {
		return dst, err
	}
	if c.w.Space(end) != len(raw) {
		return dst, errors.New("jcs: data after the value")
	}
	return dst, nil
}

// HashCanonical is Hash for raw already known to be I-JSON, computed as
// AppendCanonical computes the canonical form: the lowercase hex SHA-256 of
// the bytes Canonicalize would return.
func HashCanonical(raw []byte) (string, error) {
	c, err := AppendCanonical(nil, raw)
	if err != nil {
		return "", err
	}
	return hashHex(c), nil
}

func hashHex(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// Canonicalizer is AppendCanonical for many values in a row, such as the
// elements of a batch: it reuses its buffers and the member names it has
// seen from one value to the next, and reports the members of each value
// as it canonicalizes it, so that a caller reads and hashes a value in one
// pass. The zero Canonicalizer is ready to use; it is not safe for
// concurrent use.
type Canonicalizer struct {
	w       Walker
	dst     []byte // the output, during a call
	buf     []byte // HashValue's output, kept between calls
	scratch []canonMember
	// top, if set, receives each member of the outermost object, in text
	// order, with its value's span.
	top func(name string, start, end int) error
	// Checked makes AppendValue refuse what Parse refuses in text already
	// known to be UTF-8 JSON (utf8.Valid, json.Valid): a duplicate member name (ErrDuplicateKey) or an
	// unpaired surrogate escape (ErrLoneSurrogate). Numbers out of range
	// are refused either way (ErrNumberRange). The error says what, not
	// where: Parse says where.
	Checked bool
}

// canonMember is an object member waiting to be written in name order.
type canonMember struct {
	name       string
	start, end int // the value's bytes
}

// maxFastDepth is how deeply objects and arrays may nest in a value that
// Canonicalizer writes itself. It reads an object's member values once to
// find them and again to write them in name order, so a nested value is
// read once per enclosing object; a deeper value (not seen in practice)
// goes through Parse and Append instead, which build a tree, so that the
// work stays linear in the size of the input whatever its shape.
const maxFastDepth = 24

// errFastTooDeep is how Canonicalizer.value hands a value nested past
// maxFastDepth back to AppendValue.
var errFastTooDeep = errors.New("jcs: nested too deeply for the one-pass canonicalizer")

// AppendValue appends the canonical form of the JSON value that starts at
// src[pos:] (after whitespace) to dst, and returns it with the offset just
// past the value; src[start:end] of the value (whitespace trimmed) are its
// exact bytes. The value must be I-JSON, as for AppendCanonical; what
// follows it in src is not read.
//
// If members is not nil and the value is an object, members is called
// once with each of its own members (not those of nested objects), in text
// order, with the name and the span src[start:end] of the member's value,
// before anything of the object is written. If members returns an error,
// AppendValue stops and returns it.
func (c *Canonicalizer) AppendValue(dst, src []byte, pos int, members func(name string, start, end int) error) ([]byte, int, error) {
	base := len(dst)
	if c.w.names == nil {
		c.w.names = make(map[string]string, 32)
	}
	c.w.src, c.w.checked = src, c.Checked
	c.dst, c.scratch, c.top = dst, c.scratch[:0], members
	start := c.w.Space(pos)
	end, err := c.value(start, 0)
	dst, c.dst, c.top = c.dst, nil, nil
	if errors.Is(err, errFastTooDeep) {
		// members has seen every member already: the outermost object is
		// read whole before anything nested is written.
		dst = dst[:base]
		if end, err = c.w.Skip(start); err != nil {
			return dst, end, err
		}
		var v any
		if v, err = Parse(src[start:end]); err == nil {
			dst, err = Append(dst, v)
		}
	}
	return dst, end, err
}

// HashValue is AppendValue returning the lowercase hex SHA-256 of the
// value's canonical form (as Hash computes it) instead of the form itself.
func (c *Canonicalizer) HashValue(src []byte, pos int, members func(name string, start, end int) error) (string, int, error) {
	var (
		end int
		err error
	)
	c.buf, end, err = c.AppendValue(c.buf[:0], src, pos, members)
	if err != nil {
		return "", end, err
	}
	return hashHex(c.buf), end, nil
}

// value appends the RFC 8785 form of the value at src[pos:] to c.dst,
// exactly as Canonicalize writes it, and returns the offset just past the
// value. It reads text that Parse accepts. Strings without escapes are
// copied as they are: JSON text cannot hold unescaped any character RFC
// 8785 escapes.
func (c *Canonicalizer) value(pos, depth int) (int, error) {
	src := c.w.src
	pos = c.w.Space(pos)
	if pos >= len(src) {
		return pos, errors.New("value expected")
	}
	switch ch := src[pos]; {
	case ch == '{':
		if depth >= maxFastDepth {
			return pos, errFastTooDeep
		}
		return c.object(pos, depth+1)
	case ch == '[':
		if depth >= maxFastDepth {
			return pos, errFastTooDeep
		}
		c.dst = append(c.dst, '[')
		first := true
		end, err := c.w.Elements(pos, func(start int) (int, error) {
			if !first {
				c.dst = append(c.dst, ',')
			}
			first = false
			return c.value(start, depth+1)
		})
		c.dst = append(c.dst, ']')
		return end, err
	case ch == '"':
		end, err := c.w.Skip(pos)
		if err != nil {
			return end, err
		}
		if bytes.IndexByte(src[pos:end], '\\') < 0 {
			c.dst = append(c.dst, src[pos:end]...)
			return end, nil
		}
		if c.Checked && loneSurrogate(src[pos:end]) {
			return end, ErrLoneSurrogate
		}
		s, err := c.w.String(pos, end)
		if err != nil {
			return end, err
		}
		c.dst, err = appendString(c.dst, s)
		return end, err
	case ch == 't' || ch == 'f' || ch == 'n':
		end, err := c.w.Skip(pos)
		c.dst = append(c.dst, src[pos:end]...)
		return end, err
	default:
		end, err := c.w.Skip(pos)
		if err != nil {
			return end, err
		}
		c.dst, err = appendNumberText(c.dst, src[pos:end])
		return end, err
	}
}

// object writes the object at src[pos:] with its members sorted as RFC
// 8785 §3.2.3 requires (CompareKeys) and returns the offset past it.
func (c *Canonicalizer) object(pos, depth int) (int, error) {
	base := len(c.scratch)
	end, err := c.w.Members(pos, func(name string, start int) (int, error) {
		e, err := c.w.Skip(start)
		if err != nil {
			return e, err
		}
		c.scratch = append(c.scratch, canonMember{name: name, start: start, end: e})
		if depth == 1 && c.top != nil {
			err = c.top(name, start, e)
		}
		return e, err
	})
	if err != nil {
		return end, err
	}
	n := len(c.scratch) - base
	slices.SortFunc(c.scratch[base:], func(a, b canonMember) int { return CompareKeys(a.name, b.name) })
	if c.Checked {
		for i := base + 1; i < len(c.scratch); i++ {
			if c.scratch[i].name == c.scratch[i-1].name {
				return end, ErrDuplicateKey
			}
		}
	}
	c.dst = append(c.dst, '{')
	for i := range n {
		// Nested objects append to c.scratch past this object's members
		// and cut it back; index afresh, the array may have moved.
		m := c.scratch[base+i]
		if i > 0 {
			c.dst = append(c.dst, ',')
		}
		if c.dst, err = appendName(c.dst, m.name); err != nil {
			return end, err
		}
		c.dst = append(c.dst, ':')
		if _, err := c.value(m.start, depth); err != nil {
			return end, err
		}
	}
	c.dst = append(c.dst, '}')
	c.scratch = c.scratch[:base]
	return end, nil
}

// appendName appends the canonical form of a member name: as it is,
// quoted, unless it holds one of the characters RFC 8785 escapes (", \ and
// the C0 controls), when appendString writes it.
func appendName(dst []byte, name string) ([]byte, error) {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == '"' || c == '\\' {
			return appendString(dst, name)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"'), nil
}

// appendNumberText appends the canonical form of the JSON number text
// num. A plain integer of up to 15 digits is its own canonical form (but
// -0 is 0); anything else is converted as Append converts a json.Number.
func appendNumberText(dst, num []byte) ([]byte, error) {
	digits := num
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	plain := len(digits) > 0 && len(digits) <= 15 && (digits[0] != '0' || len(digits) == 1)
	for _, d := range digits {
		if d < '0' || d > '9' {
			plain = false
			break
		}
	}
	if plain {
		if len(num) == 2 && num[0] == '-' && num[1] == '0' {
			return append(dst, '0'), nil
		}
		return append(dst, num...), nil
	}
	return Append(dst, json.Number(num))
}

// loneSurrogate reports whether the JSON string literal lit escapes half
// of a UTF-16 surrogate pair without the other half, as Parse refuses.
func loneSurrogate(lit []byte) bool {
	i := bytes.IndexByte(lit, '\\')
	if i < 0 {
		return false
	}
	for ; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++
		if i >= len(lit) || lit[i] != 'u' {
			continue // a one-character escape; the loop steps past it
		}
		r, ok := hex4(lit[i+1:])
		if !ok {
			return false // not JSON; not this function's to judge
		}
		i += 4
		switch {
		case r < 0xD800 || r > 0xDFFF:
		case r >= 0xDC00:
			return true // a low half first
		default:
			// A high half: a low half must be escaped next.
			if i+6 >= len(lit) || lit[i+1] != '\\' || lit[i+2] != 'u' {
				return true
			}
			lo, ok := hex4(lit[i+3:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

// hex4 decodes the four hex digits that start b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
