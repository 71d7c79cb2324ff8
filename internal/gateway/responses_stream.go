package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"
)

// responsesEvent is what the gateway reads from one event of a Responses
// stream.
type responsesEvent struct {
	Type         string          `json:"type"`
	Response     json.RawMessage `json:"response"`
	OutputIndex  *int            `json:"output_index"`
	ContentIndex *int            `json:"content_index"`
	Item         json.RawMessage `json:"item"`
	Delta        json.RawMessage `json:"delta"`
}

// final reports whether the event ends a stream that counts (SPEC §6.1).
func (e *responsesEvent) final() bool {
	return e.Type == "response.completed" || e.Type == "response.incomplete"
}

// responsesAcc reassembles a Responses stream into one response object
// (SPEC §6.2): the response its final event carries; for a stream cut
// before it, the response its first event announced with the output
// items streamed so far (finished items whole, unfinished ones with the
// text and arguments their deltas spelled).
type responsesAcc struct {
	base, last json.RawMessage
	lastType   string
	items      []*streamedItem
	errored    bool
}

type streamedItem struct {
	index int
	item  map[string]any
	done  bool
}

func (a *responsesAcc) item(index int) *streamedItem {
	for _, it := range a.items {
		if it.index == index {
			return it
		}
	}
	it := &streamedItem{index: index, item: map[string]any{}}
	a.items = append(a.items, it)
	return it
}

func decodeObject(raw json.RawMessage) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || m == nil {
		return map[string]any{}
	}
	return m
}

func (a *responsesAcc) add(e *responsesEvent) {
	switch e.Type {
	case "response.created", "response.in_progress", "response.queued":
		if len(e.Response) > 0 && a.base == nil {
			a.base = slices.Clone(e.Response)
		}
	case "response.completed", "response.incomplete", "response.failed":
		a.last, a.lastType = slices.Clone(e.Response), e.Type
		if e.Type == "response.failed" {
			a.errored = true
		}
	case "error":
		a.errored = true
	case "response.output_item.added", "response.output_item.done":
		if e.OutputIndex == nil || len(e.Item) == 0 {
			return
		}
		it := a.item(*e.OutputIndex)
		if it.done {
			return
		}
		it.item = decodeObject(e.Item)
		it.done = e.Type == "response.output_item.done"
	case "response.output_text.delta", "response.function_call_arguments.delta":
		var delta string
		if e.OutputIndex == nil || json.Unmarshal(e.Delta, &delta) != nil {
			return
		}
		it := a.item(*e.OutputIndex)
		if it.done {
			return
		}
		if e.Type == "response.function_call_arguments.delta" {
			s, _ := it.item["arguments"].(string)
			it.item["arguments"] = s + delta
			return
		}
		ci := 0
		if e.ContentIndex != nil {
			ci = *e.ContentIndex
		}
		content, _ := it.item["content"].([]any)
		for len(content) <= ci {
			content = append(content, map[string]any{"type": "output_text", "text": "", "annotations": []any{}})
		}
		part, _ := content[ci].(map[string]any)
		if part == nil {
			part = map[string]any{"type": "output_text"}
		}
		s, _ := part["text"].(string)
		part["text"] = s + delta
		content[ci] = part
		it.item["content"] = content
	}
}

// response is the reassembled response object.
func (a *responsesAcc) response() []byte {
	if a.last != nil {
		return a.last
	}
	out := decodeObject(a.base)
	items := slices.Clone(a.items)
	slices.SortFunc(items, func(x, y *streamedItem) int { return x.index - y.index })
	output := make([]any, 0, len(items))
	for _, it := range items {
		output = append(output, it.item)
	}
	out["output"] = output
	if _, ok := out["object"]; !ok {
		out["object"] = "response"
	}
	b, err := json.Marshal(out)
	if err != nil {
		return []byte(`{"object":"response","output":[]}`)
	}
	return b
}

