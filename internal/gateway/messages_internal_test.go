package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/jcs"
)

func TestParseMessagesRequest_RefusesWithPointer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, pointer string
	}{
		{"not an object", `[]`, ""},
		{"not json", `{"messages":`, "/messages"},
		{"duplicate member", `{"messages":[],"messages":[]}`, "/messages"},
		{"messages not an array", `{"messages":{}}`, "/messages"},
		{"messages null", `{"messages":null}`, "/messages"},
		{"message not an object", `{"messages":[{"role":"user","content":"a"},"hi"]}`, "/messages/1"},
		{"no messages", `{"model":"m","max_tokens":5}`, "/messages"},
		{"message not I-JSON", `{"messages":[{"role":"user","content":"a","content":"b"}]}`, "/messages/0"},
		{"system a number", `{"messages":[],"system":7}`, "/system"},
		{"system block not text", `{"messages":[],"system":[{"type":"text","text":"a"},{"type":"image","source":{}}]}`, "/system/1"},
		{"system block without type", `{"messages":[],"system":[{"text":"a"}]}`, "/system/0"},
		{"system block a string", `{"messages":[],"system":["a"]}`, "/system/0"},
		{"stream not a boolean", `{"messages":[],"stream":"yes"}`, "/stream"},
		{"model not a string", `{"messages":[],"model":7}`, "/model"},
		{"invalid utf-8", "{\"messages\":[],\"x\":\"\xff\"}", ""},
	} {
		_, e := parseMessagesRequest([]byte(tc.body))
		if e == nil || e.Status != 400 || (e.Code != CodeInvalidRequest && e.Code != "missing_required_parameter") || e.pointer() != tc.pointer {
			t.Errorf("%s: %+v, want 400 at %q", tc.name, e, tc.pointer)
		}
	}
}

func TestParseMessagesRequest_SystemIsAStringOrTextBlocks(t *testing.T) {
	t.Parallel()
	for _, sys := range []string{
		`"You are terse."`,
		`[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be kind."}]`,
		`[]`,
		`null`,
	} {
		body := `{"model":"claude","max_tokens":64,"system":` + sys + `,"messages":[{"role":"user","content":"hi"}]}`
		if _, e := parseMessagesRequest([]byte(body)); e != nil {
			t.Errorf("system %s refused: %v", sys, e)
		}
	}
}

func TestParseMessagesRequest_ToolResultsAreConsumedIDs(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","stream":true,"messages":[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"w","input":{}},{"type":"tool_use","id":"toolu_2","name":"w","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"tool_use_id":"toolu_2","type":"tool_result","is_error":true},{"type":"text","text":"and?"}]},
		{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"not_a_user_turn"}]}
	]}`
	req, e := parseMessagesRequest([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	if !slices.Equal(req.consumed, []string{"toolu_1", "toolu_2"}) {
		t.Errorf("consumed = %q, want the user turn's tool_result ids", req.consumed)
	}
	if !req.stream || req.model == nil || *req.model != "m" || len(req.messages) != 4 {
		t.Errorf("stream %v model %v messages %d", req.stream, req.model, len(req.messages))
	}
	for i, m := range req.messages {
		c, err := jcs.Canonicalize(m)
		if err != nil || string(c) != string(m) {
			t.Errorf("message %d not stored canonical: %s", i, m)
		}
	}
}

func TestForwardMessages_SwapsModelMapsOverridesKeepsTheRest(t *testing.T) {
	t.Parallel()
	pol := Policy{Name: "p", Upstream: "u", Model: "claude-served", CaptureTokens: true,
		SamplingOverrides: map[string]json.RawMessage{"temperature": json.RawMessage(`1`), "stop": json.RawMessage(`"END"`),
			"max_completion_tokens": json.RawMessage(`512`)}}
	body := `{"model":"claude-asked", "x_unknown":{"b":1,"a":[1.50,"\u00e9"]},"max_tokens":64,"system":[{"type":"text","text":"S"}],"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, e := parseMessagesRequest([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	f := forwardMessages(req, pol)
	if f.refused != nil {
		t.Fatal(f.refused)
	}
	want := `{"model":"claude-served","x_unknown":{"b":1,"a":[1.50,"\u00e9"]},"max_tokens":512,"system":[{"type":"text","text":"S"}],"stream":true,"messages":[{"content":"hi","role":"user"}],"stop_sequences":["END"],"temperature":1}`
	if string(f.body) != want {
		t.Errorf("forwarded\n got %s\nwant %s", f.body, want)
	}
	if string(f.agent["model"]) != `"claude-asked"` || string(f.agent["max_tokens"]) != `64` || !slices.Equal(f.absent, []string{"stop_sequences", "temperature"}) {
		t.Errorf("agent values %v, added %v", f.agent, f.absent)
	}
	if string(f.head)+"["+string(req.messages[0])+"]"+string(f.tail) != want {
		t.Error("head + messages + tail does not rebuild the body")
	}
	pol.SamplingOverrides = map[string]json.RawMessage{"seed": json.RawMessage(`1`)}
	if f := forwardMessages(req, pol); f.refused == nil || f.refused.Code != CodeUnsupportedProtocol {
		t.Errorf("a policy whose overrides cannot map was applied: %v", f.refused)
	}
}

