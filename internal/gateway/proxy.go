package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gyrehq/gyre/internal/hangup"
	"github.com/gyrehq/gyre/internal/store"
)

// call is one gateway request on its way through.
type call struct {
	g      *Gateway
	w      http.ResponseWriter
	r      *http.Request
	route  string
	ctx    context.Context
	cancel context.CancelCauseFunc
	fl     *flight
	start  time.Time // monotonic, for metrics
	rec    store.GatewayRecord
	spec   protocolSpec
	req    *request
	fwd    *forwarded
	pol    *Policy
	up     *upstream
	// response is the answer to store: the body, or the reassembled stream.
	response []byte
	// upstream timings (monotonic): sent, answer headers, body done.
	sent, headers, ended time.Time
	// answered is when a stream's last write went out, if the handler
	// returned before it (see deliveryConn).
	answered time.Time
	// upstreamDone: the upstream sent [DONE]; its body may be read to the
	// end once the call is over (drainUpstream).
	upstreamDone bool
	finished     bool
	// span is the upstream call's client span, once one is sent.
	span trace.Span
}

func (g *Gateway) newCall(w http.ResponseWriter, r *http.Request, route string, spec protocolSpec) *call {
	ctx, cancel := context.WithCancelCause(r.Context())
	c := &call{g: g, w: w, r: r, route: route, spec: spec, ctx: ctx, cancel: cancel, start: time.Now()}
	c.rec.Protocol = string(spec.protocol())
	c.fl = g.rec.begin(cancel)
	id, err := uuid.NewV7()
	if err != nil {
		id = uuid.New()
	}
	c.rec.ID, c.rec.ReplicaID = id.String(), g.rec.replicaID
	c.rec.ReceivedAt, c.rec.Arrival = c.fl.received, c.fl.id
	return c
}

// refuse answers an error without recording the request: an
// authentication failure (counted in metrics only, SPEC §6.1) or a
// failure to record at all.
func (c *call) refuse(e *apiError) {
	if !c.finished {
		c.finished = true
		c.g.rec.finish(c.fl, nil)
	}
	if e.Status == http.StatusUnauthorized {
		c.g.m.authRejected.WithLabelValues(e.Code).Inc()
	}
	c.spec.writeError(c.w, e)
	c.g.m.answered(c.route, e.Status)
}

// reject answers an error and records the request, not counted. A
// client that hung up meanwhile (errClientGone, errExpired after a
// revocation) is recorded as such, whatever failed for it.
func (c *call) reject(e *apiError, reason string) {
	switch e {
	case errClientGone:
		reason = ReasonClientDisconnected
	case errExpired:
		if c.gone() == ReasonRevoked {
			reason = ReasonRevoked
		}
	}
	c.spec.writeError(c.w, e)
	c.finish(e.Status, false, reason)
}

// prepare reads and parses the body; false when it answered already.
func (c *call) prepare() bool {
	if c.g.rec.full() {
		c.refuse(errOverloaded)
		return false
	}
	body, e := readBody(c.r, c.g.cfg.MaxBodyBytes)
	if e != nil {
		reason := ReasonInvalidRequest
		if e.Code == CodeBodyTooLarge {
			reason = ReasonBodyTooLarge
		}
		c.reject(e, reason)
		return false
	}
	req, e := c.spec.parse(body)
	if e != nil {
		c.reject(e, ReasonInvalidRequest)
		return false
	}
	c.req = req
	c.rec.RequestedModel, c.rec.Stream, c.rec.ConsumedIDs = req.model, req.stream, req.consumed
	return true
}

// choosePolicy resolves the policy, checks that its upstream speaks the
// call's protocol and builds the upstream request.
func (c *call) choosePolicy(names ...*string) bool {
	pol, up, e := c.g.policyFor(c.ctx, c.rec.TenantID, names...)
	if e != nil {
		c.reject(e, ReasonNoPolicy)
		return false
	}
	c.rec.Policy, c.rec.Upstream, c.rec.Model = &pol.Name, &pol.Upstream, &pol.Model
	if !up.Speaks(c.spec.protocol()) {
		c.reject(errUnsupportedProtocol(c.spec.protocol(), up), ReasonUnsupportedProtocol)
		return false
	}
	c.pol, c.up = pol, up
	c.fwd = c.spec.forward(c.req, *pol)
	if refused := c.fwd.refused; refused != nil {
		c.fwd = nil // nothing was forwarded
		c.reject(refused, ReasonUnsupportedProtocol)
		return false
	}
	return true
}

