package flywheel

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/internal/jcs"
)

// formatPointer joins instance tokens into an RFC 6901 JSON Pointer.
func formatPointer(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(jcs.EscapePointerToken(t))
	}
	return b.String()
}

// lastToken returns the unescaped last reference token of pointer p.
func lastToken(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(p[i+1:])
}

// span is where one instance location sits in the JSON text.
type span struct {
	// start is the offset of the member's key for an object member, and of
	// the value itself for an array element or the root.
	start int
	// end is the offset of the value's last byte: the closing brace or
	// bracket of a container.
	end   int
	found bool
}

// locator finds the spans of a set of instance locations in one pass over
// the text, descending only into the members on the way to one of them.
type locator struct {
	data []byte
	out  []span
}

type trieNode struct {
	children map[string]*trieNode
	targets  []int // indexes into locator.out
}

// locate returns the span of each location in raw, which must be valid JSON
// (the validator has parsed it already). Locations not present in raw come
// back with found false.
func locate(raw []byte, locs [][]string) []span {
	root := &trieNode{}
	for i, loc := range locs {
		n := root
		for _, tok := range loc {
			if n.children == nil {
				n.children = make(map[string]*trieNode)
			}
			c := n.children[tok]
			if c == nil {
				c = &trieNode{}
				n.children[tok] = c
			}
			n = c
		}
		n.targets = append(n.targets, i)
	}
	l := locator{data: raw, out: make([]span, len(locs))}
	pos := l.space(0)
	if pos < len(raw) {
		l.value(pos, pos, root)
	}
	return l.out
}

func (l *locator) space(pos int) int { return jcs.NewWalker(l.data).Space(pos) }

// value scans the value at pos (whose member key, if any, starts at start)
// and returns the offset just past it. n is the trie node for this value, or
// nil when no wanted location lies inside it.
func (l *locator) value(pos, start int, n *trieNode) int {
	end := pos
	switch {
	case pos >= len(l.data):
		return pos
	case n == nil || n.children == nil:
		end = l.skip(pos)
	case l.data[pos] == '{':
		end = l.object(pos, n)
	case l.data[pos] == '[':
		end = l.array(pos, n)
	default:
		end = l.skip(pos)
	}
	if n != nil {
		for _, i := range n.targets {
			l.out[i] = span{start: start, end: end - 1, found: true}
		}
	}
	return end
}

func (l *locator) object(pos int, n *trieNode) int {
	pos = l.space(pos + 1)
	for pos < len(l.data) && l.data[pos] != '}' {
		keyStart := pos
		keyEnd := l.skipString(pos)
		key := l.key(keyStart, keyEnd)
		pos = l.space(keyEnd)
		if pos < len(l.data) && l.data[pos] == ':' {
			pos = l.space(pos + 1)
		}
		pos = l.space(l.value(pos, keyStart, n.children[key]))
		if pos < len(l.data) && l.data[pos] == ',' {
			pos = l.space(pos + 1)
		}
	}
	return pos + 1
}

func (l *locator) array(pos int, n *trieNode) int {
	pos = l.space(pos + 1)
	for i := 0; pos < len(l.data) && l.data[pos] != ']'; i++ {
		child := n.children[strconv.Itoa(i)]
		next := l.space(l.value(pos, pos, child))
		if next < len(l.data) && l.data[next] == ',' {
			next = l.space(next + 1)
		}
		if next == pos { // malformed text: stop rather than spin
			break
		}
		pos = next
	}
	return pos + 1
}

// key decodes the object key in data[start:end] (quotes included).
func (l *locator) key(start, end int) string {
	if end > len(l.data) || end-start < 2 {
		return ""
	}
	raw := l.data[start+1 : end-1]
	if !strings.Contains(string(raw), `\`) {
		return string(raw)
	}
	var s string
	if err := json.Unmarshal(l.data[start:end], &s); err != nil {
		return ""
	}
	return s
}

// skip returns the offset just past the value at pos.
func (l *locator) skip(pos int) int {
	if pos >= len(l.data) {
		return pos
	}
	switch l.data[pos] {
	case '"':
		return l.skipString(pos)
	case '{', '[':
		depth := 0
		for pos < len(l.data) {
			switch l.data[pos] {
			case '"':
				pos = l.skipString(pos)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return pos + 1
				}
			}
			pos++
		}
		return pos
	default: // number or literal
		for pos < len(l.data) {
			switch l.data[pos] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return pos
			}
			pos++
		}
		return pos
	}
}

// skipString returns the offset just past the string starting at pos.
func (l *locator) skipString(pos int) int {
	for pos++; pos < len(l.data); pos++ {
		switch l.data[pos] {
		case '\\':
			pos++
		case '"':
			return pos + 1
		}
	}
	return pos
}
