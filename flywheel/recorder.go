package flywheel

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gyrehq/gyre/internal/jcs"
)

// Recorder records what a Go agent did during one rollout or turn — the
// tool calls it executed, the completions it issued — with honest
// outcomes, and writes the report gyre worker reads (GYRE_REPORT).
//
// Honesty rules (flywheel/1 ToolCallRecord):
//
//   - The outcome is OutcomeUnknown unless the caller observed a verdict
//     and said so with ToolCall.OK or ToolCall.Failed. Unknown is never
//     rounded up to ok.
//   - status_code is set only from a status observed on the wire
//     (ToolCall.ObserveStatus, or ToolTransport for HTTP tools), and is
//     always null when the outcome is unknown: a status may confirm or
//     contradict a verdict, never manufacture one.
//   - When the outcome is unknown, an object output is scrubbed of its
//     machine-readable status keys (status, status_code, code, ok, error).
//   - tool_call_id is the id the model assigned (OpenAI tool_calls[].id),
//     never one the agent makes up.
//   - entity_ids holds only the contract's keys (id, key, uuid, sid, gid).
//   - A call started but never finished is reported as unknown, never
//     dropped: a partial list is worse than none.
//
// A Recorder is safe for concurrent use.
type Recorder struct {
	mu          sync.Mutex
	calls       []*ToolCall
	omitted     int
	llmCalls    int
	llmCounting bool
	success     Optional[bool]
	reward      Optional[float64]
	exclusion   Optional[Exclusion]
	observed    ExclusionReason // from the LLM transport: no_policy, credential_expired
	events      []json.RawMessage
	fingerprint json.RawMessage
	agentName   string
	now         func() time.Time
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{now: time.Now} }

// SetAgentName sets the agent_name of calls that do not name their own:
// which agent of a multi-agent system made them.
func (r *Recorder) SetAgentName(name string) {
	r.mu.Lock()
	r.agentName = name
	r.mu.Unlock()
}

// ToolCallStart describes a tool call as it starts.
type ToolCallStart struct {
	// Name is the tool's name; required.
	Name string
	// ToolCallID is the id the model gave the call (OpenAI
	// tool_calls[].id); "" when the framework exposed none.
	ToolCallID string
	// Arguments is the call's argument object: a Go value that encodes as
	// a JSON object, or JSON text of an object (string, []byte,
	// json.RawMessage), as models send tool arguments. Anything else is
	// left out.
	Arguments any
	// AgentName overrides the Recorder's agent name for this call.
	AgentName string
}

// ToolCall is one call in flight. Finish it exactly once with OK, Failed,
// Unknown or Finish; later finishes are ignored.
type ToolCall struct {
	rec   *Recorder
	start ToolCallStart
	began time.Time

	mu       sync.Mutex
	status   *int
	entity   map[EntityKey]string
	finished bool
	record   ToolCallRecord
}

type callKey struct{}

// Start records the start of a tool call and returns a context carrying
// it, so that HTTP requests made with that context through ToolTransport
// record their status on it.
func (r *Recorder) Start(ctx context.Context, s ToolCallStart) (context.Context, *ToolCall) {
	c := &ToolCall{rec: r, start: s, began: r.now()}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	return context.WithValue(ctx, callKey{}, c), c
}

// CallFromContext returns the tool call a context from Recorder.Start
// carries, or nil.
func CallFromContext(ctx context.Context) *ToolCall {
	c, _ := ctx.Value(callKey{}).(*ToolCall)
	return c
}

// ObserveStatus records an HTTP status seen on the wire for this call (the
// last one wins). It is reported only with an ok or failed outcome.
func (c *ToolCall) ObserveStatus(code int) {
	if code < 100 || code > 599 {
		return
	}
	c.mu.Lock()
	c.status = &code
	c.mu.Unlock()
}

// EntityID files the identity a write produced under the response field
// it came from. Keys outside the contract's set and empty values are
// ignored: no identity evidence is an abstention, never a failure.
func (c *ToolCall) EntityID(key EntityKey, value string) {
	if !key.Valid() || value == "" {
		return
	}
	c.mu.Lock()
	if c.entity == nil {
		c.entity = map[EntityKey]string{}
	}
	c.entity[key] = value
	c.mu.Unlock()
}