// finish records the call and its metrics once.
func (c *call) finish(status int, counted bool, reason string) {
	if c.finished {
		return
	}
	c.finished = true
	c.rec.Status, c.rec.Counted = status, counted
	if reason != "" {
		c.rec.Reason = &reason
	}
	done := c.g.clock.Now()
	c.rec.DoneAt = &done
	p := &pendingRecord{rec: c.rec, response: c.response, body: c.bodyParts()}
	c.g.rec.finish(c.fl, p)
	c.g.m.answered(c.route, status)
	if c.span != nil {
		c.span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.Bool("gyre.counted", counted))
		if reason != "" {
			c.span.SetAttributes(attribute.String("gyre.reason", reason))
		}
		if status >= 500 || status == 499 {
			c.span.SetStatus(codes.Error, reason)
		}
		c.span.End()
	}
	total := time.Since(c.start)
	if !c.answered.IsZero() {
		total = c.answered.Sub(c.start)
	}
	added := total
	var toHeaders time.Duration
	if !c.sent.IsZero() {
		end := c.ended
		if end.IsZero() {
			end = time.Now()
		}
		added -= end.Sub(c.sent)
		if !c.headers.IsZero() {
			toHeaders = c.headers.Sub(c.sent)
		}
	}
	upName := ""
	if c.up != nil && !c.sent.IsZero() {
		upName = c.up.Name
	}
	c.g.m.latency(c.route, upName, c.rec.Stream, toHeaders, max(added, 0))
}

// bodyParts is what the call forwarded, for its record; nil when it
// built no upstream request.
func (c *call) bodyParts() *bodyParts {
	if c.req == nil || c.fwd == nil {
		return nil
	}
	var tok *string
	if c.pol != nil {
		tok = c.pol.Tokenizer
	}
	return &bodyParts{spec: c.spec, fwd: c.fwd, messages: c.req.messages, tokenizer: tok, resolved: c.req.resolved}
}

// announce makes an answer that later requests may chain from (a
// Responses answer's id) resolvable before its last bytes go out: a
// client may send its next request as soon as it has the answer, before
// this call's record is queued.
func (c *call) announce() {
	if c.rec.ResponseID == nil || c.rec.RolloutID == nil {
		return
	}
	c.g.rec.announce(c.fl, &pendingRecord{rec: c.rec, response: c.response, body: c.bodyParts()})
}

// gone reports why the call's context ended: revoked, client gone, or
// "" while it is live.
func (c *call) gone() string {
	if c.ctx.Err() == nil {
		return ""
	}
	if errors.Is(context.Cause(c.ctx), errRevoked) {
		return ReasonRevoked
	}
	return ReasonClientDisconnected
}

// hungUp finishes a call whose client went away before its answer's
// status line went out: the record keeps status (the upstream's, or 499
// when the upstream had not answered), not counted, reason
// client_disconnected; the access log and metrics show nginx's 499, not
// the 200 net/http would assume for a handler that wrote nothing.
func (c *call) hungUp(status int) {
	c.w.WriteHeader(hangup.Status)
	c.finish(status, false, ReasonClientDisconnected)
}

