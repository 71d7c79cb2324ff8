package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// Anthropic Messages API answers (SPEC §6.1, §6.2): what the gateway reads
// from a whole message (the tool_use ids it emitted and its usage) and how
// it reassembles a stream into one message object for the record.

// messageShape is what the gateway reads from a whole message.
type messageShape struct {
	Type    string `json:"type"`
	Content []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	} `json:"content"`
	Usage json.RawMessage `json:"usage"`
}

// readMessage returns the tool_use ids a whole message emitted and its
// usage; ok is false when body is not a message object.
func readMessage(body []byte) (emitted []string, usage json.RawMessage, ok bool) {
	var m messageShape
	if json.Unmarshal(body, &m) != nil || m.Type != "message" {
		return nil, nil, false
	}
	for _, b := range m.Content {
		if b.Type == "tool_use" && b.ID != "" {
			emitted = append(emitted, b.ID)
		}
	}
	return emitted, m.Usage, true
}

// messagesUsageShape is the part of Messages usage that cost and budgets
// read. input_tokens counts only the prompt tokens neither read from nor
// written to the cache.
type messagesUsageShape struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
}

// messagesTokens reads Messages usage: every prompt token (uncached,
// read from the cache or written to it) as input, cache reads as cached,
// cache writes as written, and the total with output. ok is false when
// raw is not usage.
func messagesTokens(raw json.RawMessage) (tokenCounts, bool) {
	var u messagesUsageShape
	if len(raw) == 0 || isNull(raw) || json.Unmarshal(raw, &u) != nil {
		return tokenCounts{}, false
	}
	v := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return max(*p, 0)
	}
	t := tokenCounts{cached: v(u.CacheReadInputTokens), written: v(u.CacheCreationInputTokens), output: v(u.OutputTokens)}
	t.input = v(u.InputTokens) + t.cached + t.written
	t.total = t.input + t.output
	return t, true
}