// OK finishes the call with an observed success.
func (c *ToolCall) OK(output any) { c.Finish(OutcomeOK, output, nil) }

// Failed finishes the call with an observed failure.
func (c *ToolCall) Failed(err error, output any) { c.Finish(OutcomeFailed, output, err) }

// Unknown finishes the call without a verdict: what to report whenever the
// framework did not expose one (for example a tool that catches its own
// errors and returns text that reads like a result).
func (c *ToolCall) Unknown(output any) { c.Finish(OutcomeUnknown, output, nil) }

// Finish finishes the call with outcome (anything but ok or failed is
// unknown), its output and its error, if any.
func (c *ToolCall) Finish(outcome Outcome, output any, err error) {
	end := c.rec.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	c.finished = true
	c.record = c.build(outcome, output, err, end)
}

// build assembles the record; c.mu is held.
func (c *ToolCall) build(outcome Outcome, output any, err error, end time.Time) ToolCallRecord {
	if outcome != OutcomeOK && outcome != OutcomeFailed {
		outcome = OutcomeUnknown
	}
	name := c.start.Name
	if name == "" {
		name = "unnamed_tool"
	}
	rec := ToolCallRecord{Name: name, Outcome: outcome}
	if args, ok := encodeArguments(c.start.Arguments); ok {
		rec.Arguments = args
	}
	if outcome != OutcomeUnknown && c.status != nil {
		s := *c.status
		rec.StatusCode = &s
	}
	if out, ok := encodeOutput(output, outcome == OutcomeUnknown); ok {
		rec.Output = out
	}
	if err != nil {
		rec.Error = Some(err.Error())
	}
	rec.LatencyMS = Some(float64(max(end.Sub(c.began), 0).Microseconds()) / 1000)
	agent := c.start.AgentName
	if agent == "" {
		c.rec.mu.Lock()
		agent = c.rec.agentName
		c.rec.mu.Unlock()
	}
	if agent != "" {
		rec.AgentName = Some(agent)
	}
	if c.start.ToolCallID != "" {
		rec.ToolCallID = Some(c.start.ToolCallID)
	}
	if len(c.entity) > 0 {
		rec.EntityIDs = make(map[EntityKey]string, len(c.entity))
		for k, v := range c.entity {
			rec.EntityIDs[k] = v
		}
	}
	return rec
}

// snapshot returns the call's record: as finished, or as unknown when it is
// still running.
func (c *ToolCall) snapshot(now time.Time) ToolCallRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return c.record
	}
	rec := c.build(OutcomeUnknown, nil, nil, now)
	rec.Error = Some("the call had not finished when it was reported")
	return rec
}

// scrubbedKeys are removed from an object output whose outcome is unknown.
var scrubbedKeys = []string{"status", "status_code", "code", "ok", "error"}

// encodeOutput encodes a tool's output as JSON: json.RawMessage and []byte
// holding JSON are kept as JSON, anything else is encoded. With scrub, an
// object loses its status keys.
func encodeOutput(v any, scrub bool) (json.RawMessage, bool) {
	var raw []byte
	switch x := v.(type) {
	case nil:
		return nil, false
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	}
	if raw != nil {
		if !json.Valid(raw) {
			b, err := marshal(string(raw))
			if err != nil {
				return nil, false
			}
			raw = b
		}
	} else {
		b, err := marshal(v)
		if err != nil {
			return nil, false
		}
		raw = b
	}
	tree, err := jcs.Parse(raw)
	if err != nil {
		return nil, false // not I-JSON: the server could not store it
	}
	if obj, ok := tree.(map[string]any); ok && scrub {
		for _, k := range scrubbedKeys {
			delete(obj, k)
		}
		b, err := jcs.Marshal(obj)
		if err != nil {
			return nil, false
		}
		return b, true
	}
	return bytes.TrimSpace(raw), true
}

// encodeArguments encodes a call's arguments, which must be an object.
func encodeArguments(v any) (json.RawMessage, bool) {
	var raw []byte
	switch x := v.(type) {
	case nil:
		return nil, false
	case string:
		raw = []byte(x)
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	default:
		b, err := marshal(v)
		if err != nil {
			return nil, false
		}
		raw = b
	}
	tree, err := jcs.Parse(raw)
	if err != nil {
		return nil, false
	}
	if _, ok := tree.(map[string]any); !ok {
		return nil, false
	}
	return bytes.TrimSpace(raw), true
}

