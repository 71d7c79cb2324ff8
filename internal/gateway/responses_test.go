package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/jcs"
)

// lookupTool is the function tool the Responses tests offer.
func lookupTool() responses.ToolUnionParam {
	return responses.ToolParamOfFunction("lookup_order", map[string]any{"type": "object",
		"properties": map[string]any{"order": map[string]any{"type": "integer"}}}, false)
}

// TestResponses_NonStreamingIsSwappedCountedPricedAndRebuilt: a Responses
// call through a rollout's gateway with openai-go's Responses client goes
// upstream with the policy's model and its overrides under their
// Responses names, counts, is priced from input/output/cached tokens, and
// its stored request rebuilds the forwarded body byte for byte.
func TestResponses_NonStreamingIsSwappedCountedPricedAndRebuilt(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, _ := newResponsesHarness(t, eng, harnessOpts{})
		rr := h.rollout(`,"policy":"pr"`)
		resp, err := h.client(rr).Responses.New(context.Background(), responses.ResponseNewParams{
			Model:        "gpt-agent-asked",
			Instructions: openai.String("You are terse."),
			Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("refund order 7")},
			Temperature:  openai.Float(0.2),
		}, option.WithJSONSet("metadata_unknown", map[string]any{"trace": "x-1"}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OutputText() != "hello" || resp.ID != "resp_1" {
			t.Errorf("answer %q id %q", resp.OutputText(), resp.ID)
		}
		up := h.up.last(t)
		if up["model"] != "served-model" || up["temperature"] != 1.0 || up["max_output_tokens"] != 64.0 || up["input"] != "refund order 7" {
			t.Errorf("upstream got %v", up)
		}
		if _, ok := up["max_tokens"]; ok {
			t.Errorf("the chat name max_tokens went upstream: %v", up)
		}
		if _, ok := up["metadata_unknown"]; !ok {
			t.Errorf("an unknown member did not pass: %v", up)
		}
		h.flush()
		v := h.view(rr.RolloutID)
		if v.Gateway.Completions != 1 || len(v.Gateway.Calls) != 1 {
			t.Fatalf("gateway = %+v", v.Gateway)
		}
		wantCall(t, v, 1, "responses", true, "")
		c := v.Gateway.Calls[0]
		if string(c.Usage) != responsesUsage || c.Requested == nil || *c.Requested != "gpt-agent-asked" {
			t.Errorf("call = %+v", c)
		}
		// (11-3)·1 + 3·0.5 + 7·2 per million.
		if c.CostUSD == nil || *c.CostUSD != (8+1.5+14)/1e6 {
			t.Errorf("cost = %v", deref(c.CostUSD))
		}
		calls := h.calls(rr.RolloutID)
		if calls[0].ResponseID == nil || *calls[0].ResponseID != "resp_1" || calls[0].Protocol != "responses" {
			t.Errorf("record %+v", calls[0])
		}
		h.up.mu.Lock()
		sent := string(h.up.bodies[0])
		h.up.mu.Unlock()
		r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/calls", h.admin, "", http.StatusOK)
		if !strings.Contains(string(r.body), `"forwarded":`+sent+`,`) {
			t.Errorf("the forwarded body does not rebuild byte for byte:\n%s\nsent %s", r.body, sent)
		}
		var items struct {
			Items []struct {
				Protocol string         `json:"protocol"`
				Request  map[string]any `json:"request"`
			} `json:"items"`
		}
		if err := json.Unmarshal(r.body, &items); err != nil || len(items.Items) != 1 {
			t.Fatalf("calls %s: %v", r.body, err)
		}
		if it := items.Items[0]; it.Protocol != "responses" || it.Request["model"] != "gpt-agent-asked" || it.Request["temperature"] != 0.2 ||
			it.Request["input"] != "refund order 7" {
			t.Errorf("the request as the agent sent it: %+v", it)
		}
		// The trajectory is built from the call converted to chat: the
		// instructions, the string input as the user's message, the answer.
		traj := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/trajectory", h.admin, "", http.StatusOK)
		for _, want := range []string{`"source":"system","message":"You are terse."`, `"source":"user","message":"refund order 7"`, `"source":"agent"`} {
			if !strings.Contains(string(traj.body), want) {
				t.Errorf("trajectory lacks %s: %s", want, traj.body)
			}
		}
		// The fingerprint renders the string input as the user message it
		// stands for, with the instructions.
		var fp gateway.CallFingerprint
		if err := json.Unmarshal(calls[0].Fingerprint, &fp); err != nil {
			t.Fatal(err)
		}
		want := promptHash(t, []string{`{"role":"user","content":"refund order 7"}`}, "You are terse.")
		if fp.PromptSHA256 != want || string(fp.Sampling) != `{"max_output_tokens":64,"temperature":1}` {
			t.Errorf("fingerprint %s, want prompt %s", calls[0].Fingerprint, want)
		}
	})
}

