package suite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/jcs"
	"go.yaml.in/yaml/v3"
)

// Limits that keep hostile documents cheap: YAML aliases may expand a
// document to at most twice its own node count plus aliasSlack values (an
// alias bomb stops there), and nesting stops at maxDepth.
const (
	aliasSlack = 10_000
	maxDepth   = 512
)

type nodeKind int

const (
	kNull nodeKind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

// String names the kind for error messages.
func (k nodeKind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "a list", "an object"}[k]
}

// node is a parsed JSON-compatible value that remembers its source line.
// Objects keep their keys in document order.
type node struct {
	kind  nodeKind
	line  int
	str   string // string value, or a number's JSON text
	b     bool
	keys  []string
	vals  []*node
	items []*node
}

func (n *node) get(key string) (*node, bool) {
	for i, k := range n.keys {
		if k == key {
			return n.vals[i], true
		}
	}
	return nil, false
}

// appendJSON writes n as JSON text (object keys in document order).
func (n *node) appendJSON(b *bytes.Buffer) {
	switch n.kind {
	case kNull:
		b.WriteString("null")
	case kBool:
		b.WriteString(strconv.FormatBool(n.b))
	case kNumber:
		b.WriteString(n.str)
	case kString:
		s, _ := json.Marshal(n.str)
		b.Write(s)
	case kArray:
		b.WriteByte('[')
		for i, it := range n.items {
			if i > 0 {
				b.WriteByte(',')
			}
			it.appendJSON(b)
		}
		b.WriteByte(']')
	case kObject:
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			s, _ := json.Marshal(k)
			b.Write(s)
			b.WriteByte(':')
			n.vals[i].appendJSON(b)
		}
		b.WriteByte('}')
	}
}

func (n *node) json() json.RawMessage {
	var b bytes.Buffer
	n.appendJSON(&b)
	return b.Bytes()
}

// lineAt is the line of the deepest node a pointer reaches from n.
func lineAt(n *node, pointer string) int {
	if n == nil {
		return 0
	}
	line := n.line
	if pointer == "" {
		return line
	}
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var next *node
		switch n.kind {
		case kObject:
			next, _ = n.get(tok)
		case kArray:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n.items) {
				next = n.items[i]
			}
		}
		if next == nil {
			return line
		}
		n, line = next, next.line
	}
	return line
}

// ---- YAML ----

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// fromYAML parses one YAML document. JSON is YAML too, but JSON input goes
// through fromJSON for exact number and escape handling.
func fromYAML(raw []byte, file, ptrBase string) (*node, error) {
	if !utf8.Valid(raw) {
		return nil, &Error{Code: gyre.CodeInvalidBody, File: file, Pointer: ptrBase, Message: "suite is not valid UTF-8"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Code: gyre.CodeInvalidBody, File: file, Pointer: ptrBase, Message: "document is empty"}
		}
		return nil, yamlError(err, file, ptrBase)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, yamlError(err, file, ptrBase)
		}
		return nil, &Error{Code: gyre.CodeInvalidBody, File: file, Line: line, Pointer: ptrBase, Message: "a suite file holds exactly one YAML document"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{Code: gyre.CodeInvalidBody, File: file, Pointer: ptrBase, Message: "document is empty"}
	}
	c := &yamlConv{file: file, budget: 2*countYAML(doc.Content[0]) + aliasSlack}
	return c.conv(doc.Content[0], ptrBase, 0)
}

func yamlError(err error, file, ptr string) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(msg, m[0]+": ")
	}
	return &Error{Code: gyre.CodeInvalidBody, File: file, Line: line, Pointer: ptr, Message: "invalid YAML: " + oneLine(msg)}
}

type yamlConv struct {
	file   string
	nodes  int
	budget int
}

// countYAML counts a YAML tree's nodes without following aliases.
func countYAML(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countYAML(k)
	}
	return c
}

func (c *yamlConv) errAt(n *yaml.Node, ptr, format string, args ...any) *Error {
	return &Error{Code: gyre.CodeInvalidBody, File: c.file, Line: n.Line, Pointer: ptr, Message: fmt.Sprintf(format, args...)}
}

func (c *yamlConv) conv(n *yaml.Node, ptr string, depth int) (*node, error) {
	c.nodes++
	if c.nodes > c.budget {
		return nil, c.errAt(n, ptr, "YAML aliases expand the document to more than %d values", c.budget)
	}
	if depth > maxDepth {
		return nil, c.errAt(n, ptr, "document nests deeper than %d levels", maxDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, c.errAt(n, ptr, "unknown alias")
		}
		out, err := c.conv(n.Alias, ptr, depth+1)
		if err != nil {
			return nil, err
		}
		cp := *out
		cp.line = n.Line
		return &cp, nil
	case yaml.MappingNode:
		out := &node{kind: kObject, line: n.Line}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, c.errAt(k, ptr, "object keys must be strings")
			}
			if k.ShortTag() == "!!merge" {
				return nil, c.errAt(k, ptr, "YAML merge keys (<<) are not supported")
			}
			key := k.Value
			kptr := ptr + "/" + grade.PointerToken(key)
			if first, dup := seen[key]; dup {
				return nil, c.errAt(k, kptr, "duplicate key %q (first at line %d)", key, first)
			}
			seen[key] = k.Line
			val, err := c.conv(v, kptr, depth+1)
			if err != nil {
				return nil, err
			}
			out.keys = append(out.keys, key)
			out.vals = append(out.vals, val)
		}
		return out, nil
	case yaml.SequenceNode:
		out := &node{kind: kArray, line: n.Line, items: []*node{}}
		for i, it := range n.Content {
			v, err := c.conv(it, ptr+"/"+strconv.Itoa(i), depth+1)
			if err != nil {
				return nil, err
			}
			out.items = append(out.items, v)
		}
		return out, nil
	case yaml.ScalarNode:
		return c.scalar(n, ptr)
	}
	return nil, c.errAt(n, ptr, "unsupported YAML node")
}