// proxy sends the request upstream and answers with what comes back.
func (c *call) proxy() {
	ctx, span := c.g.tracer.Start(c.ctx, "gateway upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gyre.upstream", c.up.Name),
			attribute.String("gyre.policy", c.pol.Name),
			attribute.String("gen_ai.request.model", c.pol.Model),
			attribute.Bool("gyre.stream", c.req.stream),
		))
	c.span = span
	// The upstream request ends with the call (the client leaving, a
	// revocation, the handler returning), except that after a stream's
	// [DONE] it may read on to the end of the body (drainUpstream).
	upCtx, upCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	unlink := context.AfterFunc(c.ctx, func() { upCancel(context.Cause(c.ctx)) })
	c.sent = time.Now()
	resp, err := c.up.postFor(upCtx, c.spec.protocol(), c.fwd.body, c.req.stream, c.r.Header)
	if err != nil {
		upCancel(nil)
		c.ended = time.Now()
		switch reason := c.gone(); reason {
		case ReasonRevoked:
			c.reject(errExpired, ReasonRevoked)
		case ReasonClientDisconnected:
			c.hungUp(hangup.Status)
		default:
			c.g.log.LogAttrs(c.ctx, slog.LevelWarn, "upstream request failed", slog.String("upstream", c.up.Name), slog.Any("error", err))
			c.reject(&apiError{Status: http.StatusBadGateway, Code: CodeUpstreamUnavailable, Message: upstreamErrorText(c.up.Name, err) + "."},
				ReasonUpstreamUnreachable)
		}
		return
	}
	defer func() {
		if c.upstreamDone && unlink() {
			go drainUpstream(resp.Body, upCancel)
			return
		}
		resp.Body.Close()
		upCancel(nil)
	}()
	c.headers = time.Now()
	first := c.g.clock.Now()
	c.rec.FirstByteAt = &first
	switch {
	case resp.StatusCode/100 == 3:
		c.ended = time.Now()
		c.reject(&apiError{Status: http.StatusBadGateway, Code: CodeUpstreamError,
			Message: "The upstream answered with a redirect, which the gateway never follows."}, ReasonUpstreamRedirect)
	case resp.StatusCode/100 != 2:
		c.passError(resp)
	case c.req.stream && isEventStream(resp.Header.Get("Content-Type")):
		c.spec.relay(c, resp)
	default:
		c.whole(resp)
	}
}

func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// copyAnswerHeaders passes the upstream answer headers clients act on,
// with upstream keys redacted.
func (c *call) copyAnswerHeaders(dst, src http.Header) {
	for k, vs := range src {
		lk := strings.ToLower(k)
		if lk == "content-type" || lk == "retry-after" || lk == "retry-after-ms" || strings.HasPrefix(lk, "x-ratelimit-") {
			dst[k] = vs
		}
	}
	c.g.redact.redactHeader(dst)
}

// passError passes an upstream error through with its status (SPEC §6.1).
func (c *call) passError(resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.g.cfg.MaxResponseBytes))
	c.ended = time.Now()
	if reason := c.gone(); reason != "" {
		if reason == ReasonRevoked {
			c.reject(errExpired, reason)
		} else {
			c.hungUp(resp.StatusCode)
		}
		return
	}
	body = c.g.redact.redact(body)
	if err == nil {
		c.response = body
	}
	c.copyAnswerHeaders(c.w.Header(), resp.Header)
	c.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(resp.StatusCode)
	_, _ = c.w.Write(body)
	c.finish(resp.StatusCode, false, ReasonUpstreamError)
}