// promptHash is the Responses prompt fingerprint computed independently:
// the SHA-256 of the JCS of {"input": items, "instructions": instr}.
func promptHash(t *testing.T, items []string, instructions string) string {
	t.Helper()
	doc := `{"input":[` + strings.Join(items, ",") + `]`
	if instructions != "" {
		in, _ := json.Marshal(instructions)
		doc += `,"instructions":` + string(in)
	}
	c, err := jcs.Canonicalize([]byte(doc + "}"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:])
}

// TestResponses_StreamIsRelayedAndReassembled: a streamed Responses call
// reaches openai-go event by event, counts at response.completed, and is
// recorded as the one response object it adds up to.
func TestResponses_StreamIsRelayedAndReassembled(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, stub := newResponsesHarness(t, eng, harnessOpts{})
		stub.configure("refund done", "", false)
		rr := h.rollout(`,"policy":"pr"`)
		stream := h.client(rr).Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "m",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		var (
			text  strings.Builder
			types []string
		)
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if ev.Type == "response.output_text.delta" {
				text.WriteString(ev.Delta)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != "refund done" || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
			t.Errorf("streamed %q as %v", text.String(), types)
		}
		if up := h.up.last(t); up["stream"] != true {
			t.Errorf("upstream got %v", up)
		}
		h.flush()
		v := h.view(rr.RolloutID)
		wantCall(t, v, 1, "responses", true, "")
		if string(v.Gateway.Calls[0].Usage) != responsesUsage {
			t.Errorf("usage %s", v.Gateway.Calls[0].Usage)
		}
		calls := h.calls(rr.RolloutID)
		var resp responses.Response
		if err := json.Unmarshal(h.blob(*calls[0].ResponseBlob), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.OutputText() != "refund done" || resp.Status != "completed" || resp.ID != "resp_1" {
			t.Errorf("reassembled %+v", resp)
		}
	})
}

