package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/internal/gateway"
)

// callItem is one item of GET /api/v1/rollouts/{id}/calls and
// GET /api/v1/calls. The bodies stay raw, as the answer's bytes.
type callItem struct {
	Seq       *int            `json:"seq"`
	AgentID   *string         `json:"agent_id"`
	CallID    string          `json:"call_id"`
	Protocol  string          `json:"protocol"`
	Status    int             `json:"status"`
	Request   json.RawMessage `json:"request"`
	Forwarded json.RawMessage `json:"forwarded"`
	Response  json.RawMessage `json:"response"`
	Usage     json.RawMessage `json:"usage"`
	Counted   bool            `json:"counted"`
	Reason    *string         `json:"reason"`
	Timings   struct {
		ReceivedAt  *string `json:"received_at"`
		FirstByteAt *string `json:"first_byte_at"`
		DoneAt      *string `json:"done_at"`
	} `json:"timings"`
}

type callList struct {
	Items      []callItem `json:"items"`
	NextCursor *string    `json:"next_cursor"`
}

// listCalls pages through a calls list with the given page size.
func (h *harness) listCalls(path string, limit int) []callItem {
	h.t.Helper()
	var out []callItem
	cursor := ""
	for range 100 {
		q := "?limit=" + itoa(limit)
		if strings.Contains(path, "?") {
			q = "&limit=" + itoa(limit)
		}
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := h.mustJSON(http.MethodGet, path+q, h.admin, "", http.StatusOK)
		var l callList
		if err := json.Unmarshal(r.body, &l); err != nil {
			h.t.Fatalf("%s: %v: %s", path, err, r.body)
		}
		if len(l.Items) > limit {
			h.t.Fatalf("%s: a page of %d, limit %d", path, len(l.Items), limit)
		}
		out = append(out, l.Items...)
		if l.NextCursor == nil {
			return out
		}
		cursor = *l.NextCursor
	}
	h.t.Fatalf("%s never ends", path)
	return nil
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// sentBodies records the bodies an openai-go client sends.
type sentBodies struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (s *sentBodies) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	s.mu.Lock()
	s.bodies = append(s.bodies, b)
	s.mu.Unlock()
	return next(req)
}

