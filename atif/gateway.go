package atif

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// GatewayRecord is one chat completion as gyre's LLM gateway records it
// (SPEC §6.2), reduced to what a trajectory needs. The atif package defines
// it, rather than importing the gateway's types, so that it stays a
// public package with no dependency on gyre's internals; whoever reads the
// gateway's records fills it in.
type GatewayRecord struct {
	// Seq is the completion's sequence number within the rollout; steps
	// follow Seq order.
	Seq int64
	// Counted says whether the completion counts (SPEC §6.3: upstream
	// answered 2xx and the response reached the client in full). Only
	// counted completions become steps.
	Counted bool
	// Model is the model the completion ran on (the policy's); when empty,
	// the response's "model" is used.
	Model string
	// Request is the Chat Completions request body as the agent sent it
	// (messages rebuilt from the message store).
	Request json.RawMessage
	// Response is the response body, a chat.completion object (a stream is
	// reassembled into one).
	Response json.RawMessage
	// Usage is the recorded usage and cost. A nil token field is read from
	// the response's "usage"; CostUSD stays nil when the policy has no
	// prices.
	Usage Usage
	// ReceivedAt is when the gateway received the request.
	ReceivedAt time.Time
	// DoneAt is when the response was complete; it becomes the step's
	// timestamp (ReceivedAt when zero).
	DoneAt time.Time
	// PromptTokenIDs, CompletionTokenIDs and Logprobs are captured with a
	// policy's capture_tokens; nil otherwise.
	PromptTokenIDs     []int
	CompletionTokenIDs []int
	Logprobs           []float64
}

// GatewayOptions names what gateway records do not carry.
type GatewayOptions struct {
	// SessionID is the run's id (the rollout id); omitted when empty.
	SessionID string
	// TrajectoryID identifies the document; omitted when empty.
	TrajectoryID string
	// AgentName and AgentVersion describe the agent. When empty they are
	// read from the string members "name" and "version" of the
	// RolloutOutput's agent_fingerprint, else "unknown".
	AgentName    string
	AgentVersion string
}

// ErrNoCompletions is returned by FromGateway when no record counts: an
// ATIF trajectory needs at least one step.
var ErrNoCompletions = errors.New("atif: no counted completions")

// FromGateway builds an ATIF document, at LatestVersion, from the gateway
// records of one rollout and, when not nil, the RolloutOutput the agent
// reported:
//
//   - one agent step per counted completion, in Seq order, with the
//     assistant message, reasoning (reasoning_content or reasoning) and tool
//     calls of the response's first choice, the model, llm_call_count 1,
//     a timestamp, and metrics from the usage (prompt, completion and cached
//     tokens, cost, captured token ids and logprobs); its extra holds the
//     record's seq and finish_reason;
//   - before it, a system step for each new system or developer message
//     and a user step for each new user message of the request. A message is
//     new when the request extends the previous request's messages (plus the
//     previous reply); when the agent rewrote its history instead (say,
//     after compaction), every system and user message of the request is
//     emitted, those already emitted marked is_copied_context. Assistant
//     messages the agent wrote into its history itself (few-shot examples)
//     are not steps: they are no completion. Multimodal request content
//     keeps its text parts only;
//   - each ToolCallRecord of the output with a tool_call_id becomes an
//     observation result of the step whose completion emitted that id
//     (the k-th record with an id joins the k-th completion that emitted
//     it, later extras the last one); its content is the record's output
//     (a JSON string as is, other JSON as compact text, or the error when
//     there is no output) and its extra the record's outcome, status code,
//     error, latency and agent name. A tool call no record answers takes
//     its result from the first later request's role "tool" message, if
//     any. Records that join nothing are kept in the root's extra as
//     "unjoined_tool_calls";
//   - agent.tool_definitions from the first request that offers tools,
//     agent.model_name from the first completion, and final_metrics with
//     total_steps and each token or cost total that every agent step
//     reports.
//
// A tool call whose arguments are not a JSON object gets {} and keeps the
// text in its extra as "raw_arguments". FromGateway fails when a request
// or response body is not JSON, and with ErrNoCompletions when no record
// counts.
func FromGateway(records []GatewayRecord, out *flywheel.RolloutOutput, opts GatewayOptions) (*Trajectory, error) {
	recs := make([]GatewayRecord, 0, len(records))
	for _, r := range records {
		if r.Counted {
			recs = append(recs, r)
		}
	}
	if len(recs) == 0 {
		return nil, ErrNoCompletions
	}
	slices.SortStableFunc(recs, func(a, b GatewayRecord) int { return cmp.Compare(a.Seq, b.Seq) })

	minor := latestMinor(acceptedSet)
	b := &gatewayBuilder{
		v15:      minor >= sinceV15,
		v17:      minor >= sinceV17,
		emitted:  map[string]bool{},
		toolMsgs: map[string]Content{},
		emitters: map[string][]callRef{},
	}
	tr := &Trajectory{SchemaVersion: LatestVersion(), Agent: agentFor(out, opts)}
	if opts.SessionID != "" {
		tr.SessionID = ptr(opts.SessionID)
	}
	if opts.TrajectoryID != "" && b.v17 {
		tr.TrajectoryID = ptr(opts.TrajectoryID)
	}
	for i, r := range recs {
		if err := b.record(tr, i, r); err != nil {
			return nil, err
		}
	}
	unjoined, err := b.observations(tr, out)
	if err != nil {
		return nil, err
	}
	if len(unjoined) > 0 {
		extra, err := json.Marshal(map[string]any{"unjoined_tool_calls": unjoined})
		if err != nil {
			return nil, fmt.Errorf("atif: encode unjoined tool calls: %w", err)
		}
		tr.Extra = extra
	}
	for i := range tr.Steps {
		tr.Steps[i].StepID = i + 1
	}
	tr.FinalMetrics = finalMetrics(tr)
	return tr, nil
}