// TestResponses_ToolLoopJoinsAndReconciles: a two-turn tool loop (a
// streamed function_call, then its function_call_output sent back with
// the history) counts both calls, joins the reported tool call to the
// completion that emitted its call_id, and reconciles on_policy when the
// agent reports two calls, off_policy when it reports three.
func TestResponses_ToolLoopJoinsAndReconciles(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, _ := newResponsesHarness(t, eng, harnessOpts{})
		for _, tc := range []struct {
			reported int
			want     string
		}{{2, "on_policy"}, {3, "off_policy"}} {
			rr := h.rollout(`,"policy":"pr"`)
			cl := h.client(rr)
			ctx := context.Background()
			user := responses.ResponseInputItemParamOfMessage("where is order 7?", responses.EasyInputMessageRoleUser)
			stream := cl.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m",
				Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}},
				Tools: []responses.ToolUnionParam{lookupTool()}})
			var call responses.ResponseOutputItemUnion
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "response.completed" {
					call = ev.Response.Output[0]
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if call.Type != "function_call" || call.Arguments.OfString != `{"order":7}` {
				t.Fatalf("first turn %+v", call)
			}
			out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"status":"shipped"}`)
			out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
			resp, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m",
				Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user,
					responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name), out}},
				Tools: []responses.ToolUnionParam{lookupTool()}})
			if err != nil || resp.OutputText() != "hello" {
				t.Fatalf("second turn %v %v", resp, err)
			}
			h.submit(rr, `{"final_text":"refund","llm_call_count":`+string(rune('0'+tc.reported))+`,
				"tool_calls":[{"name":"lookup_order","outcome":"ok","status_code":200,"tool_call_id":"`+call.CallID+`","output":{"status":"shipped"}}]}`)
			h.settle(rr.RolloutID)
			v := h.view(rr.RolloutID)
			if v.Gateway.Completions != 2 || v.Reconciliation == nil || *v.Reconciliation != tc.want {
				t.Errorf("reported %d: completions %d reconciliation %v", tc.reported, v.Gateway.Completions, deref(v.Reconciliation))
			}
			if got := v.Gateway.Calls; len(got) != 2 || len(got[0].Emitted) != 1 || got[0].Emitted[0] != call.CallID ||
				len(got[1].Consumed) != 1 || got[1].Consumed[0] != call.CallID {
				t.Errorf("emitted/consumed: %+v", got)
			}
			if len(v.ToolCallJoins) != 1 || v.ToolCallJoins[0].CompletionSeq == nil || *v.ToolCallJoins[0].CompletionSeq != 1 ||
				v.ToolCallJoins[0].Ambiguous {
				t.Errorf("joins %+v", v.ToolCallJoins)
			}
		}
	})
}

// TestResponses_PreviousResponseIDResolvesThroughTheRollout: a chain of
// previous_response_id resolves through the rollout's own responses —
// one not yet flushed, then one durable — the ids go upstream as sent, and
// each fingerprint covers the whole resolved input.
func TestResponses_PreviousResponseIDResolvesThroughTheRollout(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		// No background flush: the first response is certainly not
		// durable when the second request names it.
		h, _ := newResponsesHarness(t, eng, harnessOpts{gw: gateway.Config{NoFlush: true}})
		rr := h.rollout(`,"policy":"pr"`)
		cl := h.client(rr)
		ctx := context.Background()
		first, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Instructions: openai.String("be brief"),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("one")}})
		if err != nil {
			t.Fatal(err)
		}
		// At once: the first response is this replica's, not yet flushed.
		second, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m", PreviousResponseID: openai.String(first.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("two")}})
		if err != nil {
			t.Fatal(err)
		}
		if up := h.up.last(t); up["previous_response_id"] != first.ID {
			t.Errorf("upstream got previous_response_id %v", up["previous_response_id"])
		}
		h.flush()
		// Now durable: resolved from the store and the recorded bodies.
		if _, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m", PreviousResponseID: openai.String(second.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("three")}}); err != nil {
			t.Fatal(err)
		}
		h.flush()
		out := func(n int, text string) string {
			return `{"type":"message","id":"msg_` + string(rune('0'+n)) + `","status":"completed","role":"assistant","content":[{"type":"output_text","text":"` + text + `","annotations":[]}]}`
		}
		u := func(s string) string { return `{"role":"user","content":"` + s + `"}` }
		want := []string{
			promptHash(t, []string{u("one")}, "be brief"),
			promptHash(t, []string{u("one"), out(1, "hello"), u("two")}, ""),
			promptHash(t, []string{u("one"), out(1, "hello"), u("two"), out(2, "hello"), u("three")}, ""),
		}
		calls := h.calls(rr.RolloutID)
		if len(calls) != 3 {
			t.Fatalf("%d calls", len(calls))
		}
		for i, c := range calls {
			var fp gateway.CallFingerprint
			if err := json.Unmarshal(c.Fingerprint, &fp); err != nil || fp.PromptSHA256 != want[i] || !c.Counted {
				t.Errorf("call %d: counted %v fingerprint %s, want prompt %s", i+1, c.Counted, c.Fingerprint, want[i])
			}
		}
	})
}

// TestResponses_UnknownPreviousResponseIsRefused: a previous_response_id
// that no response of this rollout had — another rollout's, or made up —
// is 400 unknown_previous_response, recorded uncounted, never sent
// upstream.
func TestResponses_UnknownPreviousResponseIsRefused(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, _ := newResponsesHarness(t, eng, harnessOpts{})
		other := h.rollout(`,"policy":"pr"`)
		theirs, err := h.client(other).Responses.New(context.Background(), responses.ResponseNewParams{Model: "m",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		if err != nil {
			t.Fatal(err)
		}
		h.flush()
		rr := h.rollout(`,"policy":"pr"`)
		before := h.up.count()
		for _, id := range []string{theirs.ID, "resp_made_up"} {
			r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/responses", rr.APIKey,
				[]byte(`{"model":"m","input":"again","previous_response_id":"`+id+`"}`))
			wantOpenAIError(t, r, http.StatusBadRequest, gateway.CodeUnknownPreviousResponse)
		}
		if h.up.count() != before {
			t.Errorf("a refused request went upstream")
		}
		h.flush()
		v := h.view(rr.RolloutID)
		wantCall(t, v, 1, "responses", false, gateway.ReasonUnknownPrevious)
		wantCall(t, v, 2, "responses", false, gateway.ReasonUnknownPrevious)
	})
}

// TestResponses_CountingFollowsTheResponseStatus: an answer delivered in
// full counts when its status is completed or incomplete (whole, or the
// stream's response.incomplete event); a failed one, and a stream the
// upstream ends before its final event, do not, with a reason.
func TestResponses_CountingFollowsTheResponseStatus(t *testing.T) {
	t.Parallel()
	h, stub := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"pr"`)
	tok := gatewayToken(rr)
	cases := []struct {
		status  string
		noFinal bool
		stream  bool
		counted bool
		reason  string
	}{
		{"incomplete", false, false, true, ""},
		{"incomplete", false, true, true, ""},
		{"failed", false, false, false, gateway.ReasonUpstreamError},
		{"failed", false, true, false, gateway.ReasonUpstreamError},
		{"in_progress", false, false, false, gateway.ReasonNotCompleted},
		{"", true, true, false, gateway.ReasonStreamIncomplete},
	}
	for _, tc := range cases {
		stub.configure("partial", tc.status, tc.noFinal)
		body := `{"model":"m","input":"x","stream":` + map[bool]string{true: "true", false: "false"}[tc.stream] + `}`
		if r := h.do(http.MethodPost, "/gw/"+tok+"/v1/responses", rr.APIKey, []byte(body)); r.status != 200 {
			t.Fatalf("%+v: %d %s", tc, r.status, r.body)
		}
	}
	h.flush()
	v := h.view(rr.RolloutID)
	for i, tc := range cases {
		wantCall(t, v, i+1, "responses", tc.counted, tc.reason)
	}
	if v.Gateway.Completions != 2 {
		t.Errorf("completions = %d, want 2", v.Gateway.Completions)
	}
}