// TestRecordedCalls_ReadBackWhatTheAgentSentAndTheUpstreamGot drives a
// rollout with the official openai-go client — a tool call answered
// whole, then a streamed answer — and reads it back (SPEC §4.8): each
// call's request is JSON-equal to what the client sent, its forwarded
// body is byte for byte what the upstream received (the policy's model,
// its temperature, the stream options the gateway added), its response is
// the answer (the stream reassembled), and the trajectory built from the
// calls and the reported tool calls passes gyre's ATIF validator.
func TestRecordedCalls_ReadBackWhatTheAgentSentAndTheUpstreamGot(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		var (
			answersMu       sync.Mutex
			upstreamAnswers [][]byte
		)
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			var rec bytes.Buffer
			mw := &recordingWriter{ResponseWriter: w, body: &rec}
			if bytes.Contains(body, []byte(`"role":"tool"`)) {
				streamText(mw, body, []string{"refund ", "issued"}, false)
			} else {
				answerToolCall(mw, "call_1", "lookup_order", `{"order": 7}`)
			}
			answersMu.Lock()
			upstreamAnswers = append(upstreamAnswers, rec.Bytes())
			answersMu.Unlock()
		})
		rr := h.rollout(`,"policy":"p1"`)
		sent := &sentBodies{}
		cl := h.client(rr, option.WithMiddleware(sent.middleware))
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "lookup_order",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"order": map[string]any{"type": "integer"}}},
		})}
		msgs := []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage("refund order 7"),
		}
		first, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-agent-asked", Messages: msgs, Tools: tools, Temperature: openai.Float(0.2),
		}, option.WithJSONSet("metadata_unknown", map[string]any{"trace": "x-1"}))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, first.Choices[0].Message.ToParam(), openai.ToolMessage(`{"status":"shipped"}`, "call_1"))
		stream := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-agent-asked", Messages: msgs, Tools: tools,
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; got != "refund issued" {
			t.Fatalf("streamed content = %q", got)
		}
		h.submit(rr, `{"final_text":"refund issued","llm_call_count":2,"agent_fingerprint":{"name":"refund-bot","version":"1.2"},
			"tool_calls":[{"name":"lookup_order","outcome":"ok","status_code":200,"tool_call_id":"call_1","output":{"status":"shipped"}}]}`)
		h.flush()

		for _, limit := range []int{1, 50} {
			items := h.listCalls("/api/v1/rollouts/"+rr.RolloutID+"/calls", limit)
			if len(items) != 2 {
				t.Fatalf("limit %d: %d calls, want 2", limit, len(items))
			}
			h.up.mu.Lock()
			upBodies := h.up.bodies
			h.up.mu.Unlock()
			for i, it := range items {
				if it.Seq == nil || *it.Seq != i+1 || it.AgentID != nil || it.Protocol != "chat" || it.Status != 200 ||
					!it.Counted || it.Reason != nil || it.CallID == "" {
					t.Errorf("call %d: %+v", i+1, it)
				}
				if it.Timings.ReceivedAt == nil || it.Timings.FirstByteAt == nil || it.Timings.DoneAt == nil {
					t.Errorf("call %d: timings %+v", i+1, it.Timings)
				}
				if !jsonEqual(t, it.Request, sent.bodies[i]) {
					t.Errorf("call %d: request is not what the client sent:\n got %s\nwant %s", i+1, it.Request, sent.bodies[i])
				}
				if !bytes.Equal(it.Forwarded, upBodies[i]) {
					t.Errorf("call %d: forwarded differs from what the upstream received:\n got %s\nwant %s", i+1, it.Forwarded, upBodies[i])
				}
				if !jsonEqual(t, it.Usage, []byte(upstreamUsage)) {
					t.Errorf("call %d: usage = %s", i+1, it.Usage)
				}
			}
			var fwd0, fwd1 map[string]any
			_ = json.Unmarshal(items[0].Forwarded, &fwd0)
			_ = json.Unmarshal(items[1].Forwarded, &fwd1)
			if fwd0["model"] != "served-model" || fwd0["temperature"] != 1.0 || fwd1["model"] != "served-model" ||
				fwd1["temperature"] != 1.0 || !reflect.DeepEqual(fwd1["stream_options"], map[string]any{"include_usage": true}) {
				t.Errorf("forwarded without the policy's model and overrides: %s / %s", items[0].Forwarded, items[1].Forwarded)
			}
			var req1 map[string]any
			_ = json.Unmarshal(items[1].Request, &req1)
			if _, ok := req1["stream_options"]; ok || req1["model"] != "gpt-agent-asked" {
				t.Errorf("request shows the gateway's changes: %s", items[1].Request)
			}
			// A whole answer is the upstream's; a stream, reassembled.
			answersMu.Lock()
			whole := upstreamAnswers[0]
			answersMu.Unlock()
			if !jsonEqual(t, items[0].Response, whole) {
				t.Errorf("response 1 = %s, want %s", items[0].Response, whole)
			}
			var resp struct {
				Object  string `json:"object"`
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(items[1].Response, &resp); err != nil || resp.Object != "chat.completion" ||
				len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "refund issued" || resp.Choices[0].FinishReason != "stop" {
				t.Errorf("reassembled stream = %s (%v)", items[1].Response, err)
			}
		}

		r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/trajectory", h.admin, "", http.StatusOK)
		if res := atif.Check(r.body); !res.Valid() {
			t.Fatalf("trajectory fails gyre's validator: %v\n%s", res.Err(), r.body)
		}
		var tr atif.Trajectory
		if err := json.Unmarshal(r.body, &tr); err != nil {
			t.Fatal(err)
		}
		var agentSteps, observed int
		for _, st := range tr.Steps {
			if st.Source == atif.SourceAgent {
				agentSteps++
			}
			if st.Observation != nil {
				observed += len(st.Observation.Results)
			}
		}
		if tr.SchemaVersion != atif.LatestVersion() || tr.SessionID == nil || *tr.SessionID != rr.RolloutID ||
			tr.Agent.Name != "refund-bot" || agentSteps != 2 || observed != 1 {
			t.Errorf("trajectory: version %s session %v agent %q, %d agent steps, %d observations", tr.SchemaVersion,
				deref(tr.SessionID), tr.Agent.Name, agentSteps, observed)
		}
	})
}

