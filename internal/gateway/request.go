package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/gyrehq/gyre/internal/jcs"
)

// member is one top-level member of a request body, its value as sent.
type member struct {
	key string
	val []byte
}

// request is a parsed request of any protocol. Only what the gateway
// changes or records is interpreted; every other member, at any depth,
// keeps its bytes (SPEC §6.1: what real clients send passes untouched).
type request struct {
	members []member
	// itemsKey is the member holding the conversation: "messages" (chat,
	// Messages) or "input" (Responses).
	itemsKey string
	// shape is how that member is written.
	shape itemsShape
	// messages holds each item of the conversation (a message, an input
	// item) in canonical JSON (RFC 8785): the form forwarded, hashed and
	// stored, so a stored request rebuilds byte for byte. Canonical form
	// keeps every member and value; only key order, whitespace and number
	// spelling are normalised.
	messages [][]byte
	// consumed are the tool-call ids the items answer: the tool_call_id
	// of chat's role "tool" messages, the call_id of Responses'
	// function_call_output items.
	consumed []string
	stream   bool
	// model is the model the agent asked for, nil when none.
	model *string
	// previous is a Responses request's previous_response_id, "" when
	// none; resolved are the canonical items it stands for (the earlier
	// calls' input and output), resolved by the gateway.
	previous string
	resolved [][]byte
}

// itemsShape is how a request carries its conversation member.
type itemsShape string

const (
	// itemsArray: an array of items, each stored as a message blob.
	itemsArray itemsShape = ""
	// itemsValue: one value that is not an array (Responses' string
	// input), stored as one message blob.
	itemsValue itemsShape = "value"
	// itemsNone: the member is absent.
	itemsNone itemsShape = "none"
)

// itemRules say how a protocol's request carries its conversation.
type itemRules struct {
	// key is the member holding the items.
	key string
	// optional: the member may be absent; else it is required.
	optional bool
	// value: the member may be a string instead of an array.
	value bool
	// watch names up to two top-level members of each item that consumed
	// reads.
	watch [2]string
	// consumed returns the tool-call ids an item answers, given the raw
	// values of the watched members (nil when absent) and the item in
	// canonical form.
	consumed func(vals [2][]byte, item []byte) []string
}

// chatItems: chat's messages, whose role "tool" messages answer the tool
// call named by tool_call_id.
var chatItems = itemRules{key: "messages", watch: [2]string{"role", "tool_call_id"},
	consumed: func(vals [2][]byte, _ []byte) []string {
		role, callID := vals[0], vals[1]
		if string(role) == `"tool"` && len(callID) > 0 && callID[0] == '"' {
			if id, err := jcs.NewWalker(callID).String(0, len(callID)); err == nil {
				return []string{id}
			}
		}
		return nil
	}}

// parseChatRequest parses a chat completion request body (see
// parseRequest).
func parseChatRequest(body []byte) (*request, *apiError) { return parseRequest(body, chatItems) }

// parseRequest parses a request body: one JSON object without duplicate
// members, whose items (rules.key) are an array of I-JSON objects. It
// reads the body in place (jcs.Walker) once validJSON has accepted it,
// and canonicalizes each item in one pass.
func parseRequest(body []byte, rules itemRules) (*request, *apiError) {
	if !utf8.Valid(body) {
		return nil, errInvalid("", "The request body is not valid UTF-8.")
	}
	if !validJSON(body) {
		return nil, syntaxError(body)
	}
	w := jcs.NewWalker(body)
	if start := w.Space(0); body[start] != '{' {
		return nil, errInvalid("", "The request body must be a JSON object.")
	}
	req := &request{itemsKey: rules.key}
	var (
		dup  *apiError
		seen map[string]bool // past a few members, to find duplicates
	)
	_, err := w.Members(0, func(key string, start int) (int, error) {
		end, err := w.Skip(start)
		if err != nil {
			return end, err
		}
		if seen == nil && len(req.members) >= 16 {
			seen = make(map[string]bool, 2*len(req.members))
			for _, m := range req.members {
				seen[m.key] = true
			}
		}
		if (seen != nil && seen[key]) || (seen == nil && req.has(key)) {
			dup = errInvalid(key, fmt.Sprintf("Member %q appears more than once.", key))
			return end, errStop
		}
		if seen != nil {
			seen[key] = true
		}
		req.members = append(req.members, member{key: key, val: body[start:end]})
		return end, nil
	})
	switch {
	case dup != nil:
		return nil, dup
	case err != nil: // validJSON accepted it: not expected
		return nil, errInvalid("", "The request body is not valid JSON.")
	}
	msgs, ok := req.get(rules.key)
	switch {
	case !ok && rules.optional:
		req.shape = itemsNone
	case !ok:
		return nil, &apiError{Status: 400, Code: "missing_required_parameter", Param: rules.key,
			Message: fmt.Sprintf("Missing required parameter: '%s'.", rules.key)}
	case rules.value && msgs[0] == '"':
		c, err := jcs.Canonicalize(msgs)
		if err != nil {
			return nil, errInvalid(rules.key, fmt.Sprintf("'%s' is not I-JSON (RFC 7493): %v", rules.key, err))
		}
		req.shape, req.messages = itemsValue, [][]byte{c}
	default:
		if e := req.readMessages(msgs, rules); e != nil {
			return nil, e
		}
	}
	if v, ok := req.get("stream"); ok {
		switch string(v) {
		case "true":
			req.stream = true
		case "false", "null":
		default:
			return nil, errInvalid("stream", "'stream' must be a boolean.")
		}
	}
	if v, ok := req.get("stream_options"); ok && !isNull(v) && v[0] != '{' {
		return nil, errInvalid("stream_options", "'stream_options' must be an object.")
	}
	if v, ok := req.get("model"); ok && !isNull(v) {
		if v[0] != '"' {
			return nil, errInvalid("model", "'model' must be a string.")
		}
		m, err := jcs.NewWalker(v).String(0, len(v))
		if err != nil {
			return nil, errInvalid("model", "'model' must be a string.")
		}
		req.model = &m
	}
	return req, nil
}