// TestResponses_ClientDisconnectMidStreamDoesNotCount: a client that
// leaves a Responses stream before its final event leaves a record
// counted false, reason client_disconnected.
func TestResponses_ClientDisconnectMidStreamDoesNotCount(t *testing.T) {
	t.Parallel()
	h, _ := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		sse(w, `{"type":"response.created","response":{"id":"resp_9","object":"response","status":"in_progress","output":[]}}`)
		// The rest would come only after the gateway, its client gone,
		// cancelled this request.
		<-r.Context().Done()
	})
	rr := h.rollout(`,"policy":"pr"`)
	ctx, cancel := context.WithCancel(context.Background())
	stream := h.client(rr).Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if !stream.Next() || stream.Current().Type != "response.created" {
		t.Fatalf("first event: %v", stream.Err())
	}
	cancel()
	stream.Close()
	h.flush()
	wantCall(t, h.view(rr.RolloutID), 1, "responses", false, gateway.ReasonClientDisconnected)
}

// TestResponses_UpstreamStreamEndingBeforeItsFinalEventDoesNotCount: an
// upstream that ends a Responses stream without response.completed or
// response.incomplete leaves openai-go's streaming client with every event
// it sent and no final one, and the call is recorded counted false, reason
// stream_incomplete; the rollout has no completion.
func TestResponses_UpstreamStreamEndingBeforeItsFinalEventDoesNotCount(t *testing.T) {
	t.Parallel()
	h, stub := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	stub.configure("partial answer", "", true)
	rr := h.rollout(`,"policy":"pr"`)
	stream := h.client(rr).Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var (
		text  strings.Builder
		types []string
	)
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	_ = stream.Close()
	if text.String() != "partial answer" || len(types) == 0 || types[0] != "response.created" {
		t.Fatalf("streamed %q as %v (err %v)", text.String(), types, stream.Err())
	}
	for _, typ := range types {
		if typ == "response.completed" || typ == "response.incomplete" {
			t.Fatalf("the client saw a final event: %v", types)
		}
	}
	h.flush()
	v := h.view(rr.RolloutID)
	wantCall(t, v, 1, "responses", false, gateway.ReasonStreamIncomplete)
	if v.Gateway.Completions != 0 {
		t.Errorf("completions = %d, want 0", v.Gateway.Completions)
	}
}