// answerShape is what the gateway reads from a whole answer.
type answerShape struct {
	Choices []struct {
		Message struct {
			ToolCalls []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// whole relays a non-streamed answer. It counts when the answer was
// written and flushed to the client in full.
func (c *call) whole(resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.g.cfg.MaxResponseBytes+1))
	c.ended = time.Now()
	if reason := c.gone(); reason != "" {
		if reason == ReasonRevoked {
			c.reject(errExpired, reason)
		} else {
			c.hungUp(resp.StatusCode)
		}
		return
	}
	if err != nil {
		c.reject(&apiError{Status: http.StatusBadGateway, Code: CodeUpstreamError, Message: "The upstream's answer was cut short."}, ReasonUpstreamBroken)
		return
	}
	if int64(len(body)) > c.g.cfg.MaxResponseBytes {
		c.reject(&apiError{Status: http.StatusBadGateway, Code: CodeUpstreamError, Message: "The upstream's answer exceeds the gateway's limit."}, ReasonResponseTooLarge)
		return
	}
	body = c.g.redact.redact(body)
	c.response = body
	var notCounted string
	// The answer is read for the record after it is written, except for
	// the rollout's first completion on this replica, whose provisional
	// record must be durable before the answer goes out (beforeCounted).
	first := c.rec.RolloutID != nil && c.g.rec.needsDurableCount(*c.rec.RolloutID)
	// A Responses answer is read first too, so that its id resolves as a
	// previous_response_id as soon as the client has it.
	readFirst := first || c.spec.protocol() == ProtocolResponses
	if readFirst {
		notCounted = c.readAnswer(body)
		c.announce()
		if first && notCounted == "" {
			c.beforeCounted(resp.StatusCode)
		}
	}
	h := c.w.Header()
	c.copyAnswerHeaders(h, resp.Header)
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.g.rec.leave(c.fl)
	c.w.WriteHeader(resp.StatusCode)
	_, werr := c.w.Write(body)
	if werr == nil {
		werr = http.NewResponseController(c.w).Flush()
	}
	if !readFirst {
		notCounted = c.readAnswer(body)
	}
	// A client may close the connection as soon as it has the answer, so
	// only a failed write or flush means it was not delivered.
	if werr != nil {
		c.finish(resp.StatusCode, false, ReasonClientDisconnected)
		return
	}
	if notCounted != "" {
		c.finish(resp.StatusCode, false, notCounted)
		return
	}
	c.finish(resp.StatusCode, true, "")
}

// readAnswer puts what a whole answer says on the record: the tool call
// ids it emitted, its usage and its id; it returns why the answer cannot
// count, "" when it can.
func (c *call) readAnswer(body []byte) string {
	f := c.spec.readAnswer(body)
	c.rec.EmittedIDs = append(c.rec.EmittedIDs, f.emitted...)
	c.setUsage(f.usage)
	if f.responseID != "" {
		id := f.responseID
		c.rec.ResponseID = &id
	}
	return f.notCounted
}

// usageShape is the part of usage that cost and budgets read.
type usageShape struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	TotalTokens         *int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// setUsage records usage, total tokens and the cost the policy's prices
// give (null without prices, SPEC §6.2).
func (c *call) setUsage(raw json.RawMessage) {
	if len(raw) == 0 || isNull(raw) {
		return
	}
	c.rec.Usage = bytes.Clone(raw)
	t, ok := c.spec.tokens(raw)
	if !ok {
		return
	}
	total := t.total
	c.rec.TotalTokens = &total
	if c.pol != nil && c.pol.Prices != nil {
		cost := c.pol.Prices.CostWithCacheWrites(t.input, t.cached, t.written, t.output)
		c.rec.CostUSD = &cost
	}
}

// beforeCounted makes a rollout's first counted completion on this
// replica durable (provisionally) before its last bytes go out.
func (c *call) beforeCounted(status int) {
	if c.rec.RolloutID == nil || !c.g.rec.needsDurableCount(*c.rec.RolloutID) {
		return
	}
	p := c.rec
	p.Status, p.Counted = status, true
	done := c.g.clock.Now()
	p.DoneAt = &done
	if err := c.g.rec.makeCountDurable(c.ctx, p); err != nil {
		// A client gone meanwhile is no failure: its call will not count.
		_ = c.g.failed(c.ctx, "provisional gateway record failed", err, nil, slog.String("rollout_id", *c.rec.RolloutID))
	}
}

// streamErrorEvent is an OpenAI-style error event, which OpenAI SDKs
// raise as an error.
func streamErrorEvent(code, message string) []byte {
	e := &apiError{Status: http.StatusBadGateway, Code: code, Message: message}
	return append(append([]byte("data: "), e.body()...), '\n', '\n')
}

var doneEvent = []byte("data: [DONE]\n\n")

// stream relays a streamed answer event by event, flushing each as it
// arrives (see relay), and reassembles it for the record after [DONE] went
// out (see backlog). It counts when the event carrying the last choice's
// finish_reason and then [DONE] were delivered (SPEC §6.3). On gyre's
// server [DONE] is left for net/http to send with the end of the body,
// and the call is finished when that write is done (doneWithBody).
func (c *call) stream(resp *http.Response) {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.copyAnswerHeaders(h, resp.Header)
	h.Set("Content-Type", "text/event-stream")
	// The headers go out with the first event, in one write.
	c.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(c.w)
	rd := newSSEReader(resp.Body, int(min(c.g.cfg.MaxResponseBytes, 1<<30)))
	var (
		werr     error
		readErr  error
		tooLarge bool
		leaked   bool // the events spelled an upstream key
		scr      = c.g.redact.newScreen()
		size     int
		acc      = &streamAcc{}
		upErr    bool
		// backlog holds the events relayed but not yet added to acc.
		// Usually it is parsed after [DONE] went out, so relaying never
		// waits for parsing. The rollout's first completion on this
		// replica must be durable before [DONE] (beforeCounted), so its
		// backlog is parsed while no further event has arrived, one event
		// at a time: an event that arrives meanwhile waits for at most one
		// parse, and little is left when the stream ends.
		backlog     []backlogEvent
		parseInGaps = c.rec.RolloutID != nil && c.g.rec.needsDurableCount(*c.rec.RolloutID)
	)
	catchUp := func(all bool) {
		for len(backlog) > 0 && (all || !rd.eventReady()) {
			e := backlog[0]
			if e.ch == nil {
				var ch chunk
				if decodeChunk(e.data, &ch) == nil {
					e.ch = &ch
				}
			}
			if e.ch != nil {
				if len(e.ch.Error) > 0 && !isNull(e.ch.Error) {
					upErr = true
				}
				acc.add(e.ch, len(e.data))
			}
			backlog[0] = backlogEvent{}
			backlog = backlog[1:]
		}
	}
	// Each event is flushed unless the next one has already arrived whole:
	// then both go out in one flush, microseconds later. No event waits
	// for one that has not arrived, and a burst costs one write, not one
	// per event.
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
			relay(raw) // comments and keep-alives
			continue
		}
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			c.upstreamDone = true
			break
		}
		if size += len(data); int64(size) > c.g.cfg.MaxResponseBytes {
			tooLarge = true
			break
		}
		if scr.spells(data) {
			leaked = true // withheld: the agent has less than the key's cut
			break
		}
		if c.fwd.clientUsage || !mayBeUsageOnly(data) {
			relay(raw)
			backlog = append(backlog, backlogEvent{data: data})
			continue
		}
		// Perhaps the usage chunk the client did not ask for, which is
		// dropped: parsed at once to tell, added in its turn.
		var ch chunk
		if decodeChunk(data, &ch) != nil {
			relay(raw)
			backlog = append(backlog, backlogEvent{data: data})
			continue
		}
		if len(ch.Choices) > 0 || len(ch.Usage) == 0 || isNull(ch.Usage) {
			relay(raw) // not the usage chunk after all
		}
		backlog = append(backlog, backlogEvent{data: data, ch: &ch})
	}
	if werr == nil && size == 0 && readErr == nil {
		werr = rc.Flush() // an empty stream still gets its headers
	}
	c.ended = time.Now()
	reason := c.gone()
	ok := reason == "" && werr == nil && !tooLarge && !leaked && readErr == nil
	// A stream that may count ends with [DONE] whether or not every choice
	// finished (a stream the upstream left unfinished still ends cleanly
	// for the client), so [DONE] goes out before the rest is parsed, which
	// only decides whether it counts. The exception is the rollout's first
	// completion on this replica: it must be durable before the answer is
	// complete (beforeCounted), so it is parsed first.
	early := ok && !parseInGaps
	rd.release()
	dc := deliveryOf(c.r)
	if early && dc != nil {
		c.doneWithBody(dc, resp.StatusCode, func() string {
			catchUp(true)
			return c.settleStream(acc, upErr)
		})
		return
	}
	var delivered bool
	if early {
		delivered = c.endStream(rc, doneEvent)
	}
	catchUp(true)
	incomplete := c.settleStream(acc, upErr)
	status := resp.StatusCode
	switch {
	case reason == ReasonRevoked:
		_, _ = c.w.Write(streamErrorEvent(CodeCredentialExpired, "This rollout's credential was revoked; the stream was cut."))
		_ = rc.Flush()
		c.finish(status, false, reason)
	case reason != "" || werr != nil:
		c.finish(status, false, ReasonClientDisconnected)
	case tooLarge:
		c.endStream(rc, streamErrorEvent(CodeUpstreamError, "The upstream's stream exceeds the gateway's limit."))
		c.finish(status, false, ReasonResponseTooLarge)
	case leaked:
		c.endStream(rc, streamErrorEvent(CodeUpstreamError, "The upstream's stream carried an upstream credential; the gateway cut it."))
		c.finish(status, false, ReasonUpstreamCredential)
	case readErr != nil:
		c.endStream(rc, streamErrorEvent(CodeUpstreamError, "The upstream's stream broke off."))
		c.finish(status, false, ReasonUpstreamBroken)
	case early && !delivered:
		c.finish(status, false, ReasonClientDisconnected)
	case early:
		c.endedStream(status, incomplete)
	default:
		// The rollout's first completion on this replica: durable before
		// [DONE] if it counts.
		if incomplete == "" {
			c.beforeCounted(status)
		}
		if dc != nil {
			c.doneWithBody(dc, status, func() string { return incomplete })
			return
		}
		c.g.rec.leave(c.fl)
		if !c.endStream(rc, doneEvent) {
			c.finish(status, false, ReasonClientDisconnected)
			return
		}
		c.endedStream(status, incomplete)
	}
}

