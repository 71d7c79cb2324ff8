package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMessagesToChat_TextToolCallsAndToolResultsMapLosslessly(t *testing.T) {
	t.Parallel()
	req := `{"model":"m","max_tokens":9,
		"system":[{"type":"text","text":"Be terse.","cache_control":{"type":"ephemeral"}}],
		"messages":[
			{"role":"user","content":"Weather in Paris?"},
			{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city": "Paris"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"type":"text","text":"And?"}]},
			{"role":"assistant","content":"It is sunny."},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"21"}]}]}
		]}`
	resp := `{"id":"msg","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"weather","input":{}}],"stop_reason":"tool_use"}`
	got, err := MessagesToChat(json.RawMessage(req), json.RawMessage(resp))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"role":"system","content":[{"type":"text","text":"Be terse."}]}`,
		`{"role":"user","content":"Weather in Paris?"}`,
		`{"role":"assistant","content":[{"type":"text","text":"Checking."}],"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]}`,
		`{"role":"tool","tool_call_id":"toolu_1","content":"sunny"}`,
		`{"role":"user","content":[{"type":"text","text":"And?"}]}`,
		`{"role":"assistant","content":"It is sunny."}`,
		`{"role":"tool","tool_call_id":"toolu_2","content":[{"type":"text","text":"21"}]}`,
	}
	if len(got.Messages) != len(want) {
		t.Fatalf("%d messages, want %d: %s", len(got.Messages), len(want), got.Messages)
	}
	for i := range want {
		if string(got.Messages[i]) != want[i] {
			t.Errorf("message %d\n got %s\nwant %s", i, got.Messages[i], want[i])
		}
	}
	if c := `{"role":"assistant","content":null,"tool_calls":[{"id":"toolu_3","type":"function","function":{"name":"weather","arguments":"{}"}}]}`; string(got.Completion) != c {
		t.Errorf("completion\n got %s\nwant %s", got.Completion, c)
	}
}

func TestMessagesToChat_ItemsWithoutAChatFormAreNotExportable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, req, resp, reason string
	}{
		{"thinking", `{"messages":[{"role":"user","content":"x"}]}`,
			`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"y"}]}`, "protocol_item_not_exportable:thinking"},
		{"image", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, ``,
			"protocol_item_not_exportable:image"},
		{"tool error", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"boom","is_error":true}]}]}`, ``,
			"protocol_item_not_exportable:tool_result:is_error"},
		{"image in a tool result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{}}]}]}]}`, ``,
			"protocol_item_not_exportable:image"},
		{"citations", `{"messages":[{"role":"user","content":"x"}]}`,
			`{"role":"assistant","content":[{"type":"text","text":"y","citations":[{"type":"char_location"}]}]}`, "protocol_item_not_exportable:citations"},
		{"server tool", `{"messages":[{"role":"user","content":"x"}]}`,
			`{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}`, "protocol_item_not_exportable:server_tool_use"},
	} {
		_, err := MessagesToChat(json.RawMessage(tc.req), json.RawMessage(tc.resp))
		var ne *NotExportableError
		if !errors.As(err, &ne) || ne.Reason() != tc.reason {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.reason)
		}
	}
	if _, err := MessagesToChat(json.RawMessage(`{"messages":"x"}`), nil); err == nil || errors.As(err, new(*NotExportableError)) || !strings.Contains(err.Error(), "messages request") {
		t.Errorf("a malformed request: %v", err)
	}
}
