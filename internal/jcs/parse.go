package jcs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of objects and arrays Parse accepts. It
// matches encoding/json's limit and keeps the recursive parser's stack small.
const MaxDepth = 10000

// The reasons Parse rejects an input. An *Error wraps exactly one of them, so
// callers branch with errors.Is.
var (
	// ErrSyntax means the input is not a JSON text (RFC 8259).
	ErrSyntax = errors.New("invalid JSON")
	// ErrInvalidUTF8 means the input is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("invalid UTF-8")
	// ErrDuplicateKey means an object has two members with the same name,
	// which makes the document ambiguous (RFC 7493 §2.3).
	ErrDuplicateKey = errors.New("duplicate object key")
	// ErrLoneSurrogate means a string escapes half of a UTF-16 surrogate
	// pair, which no Unicode string can hold (RFC 7493 §2.1).
	ErrLoneSurrogate = errors.New("unpaired UTF-16 surrogate escape")
	// ErrNumberRange means a number is outside the IEEE 754 double range
	// (RFC 7493 §2.2) and has no canonical form (RFC 8785 §3.2.2.3).
	ErrNumberRange = errors.New("number out of IEEE 754 double range")
	// ErrTooDeep means objects and arrays nest deeper than MaxDepth.
	ErrTooDeep = errors.New("nesting too deep")
)

// Error reports why and where Parse rejected an input.
type Error struct {
	// Err is one of the Err* sentinels above.
	Err error
	// Offset is the byte offset in the input at which the problem was found.
	Offset int
	// Pointer is the RFC 6901 JSON Pointer of the value at fault: the
	// duplicate member, the offending string or number, or the innermost
	// value being read when the syntax broke ("" at the top level).
	Pointer string
	// Detail is a short human explanation, without the input's content
	// beyond the duplicate key's name.
	Detail string
}

// Error describes the problem, its offset and its pointer.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("jcs: ")
	b.WriteString(e.Err.Error())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	fmt.Fprintf(&b, " (at byte %d", e.Offset)
	if e.Pointer != "" {
		fmt.Fprintf(&b, ", %s", e.Pointer)
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns the sentinel reason.
func (e *Error) Unwrap() error { return e.Err }

// Parse decodes raw into a tree of map[string]any, []any, string,
// json.Number, bool and nil, accepting exactly the I-JSON subset of JSON
// (RFC 7493) that RFC 8785 canonicalizes: UTF-8 text, no duplicate object
// keys, no unpaired surrogate escapes, and numbers within the IEEE 754 double
// range (underflow to zero is allowed, as in ECMAScript). Numbers keep their
// source text in json.Number, so nothing is lost before canonicalization.
// Insignificant whitespace may surround the value; anything else after it
// is an error.
func Parse(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			r, n := utf8.DecodeRune(raw[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, &Error{Err: ErrInvalidUTF8, Offset: off, Detail: "JSON text must be UTF-8"}
	}
	p := parser{data: raw}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.fail(ErrSyntax, "unexpected data after the top-level value")
	}
	return v, nil
}

type parser struct {
	data  []byte
	pos   int
	depth int
	// keys interns object member names: bodies repeat the same few names
	// in every element of an array, so this saves most string allocations.
	keys map[string]string
}

// maxInternedKeys bounds the intern table for inputs with many distinct names.
const maxInternedKeys = 512

// fail returns an *Error at the current offset. Its Pointer starts empty;
// each enclosing container prepends its token while the error unwinds.
func (p *parser) fail(reason error, detail string) *Error {
	return &Error{Err: reason, Offset: p.pos, Detail: detail}
}

func (p *parser) syntax(detail string) *Error {
	if p.pos >= len(p.data) {
		return p.fail(ErrSyntax, "unexpected end of input")
	}
	return p.fail(ErrSyntax, detail)
}

func (p *parser) skipSpace() { p.pos = SkipSpace(p.data, p.pos) }

func (p *parser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.syntax("")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.string()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	default:
		return nil, p.syntax(fmt.Sprintf("unexpected character %q looking for a value", rune(c)))
	}
}

func (p *parser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.syntax(fmt.Sprintf("invalid literal, want %s", word))
	}
	p.pos += len(word)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail(ErrTooDeep, fmt.Sprintf("more than %d nested objects and arrays", MaxDepth))
	}
	return nil
}

func (p *parser) object() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // {
	obj := make(map[string]any)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return obj, nil
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.syntax("expected a string object key")
		}
		keyOff := p.pos
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[key]; dup {
			return nil, &Error{
				Err: ErrDuplicateKey, Offset: keyOff, Pointer: "/" + EscapePointerToken(key),
				Detail: fmt.Sprintf("the object already has a member named %q", key),
			}
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.syntax("expected ':' after object key")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, prefix(err, key)
		}
		obj[key] = v
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.syntax("")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case '}':
			p.pos++
			p.depth--
			return obj, nil
		default:
			return nil, p.syntax("expected ',' or '}' after object member")
		}
	}
}