// Omit counts n executed calls deliberately left out of the report
// (tool_calls_omitted_count). Any omission forbids training grade.
func (r *Recorder) Omit(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.omitted += n
	r.mu.Unlock()
}

// CountLLMCall counts one completion the agent issued and received in
// full. Once it or LLMTransport is used, the report carries
// llm_call_count, which the server reconciles against its gateway.
func (r *Recorder) CountLLMCall() {
	r.mu.Lock()
	r.llmCounting = true
	r.llmCalls++
	r.mu.Unlock()
}

// SetSuccess records the agent's own view of whether it succeeded.
func (r *Recorder) SetSuccess(ok bool) {
	r.mu.Lock()
	r.success = Some(ok)
	r.mu.Unlock()
}

// SetReward records an advisory reward.
func (r *Recorder) SetReward(v float64) {
	r.mu.Lock()
	r.reward = Some(v)
	r.mu.Unlock()
}

// Exclude marks the rollout "do not train" for reason, e.g.
// ExclusionCredentialExpired or ExclusionSubstrateUnavailable.
func (r *Recorder) Exclude(reason ExclusionReason, detail string) {
	ex := Exclusion{Reason: reason}
	if detail != "" {
		ex.Detail = Some(detail)
	}
	r.mu.Lock()
	r.exclusion = Some(ex)
	r.mu.Unlock()
}

// AddEvent appends an event object (a Go value that encodes as a JSON
// object); anything else is ignored and reported false.
func (r *Recorder) AddEvent(v any) bool {
	b, ok := encodeArguments(v) // same rule: a JSON object
	if !ok {
		return false
	}
	r.mu.Lock()
	r.events = append(r.events, b)
	r.mu.Unlock()
	return true
}

// SetAgentFingerprint records the customer-declared scaffold identity (an
// object: SDK version, prompt and skill digests…). It is an attestation;
// the server derives its own fingerprint from the wire.
func (r *Recorder) SetAgentFingerprint(v any) bool {
	b, ok := encodeArguments(v)
	if !ok {
		return false
	}
	r.mu.Lock()
	r.fingerprint = b
	r.mu.Unlock()
	return true
}

// ToolCalls returns every recorded call in start order, never nil: an
// empty slice asserts that zero calls were observed.
func (r *Recorder) ToolCalls() []ToolCallRecord {
	r.mu.Lock()
	calls := slices.Clone(r.calls)
	r.mu.Unlock()
	now := r.now()
	out := make([]ToolCallRecord, 0, len(calls))
	for _, c := range calls {
		out = append(out, c.snapshot(now))
	}
	return out
}

// Report returns the report for finalText: every tool call, the omitted
// count, llm_call_count when the agent counted its completions, and what
// else was set.
func (r *Recorder) Report(finalText string) Report {
	calls := r.ToolCalls()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{
		FinalText: &finalText,
		ToolCalls: Some(calls),
		Success:   r.success,
		Reward:    r.reward,
		Exclusion: r.exclusion,
	}
	if r.omitted > 0 {
		n := r.omitted
		rep.ToolCallsOmittedCount = &n
	}
	if r.llmCounting {
		rep.LLMCallCount = Some(r.llmCalls)
	}
	if rep.Exclusion.IsAbsent() && r.observed != "" {
		rep.Exclusion = Some(Exclusion{Reason: r.observed, Detail: Some("observed on the LLM gateway")})
	}
	rep.Events = slices.Clone(r.events)
	rep.AgentFingerprint = r.fingerprint
	return rep
}

// ReportEnv is the environment variable holding the report's path.
const ReportEnv = "GYRE_REPORT"

// WriteReport writes the report for finalText to the path in GYRE_REPORT,
// the agent's own environment as gyre worker built it. Run outside gyre
// worker (GYRE_REPORT unset), it does nothing.
func (r *Recorder) WriteReport(finalText string) error {
	return r.WriteReportTo(os.Getenv(ReportEnv), finalText)
}