// doneWithBody writes [DONE] for net/http to send with the end of the body
// once the handler returns (see deliveryConn), and finishes the call when
// that write is done: the stream counts only if it succeeded. settle
// completes the record meanwhile and returns why the stream cannot count,
// if it cannot.
func (c *call) doneWithBody(dc *deliveryConn, status int, settle func() (incomplete string)) {
	c.lastWithBody(dc, doneEvent, status, settle)
}

// lastWithBody is doneWithBody for a stream whose last event is ev: [DONE]
// for chat, the upstream's own final event for protocols whose streams
// end with one (Messages' message_stop).
func (c *call) lastWithBody(dc *deliveryConn, ev []byte, status int, settle func() (incomplete string)) {
	c.g.rec.leave(c.fl)
	if _, err := c.w.Write(ev); err != nil {
		settle()
		c.finish(status, false, ReasonClientDisconnected)
		return
	}
	written := make(chan error, 1)
	dc.afterNextWrite(func(err error) {
		c.answered = time.Now()
		written <- err
	})
	go func() {
		incomplete := settle()
		if err := <-written; err != nil {
			c.finish(status, false, ReasonClientDisconnected)
			return
		}
		c.endedStream(status, incomplete)
	}()
}

// settleStream puts a relayed stream's reassembly on the record. It
// returns why the stream cannot count if the upstream left a choice
// unfinished or sent an error, and "" if every choice finished.
func (c *call) settleStream(acc *streamAcc, upErr bool) (incomplete string) {
	// Events were redacted one by one; the joined text is too, though the
	// screen cut every stream whose events spelled a key.
	c.response = c.g.redact.redact(acc.response())
	c.rec.EmittedIDs = acc.emitted()
	c.setUsage(acc.usage)
	if upErr || !acc.finished() {
		return incompleteReason(upErr)
	}
	return ""
}