// TestResponses_UnsupportedProtocol: a Responses call on a policy whose
// upstream speaks only chat is 400 unsupported_protocol naming chat, and
// nothing goes upstream.
func TestResponses_UnsupportedProtocol(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"p1"`)
	_, err := h.client(rr).Responses.New(context.Background(), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != gateway.CodeUnsupportedProtocol ||
		!strings.Contains(apiErr.Message, "speaks chat, not responses") {
		t.Fatalf("got %v", err)
	}
	if h.up.count() != 0 {
		t.Errorf("the upstream received a request")
	}
}

// TestResponses_BudgetExhausted: a Responses call past the batch's
// max_completions is 429 rollout_budget_exhausted.
func TestResponses_BudgetExhausted(t *testing.T) {
	t.Parallel()
	h, _ := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"pr","limits":{"max_completions":1}`)
	cl := h.client(rr)
	params := responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	if _, err := cl.Responses.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Responses.New(context.Background(), params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != gateway.CodeBudgetExhausted {
		t.Fatalf("got %v", err)
	}
	h.flush()
	v := h.view(rr.RolloutID)
	wantCall(t, v, 2, "responses", false, gateway.ReasonBudgetExhausted)
}

// TestResponses_PolicyEndpoint: production Responses traffic on the
// policy endpoint reaches the agent's policy and is recorded as a
// production call of protocol responses.
func TestResponses_PolicyEndpoint(t *testing.T) {
	t.Parallel()
	h, _ := newResponsesHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: "pr"}})
	key := h.key("inference", "agent-1")
	cl := openai.NewClient(option.WithBaseURL(h.ts.URL+"/agents/agent-1/v1"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(h.ts.Client()))
	resp, err := cl.Responses.New(context.Background(), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil || resp.OutputText() != "hello" {
		t.Fatalf("%v %v", resp, err)
	}
	if up := h.up.last(t); up["model"] != "served-model" {
		t.Errorf("upstream got %v", up)
	}
	h.flush()
	r := h.mustJSON(http.MethodGet, "/api/v1/calls?agent_id=agent-1", h.admin, "", http.StatusOK)
	var calls struct {
		Items []struct {
			Protocol string `json:"protocol"`
			Counted  bool   `json:"counted"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &calls); err != nil || len(calls.Items) != 1 || calls.Items[0].Protocol != "responses" ||
		!calls.Items[0].Counted {
		t.Errorf("production calls %s", r.body)
	}
}

// TestResponses_PolicyOverridesMustMap: a policy on an upstream that
// speaks responses is refused, with a pointer, when one of its overrides
// has no Responses equivalent.
func TestResponses_PolicyOverridesMustMap(t *testing.T) {
	t.Parallel()
	h, _ := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	for _, tc := range []struct{ overrides, pointer string }{
		{`{"seed":1}`, "/sampling_overrides/seed"},
		{`{"max_tokens":5,"max_completion_tokens":6}`, "/sampling_overrides/max_tokens"},
		{`{"tool_choice":{"type":"function","function":{"name":"x"}}}`, "/sampling_overrides/tool_choice"},
	} {
		r := h.do(http.MethodPost, "/api/v1/policies", h.admin,
			[]byte(`{"name":"bad","upstream":"stub","model":"m","sampling_overrides":`+tc.overrides+`}`))
		var e struct {
			Error struct {
				Pointer string `json:"pointer"`
			} `json:"error"`
		}
		if r.status != http.StatusUnprocessableEntity || json.Unmarshal(r.body, &e) != nil || e.Error.Pointer != tc.pointer {
			t.Errorf("%s: %d %s, want 422 at %s", tc.overrides, r.status, r.body, tc.pointer)
		}
	}
}

// TestResponses_StreamSpellingAnUpstreamKeyIsCut: a Responses stream whose
// deltas spell an upstream key across events is cut before the key's
// first 16 bytes reach the agent, ends with an error event, and is
// recorded uncounted.
func TestResponses_StreamSpellingAnUpstreamKeyIsCut(t *testing.T) {
	t.Parallel()
	h, _ := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		sse(w, `{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`)
		for _, piece := range []string{"the key is upstream-se", "cret-key-0123456789", " done"} {
			sse(w, `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+piece+`"}`)
		}
		sse(w, `{"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","output":[]}}`)
	})
	rr := h.rollout(`,"policy":"pr"`)
	r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/responses", rr.APIKey, []byte(`{"model":"m","input":"x","stream":true}`))
	if strings.Contains(string(r.body), "upstream-secret") || !strings.Contains(string(r.body), "event: error") ||
		strings.Contains(string(r.body), "response.completed") {
		t.Errorf("stream relayed:\n%s", r.body)
	}
	h.flush()
	wantCall(t, h.view(rr.RolloutID), 1, "responses", false, gateway.ReasonUpstreamCredential)
}