// recordingWriter keeps a copy of what an upstream stub writes.
type recordingWriter struct {
	http.ResponseWriter
	body *bytes.Buffer
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

func (w *recordingWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestRecordedCalls_NullWhenNotCapturedOrNotForwarded: a request the
// gateway could not parse has no bodies (null, never {}), and one refused
// by the rollout's budget shows what the agent sent but no forwarded body
// or response, since nothing went upstream.
func TestRecordedCalls_NullWhenNotCapturedOrNotForwarded(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"p1","limits":{"max_completions":1}`)
		path := "/gw/" + gatewayToken(rr) + "/v1/chat/completions"
		// Values keep the agent's spacing upstream, so "forwarded" must be
		// written into the answer as is, not re-encoded.
		ok := []byte(`{"model":"m", "metadata": {"a": [1, 2.50]}, "messages":[{"role":"user","content":"one"}]}`)
		if r := h.do(http.MethodPost, path, rr.APIKey, ok); r.status != http.StatusOK {
			t.Fatalf("first call: %d %s", r.status, r.body)
		}
		h.flush()
		over := []byte(`{"model":"m","messages":[{"role":"user","content":"two"}]}`)
		wantOpenAIError(t, h.do(http.MethodPost, path, rr.APIKey, over), http.StatusTooManyRequests, "rollout_budget_exhausted")
		wantOpenAIError(t, h.do(http.MethodPost, path, rr.APIKey, []byte(`{"messages":`)), http.StatusBadRequest, gateway.CodeInvalidRequest)
		h.flush()
		r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/calls", h.admin, "", http.StatusOK)
		var l struct {
			Items []map[string]json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(r.body, &l); err != nil || len(l.Items) != 3 {
			t.Fatalf("calls: %s (%v)", r.body, err)
		}
		h.up.mu.Lock()
		upFirst := h.up.bodies[0]
		h.up.mu.Unlock()
		if !bytes.Contains(upFirst, []byte(`{"a": [1, 2.50]}`)) || !bytes.Equal(l.Items[0]["forwarded"], upFirst) {
			t.Errorf("forwarded is not byte for byte what the upstream received:\n got %s\nwant %s", l.Items[0]["forwarded"], upFirst)
		}
		budget, invalid := l.Items[1], l.Items[2]
		if !jsonEqual(t, budget["request"], over) || string(budget["forwarded"]) != "null" || string(budget["response"]) != "null" {
			t.Errorf("budget-refused call: request %s forwarded %s response %s", budget["request"], budget["forwarded"], budget["response"])
		}
		for _, k := range []string{"request", "forwarded", "response", "usage"} {
			if string(invalid[k]) != "null" {
				t.Errorf("unparsable call: %s = %s, want null", k, invalid[k])
			}
		}
		if string(budget["reason"]) != `"`+gateway.ReasonBudgetExhausted+`"` || string(invalid["reason"]) != `"`+gateway.ReasonInvalidRequest+`"` {
			t.Errorf("reasons %s %s", budget["reason"], invalid["reason"])
		}
	})
}

// TestRecordedCalls_ProductionCallsListedApart: calls through the policy
// endpoint are listed by GET /api/v1/calls (with their agent_id, in order
// of receipt) and never among a rollout's calls; a rollout's calls never
// appear there; another tenant sees neither.
func TestRecordedCalls_ProductionCallsListedApart(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{gw: gateway.Config{DefaultPolicy: "p1"}})
		rr := h.rollout(`,"policy":"p1"`)
		if r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
			[]byte(`{"model":"m","messages":[{"role":"user","content":"rollout"}]}`)); r.status != http.StatusOK {
			t.Fatalf("rollout call: %d %s", r.status, r.body)
		}
		inference := h.key(gyre.RoleInference)
		var sent [][]byte
		for _, agent := range []string{"agent-1", "agent-2", "agent-1"} {
			body := []byte(`{"model":"prod","messages":[{"role":"user","content":"from ` + agent + ` ` + itoa(len(sent)) + `"}]}`)
			sent = append(sent, body)
			if r := h.do(http.MethodPost, "/agents/"+agent+"/v1/chat/completions", inference, body); r.status != http.StatusOK {
				t.Fatalf("production call: %d %s", r.status, r.body)
			}
		}
		h.flush()
		all := h.listCalls("/api/v1/calls", 2)
		if len(all) != 3 {
			t.Fatalf("GET /api/v1/calls: %d items, want the 3 production calls", len(all))
		}
		for i, it := range all {
			if it.Seq != nil || it.AgentID == nil || !jsonEqual(t, it.Request, sent[i]) || it.Forwarded == nil ||
				!bytes.Contains(it.Forwarded, []byte(`"model":"served-model"`)) || it.Response == nil || !it.Counted {
				t.Errorf("production call %d: %+v", i, it)
			}
		}
		if *all[0].AgentID != "agent-1" || *all[1].AgentID != "agent-2" {
			t.Errorf("agents %s %s", *all[0].AgentID, *all[1].AgentID)
		}
		if one := h.listCalls("/api/v1/calls?agent_id=agent-2", 50); len(one) != 1 || !jsonEqual(t, one[0].Request, sent[1]) {
			t.Errorf("agent_id=agent-2: %+v", one)
		}
		if in := h.listCalls("/api/v1/rollouts/"+rr.RolloutID+"/calls", 50); len(in) != 1 ||
			!bytes.Contains(in[0].Request, []byte(`"rollout"`)) {
			t.Errorf("the rollout's calls: %+v", in)
		}
		// Another tenant: none of them, and the rollout is not found.
		other, err := h.st.CreateTenant(context.Background(), "other")
		if err != nil {
			t.Fatal(err)
		}
		h.tenant = other
		otherKey := h.key(gyre.RoleReader)
		r := h.mustJSON(http.MethodGet, "/api/v1/calls", otherKey, "", http.StatusOK)
		if !bytes.Contains(r.body, []byte(`"items":[]`)) {
			t.Errorf("another tenant lists %s", r.body)
		}
		h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/calls", otherKey, "", http.StatusNotFound)
		h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/trajectory", otherKey, "", http.StatusNotFound)
	})
}
