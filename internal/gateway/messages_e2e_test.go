package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/gateway"
)

// The Anthropic Messages API through the gateway (SPEC §6.1), driven by
// the official Anthropic Go SDK against a stub that speaks Messages.

const anthropicKey = "anthropic-upstream-key-0123456789"

// anthropicUsage is the stub's usage: 20 uncached prompt tokens, 6 read
// from the cache, 4 written to it, 9 output tokens.
const anthropicUsage = `{"input_tokens":20,"cache_creation_input_tokens":4,"cache_read_input_tokens":6,"output_tokens":9}`

// messagesHarness is a harness whose second upstream, "anthropic", speaks
// Messages (its stub is returned), with a policy "pm" on it.
func messagesHarness(t *testing.T, eng engine, o harnessOpts) (*harness, *upstream) {
	t.Helper()
	ant := newUpstream(t)
	ant.set(anthropicStub)
	o.gw.Upstreams = append(o.gw.Upstreams, gateway.Upstream{Name: "anthropic", BaseURL: ant.ts.URL + "/v1", AllowPrivate: true,
		APIKey: anthropicKey, Protocols: []gateway.Protocol{gateway.ProtocolMessages}})
	h := newHarness(t, eng, o)
	h.secrets = append(h.secrets, anthropicKey)
	h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"pm","upstream":"anthropic","model":"claude-served",
		"tokenizer":"claude-tok","sampling_overrides":{"temperature":1.0,"max_tokens":512},
		"prices":{"input":3,"cached_input":0.3,"output":15}}`, http.StatusCreated)
	return h, ant
}

// anthropicClient is the official Anthropic SDK pointed at a rollout's
// gateway as gyre worker points it (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY).
func (h *harness) anthropicClient(rr flywheel.RolloutRequest, opts ...antoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]antoption.RequestOption{antoption.WithBaseURL(strings.TrimSuffix(rr.LLMURL, "/v1")),
		antoption.WithAPIKey(rr.APIKey), antoption.WithMaxRetries(0), antoption.WithHTTPClient(h.ts.Client())}, opts...)...)
}

// anthropicStub answers POST /v1/messages: a tool_use of "weather" until
// the conversation carries a tool_result, then text; streamed when asked.
func anthropicStub(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.URL.Path != "/v1/messages" {
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"no such path"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	answered := len(req.Messages) > 0 && strings.Contains(string(req.Messages[len(req.Messages)-1].Content), `"tool_result"`)
	if req.Stream {
		streamMessage(w, req.Model, answered, true)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_upstream")
	content, stop := `[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_weather_1","name":"weather","input":{"city":"Paris"}}]`, "tool_use"
	if answered {
		content, stop = `[{"type":"text","text":"It is sunny in Paris."}]`, "end_turn"
	}
	fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":%s,"stop_reason":%q,"stop_sequence":null,"usage":%s}`,
		req.Model, content, stop, anthropicUsage)
}

// anthropicEvent writes one named SSE event and flushes it.
func anthropicEvent(w http.ResponseWriter, data string) {
	var ev struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(data), &ev)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, data)
	w.(http.Flusher).Flush()
}

// streamMessage streams a message as Anthropic does; the tool_use input
// comes in pieces. Without stop, the stream ends before message_stop.
func streamMessage(w http.ResponseWriter, model string, answered, stop bool) {
	startStream(w)
	anthropicEvent(w, fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_s","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"cache_creation_input_tokens":4,"cache_read_input_tokens":6,"output_tokens":1}}}`, model))
	anthropicEvent(w, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	anthropicEvent(w, `{"type":"ping"}`)
	reason := "tool_use"
	if answered {
		anthropicEvent(w, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"It is sunny "}}`)
		anthropicEvent(w, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"in Paris."}}`)
		anthropicEvent(w, `{"type":"content_block_stop","index":0}`)
		reason = "end_turn"
	} else {
		anthropicEvent(w, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking."}}`)
		anthropicEvent(w, `{"type":"content_block_stop","index":0}`)
		anthropicEvent(w, `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_weather_1","name":"weather","input":{}}}`)
		anthropicEvent(w, `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`)
		anthropicEvent(w, `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`)
		anthropicEvent(w, `{"type":"content_block_stop","index":1}`)
	}
	anthropicEvent(w, `{"type":"message_delta","delta":{"stop_reason":"`+reason+`","stop_sequence":null},"usage":{"output_tokens":9}}`)
	if stop {
		anthropicEvent(w, `{"type":"message_stop"}`)
	}
}

var weatherTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "weather", Description: anthropic.String("Weather in a city"),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}

// toolLoop runs a two-turn tool loop, the first turn whole, the second
// streamed, and returns the tool_use id the model emitted.
func toolLoop(t *testing.T, cl anthropic.Client) string {
	t.Helper()
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     "claude-agent-asked",
		MaxTokens: 64,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))},
		Tools:     []anthropic.ToolUnionParam{weatherTool},
	}
	msg, err := cl.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var toolUse *anthropic.ToolUseBlock
	for _, b := range msg.Content {
		if tu, ok := b.AsAny().(anthropic.ToolUseBlock); ok {
			toolUse = &tu
		}
	}
	if toolUse == nil || string(toolUse.Input) != `{"city":"Paris"}` || msg.StopReason != anthropic.StopReasonToolUse {
		t.Fatalf("first turn %+v, want a weather tool_use", msg)
	}
	params.Messages = append(params.Messages, msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(toolUse.ID, "sunny, 21 °C", false)))
	stream := cl.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != "It is sunny in Paris." || acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens != 9 {
		t.Fatalf("second turn %+v", acc)
	}
	return toolUse.ID
}

func TestMessages_ToolLoopWithTheAnthropicSDKIsCountedJoinedAndReconciled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, count, want string
	}{
		{"on_policy", `2`, "on_policy"},
		{"off_policy when a call escaped", `3`, "off_policy"},
	}
	forEachEngine(t, func(t *testing.T, eng engine) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				h, ant := messagesHarness(t, eng, harnessOpts{})
				rr := h.rollout(`,"policy":"pm"`)
				id := toolLoop(t, h.anthropicClient(rr))

				// Upstream: the policy's model and overrides, the upstream's
				// own key as x-api-key, the SDK's anthropic-version.
				up := ant.last(t)
				if up["model"] != "claude-served" || up["temperature"] != 1.0 || up["max_tokens"] != 512.0 || up["system"] == nil {
					t.Errorf("upstream body %v", up)
				}
				ant.mu.Lock()
				hdr := ant.headers[0]
				ant.mu.Unlock()
				if hdr.Get("x-api-key") != anthropicKey || hdr.Get("Authorization") != "" || hdr.Get("anthropic-version") == "" {
					t.Errorf("upstream headers %v", hdr)
				}

				h.submit(rr, `{"final_text":"sunny","llm_call_count":`+tc.count+`,"tool_calls":[{"name":"weather","outcome":"ok","status_code":null,"tool_call_id":"`+id+`","output":{"sky":"sunny"}}]}`)
				h.settle(rr.RolloutID)
				v := h.view(rr.RolloutID)
				if v.Gateway.Completions != 2 || v.Gateway.Failed != 0 || len(v.Gateway.Calls) != 2 {
					t.Fatalf("gateway %+v", v.Gateway)
				}
				c1, c2 := v.Gateway.Calls[0], v.Gateway.Calls[1]
				if !slices.Equal(c1.Emitted, []string{id}) || len(c1.Consumed) != 0 || !slices.Equal(c2.Consumed, []string{id}) || len(c2.Emitted) != 0 {
					t.Errorf("emitted/consumed: %v %v, %v %v", c1.Emitted, c1.Consumed, c2.Emitted, c2.Consumed)
				}
				for _, c := range v.Gateway.Calls {
					if c.Protocol != "messages" || !c.Counted || deref(c.Requested) != "claude-agent-asked" {
						t.Errorf("call %+v", c)
					}
					var u, want any
					_ = json.Unmarshal(c.Usage, &u)
					_ = json.Unmarshal([]byte(anthropicUsage), &want)
					if fmt.Sprint(u) != fmt.Sprint(want) {
						t.Errorf("usage %s, want %s", c.Usage, anthropicUsage)
					}
					// 20·3 + 6·0.3 + 4·3 (cache writes at the input price) + 9·15 per million.
					if want := (60 + 1.8 + 12 + 135) / 1e6; c.CostUSD == nil || *c.CostUSD-want > 1e-12 || want-*c.CostUSD > 1e-12 {
						t.Errorf("cost %v, want %v", deref(c.CostUSD), want)
					}
				}
				if len(v.ToolCallJoins) != 1 || deref(v.ToolCallJoins[0].CompletionSeq) != 1 || v.ToolCallJoins[0].Ambiguous {
					t.Errorf("joins %+v", v.ToolCallJoins)
				}
				if deref(v.Reconciliation) != tc.want {
					t.Errorf("reconciliation %v (%v), want %s", deref(v.Reconciliation), deref(v.ReconciliationReason), tc.want)
				}

				// The stored requests rebuild the forwarded bodies byte for
				// byte; the stream is stored as one message.
				calls := h.calls(rr.RolloutID)
				ant.mu.Lock()
				sent := slices.Clone(ant.bodies)
				ant.mu.Unlock()
				for i, c := range calls {
					if c.RequestBlob == nil || c.ResponseBlob == nil {
						t.Fatalf("bodies not stored: %+v", c)
					}
					if got := rebuildAny(t, h, *c.RequestBlob); got != string(sent[i]) {
						t.Errorf("call %d: rebuilt request differs:\n got %s\nwant %s", i+1, got, sent[i])
					}
				}
				var m anthropic.Message
				if err := json.Unmarshal(h.blob(*calls[1].ResponseBlob), &m); err != nil || len(m.Content) != 1 ||
					m.Content[0].Text != "It is sunny in Paris." || m.Usage.OutputTokens != 9 || m.Usage.InputTokens != 20 {
					t.Errorf("stored stream %s (%v)", h.blob(*calls[1].ResponseBlob), err)
				}
				// The admin API reads them back: the agent's request (its
				// model and max_tokens, before the swap), what was forwarded.
				r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/calls", h.admin, "", http.StatusOK)
				var read struct {
					Items []struct {
						Protocol  string          `json:"protocol"`
						Request   map[string]any  `json:"request"`
						Forwarded json.RawMessage `json:"forwarded"`
						Response  map[string]any  `json:"response"`
					} `json:"items"`
				}
				if err := json.Unmarshal(r.body, &read); err != nil || len(read.Items) != 2 {
					t.Fatalf("calls %s (%v)", r.body, err)
				}
				for i, it := range read.Items {
					if it.Protocol != "messages" || it.Request["model"] != "claude-agent-asked" || it.Request["max_tokens"] != 64.0 ||
						string(it.Forwarded) != string(sent[i]) || it.Response["type"] != "message" {
						t.Errorf("read back call %d: %+v", i+1, it)
					}
				}
				var fp gateway.CallFingerprint
				if err := json.Unmarshal(calls[0].Fingerprint, &fp); err != nil || string(fp.Sampling) != `{"max_tokens":512,"temperature":1}` ||
					deref(fp.Tokenizer) != "claude-tok" || fp.ToolsSHA256 == nil || len(fp.PromptSHA256) != 64 {
					t.Errorf("fingerprint %s", calls[0].Fingerprint)
				}
			})
		}
	})
}