// TestResponses_RevokedMidStreamIsCut: a Responses stream in flight when
// its rollout is cancelled ends with a credential_expired error event
// that openai-go raises, and is recorded uncounted, reason revoked.
func TestResponses_RevokedMidStreamIsCut(t *testing.T) {
	t.Parallel()
	h, _ := newResponsesHarness(t, sqliteEngine, harnessOpts{})
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		startStream(w)
		sse(w, `{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`)
		<-r.Context().Done() // this upstream never finishes on its own
	})
	rr := h.rollout(`,"policy":"pr"`)
	stream := h.client(rr).Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if !stream.Next() {
		t.Fatalf("first event: %v", stream.Err())
	}
	h.mustJSON(http.MethodPost, "/api/v1/rollouts/"+rr.RolloutID+"/cancel", h.admin, "", http.StatusOK)
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), gateway.CodeCredentialExpired) {
		t.Fatalf("a revoked stream must end with a credential_expired error, got %v", err)
	}
	waitCall(t, h, rr.RolloutID, func(v view) bool {
		return len(v.Gateway.Calls) == 1 && !v.Gateway.Calls[0].Counted && *v.Gateway.Calls[0].Reason == gateway.ReasonRevoked &&
			v.Gateway.Calls[0].Protocol == "responses"
	})
}
