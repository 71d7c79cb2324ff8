package dataset

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/gyrehq/gyre/internal/jcs"
)

// canon writes JSON values in their RFC 8785 canonical form, so that a row
// does not depend on how a value was spelled when it was recorded. It
// reuses its buffers; it is not safe for concurrent use.
type canon struct {
	c jcs.Canonicalizer
	// prevRaw and prevMsgs are the last request's messages and their
	// canonical forms: a conversation resends its history with every
	// request, so most messages are the previous request's again and
	// are canonicalised once per rollout rather than once per request.
	prevRaw  []json.RawMessage
	prevMsgs [][]byte
	// prevToolsRaw and prevTools are the same for the tools array.
	prevToolsRaw, prevTools []byte
}

// reset forgets the previous request, between rollouts.
func (c *canon) reset() {
	c.prevRaw, c.prevMsgs, c.prevToolsRaw, c.prevTools = nil, nil, nil, nil
}

// errNotJSON refuses a recorded value that is not I-JSON text.
var errNotJSON = &FormatError{Rule: RuleNotJSON, Message: "a recorded value is not I-JSON text"}

// value returns the canonical form of raw in a new slice.
func (c *canon) value(raw []byte) ([]byte, error) {
	// The canonical form is at most a little longer than the text (an
	// escape written longer), usually shorter: one allocation.
	return c.append(make([]byte, 0, len(raw)+16), raw)
}

// append appends the canonical form of raw, one JSON text, to dst.
func (c *canon) append(dst, raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) || !json.Valid(raw) {
		return dst, errNotJSON
	}
	c.c.Checked = true
	out, _, err := c.c.AppendValue(dst, raw, 0, nil)
	if err != nil {
		return dst, errNotJSON
	}
	return out, nil
}

// turn is one completion in the canonical forms the rows embed.
type turn struct {
	// msgs are the request's messages.
	msgs [][]byte
	// reply is the response message in the form a chat fine-tuning row
	// holds it (see trainingMessage).
	reply []byte
	// tools is the request's tools array, nil when absent or null.
	tools []byte
	// parallel is the request's parallel_tool_calls, nil when absent.
	parallel []byte
}

// messages canonicalises a completion's request messages: what comparing
// requests needs.
func (c *canon) messages(comp *Completion) (turn, error) {
	t := turn{msgs: make([][]byte, len(comp.Request.Messages))}
	var err error
	for i, m := range comp.Request.Messages {
		if i < len(c.prevRaw) && bytes.Equal(m, c.prevRaw[i]) {
			t.msgs[i] = c.prevMsgs[i]
			continue
		}
		if t.msgs[i], err = c.value(m); err != nil {
			c.reset()
			return t, err
		}
		t.msgs[i] = dropEmpty(t.msgs[i])
	}
	c.prevRaw, c.prevMsgs = comp.Request.Messages, t.msgs
	return t, nil
}

// dropEmpty removes from a canonical message the members that say
// nothing: those whose value is null, and an empty "annotations". OpenAI's
// API reads a null member as absent, and agents that append a response's
// message to their history resend "refusal": null, "annotations": [],
// "audio": null… with it, members OpenAI's fine-tuning format does not
// have. Every other member, and every value, is kept as recorded.
func dropEmpty(msg []byte) []byte {
	if !bytes.Contains(msg, []byte(":null")) && !bytes.Contains(msg, []byte(`"annotations":[]`)) {
		return msg // canonical JSON has no space before a value
	}
	// msg is canonical: its members are in order and each value is
	// canonical, so the members kept, in the same order, are the
	// canonical form of the smaller object.
	out := make([]byte, 0, len(msg))
	out = append(out, '{')
	ok := eachMember(msg, func(name string, lit, val []byte) {
		if isNull(val) || name == "annotations" && bytes.Equal(val, []byte("[]")) {
			return
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, lit...)
		out = append(out, ':')
		out = append(out, val...)
	})
	if !ok {
		return msg
	}
	return append(out, '}')
}

