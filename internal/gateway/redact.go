package gateway

import (
	"bytes"
	"net/http"
	"strings"
)

// An upstream may echo the Authorization header it received — in an error
// body, a header, a debug field of its answer or a stream — and whatever
// the gateway relays reaches the agent and whatever it records reaches
// the store. So everything taken from an upstream's answer passes through
// a redactor that holds the key of every configured upstream, not only
// the answering one's: an upstream may be a proxy in front of another.

// RedactedMark replaces an upstream key in relayed and recorded answers.
const RedactedMark = "[redacted]"

// MinRedactedKeyLen is the length below which a configured key is not
// redacted: "EMPTY", "none" and the like are the placeholders local
// servers take, not secrets, and replacing them would rewrite ordinary
// words in model output.
const MinRedactedKeyLen = 8

// screenPrefix is how many leading bytes of a key a stream may spell
// across its events before the gateway cuts it (all of a shorter key).
// A key's public prefix ("sk-proj-", "sk-ant-api03-") stays under it, so
// an answer that only mentions such a prefix is never cut.
const screenPrefix = 16

var redactedMark = []byte(RedactedMark)

// redactor removes upstream keys from what upstreams send back.
type redactor struct {
	// literals are the forms a key is replaced in: as is, and with "\/"
	// for '/', as some JSON encoders write it.
	literals [][]byte
	strs     []string // literals as strings, for headers
	keys     []screenKey
}

// screenKey is a key as the stream screen matches it.
type screenKey struct {
	b []byte
	// fail[i] is the length of the longest proper prefix of b[:i+1] that
	// is also its suffix (Knuth–Morris–Pratt).
	fail []int
	// cut is the matched length at which a stream is cut.
	cut int
}

// newRedactor returns the redactor of the upstreams' keys; nil when none
// is long enough to redact, which costs nothing on the request path.
func newRedactor(ups []Upstream) *redactor {
	r := &redactor{}
	seen := map[string]bool{}
	for _, u := range ups {
		k := u.APIKey
		if len(k) < MinRedactedKeyLen || seen[k] {
			continue
		}
		seen[k] = true
		r.literals = append(r.literals, []byte(k))
		if strings.Contains(k, "/") {
			r.literals = append(r.literals, []byte(strings.ReplaceAll(k, "/", `\/`)))
		}
		r.keys = append(r.keys, newScreenKey(k))
	}
	if len(r.keys) == 0 {
		return nil
	}
	for _, l := range r.literals {
		r.strs = append(r.strs, string(l))
	}
	return r
}

func newScreenKey(k string) screenKey {
	b := []byte(k)
	fail := make([]int, len(b))
	for i, n := 1, 0; i < len(b); i++ {
		for n > 0 && b[i] != b[n] {
			n = fail[n-1]
		}
		if b[i] == b[n] {
			n++
		}
		fail[i] = n
	}
	return screenKey{b: b, fail: fail, cut: min(len(b), screenPrefix)}
}

// redact returns b with every key replaced by RedactedMark: b itself when
// it holds none, else a copy.
func (r *redactor) redact(b []byte) []byte {
	if r == nil {
		return b
	}
	for _, k := range r.literals {
		if bytes.Contains(b, k) {
			b = bytes.ReplaceAll(b, k, redactedMark)
		}
	}
	return b
}

// redactEvent redacts a stream event's raw bytes and its data. The data
// holds a key only if the raw bytes do: data lines are joined by "\n",
// which no key holds.
func (r *redactor) redactEvent(raw, data []byte) ([]byte, []byte) {
	if r == nil {
		return raw, data
	}
	for _, k := range r.literals {
		if bytes.Contains(raw, k) {
			raw = bytes.ReplaceAll(raw, k, redactedMark)
			data = bytes.ReplaceAll(data, k, redactedMark)
		}
	}
	return raw, data
}

// redactHeader redacts the values of h in place.
func (r *redactor) redactHeader(h http.Header) {
	if r == nil {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			for _, k := range r.strs {
				if strings.Contains(v, k) {
					v = strings.ReplaceAll(v, k, RedactedMark)
					vs[i] = v
				}
			}
		}
	}
}

// screen follows the text a stream spells across its events. Literal
// redaction sees one event at a time, but a client joins the pieces of
// some members' text (content, arguments, …) over many events, so a key could
// arrive in pieces that each look harmless. For every member name (and
// the choice or tool call index before it) the screen keeps, per key, how
// many leading bytes of the key the text spelled so far ends with — a
// sliding window of the key's length, held as one integer. An event that
// brings that to the key's cut is withheld and the stream cut, so an
// agent never receives more than cut-1 leading bytes of a key.
type screen struct {
	r      *redactor
	fields []fieldMatch
	// The first fields and their states live here, so that a stream's
	// screen costs one allocation.
	fieldBuf [8]fieldMatch
	stateBuf [32]int
	states   []int // the unused part of stateBuf
}

