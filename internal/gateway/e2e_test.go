package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/gateway"
)

func TestGateway_NonStreaming(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		resp, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-agent-asked",
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage([]openai.ChatCompletionContentPartTextParam{{Text: "You are terse."}}),
				openai.UserMessage("refund order 7"),
			},
			Temperature: openai.Float(0.2),
		}, option.WithJSONSet("metadata_unknown", map[string]any{"trace": "x-1", "nested": []any{1, "two"}}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; got != "hello" {
			t.Errorf("content = %q", got)
		}
		up := h.up.last(t)
		if up["model"] != "served-model" || up["temperature"] != 1.0 {
			t.Errorf("upstream got model %v temperature %v, want the policy's served-model and 1.0", up["model"], up["temperature"])
		}
		if fmt.Sprint(up["metadata_unknown"]) != fmt.Sprint(map[string]any{"trace": "x-1", "nested": []any{1.0, "two"}}) {
			t.Errorf("an unknown member did not pass untouched: %v", up["metadata_unknown"])
		}
		if _, ok := up["stream_options"]; ok {
			t.Errorf("a non-streaming request got stream_options: %v", up)
		}
		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 1 || v.Gateway.Failed != 0 || len(v.Gateway.Calls) != 1 {
			t.Fatalf("gateway = %+v", v.Gateway)
		}
		c := v.Gateway.Calls[0]
		if c.Seq != 1 || c.Status != 200 || !c.Counted || c.Reason != nil || c.Requested == nil || *c.Requested != "gpt-agent-asked" {
			t.Errorf("call = %+v", c)
		}
		if string(c.Usage) != upstreamUsage {
			t.Errorf("usage = %s", c.Usage)
		}
		// (11-3)·1 + 3·0.5 + 7·2 per million.
		if c.CostUSD == nil || *c.CostUSD != (8+1.5+14)/1e6 {
			t.Errorf("cost = %v", c.CostUSD)
		}
		// The stored request rebuilds the forwarded body byte for byte.
		calls := h.calls(rr.RolloutID)
		if calls[0].RequestBlob == nil || calls[0].ResponseBlob == nil {
			t.Fatalf("bodies not stored: %+v", calls[0])
		}
		h.up.mu.Lock()
		sent := h.up.bodies[0]
		h.up.mu.Unlock()
		if got := rebuild(t, h, *calls[0].RequestBlob); got != string(sent) {
			t.Errorf("rebuilt request differs from the forwarded one:\n got %s\nwant %s", got, sent)
		}
		var fp gateway.CallFingerprint
		if err := json.Unmarshal(calls[0].Fingerprint, &fp); err != nil || string(fp.Sampling) != `{"temperature":1}` ||
			fp.Tokenizer == nil || *fp.Tokenizer != "tok-1" || fp.ToolsSHA256 != nil || len(fp.PromptSHA256) != 64 {
			t.Errorf("fingerprint = %s", calls[0].Fingerprint)
		}
	})
}

// rebuild reassembles a stored request: head + [message blobs] + tail.
func rebuild(t *testing.T, h *harness, key string) string {
	t.Helper()
	var doc struct {
		Format   string   `json:"format"`
		Head     string   `json:"head"`
		Messages []string `json:"messages"`
		Tail     string   `json:"tail"`
		Agent    map[string]json.RawMessage
	}
	if err := json.Unmarshal(h.blob(key), &doc); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, sha := range doc.Messages {
		msgs = append(msgs, string(h.blob("gateway/"+h.tenant.ID+"/messages/"+sha)))
	}
	if doc.Format != "gyre.gateway-request/1" || string(doc.Agent["model"]) != `"gpt-agent-asked"` {
		t.Errorf("request document %+v", doc)
	}
	return doc.Head + "[" + strings.Join(msgs, ",") + "]" + doc.Tail
}

func TestGateway_Streaming(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			streamText(w, body, []string{"ref", "und ", "done"}, false)
		})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		for _, askUsage := range []bool{false, true} {
			p := params
			if askUsage {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			stream := cl.Chat.Completions.NewStreaming(context.Background(), p)
			var (
				text       strings.Builder
				usageSeen  bool
				emptyChunk int
			)
			for stream.Next() {
				ch := stream.Current()
				if len(ch.Choices) == 0 {
					emptyChunk++
				} else {
					text.WriteString(ch.Choices[0].Delta.Content)
				}
				if ch.Usage.TotalTokens > 0 {
					usageSeen = true
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if text.String() != "refund done" {
				t.Errorf("streamed text %q", text.String())
			}
			if usageSeen != askUsage || (emptyChunk > 0) != askUsage {
				t.Errorf("include_usage=%v: usage chunk seen %v (%d empty chunks)", askUsage, usageSeen, emptyChunk)
			}
			up := h.up.last(t)
			if so, _ := up["stream_options"].(map[string]any); so == nil || so["include_usage"] != true {
				t.Errorf("upstream stream_options = %v, want include_usage true", up["stream_options"])
			}
		}
		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 2 || len(v.Gateway.Calls) != 2 {
			t.Fatalf("gateway = %+v", v.Gateway)
		}
		for _, c := range v.Gateway.Calls {
			if !c.Counted || string(c.Usage) != upstreamUsage {
				t.Errorf("call %+v", c)
			}
		}
		// The stream is stored reassembled into one response object.
		calls := h.calls(rr.RolloutID)
		var resp struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(h.blob(*calls[0].ResponseBlob), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Object != "chat.completion" || len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "refund done" ||
			resp.Choices[0].FinishReason != "stop" || resp.Choices[0].Message.Role != "assistant" || string(resp.Usage) != upstreamUsage {
			t.Errorf("reassembled response %+v", resp)
		}
	})
}

// TestGateway_StreamWithoutDoneEndsCleanly: an upstream that closes the
// stream without [DONE] still ends it with [DONE] for the client.
func TestGateway_StreamWithoutDoneEndsCleanly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		streamText(w, body, []string{"a", "b"}, true)
	})
	rr := h.rollout(`,"policy":"p1"`)
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
		[]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`), "Accept", "application/json")
	if r.status != 200 || !strings.HasSuffix(string(r.body), "data: [DONE]\n\n") || strings.Count(string(r.body), "[DONE]") != 1 {
		t.Fatalf("status %d body %q", r.status, r.body)
	}
	if strings.Contains(string(r.body), `"choices":[]`) {
		t.Errorf("the usage chunk reached a client that did not ask for it: %s", r.body)
	}
	h.flush()
	if v := h.view(rr.RolloutID); v.Gateway.Completions != 1 {
		t.Errorf("gateway = %+v", v.Gateway)
	}
}

func TestGateway_ToolCallsAcrossTurns(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		turn := 0
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			turn++
			switch turn {
			case 1: // streamed, arguments in pieces
				startStream(w)
				sse(w, chunkJSON(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}`, ""))
				for _, p := range []string{`{"or`, `der":`, ` 7}`} {
					a, _ := json.Marshal(p)
					sse(w, chunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":`+string(a)+`}}]}`, ""))
				}
				sse(w, chunkJSON(`{}`, "tool_calls"))
				sse(w, usageChunk())
				sse(w, "[DONE]")
			case 2: // streamed, arguments in one chunk
				startStream(w)
				sse(w, chunkJSON(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"issue_refund","arguments":"{\"order\": 7}"}}]}`, "tool_calls"))
				sse(w, "[DONE]")
			default:
				answerText(w, body, "refund issued")
			}
		})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "lookup",
			Strict:     openai.Bool(true),
			Parameters: openai.FunctionParameters{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": map[string]any{"order": map[string]any{"type": "integer"}}},
		})}
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refund order 7")}
		for i := range 3 {
			params := openai.ChatCompletionNewParams{Model: "m", Messages: msgs, Tools: tools}
			var msg openai.ChatCompletionMessage
			if i < 2 {
				stream := cl.Chat.Completions.NewStreaming(context.Background(), params)
				acc := openai.ChatCompletionAccumulator{}
				for stream.Next() {
					acc.AddChunk(stream.Current())
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				msg = acc.Choices[0].Message
				want := []string{`{"order": 7}`, `{"order": 7}`}[i]
				if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Arguments != want {
					t.Fatalf("turn %d: tool calls %+v", i+1, msg.ToolCalls)
				}
			} else {
				resp, err := cl.Chat.Completions.New(context.Background(), params)
				if err != nil {
					t.Fatal(err)
				}
				msg = resp.Choices[0].Message
			}
			msgs = append(msgs, msg.ToParam())
			for _, tc := range msg.ToolCalls {
				msgs = append(msgs, openai.ToolMessage(`{"ok":true}`, tc.ID))
			}
		}
		// The tools went upstream untouched: $schema and strict included.
		up := h.up.last(t)
		fn := up["tools"].([]any)[0].(map[string]any)["function"].(map[string]any)
		if fn["strict"] != true || fn["parameters"].(map[string]any)["$schema"] == nil {
			t.Errorf("tools reached the upstream changed: %v", up["tools"])
		}
		h.submit(rr, `{"final_text":"refund issued","llm_call_count":3,"agent_fingerprint":{"scaffold":"x"},
			"tool_calls":[{"name":"lookup","outcome":"ok","status_code":200,"tool_call_id":"call_1"},
			{"name":"issue_refund","outcome":"ok","status_code":200,"tool_call_id":"call_2"},
			{"name":"ghost","outcome":"ok","status_code":200,"tool_call_id":"call_x"},
			{"name":"no_id","outcome":"ok","status_code":200}]}`)
		h.settle(rr.RolloutID)
		v := h.view(rr.RolloutID)
		if v.Reconciliation == nil || *v.Reconciliation != "on_policy" {
			t.Fatalf("reconciliation = %v (%v)", deref(v.Reconciliation), deref(v.ReconciliationReason))
		}
		seqs := map[string]*int{}
		for _, j := range v.ToolCallJoins {
			if j.ToolCallID != nil {
				seqs[*j.ToolCallID] = j.CompletionSeq
			}
			if j.Ambiguous {
				t.Errorf("join %+v is ambiguous", j)
			}
		}
		if len(v.ToolCallJoins) != 4 || seqs["call_1"] == nil || *seqs["call_1"] != 1 || seqs["call_2"] == nil || *seqs["call_2"] != 2 ||
			seqs["call_x"] != nil || v.ToolCallJoins[3].CompletionSeq != nil {
			t.Errorf("tool_call_joins = %+v", v.ToolCallJoins)
		}
		calls := v.Gateway.Calls
		if len(calls) != 3 || fmt.Sprint(calls[0].Emitted) != "[call_1]" || fmt.Sprint(calls[1].Consumed) != "[call_1]" ||
			fmt.Sprint(calls[2].Consumed) != "[call_1 call_2]" {
			t.Errorf("calls = %+v", calls)
		}
		var fp struct {
			Prompts  []string          `json:"prompt_sha256"`
			Tools    []string          `json:"tools_sha256"`
			Sampling []json.RawMessage `json:"sampling"`
			Tok      string            `json:"tokenizer"`
		}
		if err := json.Unmarshal(v.ServerFingerprint, &fp); err != nil || len(fp.Prompts) != 3 || len(fp.Tools) != 1 ||
			len(fp.Sampling) != 1 || fp.Tok != "tok-1" || fp.Prompts[0] == fp.Prompts[1] {
			t.Errorf("server_fingerprint = %s", v.ServerFingerprint)
		}
		if string(v.AgentFingerprint) != `{"scaffold":"x"}` {
			t.Errorf("agent_fingerprint = %s, kept apart from the server's", v.AgentFingerprint)
		}
	})
}

// TestGateway_StreamsThatDoNotCount: a stream whose upstream never
// finished every choice, or sent an error event, still ends cleanly for
// the client with one [DONE], but does not count (SPEC §6.3), and one
// that finished without [DONE] does. Each is tried as the rollout's first
// completion (parsed before [DONE], which must follow a durable count) and
// as a later one ([DONE] first, parsed after).
func TestGateway_StreamsThatDoNotCount(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		events  []string
		counted bool
		reason  string
	}{
		{"no finish_reason", []string{chunkJSON(`{"role":"assistant","content":"half"}`, ""), "[DONE]"}, false, gateway.ReasonStreamIncomplete},
		{"error event", []string{chunkJSON(`{"role":"assistant","content":"a"}`, ""),
			`{"error":{"message":"overloaded","type":"server_error"}}`, chunkJSON(`{}`, "stop"), "[DONE]"}, false, gateway.ReasonUpstreamError},
		{"finished without [DONE]", []string{chunkJSON(`{"role":"assistant","content":"a"}`, ""), chunkJSON(`{}`, "stop")}, true, ""},
		{"finished", []string{chunkJSON(`{"role":"assistant","content":"a"}`, ""), chunkJSON(`{}`, "stop"), "[DONE]"}, true, ""},
	}
	for _, tc := range cases {
		for _, later := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/later=%v", tc.name, later), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, sqliteEngine, harnessOpts{})
				rr := h.rollout(`,"policy":"p1"`)
				path := "/gw/" + gatewayToken(rr) + "/v1/chat/completions"
				body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
				if later {
					h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) { streamText(w, body, []string{"ok"}, false) })
					if r := h.do(http.MethodPost, path, rr.APIKey, body); r.status != 200 {
						t.Fatalf("first completion: %d %s", r.status, r.body)
					}
				}
				h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
					startStream(w)
					for _, e := range tc.events {
						sse(w, e)
					}
				})
				r := h.do(http.MethodPost, path, rr.APIKey, body)
				if r.status != 200 || !strings.HasSuffix(string(r.body), "data: [DONE]\n\n") || strings.Count(string(r.body), "[DONE]") != 1 {
					t.Fatalf("status %d body %q", r.status, r.body)
				}
				h.flush()
				calls := h.calls(rr.RolloutID)
				c := calls[len(calls)-1]
				var wantReason any
				if tc.reason != "" {
					wantReason = tc.reason
				}
				if c.Counted != tc.counted || deref(c.Reason) != wantReason {
					t.Errorf("counted %v reason %v, want %v %q", c.Counted, deref(c.Reason), tc.counted, tc.reason)
				}
				if want := map[bool]int{false: 0, true: 1}[later]; len(calls) != want+1 {
					t.Errorf("%d calls recorded, want %d", len(calls), want+1)
				}
			})
		}
	}
}

// TestGateway_CallsAreNumberedInOrderOfArrival: a rollout's calls take
// their sequence numbers in the order the requests arrived, not the order
// they finished or were written, so a tool_call_id joins to the completion
// that came before the request consuming it (SPEC §6.2). Here the first
// request is a stream the upstream holds open while a second request
// arrives, finishes and is written.
func TestGateway_CallsAreNumberedInOrderOfArrival(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		started, release := make(chan struct{}), make(chan struct{})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			switch {
			case strings.Contains(string(body), "slow"):
				startStream(w)
				sse(w, chunkJSON(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"slow_tool","arguments":"{}"}}]}`, ""))
				close(started)
				<-release
				sse(w, chunkJSON(`{}`, "tool_calls"))
				sse(w, "[DONE]")
			case strings.Contains(string(body), "fast"):
				answerToolCall(w, "call_b", "fast_tool", "{}")
			default:
				answerText(w, body, "done")
			}
		})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		slow := make(chan error, 1)
		go func() {
			stream := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("slow")}})
			for stream.Next() {
			}
			slow <- stream.Err()
		}()
		select {
		case <-started:
		case err := <-slow:
			t.Fatalf("the slow stream ended before the upstream held it: %v", err)
		}
		if _, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("fast")}}); err != nil {
			close(release)
			t.Fatal(err)
		}
		// The second call's record becomes durable while the first is
		// still streaming.
		for h.gw.Recorder().Pending() > 0 {
			if err := h.gw.Recorder().Flush(context.Background()); err != nil {
				close(release)
				t.Fatal(err)
			}
		}
		if n := len(h.calls(rr.RolloutID)); n != 1 {
			close(release)
			t.Fatalf("%d calls durable while the stream is held, want the fast one", n)
		}
		close(release)
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
		_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.UserMessage("finish"),
				openai.ToolMessage(`{"ok":true}`, "call_a"),
				openai.ToolMessage(`{"ok":true}`, "call_b"),
			}})
		if err != nil {
			t.Fatal(err)
		}
		h.submit(rr, `{"final_text":"done","llm_call_count":3,
			"tool_calls":[{"name":"slow_tool","outcome":"ok","status_code":200,"tool_call_id":"call_a"},
			{"name":"fast_tool","outcome":"ok","status_code":200,"tool_call_id":"call_b"}]}`)
		h.settle(rr.RolloutID)
		v := h.view(rr.RolloutID)
		calls := v.Gateway.Calls
		if len(calls) != 3 || fmt.Sprint(calls[0].Emitted) != "[call_a]" || fmt.Sprint(calls[1].Emitted) != "[call_b]" ||
			fmt.Sprint(calls[2].Consumed) != "[call_a call_b]" {
			t.Fatalf("calls = %+v", calls)
		}
		for i, c := range calls {
			if c.Seq != i+1 {
				t.Errorf("call %d has seq %d", i, c.Seq)
			}
		}
		if len(v.ToolCallJoins) != 2 || *v.ToolCallJoins[0].CompletionSeq != 1 || *v.ToolCallJoins[1].CompletionSeq != 2 {
			t.Errorf("tool_call_joins = %+v", v.ToolCallJoins)
		}
	})
}