func (c *yamlConv) scalar(n *yaml.Node, ptr string) (*node, error) {
	out := &node{line: n.Line}
	switch n.ShortTag() {
	case "!!str", "!!timestamp", "!!binary":
		out.kind, out.str = kString, n.Value
	case "!!null":
		out.kind = kNull
	case "!!bool":
		if err := n.Decode(&out.b); err != nil {
			return nil, c.errAt(n, ptr, "invalid boolean %q", n.Value)
		}
		out.kind = kBool
	case "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, c.errAt(n, ptr, "invalid number %q", n.Value)
		}
		var text string
		switch x := v.(type) {
		case int:
			text = strconv.Itoa(x)
		case int64:
			text = strconv.FormatInt(x, 10)
		case uint64:
			text = strconv.FormatUint(x, 10)
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, c.errAt(n, ptr, "%s is not a JSON number", n.Value)
			}
			text = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			return nil, c.errAt(n, ptr, "invalid number %q", n.Value)
		}
		out.kind, out.str = kNumber, text
	default:
		return nil, c.errAt(n, ptr, "unsupported YAML tag %s", n.Tag)
	}
	return out, nil
}

// ---- JSON ----

// fromJSON parses one JSON text, which must be I-JSON (RFC 7493): UTF-8,
// no duplicate keys, no lone surrogates, numbers within double range.
// firstLine offsets reported lines (JSONL).
func fromJSON(raw []byte, file string, firstLine int, ptrBase string) (*node, error) {
	lines := lineIndex(raw)
	if _, err := jcs.Parse(raw); err != nil {
		var je *jcs.Error
		e := &Error{Code: gyre.CodeInvalidBody, File: file, Message: "invalid JSON: " + err.Error()}
		if errors.As(err, &je) {
			e.Pointer = ptrBase + je.Pointer
			e.Line = firstLine + lines.line(je.Offset) - 1
			e.Message = je.Err.Error()
			if je.Detail != "" {
				e.Message += ": " + je.Detail
			}
		}
		return nil, e
	}
	b := &jsonBuilder{raw: raw, dec: json.NewDecoder(bytes.NewReader(raw)), lines: lines, firstLine: firstLine, file: file, ptrBase: ptrBase}
	b.dec.UseNumber()
	n, err := b.value("", 0)
	if err != nil {
		return nil, err
	}
	return n, nil
}

type lineStarts []int

func lineIndex(raw []byte) lineStarts {
	ls := lineStarts{0}
	for i, c := range raw {
		if c == '\n' {
			ls = append(ls, i+1)
		}
	}
	return ls
}

// line is the 1-based line holding byte offset off.
func (ls lineStarts) line(off int) int {
	return sort.Search(len(ls), func(i int) bool { return ls[i] > off })
}

type jsonBuilder struct {
	raw       []byte
	dec       *json.Decoder
	lines     lineStarts
	firstLine int
	file      string
	ptrBase   string
}

// nextLine is the line where the next token starts.
func (b *jsonBuilder) nextLine() int {
	off := int(b.dec.InputOffset())
	for off < len(b.raw) {
		switch b.raw[off] {
		case ' ', '\t', '\r', '\n', ':', ',':
			off++
			continue
		}
		break
	}
	return b.firstLine + b.lines.line(off) - 1
}

func (b *jsonBuilder) fail(ptr, msg string) *Error {
	return &Error{Code: gyre.CodeInvalidBody, File: b.file, Pointer: b.ptrBase + ptr, Line: b.nextLine(), Message: msg}
}

func (b *jsonBuilder) value(ptr string, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, b.fail(ptr, fmt.Sprintf("document nests deeper than %d levels", maxDepth))
	}
	line := b.nextLine()
	tok, err := b.dec.Token()
	if err != nil {
		return nil, b.fail(ptr, "invalid JSON: "+err.Error())
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kNull, line: line}, nil
	case bool:
		return &node{kind: kBool, b: t, line: line}, nil
	case json.Number:
		return &node{kind: kNumber, str: t.String(), line: line}, nil
	case string:
		return &node{kind: kString, str: t, line: line}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: kArray, line: line, items: []*node{}}
			for i := 0; b.dec.More(); i++ {
				v, err := b.value(ptr+"/"+strconv.Itoa(i), depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			if _, err := b.dec.Token(); err != nil {
				return nil, b.fail(ptr, "invalid JSON: "+err.Error())
			}
			return n, nil
		case '{':
			n := &node{kind: kObject, line: line}
			for b.dec.More() {
				kt, err := b.dec.Token()
				if err != nil {
					return nil, b.fail(ptr, "invalid JSON: "+err.Error())
				}
				k, _ := kt.(string)
				v, err := b.value(ptr+"/"+grade.PointerToken(k), depth+1)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			if _, err := b.dec.Token(); err != nil {
				return nil, b.fail(ptr, "invalid JSON: "+err.Error())
			}
			return n, nil
		}
	}
	return nil, b.fail(ptr, "invalid JSON")
}

// oneLine collapses whitespace so a message fits one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