type fieldMatch struct {
	field  uint64 // hash of the member name and index
	states []int  // per key: leading bytes of it the text ends with
}

// newScreen returns a screen for one stream; nil (which passes
// everything) when there is no key to screen for.
func (r *redactor) newScreen() *screen {
	if r == nil {
		return nil
	}
	s := &screen{r: r}
	s.fields, s.states = s.fieldBuf[:0], s.stateBuf[:]
	return s
}

// spells reports whether the next event's data, already redacted, makes a
// joined member's text spell a key's cut or more of its leading bytes. The
// data is read as JSON leniently: whatever is between quotes is a string,
// a string followed by ':' is a member name.
func (s *screen) spells(data []byte) bool {
	if s == nil {
		return false
	}
	name, index, joined := []byte(nil), -1, false
	for i := 0; i < len(data); {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return false
		}
		start := i + q + 1
		end := stringEnd(data, start)
		j := end + 1
		for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r') {
			j++
		}
		if j < len(data) && data[j] == ':' {
			name = data[start:end]
			joined = joinedMember(name)
			if string(name) == "index" || string(name) == "output_index" {
				index = leadingInt(data[j+1:])
			}
		} else if joined && s.feed(fieldHash(name, index), data[start:end]) {
			return true
		}
		i = j
	}
	return false
}

// joinedMember reports whether clients join a member's strings across
// stream events into one text: the only way pieces become a key. Ids,
// model names and the like arrive whole in each event, where literal
// redaction sees them.
func joinedMember(name []byte) bool {
	switch string(name) {
	case "content", "refusal", "reasoning_content", "reasoning", "arguments", "name", "text",
		"delta",                    // Responses' text, arguments and reasoning deltas
		"partial_json", "thinking": // Messages' tool input and thinking deltas
		return true
	}
	return false
}

// stringEnd returns the index of the quote closing the string that starts
// at start, or len(data) if it is not closed.
func stringEnd(data []byte, start int) int {
	for j := start; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return len(data)
}

// leadingInt reads the non-negative integer at the start of b, after
// spaces; -1 if there is none.
func leadingInt(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	n, digits := 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9' && digits < 9; i++ {
		n = n*10 + int(b[i]-'0')
		digits++
	}
	if digits == 0 {
		return -1
	}
	return n
}

// fieldHash is FNV-1a of a member name, mixed with its index.
func fieldHash(name []byte, index int) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range name {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h ^ uint64(index+1)*0x9e3779b97f4a7c15
}

// feed adds a string's raw (still escaped) bytes to a member's text and
// reports whether a key's cut was reached.
func (s *screen) feed(field uint64, raw []byte) bool {
	var m *fieldMatch
	for i := range s.fields {
		if s.fields[i].field == field {
			m = &s.fields[i]
			break
		}
	}
	if m == nil {
		n := len(s.r.keys)
		var states []int
		if len(s.states) >= n {
			states, s.states = s.states[:n:n], s.states[n:]
		} else {
			states = make([]int, n)
		}
		s.fields = append(s.fields, fieldMatch{field: field, states: states})
		m = &s.fields[len(s.fields)-1]
	}
	for ki := range s.r.keys {
		k := &s.r.keys[ki]
		st := m.states[ki]
		for i := 0; i < len(raw); i++ {
			c := raw[i]
			if c == '\\' && i+1 < len(raw) {
				c, i = unescapeAt(raw, i)
			}
			for st > 0 && k.b[st] != c {
				st = k.fail[st-1]
			}
			if k.b[st] == c {
				st++
			}
			if st >= k.cut {
				return true
			}
		}
		m.states[ki] = st
	}
	return false
}

// unescapeAt decodes the JSON escape at raw[i] to the byte it stands for
// and returns the index of its last byte. An escaped non-ASCII character
// becomes 0xFF, which no key (ASCII, as every provider's are) matches.
func unescapeAt(raw []byte, i int) (byte, int) {
	switch e := raw[i+1]; e {
	case 'n':
		return '\n', i + 1
	case 't':
		return '\t', i + 1
	case 'r':
		return '\r', i + 1
	case 'b':
		return '\b', i + 1
	case 'f':
		return '\f', i + 1
	case 'u':
		if i+5 < len(raw) {
			v := 0
			for _, h := range raw[i+2 : i+6] {
				switch {
				case h >= '0' && h <= '9':
					v = v<<4 | int(h-'0')
				case h >= 'a' && h <= 'f':
					v = v<<4 | int(h-'a'+10)
				case h >= 'A' && h <= 'F':
					v = v<<4 | int(h-'A'+10)
				default:
					return 0xFF, i + 1
				}
			}
			if v < 0x80 {
				return byte(v), i + 5
			}
			return 0xFF, i + 5
		}
		return 0xFF, i + 1
	default: // '"', '\\', '/' and anything invalid stand for themselves
		return e, i + 1
	}
}