// rebuildAny reassembles a stored request: head + [message blobs] + tail.
func rebuildAny(t *testing.T, h *harness, key string) string {
	t.Helper()
	var doc struct {
		Head     string   `json:"head"`
		Messages []string `json:"messages"`
		Tail     string   `json:"tail"`
	}
	if err := json.Unmarshal(h.blob(key), &doc); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, sha := range doc.Messages {
		msgs = append(msgs, string(h.blob("gateway/"+h.tenant.ID+"/messages/"+sha)))
	}
	return doc.Head + "[" + strings.Join(msgs, ",") + "]" + doc.Tail
}

// anthropicErr is an Anthropic-shaped error answer.
type anthropicErr struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code"`
		Pointer string `json:"pointer"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

func wantAnthropicError(t *testing.T, r response, status int, typ, code string) anthropicErr {
	t.Helper()
	var e anthropicErr
	if r.status != status || json.Unmarshal(r.body, &e) != nil || e.Type != "error" || e.Error.Type != typ || e.Error.Code != code ||
		e.Error.Message == "" || e.RequestID == "" || r.header.Get("request-id") != e.RequestID {
		t.Fatalf("got %d %s (request-id %q), want %d with Anthropic error %s/%s", r.status, r.body, r.header.Get("request-id"), status, typ, code)
	}
	return e
}

// sdkError is the SDK's error for a refused call.
func sdkError(t *testing.T, err error) *anthropic.Error {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an API error", err)
	}
	return ae
}

var oneMessage = anthropic.MessageNewParams{Model: "claude", MaxTokens: 8,
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}}

func TestMessages_AuthByXAPIKeyOrBearerAndAnthropicShaped401(t *testing.T) {
	t.Parallel()
	h, _ := messagesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"pm"`)
	path := "/gw/" + gatewayToken(rr) + "/v1/messages"
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	// Bearer works as well as the SDK's x-api-key.
	if r := h.do(http.MethodPost, path, rr.APIKey, body); r.status != http.StatusOK {
		t.Fatalf("Bearer: %d %s", r.status, r.body)
	}
	if r := h.do(http.MethodPost, path, "", body, "x-api-key", rr.APIKey); r.status != http.StatusOK {
		t.Fatalf("x-api-key: %d %s", r.status, r.body)
	}
	wantAnthropicError(t, h.do(http.MethodPost, path, "", body, "x-api-key", "wrong"), http.StatusUnauthorized, "authentication_error", gateway.CodeInvalidAPIKey)
	wantAnthropicError(t, h.do(http.MethodPost, path, "", body), http.StatusUnauthorized, "authentication_error", gateway.CodeInvalidAPIKey)
	wantAnthropicError(t, h.do(http.MethodPost, "/gw/short/v1/messages", rr.APIKey, body), http.StatusUnauthorized, "authentication_error", gateway.CodeInvalidAPIKey)

	bad := rr
	bad.APIKey = "not-the-key"
	badCl := h.anthropicClient(bad)
	_, err := badCl.Messages.New(context.Background(), oneMessage)
	if ae := sdkError(t, err); ae.StatusCode != http.StatusUnauthorized || ae.Type() != "authentication_error" || ae.RequestID == "" {
		t.Errorf("SDK error %v: status %d type %q request id %q", ae, ae.StatusCode, ae.Type(), ae.RequestID)
	}
	// After submission the credential has expired.
	h.submit(rr, `{"final_text":"x"}`)
	wantAnthropicError(t, h.do(http.MethodPost, path, rr.APIKey, body), http.StatusUnauthorized, "authentication_error", gateway.CodeCredentialExpired)
}