// messagesEvent is what the gateway reads from one event of a Messages
// stream.
type messagesEvent struct {
	Type         string          `json:"type"`
	Message      json.RawMessage `json:"message"`
	Index        *int            `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        json.RawMessage `json:"delta"`
	Usage        json.RawMessage `json:"usage"`
}

type blockDelta struct {
	Type        string          `json:"type"`
	Text        *string         `json:"text"`
	PartialJSON *string         `json:"partial_json"`
	Thinking    *string         `json:"thinking"`
	Signature   *string         `json:"signature"`
	Citation    json.RawMessage `json:"citation"`
}

// messagesAcc reassembles a Messages stream into one message object:
// message_start's message, each content block from its
// content_block_start with its deltas applied (text, thinking and
// signature concatenated, citations appended, a tool_use input from its
// input_json_delta pieces), message_delta's stop reason and usage merged
// in. Members it does not know keep their values.
type messagesAcc struct {
	message map[string]json.RawMessage
	blocks  []*blockAcc
	stopped bool // message_stop seen
	failed  bool // an error event seen
}

type blockAcc struct {
	index     int
	fields    map[string]json.RawMessage
	text      strings.Builder
	thinking  strings.Builder
	signature strings.Builder
	input     strings.Builder
	citations []json.RawMessage
	has       struct{ text, thinking, signature, input bool }
}

// add folds one event's data into the reassembly.
func (a *messagesAcc) add(data []byte) {
	var ev messagesEvent
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		var m map[string]json.RawMessage
		if json.Unmarshal(ev.Message, &m) == nil {
			a.message = m
		}
	case "content_block_start":
		if ev.Index == nil {
			return
		}
		b := a.block(*ev.Index)
		_ = json.Unmarshal(ev.ContentBlock, &b.fields)
	case "content_block_delta":
		if ev.Index == nil {
			return
		}
		var d blockDelta
		if json.Unmarshal(ev.Delta, &d) != nil {
			return
		}
		b := a.block(*ev.Index)
		if d.Text != nil {
			b.text.WriteString(*d.Text)
			b.has.text = true
		}
		if d.Thinking != nil {
			b.thinking.WriteString(*d.Thinking)
			b.has.thinking = true
		}
		if d.Signature != nil {
			b.signature.WriteString(*d.Signature)
			b.has.signature = true
		}
		if d.PartialJSON != nil {
			b.input.WriteString(*d.PartialJSON)
			b.has.input = true
		}
		if len(d.Citation) > 0 && !isNull(d.Citation) {
			b.citations = append(b.citations, slices.Clone(d.Citation))
		}
	case "message_delta":
		if a.message == nil {
			a.message = map[string]json.RawMessage{}
		}
		mergeObject(a.message, ev.Delta)
		if len(ev.Usage) > 0 && !isNull(ev.Usage) {
			usage := map[string]json.RawMessage{}
			if u, ok := a.message["usage"]; ok {
				_ = json.Unmarshal(u, &usage)
			}
			mergeObject(usage, ev.Usage)
			a.message["usage"], _ = json.Marshal(usage)
		}
	case "message_stop":
		a.stopped = true
	case "error":
		a.failed = true
	}
}

// mergeObject sets dst's members to the non-null members of the JSON
// object src: message_delta sends null for what it does not update.
func mergeObject(dst map[string]json.RawMessage, src json.RawMessage) {
	var m map[string]json.RawMessage
	if json.Unmarshal(src, &m) != nil {
		return
	}
	for k, v := range m {
		if !isNull(v) || dst[k] == nil {
			dst[k] = v
		}
	}
}

func (a *messagesAcc) block(index int) *blockAcc {
	for _, b := range a.blocks {
		if b.index == index {
			return b
		}
	}
	b := &blockAcc{index: index}
	a.blocks = append(a.blocks, b)
	return b
}

// finished reports whether the stream ended the message: message_stop
// came, and no error event.
func (a *messagesAcc) finished() bool { return a.stopped && !a.failed }

// usage is the message's usage so far: message_start's, with
// message_delta's counts over it.
func (a *messagesAcc) usage() json.RawMessage { return a.message["usage"] }

// emitted lists the ids of the tool_use blocks, in order.
func (a *messagesAcc) emitted() []string {
	var ids []string
	for _, b := range a.sorted() {
		var typ, id string
		_ = json.Unmarshal(b.fields["type"], &typ)
		_ = json.Unmarshal(b.fields["id"], &id)
		if typ == "tool_use" && id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

func (a *messagesAcc) sorted() []*blockAcc {
	blocks := slices.Clone(a.blocks)
	slices.SortStableFunc(blocks, func(x, y *blockAcc) int { return x.index - y.index })
	return blocks
}

// response is the reassembled message object.
func (a *messagesAcc) response() []byte {
	msg := make(map[string]json.RawMessage, len(a.message)+1)
	for k, v := range a.message {
		msg[k] = v
	}
	if _, ok := msg["type"]; !ok {
		msg["type"] = json.RawMessage(`"message"`)
	}
	content := make([]json.RawMessage, 0, len(a.blocks))
	for _, b := range a.sorted() {
		content = append(content, b.render())
	}
	msg["content"], _ = json.Marshal(content)
	out, err := json.Marshal(msg)
	if err != nil {
		return []byte(`{"type":"message","content":[]}`)
	}
	return out
}

// render is a block with its deltas applied.
func (b *blockAcc) render() json.RawMessage {
	f := make(map[string]json.RawMessage, len(b.fields)+2)
	for k, v := range b.fields {
		f[k] = v
	}
	str := func(key string, s *strings.Builder, has bool) {
		if !has {
			return
		}
		prev := ""
		_ = json.Unmarshal(f[key], &prev)
		f[key] = marshalString(prev + s.String())
	}
	str("text", &b.text, b.has.text)
	str("thinking", &b.thinking, b.has.thinking)
	str("signature", &b.signature, b.has.signature)
	if b.has.input {
		// The pieces replace the start event's input (an empty object);
		// pieces that do not join into JSON (a stream cut mid-way) leave
		// an empty object, as the SDKs do.
		in := bytes.TrimSpace([]byte(b.input.String()))
		switch {
		case len(in) == 0:
		case json.Valid(in):
			f["input"] = in
		default:
			f["input"] = json.RawMessage(`{}`)
		}
	}
	if len(b.citations) > 0 {
		var prev []json.RawMessage
		_ = json.Unmarshal(f["citations"], &prev)
		f["citations"], _ = json.Marshal(append(prev, b.citations...))
	}
	out, err := json.Marshal(f)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return out
}

// marshalString encodes s as JSON without HTML escaping, as upstreams do.
func marshalString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
