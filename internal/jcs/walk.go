package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Walker reads JSON text in place, without building values: it finds the
// members of an object, the elements of an array and the end of any value,
// as byte offsets into the text, and decodes strings on request.
//
// It does not validate. On JSON text its answers are exact; on other text
// it stops with an error where the structure breaks (an unterminated
// string, a missing colon or comma) but takes whatever lies between
// delimiters for a value (a literal such as tru, a string with a raw
// control character), and it never panics. A caller that needs valid
// I-JSON checks it first, with Parse or a validator that parses.
//
// The zero Walker reads empty text. A Walker is a small value, cheap to
// copy, and safe for concurrent use while its text does not change.
type Walker struct {
	src []byte
	// names interns object member names, if set: a batch of like objects
	// repeats the same few names in each.
	names map[string]string
	// checked refuses member names with an unpaired surrogate escape
	// (Canonicalizer.Checked).
	checked bool
}

// NewWalker returns a Walker over src.
func NewWalker(src []byte) Walker { return Walker{src: src} }

// maxInternedNames bounds Walker.names for texts with many distinct member
// names.
const maxInternedNames = 256

// Space returns the offset of the first byte at or after pos that is not
// JSON whitespace (len(src) if there is none).
func (w Walker) Space(pos int) int { return SkipSpace(w.src, pos) }

// SkipSpace returns the offset of the first byte of b at or after pos
// that is not JSON whitespace (len(b) if there is none).
func SkipSpace(b []byte, pos int) int {
	for pos < len(b) {
		switch b[pos] {
		case ' ', '\t', '\n', '\r':
			pos++
		default:
			return pos
		}
	}
	return pos
}

// Members calls fn with the name of each member of the object at src[pos:]
// (after whitespace) and the offset of its value, in text order; fn returns
// the offset just past the value (Skip finds it when fn does not read the
// value itself). Members returns the offset just past the object, or fn's
// first error unchanged, so a caller may stop early with an error of its
// own.
func (w Walker) Members(pos int, fn func(name string, start int) (end int, err error)) (int, error) {
	pos = w.Space(pos)
	if pos >= len(w.src) || w.src[pos] != '{' {
		return pos, errors.New("not an object")
	}
	pos = w.Space(pos + 1)
	if pos < len(w.src) && w.src[pos] == '}' {
		return pos + 1, nil
	}
	for {
		nameEnd, err := w.Skip(pos)
		if err != nil || w.src[pos] != '"' {
			return pos, errors.New("member name expected")
		}
		name, err := w.name(pos, nameEnd)
		if err != nil {
			return pos, err
		}
		pos = w.Space(nameEnd)
		if pos >= len(w.src) || w.src[pos] != ':' {
			return pos, errors.New("colon expected")
		}
		end, err := fn(name, w.Space(pos+1))
		if err != nil {
			return end, err
		}
		var done bool
		if pos, done, err = w.separator(end, '}'); done || err != nil {
			return pos, err
		}
	}
}

// separator reads what follows a member or element ending at end: a
// comma (it returns the offset of the next one) or close (it returns the
// offset just past it, and done).
func (w Walker) separator(end int, close byte) (pos int, done bool, err error) {
	pos = w.Space(end)
	switch {
	case pos < len(w.src) && w.src[pos] == ',':
		return w.Space(pos + 1), false, nil
	case pos < len(w.src) && w.src[pos] == close:
		return pos + 1, true, nil
	}
	return pos, false, errors.New("comma or " + string(close) + " expected")
}

// Elements calls fn with the offset of each element of the array at
// src[pos:] (after whitespace), in order; fn returns the offset just past
// the element. Elements returns the offset just past the array, or fn's
// first error unchanged.
func (w Walker) Elements(pos int, fn func(start int) (end int, err error)) (int, error) {
	pos = w.Space(pos)
	if pos >= len(w.src) || w.src[pos] != '[' {
		return pos, errors.New("not an array")
	}
	pos = w.Space(pos + 1)
	if pos < len(w.src) && w.src[pos] == ']' {
		return pos + 1, nil
	}
	for {
		end, err := fn(pos)
		if err != nil {
			return end, err
		}
		var done bool
		if pos, done, err = w.separator(end, ']'); done || err != nil {
			return pos, err
		}
	}
}

// Skip returns the offset just past the value that starts at src[pos]
// (no whitespace before it). It finds where the value ends, matching
// brackets and quotes, without checking what lies between.
func (w Walker) Skip(pos int) (int, error) {
	if pos >= len(w.src) {
		return pos, errors.New("value expected")
	}
	switch w.src[pos] {
	case '"':
		// Find each quote with IndexByte (vectorised); one preceded by an
		// odd run of backslashes is escaped.
		for pos++; pos < len(w.src); {
			i := bytes.IndexByte(w.src[pos:], '"')
			if i < 0 {
				break
			}
			q := pos + i
			bs := 0
			for j := q - 1; j >= pos && w.src[j] == '\\'; j-- {
				bs++
			}
			if bs%2 == 0 {
				return q + 1, nil
			}
			pos = q + 1
		}
		return len(w.src), errors.New("unterminated string")
	case '{', '[':
		depth := 0
		for pos < len(w.src) {
			switch w.src[pos] {
			case '"':
				end, err := w.Skip(pos)
				if err != nil {
					return end, err
				}
				pos = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return pos + 1, nil
				}
			}
			pos++
		}
		return pos, errors.New("unterminated object or array")
	default: // number or literal
		start := pos
		for pos < len(w.src) {
			switch w.src[pos] {
			case ',', '}', ']', ':', ' ', '\t', '\n', '\r':
				if pos == start {
					return pos, errors.New("value expected")
				}
				return pos, nil
			}
			pos++
		}
		return pos, nil
	}
}

// String decodes the JSON string literal src[start:end], quotes included,
// as Skip delimits it.
func (w Walker) String(start, end int) (string, error) {
	lit := w.src[start:end]
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", errors.New("not a string")
	}
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", fmt.Errorf("decode string: %w", err)
	}
	return s, nil
}

// name decodes the member name literal src[start:end], interned.
func (w Walker) name(start, end int) (string, error) {
	if w.checked && loneSurrogate(w.src[start:end]) {
		return "", ErrLoneSurrogate
	}
	if w.names == nil || end-start < 2 {
		return w.String(start, end)
	}
	if k, ok := w.names[string(w.src[start+1:end-1])]; ok {
		return k, nil
	}
	k, err := w.String(start, end)
	if err == nil && len(w.names) < maxInternedNames && !bytes.Contains(w.src[start:end], []byte{'\\'}) {
		w.names[k] = k
	}
	return k, err
}