func TestMessages_BudgetExhaustedIsAnAnthropicRateLimitErrorTheSDKDoesNotRetry(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"pm","limits":{"max_completions":1}`)
	cl := h.anthropicClient(rr, antoption.WithMaxRetries(2))
	if _, err := cl.Messages.New(context.Background(), oneMessage); err != nil {
		t.Fatal(err)
	}
	h.flush()
	_, err := cl.Messages.New(context.Background(), oneMessage)
	ae := sdkError(t, err)
	if ae.StatusCode != http.StatusTooManyRequests || ae.Type() != "rate_limit_error" || !strings.Contains(ae.RawJSON(), gateway.CodeBudgetExhausted) {
		t.Errorf("SDK error: status %d type %q body %s", ae.StatusCode, ae.Type(), ae.RawJSON())
	}
	if n := ant.count(); n != 1 {
		t.Errorf("the upstream got %d requests, want 1: the refusal is not retried", n)
	}
	h.flush()
	v := h.view(rr.RolloutID)
	if v.Gateway.Completions != 1 || v.Gateway.Failed != 1 || deref(v.Gateway.Calls[1].Reason) != gateway.ReasonBudgetExhausted {
		t.Errorf("gateway %+v", v.Gateway)
	}
}

func TestMessages_UnsupportedProtocolWhenThePolicysUpstreamSpeaksOnlyChat(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"p1"`) // p1 routes to "stub", which speaks chat only
	cl := h.anthropicClient(rr)
	_, err := cl.Messages.New(context.Background(), oneMessage)
	ae := sdkError(t, err)
	var e anthropicErr
	if ae.StatusCode != http.StatusBadRequest || ae.Type() != "invalid_request_error" || json.Unmarshal([]byte(ae.RawJSON()), &e) != nil ||
		e.Error.Code != "unsupported_protocol" || !strings.Contains(e.Error.Message, "chat") {
		t.Errorf("SDK error: status %d type %q body %s", ae.StatusCode, ae.Type(), ae.RawJSON())
	}
	if ant.count() != 0 || h.up.count() != 0 {
		t.Error("a call on an unsupported protocol reached an upstream")
	}
}