// WriteReportTo writes the report for finalText to path, atomically; an
// empty path does nothing.
func (r *Recorder) WriteReportTo(path, finalText string) error {
	if path == "" {
		return nil
	}
	return WriteReportFile(path, r.Report(finalText))
}

// ToolTransport wraps base (nil means http.DefaultTransport) so that every
// request made with a context from Start records its response status on
// that call.
func (r *Recorder) ToolTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		if resp != nil {
			if c := CallFromContext(req.Context()); c != nil {
				c.ObserveStatus(resp.StatusCode)
			}
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// LLMTransport wraps base (nil means http.DefaultTransport), the transport
// of the agent's LLM client, and counts completions as the gateway does: a
// POST to a completions endpoint answered 2xx whose body was read to the
// end (or, for a stream, to its [DONE] event). An Anthropic Messages
// stream counts only once its message_stop event was read: a stream cut
// before it ends with an error event, and the gateway does not count it
// either. It also notices the gateway's no_policy (503) and
// credential_expired (401) answers, in the OpenAI or the Anthropic error
// shape (both carry error.code), which make the report carry exclusion
// substrate_unavailable or credential_expired unless the agent set its
// own.
func (r *Recorder) LLMTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	r.mu.Lock()
	r.llmCounting = true
	r.mu.Unlock()
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		if err != nil || resp == nil || req.Method != http.MethodPost || !isCompletionPath(req.URL.Path) {
			return resp, err
		}
		switch {
		case resp.StatusCode/100 == 2:
			cb := &countingBody{ReadCloser: resp.Body, count: r.countCompletion, marker: doneMarker}
			if strings.HasSuffix(req.URL.Path, "/messages") && isEventStream(resp.Header.Get("Content-Type")) {
				cb.marker, cb.needMarker = messageStopMarker, true
			}
			resp.Body = cb
		case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusUnauthorized:
			r.noticeGatewayError(resp)
		}
		return resp, nil
	})
}

func isCompletionPath(p string) bool {
	for _, suffix := range []string{"/chat/completions", "/completions", "/responses", "/messages"} {
		if strings.HasSuffix(p, suffix) {
			return true
		}
	}
	return false
}

func (r *Recorder) countCompletion() {
	r.mu.Lock()
	r.llmCalls++
	r.mu.Unlock()
}

// noticeGatewayError peeks at an OpenAI-shaped error body and restores it.
func (r *Recorder) noticeGatewayError(resp *http.Response) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) != nil {
		return
	}
	var reason ExclusionReason
	switch body.Error.Code {
	case "no_policy":
		reason = ExclusionSubstrateUnavailable
	case "credential_expired":
		reason = ExclusionCredentialExpired
	default:
		return
	}
	r.mu.Lock()
	if r.observed == "" {
		r.observed = reason
	}
	r.mu.Unlock()
}

// countingBody counts a completion once its body was read to the end or
// its stream's final event (marker) was seen; with needMarker, only once
// the marker was seen.
type countingBody struct {
	io.ReadCloser
	count      func()
	once       sync.Once
	marker     []byte
	needMarker bool
	tail       []byte
	sawDone    bool
}

var (
	doneMarker = []byte("[DONE]")
	// messageStopMarker is the data of a Messages stream's last event,
	// as JSON structure (inside a text or tool-input delta its quotes are
	// escaped).
	messageStopMarker = []byte(`"type":"message_stop"`)
)

func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.sawDone {
		chunk := p[:n]
		keep := len(b.marker) - 1
		head := append(append([]byte(nil), b.tail...), chunk[:min(len(chunk), keep)]...)
		if bytes.Contains(chunk, b.marker) || bytes.Contains(head, b.marker) {
			b.sawDone = true
		}
		all := append(append([]byte(nil), b.tail...), chunk[max(0, len(chunk)-keep):]...)
		b.tail = all[max(0, len(all)-keep):]
	}
	if err == io.EOF && (b.sawDone || !b.needMarker) {
		b.once.Do(b.count)
	}
	return n, err
}

func (b *countingBody) Close() error {
	if b.sawDone {
		b.once.Do(b.count)
	}
	return b.ReadCloser.Close()
}