// errStop ends a walk early.
var errStop = errors.New("stop")

// canonicalizers recycle the message canonicalizers' buffers.
var canonicalizers = sync.Pool{New: func() any { return &jcs.Canonicalizer{Checked: true} }}

// readMessages canonicalizes each item of the array msgs, a JSON value,
// into one buffer, and notes the tool-call ids each item consumes.
func (r *request) readMessages(msgs []byte, rules itemRules) *apiError {
	if msgs[0] != '[' {
		if rules.value {
			return errInvalid(rules.key, fmt.Sprintf("'%s' must be a string or an array of item objects.", rules.key))
		}
		return errInvalid(rules.key, fmt.Sprintf("'%s' must be an array of message objects.", rules.key))
	}
	canon := canonicalizers.Get().(*jcs.Canonicalizer)
	defer canonicalizers.Put(canon)
	w := jcs.NewWalker(msgs)
	var (
		buf  = make([]byte, 0, len(msgs)+len(msgs)/8)
		ends []int
		bad  *apiError
	)
	_, err := w.Elements(0, func(start int) (int, error) {
		param := rules.key + "[" + strconv.Itoa(len(ends)) + "]"
		if msgs[start] != '{' {
			bad = errInvalid(param, fmt.Sprintf("'%s' must be an object.", param))
			return start, errStop
		}
		var vals [2][]byte
		var (
			end int
			err error
		)
		from := len(buf)
		buf, end, err = canon.AppendValue(buf, msgs, start, func(name string, vs, ve int) error {
			switch name {
			case rules.watch[0]:
				vals[0] = msgs[vs:ve]
			case rules.watch[1]:
				vals[1] = msgs[vs:ve]
			}
			return nil
		})
		if err != nil {
			// Parse says where and why.
			end, _ = w.Skip(start)
			_, err = jcs.Canonicalize(msgs[start:end])
			bad = errInvalid(param, fmt.Sprintf("'%s' is not I-JSON (RFC 7493): %v", param, err))
			return end, errStop
		}
		ends = append(ends, len(buf))
		r.consumed = append(r.consumed, rules.consumed(vals, buf[from:])...)
		return end, nil
	})
	switch {
	case bad != nil:
		return bad
	case err != nil: // validJSON accepted it: not expected
		return errInvalid(rules.key, fmt.Sprintf("'%s' must be an array of message objects.", rules.key))
	}
	r.messages = make([][]byte, len(ends))
	from := 0
	for i, to := range ends {
		r.messages[i] = buf[from:to:to]
		from = to
	}
	return nil
}

// syntaxError says why a body that is not JSON is not: where it breaks, as
// encoding/json reads it, naming the member whose value is broken.
func syntaxError(body []byte) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return errInvalid("", "The request body must be a JSON object.")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errInvalid("", "The request body is not valid JSON.")
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return errInvalid(key, "The request body is not valid JSON.")
		}
		if seen[key] {
			return errInvalid(key, fmt.Sprintf("Member %q appears more than once.", key))
		}
		seen[key] = true
	}
	if _, err := dec.Token(); err != nil {
		return errInvalid("", "The request body is not valid JSON.")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errInvalid("", "The request body has data after the JSON object.")
	}
	return errInvalid("", "The request body is not valid JSON.")
}

func (r *request) has(key string) bool {
	_, ok := r.get(key)
	return ok
}