func TestMessages_NoPolicyIsAnthropicShaped(t *testing.T) {
	t.Parallel()
	h, _ := messagesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(``)
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/messages", rr.APIKey, []byte(`{"model":"m","max_tokens":8,"messages":[]}`))
	wantAnthropicError(t, r, http.StatusServiceUnavailable, "api_error", gateway.CodeNoPolicy)
}

func TestMessages_InvalidRequestNamesThePointerAndChangesNothing(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"pm"`)
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/messages", rr.APIKey,
		[]byte(`{"model":"m","max_tokens":8,"system":[{"type":"image"}],"messages":[]}`))
	if e := wantAnthropicError(t, r, http.StatusBadRequest, "invalid_request_error", gateway.CodeInvalidRequest); e.Error.Pointer != "/system/0" {
		t.Errorf("pointer %q", e.Error.Pointer)
	}
	if ant.count() != 0 {
		t.Error("an invalid request reached the upstream")
	}
}

func TestMessages_DefaultAnthropicVersionOnlyWhenTheAgentSentNone(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"pm"`)
	path := "/gw/" + gatewayToken(rr) + "/v1/messages"
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	h.mustJSON(http.MethodPost, path, rr.APIKey, string(body), http.StatusOK)
	h.mustJSON(http.MethodPost, path, rr.APIKey, string(body), http.StatusOK, "anthropic-version", "2024-01-01", "anthropic-beta", "tools-2099")
	ant.mu.Lock()
	defer ant.mu.Unlock()
	if v := ant.headers[0].Get("anthropic-version"); v != "2023-06-01" {
		t.Errorf("default anthropic-version %q", v)
	}
	if v, b := ant.headers[1].Get("anthropic-version"), ant.headers[1].Get("anthropic-beta"); v != "2024-01-01" || b != "tools-2099" {
		t.Errorf("the agent's anthropic-version %q and anthropic-beta %q did not pass", v, b)
	}
}

func TestMessages_StreamCutIsNotCounted(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, ant := messagesHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"pm"`)

		// The upstream ends without message_stop: the SDK is told, and
		// the call does not count.
		ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			streamMessage(w, "claude-served", true, false)
		})
		cl := h.anthropicClient(rr)
		stream := cl.Messages.NewStreaming(context.Background(), oneMessage)
		for stream.Next() {
		}
		if err := stream.Err(); err == nil {
			t.Error("a stream cut before message_stop ended without an error for the client")
		}

		// The client leaves mid-stream.
		gate := make(chan struct{})
		ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			startStream(w)
			anthropicEvent(w, `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":0}}}`)
			<-r.Context().Done() // the gateway cancels the upstream when its client leaves
			close(gate)
		})
		req, _ := http.NewRequest(http.MethodPost, h.ts.URL+"/gw/"+gatewayToken(rr)+"/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("x-api-key", rr.APIKey)
		resp, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		<-gate

		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 0 || v.Gateway.Failed != 2 || len(v.Gateway.Calls) != 2 {
			t.Fatalf("gateway %+v", v.Gateway)
		}
		for i, want := range []string{gateway.ReasonStreamIncomplete, gateway.ReasonClientDisconnected} {
			if c := v.Gateway.Calls[i]; c.Counted || deref(c.Reason) != want {
				t.Errorf("call %d: counted %v reason %v, want %s", i+1, c.Counted, deref(c.Reason), want)
			}
		}
	})
}

func TestMessages_PolicyEndpoint(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: "pm"}})
	h.rollout("") // agent-1 exists
	inference := h.key(gyre.RoleInference, "agent-1")
	cl := anthropic.NewClient(antoption.WithBaseURL(h.ts.URL+"/agents/agent-1"), antoption.WithAPIKey(inference),
		antoption.WithMaxRetries(0), antoption.WithHTTPClient(h.ts.Client()))
	msg, err := cl.Messages.New(context.Background(), oneMessage)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || ant.last(t)["model"] != "claude-served" {
		t.Errorf("answer %+v, upstream model %v", msg, ant.last(t)["model"])
	}
	bad := anthropic.NewClient(antoption.WithBaseURL(h.ts.URL+"/agents/agent-1"), antoption.WithAPIKey("nope"),
		antoption.WithMaxRetries(0), antoption.WithHTTPClient(h.ts.Client()))
	_, err = bad.Messages.New(context.Background(), oneMessage)
	if ae := sdkError(t, err); ae.StatusCode != http.StatusUnauthorized || ae.Type() != "authentication_error" {
		t.Errorf("SDK error: status %d type %q", ae.StatusCode, ae.Type())
	}
	h.flush()
	r := h.mustJSON(http.MethodGet, "/api/v1/calls?agent_id=agent-1", h.admin, "", http.StatusOK)
	var list struct {
		Items []struct {
			Protocol string `json:"protocol"`
			Counted  bool   `json:"counted"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Items) != 1 || list.Items[0].Protocol != "messages" || !list.Items[0].Counted {
		t.Errorf("production calls %s (%v)", r.body, err)
	}
}

func TestMessages_PolicyWithAnUnmappableOverrideIsRefusedForAMessagesUpstream(t *testing.T) {
	t.Parallel()
	h, _ := messagesHarness(t, sqliteEngine, harnessOpts{})
	r := h.do(http.MethodPost, "/api/v1/policies", h.admin, []byte(`{"name":"bad","upstream":"anthropic","model":"c","sampling_overrides":{"seed":1}}`))
	var e struct {
		Error struct {
			Code, Pointer string
		} `json:"error"`
	}
	if r.status != http.StatusUnprocessableEntity || json.Unmarshal(r.body, &e) != nil || e.Error.Pointer != "/sampling_overrides/seed" {
		t.Errorf("%d %s", r.status, r.body)
	}
	h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"ok","upstream":"anthropic","model":"c","sampling_overrides":{"stop":"END","top_k":5}}`, http.StatusCreated)
}

// TestMessages_StreamCountsWhenMessageStopWasDelivered: message_stop goes
// out last, once, and the stream counts, whether it is the rollout's
// first completion (made durable before message_stop) or a later one, and
// whether the server watches the last write (gyre serve) or not.
func TestMessages_StreamCountsWhenMessageStopWasDelivered(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plainServer=%v", plain), func(t *testing.T) {
			t.Parallel()
			h, _ := messagesHarness(t, sqliteEngine, harnessOpts{plainServer: plain})
			rr := h.rollout(`,"policy":"pm"`)
			for range 2 {
				r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/messages", "",
					[]byte(`{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`), "x-api-key", rr.APIKey)
				body := string(r.body)
				if r.status != http.StatusOK || strings.Count(body, "message_stop") != 2 || !strings.HasSuffix(body, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
					t.Fatalf("%d %q", r.status, body)
				}
			}
			h.flush()
			v := h.view(rr.RolloutID)
			if v.Gateway.Completions != 2 || v.Gateway.Failed != 0 {
				t.Errorf("gateway %+v", v.Gateway)
			}
			for _, c := range v.Gateway.Calls {
				if !slices.Equal(c.Emitted, []string{"toolu_weather_1"}) {
					t.Errorf("emitted %v", c.Emitted)
				}
			}
		})
	}
}