// relayResponses relays a Responses stream event by event, flushing each
// as it arrives (or with the next when that one has already arrived
// whole), and reads each after it went out. It counts when the final
// event (response.completed or response.incomplete) was written and
// flushed (SPEC §6.1); a stream the upstream ends without it, or ends
// with response.failed or an error event, is relayed as it came and
// recorded uncounted.
func (c *call) relayResponses(resp *http.Response) {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.copyAnswerHeaders(h, resp.Header)
	h.Set("Content-Type", "text/event-stream")
	c.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(c.w)
	rd := newSSEReader(resp.Body, int(min(c.g.cfg.MaxResponseBytes, 1<<30)))
	defer rd.release()
	var (
		werr      error
		readErr   error
		tooLarge  bool
		leaked    bool
		scr       = c.g.redact.newScreen()
		size      int
		acc       = &responsesAcc{}
		delivered bool // the final event went out and was flushed
		settled   bool
	)
	settle := func() {
		if settled {
			return
		}
		settled = true
		c.response = c.g.redact.redact(acc.response())
		var shape responseShape
		if json.Unmarshal(c.response, &shape) == nil {
			f := shape.facts()
			c.rec.EmittedIDs = f.emitted
			c.setUsage(f.usage)
			if f.responseID != "" {
				id := f.responseID
				c.rec.ResponseID = &id
			}
		}
	}
	for werr == nil {
		raw, data, hasData, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		raw, data = c.g.redact.redactEvent(raw, data)
		if !hasData {
			if _, werr = c.w.Write(raw); werr == nil && !rd.eventReady() {
				werr = rc.Flush()
			}
			continue
		}
		if size += len(data); int64(size) > c.g.cfg.MaxResponseBytes {
			tooLarge = true
			break
		}
		if scr.spells(data) {
			leaked = true
			break
		}
		var ev responsesEvent
		parsed := json.Unmarshal(data, &ev) == nil
		if parsed && ev.final() {
			// The rollout's first completion on this replica is made
			// durable before the event that completes it goes out.
			acc.add(&ev)
			settle()
			c.announce()
			if statusReason(responseStatus(acc.last)) == "" {
				c.beforeCounted(resp.StatusCode)
			}
			c.g.rec.leave(c.fl)
			if _, werr = c.w.Write(raw); werr == nil {
				werr = rc.Flush()
			}
			delivered = werr == nil
			continue
		}
		if _, werr = c.w.Write(raw); werr == nil && !rd.eventReady() {
			werr = rc.Flush()
		}
		if parsed {
			acc.add(&ev)
		}
	}
	if werr == nil && size == 0 && readErr == nil {
		werr = rc.Flush() // an empty stream still gets its headers
	}
	c.ended = time.Now()
	settle()
	status := resp.StatusCode
	switch reason := c.gone(); {
	case tooLarge:
		c.endStream(rc, responsesErrorEvent(CodeUpstreamError, "The upstream's stream exceeds the gateway's limit."))
		c.finish(status, false, ReasonResponseTooLarge)
	case leaked:
		c.endStream(rc, responsesErrorEvent(CodeUpstreamError, "The upstream's stream carried an upstream credential; the gateway cut it."))
		c.finish(status, false, ReasonUpstreamCredential)
	case delivered && !acc.errored:
		// Clients may close the stream once they have the final event.
		if r := statusReason(responseStatus(acc.last)); r != "" {
			c.finish(status, false, r)
			return
		}
		c.finish(status, true, "")
	case reason == ReasonRevoked:
		_, _ = c.w.Write(responsesErrorEvent(CodeCredentialExpired, "This rollout's credential was revoked; the stream was cut."))
		_ = rc.Flush()
		c.finish(status, false, reason)
	case reason != "" || werr != nil:
		c.finish(status, false, ReasonClientDisconnected)
	case readErr != nil:
		c.endStream(rc, responsesErrorEvent(CodeUpstreamError, "The upstream's stream broke off."))
		c.finish(status, false, ReasonUpstreamBroken)
	case acc.errored:
		c.finish(status, false, ReasonUpstreamError)
	default:
		// The upstream ended the stream without its final event.
		c.finish(status, false, ReasonStreamIncomplete)
	}
}

// responseStatus reads a response object's status.
func responseStatus(raw json.RawMessage) string {
	var s struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &s)
	return s.Status
}
