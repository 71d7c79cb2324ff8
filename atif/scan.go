package atif

import (
	"unicode/utf16"
	"unicode/utf8"
)

// scanner walks JSON text that encoding/json has already found valid, so
// it never meets a syntax error; it only tracks where it is. Keeping the
// walk over the text (rather than over a decoded tree) keeps member order,
// byte offsets and raw bytes, and needs memory only for what it returns.
type scanner struct {
	data []byte
	pos  int
}

// jsonKind is the type of a JSON value.
type jsonKind uint8

const (
	kindNull jsonKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "boolean"
	case kindNumber:
		return "number"
	case kindString:
		return "string"
	case kindArray:
		return "array"
	default:
		return "object"
	}
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// next skips white space and returns the kind of the value that starts
// there.
func (s *scanner) next() jsonKind {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return kindNull
	}
	switch s.data[s.pos] {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	default:
		return kindNumber
	}
}

// stringEnd returns the offset just past the closing quote of the string
// whose opening quote is at i, and whether it holds escapes.
func (s *scanner) stringEnd(i int) (int, bool) {
	escaped := false
	for i++; i < len(s.data); i++ {
		switch s.data[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i + 1, escaped
		}
	}
	return len(s.data), escaped
}

// readString decodes the string at the current position.
func (s *scanner) readString() string {
	start := s.pos
	end, escaped := s.stringEnd(start)
	s.pos = end
	body := s.data[start+1 : end-1]
	if !escaped {
		return string(body)
	}
	return unescape(body)
}

// unescape decodes the body of a JSON string that holds escapes (valid, as
// json.Valid checked). Like encoding/json, it turns an unpaired surrogate
// into U+FFFD.
func unescape(body []byte) string {
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' || i+1 >= len(body) {
			out = append(out, c)
			continue
		}
		i++
		switch body[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body[i+1:])
			if !ok {
				out = append(out, '\\', 'u')
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					r2, ok = hex4(body[i+3:])
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, body[i])
		}
	}
	return string(out)
}

// hex4 decodes four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// readBool reads true or false.
func (s *scanner) readBool() bool {
	if s.data[s.pos] == 't' {
		s.pos += len("true")
		return true
	}
	s.pos += len("false")
	return false
}

// readNumber returns the text of the number at the current position.
func (s *scanner) readNumber() string {
	start := s.pos
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			s.pos++
		default:
			return string(s.data[start:s.pos])
		}
	}
	return string(s.data[start:s.pos])
}

// skip moves past the value at the current position and returns its
// offsets and how deeply it nests (0 for a scalar, 1 for a flat array or
// object). It does not recurse, so hostile nesting costs no stack.
func (s *scanner) skip() (start, end, depth int) {
	s.skipSpace()
	start = s.pos
	switch s.data[s.pos] {
	case '"':
		s.pos, _ = s.stringEnd(s.pos)
	case 't':
		s.pos += len("true")
	case 'f':
		s.pos += len("false")
	case 'n':
		s.pos += len("null")
	case '{', '[':
		d := 0
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case '"':
				s.pos, _ = s.stringEnd(s.pos)
				continue
			case '{', '[':
				d++
				depth = max(depth, d)
			case '}', ']':
				d--
				if d == 0 {
					s.pos++
					return start, s.pos, depth
				}
			}
			s.pos++
		}
	default:
		s.readNumber()
	}
	return start, s.pos, depth
}

// expect consumes the byte c after optional white space. It reports false
// only on text that is not valid JSON, which the caller rules out.
func (s *scanner) expect(c byte) bool {
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// more consumes the separator after an object member or array element and
// reports whether another one follows (true after ',', false after the
// closing bracket).
func (s *scanner) more() bool {
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == ',' {
		s.pos++
		return true
	}
	s.pos++ // '}' or ']'
	return false
}

// empty consumes the closing bracket of an empty object or array right
// after its opening one and reports whether it was there.
func (s *scanner) empty(closing byte) bool {
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == closing {
		s.pos++
		return true
	}
	return false
}

// firstInvalidUTF8 returns the offset of the first byte of b that is not
// part of valid UTF-8, or -1.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}