// TestMessages_StreamSpellingAnUpstreamKeyIsCut: a Messages stream whose
// text or tool-input deltas spell an upstream key across events is cut
// before the key's first 16 bytes reach the agent, ends with an error
// event, and is recorded uncounted.
func TestMessages_StreamSpellingAnUpstreamKeyIsCut(t *testing.T) {
	t.Parallel()
	for _, delta := range []string{"text_delta", "input_json_delta"} {
		t.Run(delta, func(t *testing.T) {
			t.Parallel()
			h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
			member, block := "text", `{"type":"text","text":""}`
			if delta == "input_json_delta" {
				member, block = "partial_json", `{"type":"tool_use","id":"toolu_1","name":"w","input":{}}`
			}
			ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
				startStream(w)
				anthropicEvent(w, `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":0}}}`)
				anthropicEvent(w, `{"type":"content_block_start","index":0,"content_block":`+block+`}`)
				for _, piece := range []string{"the key is anthropic-up", "stream-key-0123456789", " done"} {
					p, _ := json.Marshal(piece)
					anthropicEvent(w, `{"type":"content_block_delta","index":0,"delta":{"type":"`+delta+`","`+member+`":`+string(p)+`}}`)
				}
				anthropicEvent(w, `{"type":"content_block_stop","index":0}`)
				anthropicEvent(w, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`)
				anthropicEvent(w, `{"type":"message_stop"}`)
			})
			rr := h.rollout(`,"policy":"pm"`)
			r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/messages", rr.APIKey,
				[]byte(`{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`))
			if strings.Contains(string(r.body), "anthropic-upstream") || !strings.Contains(string(r.body), "event: error") ||
				strings.Contains(string(r.body), "message_stop") {
				t.Errorf("stream relayed:\n%s", r.body)
			}
			h.flush()
			v := h.view(rr.RolloutID)
			if len(v.Gateway.Calls) != 1 || v.Gateway.Calls[0].Counted || deref(v.Gateway.Calls[0].Reason) != gateway.ReasonUpstreamCredential {
				t.Errorf("gateway %+v", v.Gateway)
			}
		})
	}
}

// TestMessages_RevokedMidStreamIsCut: a Messages stream in flight when its
// rollout is cancelled ends with an error event the Anthropic SDK raises
// (authentication_error, code credential_expired), and is recorded
// uncounted, reason revoked.
func TestMessages_RevokedMidStreamIsCut(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
	ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		anthropicEvent(w, `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":0}}}`)
		<-r.Context().Done() // this upstream never finishes on its own
	})
	rr := h.rollout(`,"policy":"pm"`)
	cl := h.anthropicClient(rr)
	stream := cl.Messages.NewStreaming(context.Background(), oneMessage)
	if !stream.Next() {
		t.Fatalf("first event: %v", stream.Err())
	}
	h.mustJSON(http.MethodPost, "/api/v1/rollouts/"+rr.RolloutID+"/cancel", h.admin, "", http.StatusOK)
	for stream.Next() {
	}
	ae := sdkError(t, stream.Err())
	if ae.Type() != "authentication_error" || !strings.Contains(ae.RawJSON(), gateway.CodeCredentialExpired) {
		t.Errorf("SDK error type %q body %s", ae.Type(), ae.RawJSON())
	}
	waitCall(t, h, rr.RolloutID, func(v view) bool {
		return len(v.Gateway.Calls) == 1 && !v.Gateway.Calls[0].Counted && deref(v.Gateway.Calls[0].Reason) == gateway.ReasonRevoked &&
			v.Gateway.Calls[0].Protocol == "messages"
	})
}

// TestMessages_A2xxAnswerThatIsNotAMessageDoesNotCount: the answer is
// passed on as it came, and recorded uncounted.
func TestMessages_A2xxAnswerThatIsNotAMessageDoesNotCount(t *testing.T) {
	t.Parallel()
	h, ant := messagesHarness(t, sqliteEngine, harnessOpts{})
	ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	})
	rr := h.rollout(`,"policy":"pm"`)
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/messages", rr.APIKey, []byte(`{"model":"m","max_tokens":8,"messages":[]}`))
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "overloaded_error") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.flush()
	v := h.view(rr.RolloutID)
	if v.Gateway.Completions != 0 || len(v.Gateway.Calls) != 1 || deref(v.Gateway.Calls[0].Reason) != gateway.ReasonNotAMessage {
		t.Errorf("gateway %+v", v.Gateway)
	}
}