// callRef locates a tool call: step index and index in its tool_calls.
type callRef struct{ step, call int }

// gatewayBuilder carries what FromGateway learns from one record to the
// next. v15 and v17 say whether LatestVersion has the fields those
// versions added.
type gatewayBuilder struct {
	v15, v17 bool
	prevMsgs []string             // canonical messages of the previous request
	emitted  map[string]bool      // canonical system/user messages already emitted
	toolMsgs map[string]Content   // tool_call_id → first role "tool" message content seen
	emitters map[string][]callRef // tool_call_id → the calls that emitted it, in order
}

type chatRequest struct {
	Messages []json.RawMessage `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
}

type chatMsg struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
}

type chatResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content          json.RawMessage `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
			Refusal          *string         `json:"refusal"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        *int `json:"prompt_tokens"`
		CompletionTokens    *int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (b *gatewayBuilder) record(tr *Trajectory, i int, r GatewayRecord) error {
	var req chatRequest
	if err := json.Unmarshal(r.Request, &req); err != nil {
		return fmt.Errorf("atif: completion %d: request body: %w", r.Seq, err)
	}
	var resp chatResponse
	if err := json.Unmarshal(r.Response, &resp); err != nil {
		return fmt.Errorf("atif: completion %d: response body: %w", r.Seq, err)
	}
	if tr.Agent.ToolDefinitions == nil && len(req.Tools) > 0 && b.v15 {
		tr.Agent.ToolDefinitions = req.Tools
	}

	// System and user steps for the request's new messages.
	msgs := make([]chatMsg, len(req.Messages))
	canon := make([]string, len(req.Messages))
	for j, raw := range req.Messages {
		if err := json.Unmarshal(raw, &msgs[j]); err != nil {
			return fmt.Errorf("atif: completion %d: message %d: %w", r.Seq, j, err)
		}
		canon[j] = canonical(raw)
		if m := msgs[j]; m.Role == RoleTool && m.ToolCallID != "" {
			if _, seen := b.toolMsgs[m.ToolCallID]; !seen {
				b.toolMsgs[m.ToolCallID] = TextContent(messageText(m.Content))
			}
		}
	}
	start, rewritten := 0, false
	if i > 0 {
		if len(canon) >= len(b.prevMsgs) && slices.Equal(canon[:len(b.prevMsgs)], b.prevMsgs) {
			start = len(b.prevMsgs)
			if start < len(msgs) && msgs[start].Role == RoleAssistant {
				start++ // the previous completion's reply
			}
		} else {
			rewritten = true
		}
	}
	for j := start; j < len(msgs); j++ {
		var src Source
		switch msgs[j].Role {
		case RoleSystem, "developer":
			src = SourceSystem
		case RoleUser:
			src = SourceUser
		default:
			continue
		}
		key := string(src) + "\x00" + canon[j]
		st := Step{Source: src, Message: TextContent(messageText(msgs[j].Content))}
		if rewritten && b.emitted[key] {
			st.IsCopiedContext = ptr(true)
		}
		b.emitted[key] = true
		tr.Steps = append(tr.Steps, st)
	}
	b.prevMsgs = canon

	// The agent step.
	st := Step{Source: SourceAgent, Message: TextContent("")}
	if m := cmp.Or(r.Model, resp.Model); m != "" {
		st.ModelName = ptr(m)
		if tr.Agent.ModelName == nil {
			tr.Agent.ModelName = ptr(m)
		}
	}
	if ts := cmp.Or(r.DoneAt, r.ReceivedAt); !ts.IsZero() {
		st.Timestamp = ptr(ts.UTC().Format(time.RFC3339Nano))
	}
	extra := map[string]any{"seq": r.Seq}
	if len(resp.Choices) > 0 {
		ch := resp.Choices[0]
		text := messageText(ch.Message.Content)
		if text == "" && ch.Message.Refusal != nil {
			text = *ch.Message.Refusal
		}
		st.Message = TextContent(text)
		if rc := ch.Message.ReasoningContent; rc != nil && *rc != "" {
			st.ReasoningContent = rc
		} else if rc := ch.Message.Reasoning; rc != nil && *rc != "" {
			st.ReasoningContent = rc
		}
		if ch.FinishReason != nil {
			extra["finish_reason"] = *ch.FinishReason
		}
		for k, call := range ch.Message.ToolCalls {
			tc := ToolCall{ToolCallID: call.ID, FunctionName: call.Function.Name}
			var raw string
			tc.Arguments, raw = argumentsObject(call.Function.Arguments)
			if raw != "" && b.v17 {
				tc.Extra, _ = json.Marshal(map[string]string{"raw_arguments": raw})
			}
			st.ToolCalls = append(st.ToolCalls, tc)
			b.emitters[call.ID] = append(b.emitters[call.ID], callRef{step: len(tr.Steps), call: k})
		}
	}
	st.Extra, _ = json.Marshal(extra)
	if b.v17 {
		st.LLMCallCount = ptr(1)
	}
	st.Metrics = metricsFor(r, resp)
	tr.Steps = append(tr.Steps, st)
	return nil
}

// observations joins the output's tool call records, and the requests'
// tool messages, to the steps that made the calls. It returns the records
// that join nothing.
func (b *gatewayBuilder) observations(tr *Trajectory, out *flywheel.RolloutOutput) ([]flywheel.ToolCallRecord, error) {
	answers := map[callRef][]ObservationResult{}
	var unjoined []flywheel.ToolCallRecord
	used := map[string]int{}
	if out != nil {
		calls, _ := out.ToolCalls.Get()
		for _, rec := range calls {
			id, ok := rec.ToolCallID.Get()
			refs := b.emitters[id]
			if !ok || len(refs) == 0 {
				unjoined = append(unjoined, rec)
				continue
			}
			ref := refs[min(used[id], len(refs)-1)]
			used[id]++
			res, err := b.recordResult(id, rec, tr.Steps[ref.step].ToolCalls[ref.call].FunctionName)
			if err != nil {
				return nil, err
			}
			answers[ref] = append(answers[ref], res)
		}
	}
	for i := range tr.Steps {
		st := &tr.Steps[i]
		if len(st.ToolCalls) == 0 {
			continue
		}
		results := []ObservationResult{}
		for k, call := range st.ToolCalls {
			rs := answers[callRef{i, k}]
			if len(rs) == 0 {
				if c, ok := b.toolMsgs[call.ToolCallID]; ok {
					r := ObservationResult{SourceCallID: ptr(call.ToolCallID), Content: &c}
					if b.v17 {
						r.Extra = json.RawMessage(`{"origin":"request"}`)
					}
					rs = []ObservationResult{r}
				}
			}
			results = append(results, rs...)
		}
		if len(results) > 0 {
			st.Observation = &Observation{Results: results}
		}
	}
	return unjoined, nil
}

func (b *gatewayBuilder) recordResult(id string, rec flywheel.ToolCallRecord, fn string) (ObservationResult, error) {
	r := ObservationResult{SourceCallID: ptr(id)}
	if text, ok := outputText(rec.Output); ok {
		r.Content = ptr(TextContent(text))
	} else if e, ok := rec.Error.Get(); ok {
		r.Content = ptr(TextContent(e))
	}
	if !b.v17 {
		return r, nil
	}
	extra := map[string]any{"origin": "tool_call_record", "outcome": rec.Outcome}
	if rec.StatusCode != nil {
		extra["status_code"] = *rec.StatusCode
	}
	if v, ok := rec.Error.Get(); ok {
		extra["error"] = v
	}
	if v, ok := rec.ErrorClass.Get(); ok {
		extra["error_class"] = v
	}
	if v, ok := rec.LatencyMS.Get(); ok {
		extra["latency_ms"] = v
	}
	if v, ok := rec.AgentName.Get(); ok {
		extra["agent_name"] = v
	}
	if rec.Name != fn {
		extra["name"] = rec.Name
	}
	var err error
	if r.Extra, err = json.Marshal(extra); err != nil {
		return r, fmt.Errorf("atif: tool call %s: %w", id, err)
	}
	return r, nil
}

// outputText renders a tool output: a JSON string as is, null or nothing
// as absent, anything else as compact JSON text.
func outputText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, true
		}
	}
	return compactJSON(raw), true
}

func metricsFor(r GatewayRecord, resp chatResponse) *Metrics {
	u := r.Usage
	if ru := resp.Usage; ru != nil {
		u.PromptTokens = cmp.Or(u.PromptTokens, ru.PromptTokens)
		u.CompletionTokens = cmp.Or(u.CompletionTokens, ru.CompletionTokens)
		if ru.PromptTokensDetails != nil {
			u.CachedTokens = cmp.Or(u.CachedTokens, ru.PromptTokensDetails.CachedTokens)
		}
	}
	m := &Metrics{
		PromptTokens:       u.PromptTokens,
		CompletionTokens:   u.CompletionTokens,
		CachedTokens:       u.CachedTokens,
		CostUSD:            u.CostUSD,
		PromptTokenIDs:     r.PromptTokenIDs,
		CompletionTokenIDs: r.CompletionTokenIDs,
		Logprobs:           r.Logprobs,
	}
	if m.PromptTokens == nil && m.CompletionTokens == nil && m.CachedTokens == nil && m.CostUSD == nil &&
		m.PromptTokenIDs == nil && m.CompletionTokenIDs == nil && m.Logprobs == nil {
		return nil
	}
	return m
}

// finalMetrics totals the agent steps: each total is set when every agent
// step reports the field.
func finalMetrics(tr *Trajectory) *FinalMetrics {
	fm := &FinalMetrics{TotalSteps: ptr(len(tr.Steps))}
	sumInt := func(get func(*Metrics) *int) *int {
		total := 0
		for i := range tr.Steps {
			s := &tr.Steps[i]
			if s.Source != SourceAgent {
				continue
			}
			if s.Metrics == nil || get(s.Metrics) == nil {
				return nil
			}
			total += *get(s.Metrics)
		}
		return &total
	}
	fm.TotalPromptTokens = sumInt(func(m *Metrics) *int { return m.PromptTokens })
	fm.TotalCompletionTokens = sumInt(func(m *Metrics) *int { return m.CompletionTokens })
	fm.TotalCachedTokens = sumInt(func(m *Metrics) *int { return m.CachedTokens })
	cost := 0.0
	for i := range tr.Steps {
		s := &tr.Steps[i]
		if s.Source != SourceAgent {
			continue
		}
		if s.Metrics == nil || s.Metrics.CostUSD == nil {
			return fm
		}
		cost += *s.Metrics.CostUSD
	}
	fm.TotalCostUSD = &cost
	return fm
}

func agentFor(out *flywheel.RolloutOutput, opts GatewayOptions) Agent {
	var fp struct {
		Name    any `json:"name"`
		Version any `json:"version"`
	}
	if out != nil && len(out.AgentFingerprint) > 0 {
		_ = json.Unmarshal(out.AgentFingerprint, &fp) // best effort: a fingerprint of another shape names nothing
	}
	str := func(v any) string {
		s, _ := v.(string)
		return s
	}
	return Agent{
		Name:    cmp.Or(opts.AgentName, str(fp.Name), "unknown"),
		Version: cmp.Or(opts.AgentVersion, str(fp.Version), "unknown"),
	}
}

// argumentsObject turns a tool call's arguments (an OpenAI JSON-encoded
// string, or an object from providers that send one) into a JSON object.
// When that is impossible it returns {} and the original text.
func argumentsObject(raw json.RawMessage) (json.RawMessage, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return json.RawMessage("{}"), string(raw)
		}
		if strings.TrimSpace(s) == "" {
			return json.RawMessage("{}"), ""
		}
		raw = json.RawMessage(s)
	}
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return json.RawMessage("{}"), ""
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return json.RawMessage("{}"), string(raw)
	}
	return json.RawMessage(compactJSON(raw)), ""
}

// messageText returns the text of a Chat Completions content: a string,
// or the text parts of an array joined with newlines.
func messageText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" || p.Type == "input_text" || p.Type == "output_text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// canonical returns a form of a JSON value that ignores member order and
// white space, for comparing messages across requests.
func canonical(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }
