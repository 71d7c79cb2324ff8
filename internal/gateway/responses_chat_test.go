package gateway_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
)

// TestResponsesToChat_MapsTextToolCallsAndResultsLosslessly: the items
// chat can carry become chat messages; nothing is lost or invented.
func TestResponsesToChat_MapsTextToolCallsAndResultsLosslessly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, request, response string
		messages                []string
		completion              string
	}{
		{"string input with instructions",
			`{"model":"m","instructions":"be brief","input":"hi"}`,
			`{"output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[]}]}]}`,
			[]string{`{"role":"system","content":"be brief"}`, `{"role":"user","content":"hi"}`},
			`{"role":"assistant","content":[{"type":"text","text":"hello"}]}`},
		{"tool loop with history",
			`{"input":[{"role":"user","content":"where is 7?"},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"checking","annotations":[]}]},
				{"type":"function_call","call_id":"call_1","name":"lookup","arguments":"{\"order\":7}"},
				{"type":"function_call","call_id":"call_2","name":"lookup","arguments":"{\"order\":8}"},
				{"type":"function_call_output","call_id":"call_1","output":"shipped"},
				{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"lost"}]},
				{"role":"developer","content":[{"type":"input_text","text":"answer now"}]}]}`,
			`{"output":[{"type":"function_call","call_id":"call_3","name":"refund","arguments":"{}"}]}`,
			[]string{`{"role":"user","content":"where is 7?"}`,
				`{"role":"assistant","content":[{"type":"text","text":"checking"}],"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"order\":7}"}},{"id":"call_2","type":"function","function":{"name":"lookup","arguments":"{\"order\":8}"}}]}`,
				`{"role":"tool","tool_call_id":"call_1","content":"shipped"}`,
				`{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"lost"}]}`,
				`{"role":"developer","content":[{"type":"text","text":"answer now"}]}`},
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_3","type":"function","function":{"name":"refund","arguments":"{}"}}]}`},
		{"no response", `{"input":[{"role":"user","content":"x"}]}`, ``,
			[]string{`{"role":"user","content":"x"}`}, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conv, err := gateway.ResponsesToChat(json.RawMessage(tc.request), json.RawMessage(tc.response))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range conv.Messages {
				got = append(got, string(m))
			}
			if strings.Join(got, "\n") != strings.Join(tc.messages, "\n") {
				t.Errorf("messages\n got %s\nwant %s", strings.Join(got, "\n"), strings.Join(tc.messages, "\n"))
			}
			if string(conv.Completion) != tc.completion {
				t.Errorf("completion\n got %s\nwant %s", conv.Completion, tc.completion)
			}
		})
	}
}

// TestResponsesToChat_ItemsWithoutAChatFormAreNotExportable: reasoning,
// images, built-in tool calls, annotated text and chains are refused with
// protocol_item_not_exportable:<type>, never dropped.
func TestResponsesToChat_ItemsWithoutAChatFormAreNotExportable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ request, response, reason string }{
		{`{"input":"x"}`, `{"output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","role":"assistant","content":[]}]}`,
			"protocol_item_not_exportable:reasoning"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:..."}]}]}`, ``,
			"protocol_item_not_exportable:input_image"},
		{`{"input":[{"type":"web_search_call","id":"ws_1"}]}`, ``, "protocol_item_not_exportable:web_search_call"},
		{`{"input":[{"type":"item_reference","id":"msg_1"}]}`, ``, "protocol_item_not_exportable:item_reference"},
		{`{"input":"x"}`, `{"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"see","annotations":[{"type":"url_citation"}]}]}]}`,
			"protocol_item_not_exportable:annotation"},
		{`{"input":"x","previous_response_id":"resp_1"}`, ``, "protocol_item_not_exportable:previous_response"},
		{`{"input":"x"}`, `{"output":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"message","role":"assistant","content":"after"}]}`,
			"protocol_item_not_exportable:output_sequence"},
	} {
		_, err := gateway.ResponsesToChat(json.RawMessage(tc.request), json.RawMessage(tc.response))
		var ne *gateway.NotExportableError
		if !errors.As(err, &ne) || ne.Reason() != tc.reason {
			t.Errorf("%s %s: %v, want %s", tc.request, tc.response, err, tc.reason)
		}
	}
}

// FuzzResponsesToChat: any bodies convert or fail with an error, and
// every message produced is JSON.
func FuzzResponsesToChat(f *testing.F) {
	f.Add([]byte(`{"instructions":"s","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`),
		[]byte(`{"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"t","annotations":[]}]}]}`))
	f.Add([]byte(`{"input":"x"}`), []byte(`null`))
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		conv, err := gateway.ResponsesToChat(req, resp)
		if err != nil {
			return
		}
		for _, m := range append(conv.Messages, conv.Completion) {
			if m != nil && !json.Valid(m) {
				t.Fatalf("message %q is not JSON", m)
			}
		}
	})
}
