package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
)

// sseReader reads Server-Sent Events one event at a time.
type sseReader struct {
	r   *bufio.Reader
	max int // bound on one event's size
}

var errEventTooLarge = errors.New("upstream event exceeds the size limit")

// sseBuffers recycles the readers' 64 KiB buffers: allocated per stream
// they were four tenths of everything the gateway allocated, and so of its
// garbage collection.
var sseBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func newSSEReader(r io.Reader, max int) *sseReader {
	br := sseBuffers.Get().(*bufio.Reader)
	br.Reset(r)
	return &sseReader{r: br, max: max}
}

// release returns the reader's buffer for reuse. Nothing next returned
// refers to it (events are copied out), and s must not be used after.
func (s *sseReader) release() {
	s.r.Reset(nil)
	sseBuffers.Put(s.r)
	s.r = nil
}

// eventReady reports whether a whole event is already buffered, so that
// next returns it without waiting on the network.
func (s *sseReader) eventReady() bool {
	n := s.r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := s.r.Peek(n)
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\r\r"))
}

// next returns the next event: its raw bytes, up to and including the
// blank line that ends it, and its data (data lines joined by "\n"); hasData
// is false for events without data lines (comments, keep-alives). At the
// end of the stream it returns io.EOF, after a last event that lacked its
// blank line, if any.
func (s *sseReader) next() (raw, data []byte, hasData bool, err error) {
	var (
		ev    []byte
		lines int
	)
	for {
		line, err := s.line()
		if len(line) > 0 {
			if len(ev)+len(line) > s.max {
				return nil, nil, false, errEventTooLarge
			}
			ev = append(ev, line...)
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(bytes.TrimSpace(ev)) > 0 {
				data, hasData = eventData(ev)
				return ev, data, hasData, nil
			}
			return nil, nil, false, err
		}
		if isBlank(line) {
			if lines == 0 {
				ev = ev[:0] // stray blank lines between events
				continue
			}
			data, hasData = eventData(ev)
			return ev, data, hasData, nil
		}
		lines++
	}
}

// line reads one line with its terminator; at EOF the last, unterminated
// line comes with io.EOF.
func (s *sseReader) line() ([]byte, error) {
	var out []byte
	for {
		b, err := s.r.ReadSlice('\n')
		if len(out)+len(b) > s.max {
			return nil, errEventTooLarge
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			out = append(out, b...)
			continue
		}
		if out == nil {
			out = slices.Clone(b)
		} else {
			out = append(out, b...)
		}
		return out, err
	}
}

func isBlank(line []byte) bool {
	return len(bytes.TrimRight(line, "\r\n")) == 0 && len(line) > 0
}