func (r *request) get(key string) ([]byte, bool) {
	for _, m := range r.members {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// forwarded is a request as the gateway sends it upstream.
type forwarded struct {
	body []byte
	// head and tail surround the items in body: body is head + "[" +
	// items joined by "," + "]" + tail (shape itemsArray), head + the one
	// item + tail (itemsValue), or head alone (itemsNone).
	head, tail []byte
	shape      itemsShape
	// agent holds the values the agent sent for members the gateway
	// replaced; absent lists those it added.
	agent  map[string]json.RawMessage
	absent []string
	// members are the forwarded top-level members (messages as sent).
	members []member
	// clientUsage: the client itself asked for the usage chunk.
	clientUsage bool
	// refused, when set, is why the policy cannot serve the call: its
	// sampling overrides do not map to the protocol's parameters. The
	// call is answered with it and nothing goes upstream.
	refused *apiError
}

// forward builds the chat upstream request for policy p: the policy's
// model, its sampling overrides, token capture, and for streams
// stream_options.include_usage = true.
func (r *request) forward(p Policy) *forwarded {
	return r.rewrite(func(f *forwarded, set func(key string, val []byte)) {
		model, _ := json.Marshal(p.Model)
		set("model", model)
		for _, k := range sortedKeys(p.SamplingOverrides) {
			set(k, p.SamplingOverrides[k])
		}
		if p.CaptureTokens {
			set("logprobs", []byte("true"))
			set("return_token_ids", []byte("true"))
		}
		if r.stream {
			opts, _ := r.get("stream_options")
			val, asked := withIncludeUsage(opts)
			f.clientUsage = asked
			if !asked {
				set("stream_options", val)
			}
		}
	})
}

// rewrite builds a forwarded request: edit sets (replaces or adds) the
// members the gateway changes, remembering the agent's values; every
// other member keeps its place and bytes, and the items are written in
// canonical form.
func (r *request) rewrite(edit func(f *forwarded, set func(key string, val []byte))) *forwarded {
	f := &forwarded{members: slices.Clone(r.members), agent: map[string]json.RawMessage{}}
	set := func(key string, val []byte) {
		for i, m := range f.members {
			if m.key == key {
				if _, done := f.agent[key]; !done && !slices.Contains(f.absent, key) {
					f.agent[key] = m.val
				}
				f.members[i].val = val
				return
			}
		}
		f.absent = append(f.absent, key)
		f.members = append(f.members, member{key: key, val: val})
	}
	edit(f, set)
	var b bytes.Buffer
	b.Grow(64 + len(f.members)*32 + r.size())
	b.WriteByte('{')
	start, end := -1, -1
	for i, m := range f.members {
		if i > 0 {
			b.WriteByte(',')
		}
		writeKey(&b, m.key)
		b.WriteByte(':')
		if m.key != r.itemsKey {
			b.Write(m.val)
			continue
		}
		start = b.Len()
		if r.shape == itemsValue {
			b.Write(r.messages[0])
		} else {
			writeMessages(&b, r.messages)
		}
		end = b.Len()
	}
	b.WriteByte('}')
	f.body = b.Bytes()
	f.shape = r.shape
	if start < 0 {
		f.head = f.body
		return f
	}
	f.head, f.tail = f.body[:start], f.body[end:]
	return f
}

func (r *request) size() int {
	n := 0
	for _, m := range r.members {
		n += len(m.key) + len(m.val)
	}
	for _, m := range r.messages {
		n += len(m) + 1
	}
	return n
}

func writeMessages(b *bytes.Buffer, msgs [][]byte) {
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteByte(']')
}

// withIncludeUsage returns stream_options with include_usage true, and
// whether the client had asked for it already. Other options keep their
// bytes and order.
func withIncludeUsage(opts []byte) ([]byte, bool) {
	if len(opts) == 0 || isNull(opts) {
		return []byte(`{"include_usage":true}`), false
	}
	dec := json.NewDecoder(bytes.NewReader(opts))
	if _, err := dec.Token(); err != nil {
		return []byte(`{"include_usage":true}`), false
	}
	var (
		b     bytes.Buffer
		first = true
		found bool
	)
	b.WriteByte('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if key == "include_usage" {
			found = true
			if string(bytes.TrimSpace(raw)) == "true" {
				return opts, true
			}
			raw = json.RawMessage("true")
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeKey(&b, key)
		b.WriteByte(':')
		b.Write(raw)
	}
	if !found {
		if !first {
			b.WriteByte(',')
		}
		b.WriteString(`"include_usage":true`)
	}
	b.WriteByte('}')
	return b.Bytes(), false
}

// writeKey writes a JSON object key.
func writeKey(b *bytes.Buffer, k string) {
	plain := true
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			plain = false
			break
		}
	}
	if plain {
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteByte('"')
		return
	}
	enc, _ := json.Marshal(k) // a decoded key always marshals
	b.Write(enc)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