func TestMessagesOverrides_MapsTheSamplingKeysOrNamesTheOneThatCannot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, overrides, want, badKey string
	}{
		{"none", `{}`, `{}`, ""},
		{"direct names", `{"max_tokens":10,"temperature":0.5,"top_p":0.9,"top_k":40}`, `{"max_tokens":10,"temperature":0.5,"top_k":40,"top_p":0.9}`, ""},
		{"stop string", `{"stop":"\n\n"}`, `{"stop_sequences":["\n\n"]}`, ""},
		{"stop array", `{"stop":["a","b"]}`, `{"stop_sequences":["a","b"]}`, ""},
		{"max_completion_tokens", `{"max_completion_tokens":99}`, `{"max_tokens":99}`, ""},
		{"stop not strings", `{"stop":[1]}`, "", "stop"},
		{"seed", `{"temperature":1,"seed":3}`, "", "seed"},
		{"n", `{"n":2}`, "", "n"},
		{"tool_choice", `{"tool_choice":"auto"}`, "", "tool_choice"},
		{"two keys onto max_tokens", `{"max_tokens":1,"max_completion_tokens":2}`, "", "max_tokens"},
	} {
		var in map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.overrides), &in); err != nil {
			t.Fatal(err)
		}
		out, key, err := MapOverrides(ProtocolMessages, in)
		if tc.badKey != "" {
			if err == nil || key != tc.badKey {
				t.Errorf("%s: key %q err %v, want it to name %q", tc.name, key, err, tc.badKey)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got, _ := json.Marshal(out)
		if out == nil {
			got = []byte(`{}`)
		}
		if string(got) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestMessagesFingerprint_PromptCoversSystemAndMessages(t *testing.T) {
	t.Parallel()
	fp := func(body string) CallFingerprint {
		t.Helper()
		req, e := parseMessagesRequest([]byte(body))
		if e != nil {
			t.Fatal(e)
		}
		return messagesFingerprint(req.messages, req.members, nil)
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	plain := fp(`{` + msgs + `}`)
	want, _ := jcs.Hash([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	if plain.PromptSHA256 != want {
		t.Errorf("prompt without system = %s, want the JCS hash of {messages} %s", plain.PromptSHA256, want)
	}
	if fp(`{`+msgs+`,"system":null}`).PromptSHA256 != want {
		t.Error("a null system changed the prompt hash")
	}
	withSys := fp(`{"system":"be terse",` + msgs + `}`)
	want, _ = jcs.Hash([]byte(`{"system":"be terse","messages":[{"content":"hi","role":"user"}]}`))
	if withSys.PromptSHA256 != want {
		t.Errorf("prompt with system = %s, want %s", withSys.PromptSHA256, want)
	}
	if other := fp(`{"system":"be kind",` + msgs + `}`); other.PromptSHA256 == withSys.PromptSHA256 {
		t.Error("a different system kept the prompt hash")
	}
	s := fp(`{` + msgs + `,"temperature":0.50,"max_tokens":8,"stop_sequences":["x"],"seed":3,"tools":[{"name":"w","input_schema":{}}]}`)
	if string(s.Sampling) != `{"max_tokens":8,"stop_sequences":["x"],"temperature":0.5}` || s.ToolsSHA256 == nil {
		t.Errorf("sampling %s tools %v", s.Sampling, s.ToolsSHA256)
	}
}

// feedMessages folds a Messages stream's event data into a reassembly.
func feedMessages(events ...string) *messagesAcc {
	a := &messagesAcc{}
	for _, e := range events {
		a.add([]byte(e))
	}
	return a
}

var toolStream = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-served","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"cache_read_input_tokens":5,"cache_creation_input_tokens":0,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check <weather>."}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_9","name":"weather","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"is\"}"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":15}}`,
	`{"type":"message_stop"}`,
}

func TestMessagesAcc_ReassemblesTextAndToolUseInPieces(t *testing.T) {
	t.Parallel()
	a := feedMessages(toolStream...)
	if !a.finished() {
		t.Error("a stream with message_stop is not finished")
	}
	if !slices.Equal(a.emitted(), []string{"toolu_9"}) {
		t.Errorf("emitted %q", a.emitted())
	}
	var got, want any
	_ = json.Unmarshal(a.response(), &got)
	_ = json.Unmarshal([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-served",
		"content":[{"type":"text","text":"Let me check <weather>."},{"type":"tool_use","id":"toolu_9","name":"weather","input":{"city":"Paris"}}],
		"stop_reason":"tool_use","stop_sequence":null,
		"usage":{"input_tokens":20,"cache_read_input_tokens":5,"cache_creation_input_tokens":0,"output_tokens":15}}`), &want)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("reassembled\n got %s\nwant %s", gb, wb)
	}
	var u map[string]int
	if json.Unmarshal(a.usage(), &u) != nil || u["output_tokens"] != 15 || u["input_tokens"] != 20 {
		t.Errorf("usage %s", a.usage())
	}
}

func TestMessagesAcc_ToolInputInOneEventOrInTheStartBlock(t *testing.T) {
	t.Parallel()
	start := toolStream[0]
	for name, events := range map[string][]string{
		"one delta": {start, `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"w","input":{}}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}"}}`},
		"start block": {start, `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"w","input":{"city":"Paris"}}}`},
	} {
		var m struct {
			Content []struct {
				Input map[string]string `json:"input"`
			} `json:"content"`
		}
		if err := json.Unmarshal(feedMessages(events...).response(), &m); err != nil || len(m.Content) != 1 || m.Content[0].Input["city"] != "Paris" {
			t.Errorf("%s: %+v %v", name, m, err)
		}
	}
}

func TestMessagesAcc_CountsOnlyAtMessageStopWithoutError(t *testing.T) {
	t.Parallel()
	if a := feedMessages(toolStream[:len(toolStream)-1]...); a.finished() {
		t.Error("a stream that ended before message_stop is finished")
	}
	errored := append(slices.Clone(toolStream[:5]), `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, `{"type":"message_stop"}`)
	if feedMessages(errored...).finished() {
		t.Error("a stream with an error event is finished")
	}
}

func TestMessagesTokens_PricesCacheReadsAsCachedAndWritesAsInputUnlessPriced(t *testing.T) {
	t.Parallel()
	usage := json.RawMessage(`{"input_tokens":100,"cache_read_input_tokens":1000,"cache_creation_input_tokens":200,"output_tokens":50}`)
	tc, ok := messagesTokens(usage)
	if !ok || tc != (tokenCounts{input: 1300, cached: 1000, written: 200, output: 50, total: 1350}) {
		t.Fatalf("counts %+v ok %v", tc, ok)
	}
	cached := 0.1
	prices := &Prices{Input: 3, CachedInput: &cached, Output: 15}
	// 100·3 + 1000·0.1 + 200·3 + 50·15 per million.
	if got, want := prices.CostWithCacheWrites(tc.input, tc.cached, tc.written, tc.output), (300+100+600+750)/1e6; !near(got, want) {
		t.Errorf("cost %v, want %v", got, want)
	}
	write := 3.75
	prices.CacheCreationInput = &write
	if got, want := prices.CostWithCacheWrites(tc.input, tc.cached, tc.written, tc.output), (300+100+750+750)/1e6; !near(got, want) {
		t.Errorf("cost with a cache-write price %v, want %v", got, want)
	}
	if got, want := prices.CostWithCacheWrites(1000, 100, 0, 10), prices.Cost(1000, 100, 10); got != want {
		t.Errorf("without cache writes the cost %v differs from Cost %v", got, want)
	}
	if _, ok := messagesTokens(json.RawMessage(`null`)); ok {
		t.Error("null usage read as usage")
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

func TestReadMessage_ToolUseIDsAndUsage(t *testing.T) {
	t.Parallel()
	ids, usage, ok := readMessage([]byte(`{"id":"msg","type":"message","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"toolu_a","name":"f","input":{}},{"type":"server_tool_use","id":"srvtoolu_b"}],"usage":{"input_tokens":1,"output_tokens":2}}`))
	if !ok || !slices.Equal(ids, []string{"toolu_a"}) || string(usage) != `{"input_tokens":1,"output_tokens":2}` {
		t.Errorf("ids %q usage %s ok %v", ids, usage, ok)
	}
	if _, _, ok := readMessage([]byte(`{"type":"error","error":{}}`)); ok {
		t.Error("an error read as a message")
	}
}

func TestAnthropicError_ShapeTypeCodeAndRequestID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e        *apiError
		typ, ptr string
	}{
		{errInvalidKey, "authentication_error", ""},
		{errExpired, "authentication_error", ""},
		{errBudget("max_completions 1 reached"), "rate_limit_error", ""},
		{errNoPolicy, "api_error", ""},
		{errOverloaded, "overloaded_error", ""},
		{bodyTooLarge(10), "request_too_large", ""},
		{errInvalid("messages[2]", "bad"), "invalid_request_error", "/messages/2"},
		{errInvalid("system[0]", "bad"), "invalid_request_error", "/system/0"},
		{errInvalid("a/b", "bad"), "invalid_request_error", "/a~1b"},
		{errInvalid("stream", "bad"), "invalid_request_error", "/stream"},
	} {
		w := httptest.NewRecorder()
		writeAnthropicError(w, tc.e, "req-1")
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message, Code, Pointer string
			} `json:"error"`
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != tc.e.Status || body.Type != "error" || body.Error.Type != tc.typ || body.Error.Code != tc.e.Code ||
			body.Error.Message != tc.e.Message || body.Error.Pointer != tc.ptr || body.RequestID != "req-1" || w.Header().Get("request-id") != "req-1" {
			t.Errorf("%s: %d %+v", tc.e.Code, w.Code, body)
		}
		if got := w.Header().Get("x-should-retry"); got != "false" {
			t.Errorf("%s: x-should-retry %q", tc.e.Code, got)
		}
	}
	ev := string(anthropicErrorEvent(&apiError{Status: 502, Code: CodeUpstreamError, Message: "cut"}))
	if !strings.HasPrefix(ev, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"") || !strings.HasSuffix(ev, "\n\n") {
		t.Errorf("error event %q", ev)
	}
}

func FuzzParseMessagesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"\ud800"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := parseMessagesRequest(body)
		if (req == nil) == (e == nil) {
			t.Fatalf("request %v and error %v", req, e)
		}
		if e != nil {
			if e.Status != 400 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		f := forwardMessages(req, Policy{Model: "x"})
		if !json.Valid(f.body) {
			t.Fatalf("forwarded body is not JSON: %s", f.body)
		}
	})
}

func TestSetMessagesHeaders_UpstreamKeyAsXAPIKeyAndTheAgentsVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		agent      map[string][]string
		version    string
		betas      []string
		withoutKey bool
	}{
		{name: "default version", agent: map[string][]string{"Authorization": {"Bearer rollout-key"}}, version: "2023-06-01"},
		{name: "the agent's version and betas", agent: map[string][]string{"Anthropic-Version": {"2024-10-22"}, "Anthropic-Beta": {"a-1", "b-2"}, "X-Api-Key": {"rollout-key"}},
			version: "2024-10-22", betas: []string{"a-1", "b-2"}},
		{name: "no upstream key", agent: map[string][]string{}, version: "2023-06-01", withoutKey: true},
	} {
		h := http.Header{"Authorization": {"Bearer x"}}
		key := "upstream-key"
		if tc.withoutKey {
			key = ""
		}
		setMessagesHeaders(h, http.Header(tc.agent), key)
		if h.Get("Authorization") != "" || h.Get("X-Api-Key") != key || h.Get("Anthropic-Version") != tc.version ||
			!slices.Equal(h.Values("Anthropic-Beta"), tc.betas) {
			t.Errorf("%s: headers %v", tc.name, h)
		}
	}
}
