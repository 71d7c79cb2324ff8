package gateway_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
)

// TestChatBodies_ConvertsTheRequestToolsAndAnswer: a Responses or
// Messages call becomes a chat request (messages, function tools, the
// members chat shares) and a chat.completion with chat's finish_reason;
// chat bodies pass as they are.
func TestChatBodies_ConvertsTheRequestToolsAndAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, protocol, request, response string
		resolved                          []string
		wantRequest, wantResponse         string
	}{
		{
			name: "chat passes", protocol: "chat",
			request:     `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			response:    `{"choices":[{"message":{"role":"assistant","content":"yo"}}]}`,
			wantRequest: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, wantResponse: `{"choices":[{"message":{"role":"assistant","content":"yo"}}]}`,
		},
		{
			name: "responses tool call", protocol: "responses",
			request: `{"model":"m","instructions":"be terse","input":"refund 7","parallel_tool_calls":false,"temperature":1,
				"tools":[{"type":"function","name":"lookup","description":"find","parameters":{"type":"object"},"strict":true}]}`,
			response:     `{"status":"completed","output":[{"type":"function_call","call_id":"c1","name":"lookup","arguments":"{}"}]}`,
			wantRequest:  `{"messages":[{"role":"system","content":"be terse"},{"role":"user","content":"refund 7"}],"model":"m","parallel_tool_calls":false,"tools":[{"type":"function","function":{"name":"lookup","description":"find","parameters":{"type":"object"},"strict":true}}]}`,
			wantResponse: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"object":"chat.completion"}`,
		},
		{
			name: "responses chained by previous_response_id", protocol: "responses",
			request:  `{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c1","output":"ok"}]}`,
			resolved: []string{`{"content":"refund 7","role":"user"}`, `{"arguments":"{}","call_id":"c1","name":"lookup","type":"function_call"}`},
			response: `{"status":"incomplete","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]}]}`,
			wantRequest: `{"messages":[{"role":"user","content":"refund 7"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"ok"}],"model":"m"}`,
			wantResponse: `{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"done"}]},"finish_reason":"length"}],"object":"chat.completion"}`,
		},
		{
			name: "messages tool use", protocol: "messages",
			request: `{"model":"claude","max_tokens":64,"system":"be terse","messages":[{"role":"user","content":"weather?"}],
				"tools":[{"name":"weather","description":"w","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]}`,
			response:     `{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"tu1","name":"weather","input":{"city":"Paris"}}],"stop_reason":"tool_use"}`,
			wantRequest:  `{"messages":[{"role":"system","content":"be terse"},{"role":"user","content":"weather?"}],"model":"claude","tools":[{"type":"function","function":{"name":"weather","description":"w","parameters":{"type":"object"}}}]}`,
			wantResponse: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"tu1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"object":"chat.completion"}`,
		},
		{
			name: "messages end turn", protocol: "messages",
			request:      `{"model":"claude","messages":[{"role":"user","content":"hi"}]}`,
			response:     `{"type":"message","role":"assistant","content":[{"type":"text","text":"yo"}],"stop_reason":"end_turn"}`,
			wantRequest:  `{"messages":[{"role":"user","content":"hi"}],"model":"claude"}`,
			wantResponse: `{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"yo"}]},"finish_reason":"stop"}],"object":"chat.completion"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := gateway.CallBodies{Request: json.RawMessage(tc.request), Response: json.RawMessage(tc.response)}
			for _, r := range tc.resolved {
				b.Resolved = append(b.Resolved, json.RawMessage(r))
			}
			got, err := gateway.ChatBodies(tc.protocol, b)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, got.Request, []byte(tc.wantRequest)) {
				t.Errorf("request\n got %s\nwant %s", got.Request, tc.wantRequest)
			}
			if !jsonEqual(t, got.Response, []byte(tc.wantResponse)) {
				t.Errorf("response\n got %s\nwant %s", got.Response, tc.wantResponse)
			}
		})
	}
}

// TestChatBodies_ItemsWithoutAChatFormAreNamed: a call holding an item,
// content block or tool chat cannot carry is refused with the reason
// protocol_item_not_exportable:<type>, never converted lossily.
func TestChatBodies_ItemsWithoutAChatFormAreNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, protocol, request, response, reason string
	}{
		{"responses reasoning output", "responses", `{"input":"hi"}`,
			`{"status":"completed","output":[{"type":"reasoning","id":"rs","summary":[]},{"type":"message","role":"assistant","content":"x"}]}`,
			"protocol_item_not_exportable:reasoning"},
		{"responses built-in tool", "responses", `{"input":"hi","tools":[{"type":"web_search"}]}`,
			`{"status":"completed","output":[{"type":"message","role":"assistant","content":"x"}]}`, "protocol_item_not_exportable:tool:web_search"},
		{"responses image input", "responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:,"}]}]}`,
			`{"status":"completed","output":[]}`, "protocol_item_not_exportable:input_image"},
		{"responses chain whose items were not read", "responses", `{"previous_response_id":"resp_1","input":"more"}`,
			`{"status":"completed","output":[{"type":"message","role":"assistant","content":"x"}]}`, "protocol_item_not_exportable:previous_response"},
		{"responses empty output", "responses", `{"input":"hi"}`, `{"status":"completed","output":[]}`, "protocol_item_not_exportable:empty_output"},
		{"messages thinking", "messages", `{"messages":[{"role":"user","content":"hi"}]}`,
			`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"x"}]}`,
			"protocol_item_not_exportable:thinking"},
		{"messages server tool", "messages", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`,
			`{"role":"assistant","content":[{"type":"text","text":"x"}]}`, "protocol_item_not_exportable:tool:web_search_20250305"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := gateway.ChatBodies(tc.protocol, gateway.CallBodies{Request: json.RawMessage(tc.request), Response: json.RawMessage(tc.response)})
			var ne *gateway.NotExportableError
			if !errors.As(err, &ne) || ne.Reason() != tc.reason {
				t.Errorf("err %v, want %s", err, tc.reason)
			}
		})
	}
}

// TestNative_KeepsEachProtocolsOwnItems: the rl form of a call is its own
// protocol's items, the instructions or system prompt first as a system
// entry, the resolved chain before the input.
func TestNative_KeepsEachProtocolsOwnItems(t *testing.T) {
	t.Parallel()
	n, err := gateway.Native("responses", gateway.CallBodies{
		Request:  json.RawMessage(`{"instructions":"be terse","previous_response_id":"r1","input":"more","tools":[{"type":"web_search"}]}`),
		Resolved: []json.RawMessage{json.RawMessage(`{"type":"reasoning","id":"rs","summary":[]}`)},
		Response: json.RawMessage(`{"output":[{"type":"message","role":"assistant","content":"x"}]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	items, _ := json.Marshal(n.Items)
	if string(items) != `[{"role":"system","content":"be terse"},{"type":"reasoning","id":"rs","summary":[]},{"role":"user","content":"more"}]` ||
		string(n.Tools) != `[{"type":"web_search"}]` || string(n.Response) != `[{"type":"message","role":"assistant","content":"x"}]` {
		t.Errorf("responses native: items %s tools %s response %s", items, n.Tools, n.Response)
	}
	n, err = gateway.Native("messages", gateway.CallBodies{
		Request:  json.RawMessage(`{"system":[{"type":"text","text":"be terse"}],"messages":[{"role":"user","content":"hi"}]}`),
		Response: json.RawMessage(`{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hm"}]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	items, _ = json.Marshal(n.Items)
	if string(items) != `[{"role":"system","content":[{"type":"text","text":"be terse"}]},{"role":"user","content":"hi"}]` || n.Tools != nil ||
		string(n.Response) != `{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hm"}]}` {
		t.Errorf("messages native: items %s tools %s response %s", items, n.Tools, n.Response)
	}
}
