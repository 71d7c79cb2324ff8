package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// messagesSpec is the Anthropic Messages API (SPEC §6.1): messages with
// an optional system prompt, a stream of named events from message_start
// to message_stop, usage in input_tokens/output_tokens with the prompt
// cache's reads and writes apart, tool_use blocks answered by
// tool_result blocks, and Anthropic-shaped errors.
type messagesSpec struct{}

func (messagesSpec) protocol() Protocol { return ProtocolMessages }

func (messagesSpec) parse(body []byte) (*request, *apiError) { return parseMessagesRequest(body) }

func (messagesSpec) forward(r *request, p Policy) *forwarded { return forwardMessages(r, p) }

// ReasonNotAMessage: a 2xx Messages answer that is not a message object.
const ReasonNotAMessage = "answer_not_a_message"

// readAnswer reads the tool_use ids a whole message emitted and its usage.
// A delivered 2xx message counts; a 2xx answer that is not one does not.
func (messagesSpec) readAnswer(body []byte) answerFacts {
	emitted, usage, ok := readMessage(body)
	if !ok {
		return answerFacts{notCounted: ReasonNotAMessage}
	}
	return answerFacts{emitted: emitted, usage: usage}
}

func (messagesSpec) relay(c *call, resp *http.Response) { c.streamMessages(resp) }

func (messagesSpec) tokens(raw json.RawMessage) (tokenCounts, bool) { return messagesTokens(raw) }

func (messagesSpec) fingerprint(b *bodyParts) CallFingerprint {
	return messagesFingerprint(b.messages, b.fwd.members, b.tokenizer)
}

func (messagesSpec) writeError(w http.ResponseWriter, e *apiError) {
	writeAnthropicError(w, e, requestID(w))
}

// isMessageStop reports whether an event's data is message_stop, the
// last event of a Messages stream.
func isMessageStop(data []byte) bool {
	if !bytes.Contains(data, []byte("message_stop")) {
		return false
	}
	var ev struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(data, &ev) == nil && ev.Type == "message_stop"
}

// streamMessages relays a Messages stream event by event, flushing each
// as it arrives, as chat's stream does, and reassembles it for the record
// (messagesAcc). message_stop, the stream's last event, is held back and
// written last: on gyre's server with the end of the body, and the call
// is finished when that write is done (lastWithBody). It counts when
// message_stop was delivered and the stream carried no error event (SPEC
// §6.1). A stream the upstream ends without message_stop is ended for the
// client with an error event, since a message_stop the gateway made up
// would tell the client the message was whole; it does not count.
func (c *call) streamMessages(resp *http.Response) {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.copyAnswerHeaders(h, resp.Header)
	h.Set("Content-Type", "text/event-stream")
	c.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(c.w)
	rd := newSSEReader(resp.Body, int(min(c.g.cfg.MaxResponseBytes, 1<<30)))
	var (
		werr     error
		readErr  error
		tooLarge bool
		leaked   bool
		scr      = c.g.redact.newScreen()
		size     int
		acc      = &messagesAcc{}
		// stop is the message_stop event, held back to go out last.
		stop []byte
		// backlog holds the events relayed but not yet reassembled, as in
		// chat's stream: parsed after the last event went out, or between
		// events for the rollout's first completion on this replica.
		backlog     [][]byte
		parseInGaps = c.rec.RolloutID != nil && c.g.rec.needsDurableCount(*c.rec.RolloutID)
	)
	catchUp := func(all bool) {
		for len(backlog) > 0 && (all || !rd.eventReady()) {
			acc.add(backlog[0])
			backlog[0] = nil
			backlog = backlog[1:]
		}
	}
	relay := func(raw []byte) {
		if _, werr = c.w.Write(raw); werr == nil && !rd.eventReady() {
			werr = rc.Flush()
		}
	}
	for werr == nil {
		if parseInGaps {
			catchUp(false)
		}
		raw, data, hasData, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		raw, data = c.g.redact.redactEvent(raw, data)
		if !hasData {
			relay(raw)
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
		backlog = append(backlog, data)
		if isMessageStop(data) {
			stop = raw
			c.upstreamDone = true
			break
		}
		relay(raw)
	}
	if werr == nil && size == 0 && readErr == nil {
		werr = rc.Flush()
	}
	c.ended = time.Now()
	reason := c.gone()
	ok := reason == "" && werr == nil && !tooLarge && !leaked && readErr == nil && stop != nil
	early := ok && !parseInGaps
	rd.release()
	dc := deliveryOf(c.r)
	settle := func() string {
		catchUp(true)
		return c.settleMessages(acc)
	}
	if early && dc != nil {
		c.lastWithBody(dc, stop, resp.StatusCode, settle)
		return
	}
	var delivered bool
	if early {
		delivered = c.endStream(rc, stop)
	}
	incomplete := settle()
	status := resp.StatusCode
	cut := func(e *apiError) {
		e.Status = http.StatusBadGateway
		c.endStream(rc, anthropicErrorEvent(e))
	}
	switch {
	case reason == ReasonRevoked:
		_, _ = c.w.Write(anthropicErrorEvent(&apiError{Status: http.StatusUnauthorized, Code: CodeCredentialExpired,
			Message: "This rollout's credential was revoked; the stream was cut."}))
		_ = rc.Flush()
		c.finish(status, false, reason)
	case reason != "" || werr != nil:
		c.finish(status, false, ReasonClientDisconnected)
	case tooLarge:
		cut(&apiError{Code: CodeUpstreamError, Message: "The upstream's stream exceeds the gateway's limit."})
		c.finish(status, false, ReasonResponseTooLarge)
	case leaked:
		cut(&apiError{Code: CodeUpstreamError, Message: "The upstream's stream carried an upstream credential; the gateway cut it."})
		c.finish(status, false, ReasonUpstreamCredential)
	case readErr != nil:
		cut(&apiError{Code: CodeUpstreamError, Message: "The upstream's stream broke off."})
		c.finish(status, false, ReasonUpstreamBroken)
	case stop == nil:
		// The upstream ended the stream without message_stop; an error
		// event it sent has reached the client already.
		if !acc.failed {
			cut(&apiError{Code: CodeUpstreamError, Message: "The upstream's stream ended before message_stop."})
		}
		c.finish(status, false, incomplete)
	case early && !delivered:
		c.finish(status, false, ReasonClientDisconnected)
	case early:
		c.endedStream(status, incomplete)
	default:
		// The rollout's first completion on this replica: durable before
		// message_stop if it counts.
		if incomplete == "" {
			c.beforeCounted(status)
		}
		if dc != nil {
			c.lastWithBody(dc, stop, status, func() string { return incomplete })
			return
		}
		c.g.rec.leave(c.fl)
		if !c.endStream(rc, stop) {
			c.finish(status, false, ReasonClientDisconnected)
			return
		}
		c.endedStream(status, incomplete)
	}
}

// settleMessages puts a relayed Messages stream's reassembly on the
// record and returns why it cannot count: an error event (upstream_error)
// or no message_stop (stream_incomplete); "" when it can.
func (c *call) settleMessages(acc *messagesAcc) (incomplete string) {
	c.response = c.g.redact.redact(acc.response())
	c.rec.EmittedIDs = acc.emitted()
	c.setUsage(acc.usage())
	if !acc.finished() {
		return incompleteReason(acc.failed)
	}
	return ""
}