// endedStream finishes a stream whose [DONE] was delivered: it counts
// unless it was incomplete, which ended cleanly for the client all the
// same.
func (c *call) endedStream(status int, incomplete string) {
	if incomplete != "" {
		c.finish(status, false, incomplete)
		return
	}
	c.finish(status, true, "")
}

// Bounds on reading an upstream's body past [DONE].
const (
	drainBytes = 4 << 10
	drainWait  = time.Second
)

// drainUpstream reads what an upstream sends after a stream's [DONE]
// (usually only the end of the chunked body, which servers that stream
// through ASGI write separately) so that the connection can carry the
// next request instead of being dropped, then closes the body. It gives
// up after drainBytes or drainWait.
func drainUpstream(body io.ReadCloser, cancel context.CancelCauseFunc) {
	t := time.AfterFunc(drainWait, func() { cancel(errDrainTimedOut) })
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainBytes))
	t.Stop()
	body.Close()
	cancel(nil)
}

var errDrainTimedOut = errors.New("the upstream did not end its body after [DONE]")

// backlogEvent is a relayed event's data, with its chunk once parsed.
type backlogEvent struct {
	data []byte
	ch   *chunk
}

// incompleteReason is why a stream that ended without every choice
// finished does not count.
func incompleteReason(upErr bool) string {
	if upErr {
		return ReasonUpstreamError
	}
	return ReasonStreamIncomplete
}

// mayBeUsageOnly reports whether an event's data may be the usage chunk
// include_usage adds: one whose choices are empty.
func mayBeUsageOnly(data []byte) bool {
	return bytes.Contains(data, []byte(`"choices":[]`)) || bytes.Contains(data, []byte(`"choices": []`))
}

// endStream writes the last event and reports whether it was written and
// flushed. Clients close the stream as soon as they read [DONE] (OpenAI
// SDKs do), so the context ending afterwards says nothing about delivery.
func (c *call) endStream(rc *http.ResponseController, ev []byte) bool {
	if _, err := c.w.Write(ev); err != nil {
		return false
	}
	return rc.Flush() == nil
}