// eventData extracts the data of an event's raw lines.
func eventData(ev []byte) ([]byte, bool) {
	var (
		data    []byte
		hasData bool
	)
	for len(ev) > 0 {
		i := bytes.IndexByte(ev, '\n')
		var line []byte
		if i < 0 {
			line, ev = ev, nil
		} else {
			line, ev = ev[:i], ev[i+1:]
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if hasData {
			data = append(data, '\n')
		}
		data = append(data, v...)
		hasData = true
	}
	return data, hasData
}

// chunk is what the gateway reads from one streamed chat.completion.chunk.
type chunk struct {
	ID                string          `json:"id"`
	Created           json.Number     `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint *string         `json:"system_fingerprint"`
	ServiceTier       *string         `json:"service_tier"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage"`
	Error             json.RawMessage `json:"error"`
}

type chunkChoice struct {
	Index int `json:"index"`
	Delta struct {
		Role             *string     `json:"role"`
		Content          *string     `json:"content"`
		Refusal          *string     `json:"refusal"`
		ReasoningContent *string     `json:"reasoning_content"`
		ToolCalls        []toolDelta `json:"tool_calls"`
	} `json:"delta"`
	Logprobs     *chunkLogprobs `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
	// TokenIDs are vLLM's return_token_ids.
	TokenIDs []json.Number `json:"token_ids"`
}

type chunkLogprobs struct {
	Content []json.RawMessage `json:"content"`
}

type toolDelta struct {
	Index    *int    `json:"index"`
	ID       *string `json:"id"`
	Type     *string `json:"type"`
	Function *struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

// streamAcc reassembles a stream into one chat.completion object (SPEC
// §6.2): content, refusals and reasoning concatenated, tool calls merged by
// index (arguments arriving in pieces or in one chunk), finish reasons,
// logprobs, token ids and the usage chunk.
type streamAcc struct {
	id, model         string
	created           json.Number
	systemFingerprint *string
	serviceTier       *string
	choices           []*choiceAcc
	usage             json.RawMessage
	size              int
}

type choiceAcc struct {
	index                       int
	role                        string
	content, refusal, reasoning strings.Builder
	hasContent, hasRefusal      bool
	hasReasoning                bool
	tools                       []*toolAcc
	finish                      *string
	logprobs                    []json.RawMessage
	hasLogprobs                 bool
	tokenIDs                    []json.Number
}

type toolAcc struct {
	index      int
	id, typ    string
	name, args strings.Builder
}

func (a *streamAcc) choice(index int) *choiceAcc {
	for _, c := range a.choices {
		if c.index == index {
			return c
		}
	}
	c := &choiceAcc{index: index}
	a.choices = append(a.choices, c)
	return c
}

// add folds one chunk into the accumulator and returns its data size.
func (a *streamAcc) add(c *chunk, size int) {
	a.size += size
	if c.ID != "" {
		a.id = c.ID
	}
	if c.Model != "" {
		a.model = c.Model
	}
	if c.Created != "" {
		a.created = c.Created
	}
	if c.SystemFingerprint != nil {
		a.systemFingerprint = c.SystemFingerprint
	}
	if c.ServiceTier != nil {
		a.serviceTier = c.ServiceTier
	}
	if len(c.Usage) > 0 && !isNull(c.Usage) {
		a.usage = slices.Clone(c.Usage)
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		acc := a.choice(ch.Index)
		d := &ch.Delta
		if d.Role != nil {
			acc.role = *d.Role
		}
		if d.Content != nil {
			acc.content.WriteString(*d.Content)
			acc.hasContent = true
		}
		if d.Refusal != nil {
			acc.refusal.WriteString(*d.Refusal)
			acc.hasRefusal = true
		}
		if d.ReasoningContent != nil {
			acc.reasoning.WriteString(*d.ReasoningContent)
			acc.hasReasoning = true
		}
		for _, td := range d.ToolCalls {
			acc.tool(td)
		}
		if ch.Logprobs != nil {
			acc.hasLogprobs = true
			acc.logprobs = append(acc.logprobs, ch.Logprobs.Content...)
		}
		acc.tokenIDs = append(acc.tokenIDs, ch.TokenIDs...)
		if ch.FinishReason != nil {
			acc.finish = ch.FinishReason
		}
	}
}

// tool merges one tool-call delta: by index when the upstream sends one,
// else by id, else into the last call.
func (c *choiceAcc) tool(td toolDelta) {
	var t *toolAcc
	switch {
	case td.Index != nil:
		for _, x := range c.tools {
			if x.index == *td.Index {
				t = x
			}
		}
		if t == nil {
			t = &toolAcc{index: *td.Index}
			c.tools = append(c.tools, t)
		}
	case td.ID != nil && *td.ID != "":
		for _, x := range c.tools {
			if x.id == *td.ID {
				t = x
			}
		}
		if t == nil {
			t = &toolAcc{index: len(c.tools)}
			c.tools = append(c.tools, t)
		}
	case len(c.tools) > 0:
		t = c.tools[len(c.tools)-1]
	default:
		t = &toolAcc{}
		c.tools = append(c.tools, t)
	}
	if td.ID != nil && *td.ID != "" {
		t.id = *td.ID
	}
	if td.Type != nil && *td.Type != "" {
		t.typ = *td.Type
	}
	if td.Function != nil {
		if td.Function.Name != nil {
			t.name.WriteString(*td.Function.Name)
		}
		if td.Function.Arguments != nil {
			t.args.WriteString(*td.Function.Arguments)
		}
	}
}

// finished reports whether every choice seen has its finish_reason.
func (a *streamAcc) finished() bool {
	if len(a.choices) == 0 {
		return false
	}
	for _, c := range a.choices {
		if c.finish == nil {
			return false
		}
	}
	return true
}

// emitted lists the tool call ids of the reassembled answer.
func (a *streamAcc) emitted() []string {
	var ids []string
	for _, c := range a.choices {
		for _, t := range c.tools {
			if t.id != "" {
				ids = append(ids, t.id)
			}
		}
	}
	return ids
}

type respOut struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           json.Number     `json:"created,omitempty"`
	Model             string          `json:"model"`
	SystemFingerprint *string         `json:"system_fingerprint,omitempty"`
	ServiceTier       *string         `json:"service_tier,omitempty"`
	Choices           []choiceOut     `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

type choiceOut struct {
	Index        int             `json:"index"`
	Message      messageOut      `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	TokenIDs     []json.Number   `json:"token_ids,omitempty"`
}

type messageOut struct {
	Role             string    `json:"role"`
	Content          *string   `json:"content"`
	Refusal          *string   `json:"refusal,omitempty"`
	ReasoningContent *string   `json:"reasoning_content,omitempty"`
	ToolCalls        []toolOut `json:"tool_calls,omitempty"`
}

type toolOut struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// response is the reassembled chat.completion object.
func (a *streamAcc) response() []byte {
	out := respOut{ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model,
		SystemFingerprint: a.systemFingerprint, ServiceTier: a.serviceTier, Choices: []choiceOut{}, Usage: a.usage}
	choices := slices.Clone(a.choices)
	slices.SortStableFunc(choices, func(x, y *choiceAcc) int { return x.index - y.index })
	for _, c := range choices {
		m := messageOut{Role: c.role}
		if m.Role == "" {
			m.Role = "assistant"
		}
		if c.hasContent {
			s := c.content.String()
			m.Content = &s
		}
		if c.hasRefusal {
			s := c.refusal.String()
			m.Refusal = &s
		}
		if c.hasReasoning {
			s := c.reasoning.String()
			m.ReasoningContent = &s
		}
		tools := slices.Clone(c.tools)
		slices.SortStableFunc(tools, func(x, y *toolAcc) int { return x.index - y.index })
		for _, t := range tools {
			to := toolOut{ID: t.id, Type: t.typ}
			if to.Type == "" {
				to.Type = "function"
			}
			to.Function.Name, to.Function.Arguments = t.name.String(), t.args.String()
			m.ToolCalls = append(m.ToolCalls, to)
		}
		co := choiceOut{Index: c.index, Message: m, Logprobs: json.RawMessage("null"), FinishReason: c.finish, TokenIDs: c.tokenIDs}
		if c.hasLogprobs {
			lp, _ := json.Marshal(map[string]any{"content": nonNilRaw(c.logprobs)})
			co.Logprobs = lp
		}
		out.Choices = append(out.Choices, co)
	}
	b, err := json.Marshal(out)
	if err != nil {
		// Only a value the upstream sent that is not valid JSON number
		// text could fail; keep what is certain.
		out.Created = ""
		b, _ = json.Marshal(out)
	}
	return b
}

func nonNilRaw(r []json.RawMessage) []json.RawMessage {
	if r == nil {
		return []json.RawMessage{}
	}
	return r
}