func (p *parser) array() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // [
	arr := make([]any, 0, 4)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return arr, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, prefix(err, strconv.Itoa(len(arr)))
		}
		arr = append(arr, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.syntax("")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case ']':
			p.pos++
			p.depth--
			return arr, nil
		default:
			return nil, p.syntax("expected ',' or ']' after array element")
		}
	}
}

// prefix prepends a container token to the pointer of an error raised
// inside one of its members.
func prefix(err error, token string) error {
	var e *Error
	if errors.As(err, &e) {
		e.Pointer = "/" + EscapePointerToken(token) + e.Pointer
	}
	return err
}

// key reads an object member name, reusing an earlier identical one.
func (p *parser) key() (string, error) {
	start := p.pos + 1
	for i := start; i < len(p.data); i++ {
		c := p.data[i]
		if c == '"' {
			if k, ok := p.keys[string(p.data[start:i])]; ok {
				p.pos = i + 1
				return k, nil
			}
			break
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	v, err := p.string()
	if err != nil {
		return "", err
	}
	k := v.(string)
	if p.keys == nil {
		p.keys = make(map[string]string, 32)
	}
	if len(p.keys) < maxInternedKeys {
		p.keys[k] = k
	}
	return k, nil
}

func (p *parser) string() (any, error) {
	start := p.pos
	p.pos++ // opening quote
	// Fast path: no escapes. The input is known to be valid UTF-8.
	for i := p.pos; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '"':
			s := string(p.data[p.pos:i])
			p.pos = i + 1
			return s, nil
		case c == '\\':
			return p.escapedString(start)
		case c < 0x20:
			p.pos = i
			return nil, p.syntax("control character in string must be escaped")
		}
	}
	p.pos = len(p.data)
	return nil, p.syntax("")
}

func (p *parser) escapedString(start int) (any, error) {
	p.pos = start + 1
	buf := make([]byte, 0, 32)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return nil, p.syntax("control character in string must be escaped")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		// Escape sequence.
		escOff := p.pos
		p.pos++
		if p.pos >= len(p.data) {
			return nil, p.syntax("")
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, p.syntax(`invalid \u escape`)
			}
			switch {
			case utf16.IsSurrogate(r) && r < 0xDC00:
				// High surrogate: a low surrogate escape must follow.
				if p.pos+6 <= len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					p.pos += 2
					lo, ok := p.hex4()
					if !ok {
						return nil, p.syntax(`invalid \u escape`)
					}
					if lo >= 0xDC00 && lo <= 0xDFFF {
						buf = utf8.AppendRune(buf, utf16.DecodeRune(r, lo))
						break
					}
				}
				return nil, &Error{Err: ErrLoneSurrogate, Offset: escOff, Detail: "a high surrogate escape must be followed by a low surrogate escape"}
			case utf16.IsSurrogate(r):
				return nil, &Error{Err: ErrLoneSurrogate, Offset: escOff, Detail: "a low surrogate escape must follow a high surrogate escape"}
			default:
				buf = utf8.AppendRune(buf, r)
			}
		default:
			p.pos = escOff
			return nil, p.syntax(fmt.Sprintf("invalid escape %q", "\\"+string(rune(e))))
		}
	}
	return nil, p.syntax("")
}

func (p *parser) hex4() (rune, bool) {
	r, ok := hex4(p.data[p.pos:])
	if ok {
		p.pos += 4
	}
	return r, ok
}

func (p *parser) number() (any, error) {
	start := p.pos
	d := p.data
	i := p.pos
	if d[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		digits()
	default:
		p.pos = i
		return nil, p.syntax("invalid number: expected a digit")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			p.pos = i
			return nil, p.syntax("invalid number: expected a digit after the decimal point")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			p.pos = i
			return nil, p.syntax("invalid number: expected a digit in the exponent")
		}
	}
	p.pos = i
	text := string(d[start:i])
	if _, err := strconv.ParseFloat(text, 64); err != nil {
		// The grammar above is a subset of ParseFloat's, so the only
		// possible failure is overflow to ±Inf.
		return nil, &Error{Err: ErrNumberRange, Offset: start, Detail: "the value overflows to infinity"}
	}
	return json.Number(text), nil
}

// EscapePointerToken escapes one reference token for an RFC 6901 JSON
// Pointer: "~" becomes "~0" and "/" becomes "~1".
func EscapePointerToken(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}