func TestGateway_UpstreamErrorsPassThroughNotCounted(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		for _, tc := range []struct {
			status int
			retry  string
		}{{500, ""}, {429, "7"}} {
			h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
				if tc.retry != "" {
					w.Header().Set("Retry-After", tc.retry)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, `{"error":{"message":"upstream says %d","type":"server_error","code":"boom"}}`, tc.status)
			})
			var res *http.Response
			_, err := cl.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&res))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != "boom" {
				t.Fatalf("status %d: err = %v", tc.status, err)
			}
			if got := apiErr.Response.Header.Get("Retry-After"); got != tc.retry {
				t.Errorf("Retry-After = %q, want %q", got, tc.retry)
			}
		}
		if n := h.up.count(); n != 2 {
			t.Errorf("upstream saw %d requests: the gateway must never retry", n)
		}
		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 0 || v.Gateway.Failed != 2 {
			t.Fatalf("gateway = %+v", v.Gateway)
		}
		for i, c := range v.Gateway.Calls {
			if c.Counted || c.Reason == nil || *c.Reason != gateway.ReasonUpstreamError || c.Status != []int{500, 429}[i] {
				t.Errorf("call %+v", c)
			}
		}
	})
}

func TestGateway_ClientCancelMidStreamCancelsUpstream(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		cancelled := make(chan struct{})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			startStream(w)
			sse(w, chunkJSON(`{"role":"assistant","content":"first"}`, ""))
			<-r.Context().Done() // until the gateway cancels the upstream request
			close(cancelled)
		})
		rr := h.rollout(`,"policy":"p1"`)
		ctx, cancel := context.WithCancel(context.Background())
		stream := h.client(rr).Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if !stream.Next() || stream.Current().Choices[0].Delta.Content != "first" {
			t.Fatalf("first event: %v", stream.Err())
		}
		cancel()
		<-cancelled
		for stream.Next() {
		}
		stream.Close()
		waitCall(t, h, rr.RolloutID, func(v view) bool {
			return len(v.Gateway.Calls) == 1 && !v.Gateway.Calls[0].Counted && v.Gateway.Calls[0].Reason != nil &&
				*v.Gateway.Calls[0].Reason == gateway.ReasonClientDisconnected
		})
	})
}

// waitCall flushes until the rollout's view satisfies ok. The gateway
// records a call when its handler ends, which may trail the client.
func waitCall(t *testing.T, h *harness, id string, ok func(view) bool) view {
	t.Helper()
	var v view
	for range 200 {
		h.flush()
		if v = h.view(id); ok(v) {
			return v
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("view never satisfied the condition: %+v", v.Gateway)
	return v
}

func TestGateway_FirstEventBeforeUpstreamFinishes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	release := make(chan struct{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		sse(w, chunkJSON(`{"role":"assistant","content":"early"}`, ""))
		<-release // the upstream is not finished until the client saw the first event
		sse(w, chunkJSON(`{"content":" late"}`, "stop"))
		sse(w, "[DONE]")
	})
	rr := h.rollout(`,"policy":"p1"`)
	stream := h.client(rr).Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if !stream.Next() || stream.Current().Choices[0].Delta.Content != "early" {
		close(release)
		t.Fatalf("the first event did not arrive while the upstream was still streaming: %v", stream.Err())
	}
	close(release)
	var rest strings.Builder
	for stream.Next() {
		if len(stream.Current().Choices) > 0 {
			rest.WriteString(stream.Current().Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || rest.String() != " late" {
		t.Fatalf("rest %q, err %v", rest.String(), err)
	}
}

// TestGateway_BurstOfEventsNeverWaitsForTheNext: events that arrive
// together may leave in one flush, but every event that has arrived
// reaches the client while the upstream still holds back the next one.
func TestGateway_BurstOfEventsNeverWaitsForTheNext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	release := make(chan struct{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		// Three events in one write, then a partial fourth.
		burst := ""
		for _, c := range []string{`{"role":"assistant","content":"a"}`, `{"content":"b"}`, `{"content":"c"}`} {
			burst += "data: " + chunkJSON(c, "") + "\n\n"
		}
		_, _ = io.WriteString(w, burst+"data: ")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, chunkJSON(`{"content":"d"}`, "stop")+"\n\n")
		sse(w, "[DONE]")
	})
	rr := h.rollout(`,"policy":"p1"`)
	// A missing flush would hold the burst until the upstream goes on,
	// which it never does by itself: bound the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := h.client(rr).Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var got strings.Builder
	for range 3 {
		if !stream.Next() {
			close(release)
			t.Fatalf("after %q the burst's events did not all arrive while the upstream held the next: %v", got.String(), stream.Err())
		}
		got.WriteString(stream.Current().Choices[0].Delta.Content)
	}
	close(release)
	for stream.Next() {
		if len(stream.Current().Choices) > 0 {
			got.WriteString(stream.Current().Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || got.String() != "abcd" {
		t.Fatalf("got %q, err %v", got.String(), err)
	}
}

func TestGateway_Auth(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"p1"`)
		tok := gatewayToken(rr)
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)
		chat := func(token, key string, headers ...string) response {
			return h.do(http.MethodPost, "/gw/"+token+"/v1/chat/completions", key, body, headers...)
		}
		wantOpenAIError(t, chat(tok, "wrong-key"), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
		wantOpenAIError(t, chat(tok, ""), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
		wantOpenAIError(t, chat("short", rr.APIKey), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
		wantOpenAIError(t, chat(strings.Repeat("A", 43), rr.APIKey), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
		wantOpenAIError(t, chat(strings.Repeat("!", 43), rr.APIKey), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
		// x-api-key works as well as a bearer token.
		if r := chat(tok, "", "X-Api-Key", rr.APIKey); r.status != http.StatusOK {
			t.Fatalf("x-api-key: %d %s", r.status, r.body)
		}
		// Any other path under the token: 404 unsupported_endpoint.
		wantOpenAIError(t, h.do(http.MethodPost, "/gw/"+tok+"/v1/embeddings", rr.APIKey, body), http.StatusNotFound, gateway.CodeUnsupportedEndpoint)
		wantOpenAIError(t, h.do(http.MethodGet, "/gw/"+tok+"/v1/chat/completions", rr.APIKey, nil), http.StatusNotFound, gateway.CodeUnsupportedEndpoint)
		// /v1/models: the policy's model and what the agent asked for.
		m := h.mustJSON(http.MethodGet, "/gw/"+tok+"/v1/models", rr.APIKey, "", http.StatusOK)
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(m.body, &models); err != nil || len(models.Data) != 2 || models.Data[0].ID != "served-model" || models.Data[1].ID != "m" {
			t.Errorf("models = %s", m.body)
		}
		// Rejections at authentication are counted in metrics only.
		h.flush()
		if v := h.view(rr.RolloutID); len(v.Gateway.Calls) != 1 {
			t.Errorf("auth rejections were recorded: %+v", v.Gateway)
		}
		metrics := string(h.mustJSON(http.MethodGet, "/metrics", h.admin, "", http.StatusOK).body)
		if !strings.Contains(metrics, `gyre_gateway_auth_rejected_total{code="invalid_api_key"} 5`) {
			t.Errorf("auth rejections not in metrics")
		}
		// Past the deadline the credential has expired.
		h.clk.Advance(11 * time.Minute)
		wantOpenAIError(t, chat(tok, rr.APIKey), http.StatusUnauthorized, gateway.CodeCredentialExpired)
		wantOpenAIError(t, chat(tok, "wrong-key"), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
	})
}

func TestGateway_AfterSubmissionCredentialExpired(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		if _, err := cl.Chat.Completions.New(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		h.submit(rr, `{"final_text":"refund","llm_call_count":1,"tool_calls":[]}`)
		_, err := cl.Chat.Completions.New(context.Background(), params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != gateway.CodeCredentialExpired {
			t.Fatalf("after submission: %v", err)
		}
	})
}

func TestGateway_RevokedMidStreamIsCut(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		cancelled := make(chan struct{})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			startStream(w)
			sse(w, chunkJSON(`{"role":"assistant","content":"first"}`, ""))
			<-r.Context().Done() // this upstream never finishes on its own
			close(cancelled)
		})
		rr := h.rollout(`,"policy":"p1"`)
		stream := h.client(rr).Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if !stream.Next() {
			t.Fatalf("first event: %v", stream.Err())
		}
		// Revoke: the admin cancels the rollout; the stream was admitted
		// before and must be cut by the revocation check.
		revoked := time.Now()
		h.mustJSON(http.MethodPost, "/api/v1/rollouts/"+rr.RolloutID+"/cancel", h.admin, "", http.StatusOK)
		for stream.Next() {
		}
		elapsed := time.Since(revoked)
		err := stream.Err()
		if err == nil || !strings.Contains(err.Error(), gateway.CodeCredentialExpired) {
			t.Fatalf("a revoked stream must end with a credential_expired error, got %v", err)
		}
		<-cancelled
		t.Logf("stream cut %v after revocation (revocation check every %v)", elapsed, gateway.DefaultRevokeCheckEvery)
		waitCall(t, h, rr.RolloutID, func(v view) bool {
			return len(v.Gateway.Calls) == 1 && !v.Gateway.Calls[0].Counted && *v.Gateway.Calls[0].Reason == gateway.ReasonRevoked
		})
	})
}

func TestRelease_AlreadyStartedAfterCountedCompletion(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{gw: gateway.Config{NoFlush: true}})
		rr := h.rollout(`,"policy":"p1"`)
		if _, err := h.client(rr).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}); err != nil {
			t.Fatal(err)
		}
		// No flush runs (NoFlush): the first counted
		// completion was made durable before it was answered.
		lt, _ := rr.LeaseToken.Get()
		r := h.do(http.MethodPost, "/rollouts/"+rr.RolloutID+"/release", h.agent, nil, "Lease-Token", lt)
		if r.status != http.StatusConflict || !strings.Contains(string(r.body), `"already_started"`) {
			t.Fatalf("release after a counted completion: %d %s", r.status, r.body)
		}
	})
}

func TestGateway_BudgetExhausted(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"p1","limits":{"max_completions":1}`)
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)
		path := "/gw/" + gatewayToken(rr) + "/v1/chat/completions"
		if r := h.do(http.MethodPost, path, rr.APIKey, body); r.status != http.StatusOK {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		r := h.do(http.MethodPost, path, rr.APIKey, body)
		wantOpenAIError(t, r, http.StatusTooManyRequests, gateway.CodeBudgetExhausted)
		if r.header.Get("Retry-After") != "" {
			t.Errorf("a budget refusal must not carry Retry-After")
		}
		if h.up.count() != 1 {
			t.Errorf("the refused request reached the upstream")
		}
		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 1 || v.Gateway.Failed != 1 || *v.Gateway.Calls[1].Reason != gateway.ReasonBudgetExhausted {
			t.Errorf("gateway = %+v", v.Gateway)
		}
	})
}

func TestGateway_NoPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{noPolicy: true})
	rr := h.rollout("")
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
		[]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	wantOpenAIError(t, r, http.StatusServiceUnavailable, gateway.CodeNoPolicy)
}

func TestGateway_DefaultPolicyAndClientShapes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: "p1"}})
	rr := h.rollout("") // the batch names no policy: the default applies
	// What real clients send: system content as parts, assistant tool-call
	// turns whose content is missing, null or "", unknown members
	// anywhere, name on messages, parsed/refusal on assistant turns.
	body := `{"model":"gpt-4o","messages":[
		{"role":"system","content":[{"type":"text","text":"be brief"}]},
		{"role":"user","content":"hi","name":"alice"},
		{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"},"parsed_arguments":{}}]},
		{"role":"tool","tool_call_id":"c1","content":"ok"},
		{"role":"assistant","content":null,"refusal":null,"parsed":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c2","content":"ok"},
		{"role":"assistant","content":"","tool_calls":[{"id":"c3","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c3","content":"ok"}],
		"x_vendor":{"deep":[1,{"k":true}]},"stream_options":{"include_usage":true,"other":1},"stream":false}`
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, []byte(body))
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	up := h.up.last(t)
	var sent map[string]any
	_ = json.Unmarshal([]byte(body), &sent)
	for _, k := range []string{"messages", "x_vendor", "stream_options", "stream"} {
		if fmt.Sprint(up[k]) != fmt.Sprint(sent[k]) {
			t.Errorf("%s changed on the way upstream:\n got %v\nwant %v", k, up[k], sent[k])
		}
	}
	h.flush()
	if v := h.view(rr.RolloutID); len(v.Gateway.Calls) != 1 || fmt.Sprint(v.Gateway.Calls[0].Consumed) != "[c1 c2 c3]" {
		t.Errorf("calls = %+v", v.Gateway.Calls)
	}
}

// TestGateway_StreamCountsWhenTheClientClosesAfterDone: clients close a
// stream as soon as they read [DONE] (the OpenAI SDKs do); the completion
// was delivered and counts.
func TestGateway_StreamCountsWhenTheClientClosesAfterDone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) { streamText(w, body, []string{"a"}, false) })
	rr := h.rollout(`,"policy":"p1"`)
	const n = 20
	for range n {
		resp, err := h.postStream(rr)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		var got []byte
		for !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
			n, err := resp.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil && !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
				t.Fatalf("read: %v after %q", err, got)
			}
		}
		resp.Body.Close() // at once, before the end of the response
	}
	waitCall(t, h, rr.RolloutID, func(v view) bool { return len(v.Gateway.Calls) == n })
	if v := h.view(rr.RolloutID); v.Gateway.Completions != n {
		t.Errorf("%d of %d completions counted: %+v", v.Gateway.Completions, n, v.Gateway.Calls)
	}
}

// TestGateway_StreamOutlastsTheServerReadTimeout: a stream longer than
// the server's read timeout is not cut by it.
func TestGateway_StreamOutlastsTheServerReadTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		for range 6 {
			sse(w, chunkJSON(`{"content":"x"}`, ""))
			time.Sleep(100 * time.Millisecond)
		}
		sse(w, chunkJSON(`{}`, "stop"))
		sse(w, "[DONE]")
	})
	srv, err := api.New(api.Config{ReadTimeout: 200 * time.Millisecond}, api.Deps{Store: h.st, Rollouts: h.svc, Gateway: h.gw, Blobs: h.blobs})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rr := h.rollout(`,"policy":"p1"`)
	rr.LLMURL = "http://" + ln.Addr().String() + "/gw/" + gatewayToken(rr) + "/v1"
	stream := h.client(rr).Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	n := 0
	for stream.Next() {
		n++
	}
	if err := stream.Err(); err != nil || n != 7 {
		t.Fatalf("%d events, %v", n, err)
	}
	v := waitCall(t, h, rr.RolloutID, func(v view) bool { return len(v.Gateway.Calls) == 1 })
	if !v.Gateway.Calls[0].Counted {
		t.Errorf("call %+v", v.Gateway.Calls[0])
	}
}