// rest canonicalises the rest of what a chat row needs of a completion
// whose messages t holds: the reply, tools and parallel_tool_calls.
func (c *canon) rest(t *turn, comp *Completion) error {
	var err error
	if t.reply, err = c.trainingMessage(comp.Response); err != nil {
		return err
	}
	if !isNull(comp.Request.Tools) {
		if bytes.Equal(comp.Request.Tools, c.prevToolsRaw) {
			t.tools = c.prevTools
		} else if t.tools, err = c.value(comp.Request.Tools); err != nil {
			return err
		}
		c.prevToolsRaw, c.prevTools = comp.Request.Tools, t.tools
	}
	t.parallel, err = c.member(comp.Request.Rest, "parallel_tool_calls")
	return err
}

// turn canonicalises everything a chat row needs of a completion.
func (c *canon) turn(comp *Completion) (turn, error) {
	t, err := c.messages(comp)
	if err != nil {
		return t, err
	}
	return t, c.rest(&t, comp)
}

// member returns the canonical form of one member of the JSON object
// obj, nil when obj is nil or the member is absent or null.
func (c *canon) member(obj json.RawMessage, name string) ([]byte, error) {
	if isNull(obj) {
		return nil, nil
	}
	if !json.Valid(obj) {
		return nil, errNotJSON
	}
	m, ok := object(obj)
	if !ok {
		return nil, errNotJSON
	}
	v, ok := m[name]
	if !ok || isNull(v) {
		return nil, nil
	}
	return c.value(v)
}

// trainingMembers are the members of a response message that a chat
// fine-tuning row keeps. The others a response carries (refusal,
// annotations, audio, reasoning…) describe the response, not a message
// OpenAI's format accepts.
var trainingMembers = []string{"content", "name", "role", "tool_calls"}

// trainingMessage returns the canonical form of a response's assistant
// message as a training message: role (assistant when missing), and
// content, name and tool_calls when present and not null.
func (c *canon) trainingMessage(resp json.RawMessage) ([]byte, error) {
	if !json.Valid(resp) {
		return nil, errNotJSON
	}
	m, ok := object(resp)
	if !ok {
		return nil, errNotJSON
	}
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, k := range trainingMembers { // already in RFC 8785 order
		v, ok := m[k]
		switch k {
		case "role":
			if !ok || isNull(v) {
				v = json.RawMessage(`"assistant"`)
			}
		default:
			if !ok || isNull(v) {
				continue
			}
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return c.value(b.Bytes())
}

// normalizer rewrites the tool call ids of one conversation to call_1,
// call_2, … in order of first appearance, so that two conversations that
// differ only in the ids a model generated compare equal.
type normalizer struct {
	ids map[string]string
}

func newNormalizer() *normalizer { return &normalizer{ids: map[string]string{}} }

func (n *normalizer) id(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if m, ok := n.ids[s]; ok {
		return m
	}
	m := "call_" + strconv.Itoa(len(n.ids)+1)
	n.ids[s] = m
	return m
}

// message returns the comparison key of one canonical message: its
// canonical form with tool call ids normalised.
func (n *normalizer) message(msg []byte) (string, error) {
	v, err := jcs.Parse(msg)
	if err != nil {
		return "", errNotJSON
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return string(msg), nil
	}
	if calls, ok := obj["tool_calls"].([]any); ok {
		for _, c := range calls {
			if call, ok := c.(map[string]any); ok {
				if id, ok := call["id"]; ok {
					call["id"] = n.id(id)
				}
			}
		}
	}
	if id, ok := obj["tool_call_id"]; ok {
		obj["tool_call_id"] = n.id(id)
	}
	out, err := jcs.Append(nil, obj)
	if err != nil {
		return "", errNotJSON
	}
	return string(out), nil
}
