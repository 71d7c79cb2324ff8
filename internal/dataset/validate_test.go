package dataset_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre/internal/dataset"
)

// TestValidateChatRules has one case per rule of OpenAI's chat
// fine-tuning format that ValidateChat checks, and the rows it accepts.
func TestValidateChatRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		row  string
		rule string // "" when accepted
	}{
		{"a user and an assistant message", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`, ""},
		{"every role, tools, a tool call answered", `{"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"assistant","content":"done","weight":1}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"parallel_tool_calls":true}`, ""},
		{"weight 0 on an assistant message", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","weight":0},{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}`, ""},
		{"arguments that are a JSON string are JSON", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"\"x\""}}]}]}`, ""},
		{"not an object", `[1]`, dataset.RuleNotJSON},
		{"not JSON", `{"messages":`, dataset.RuleNotJSON},
		{"unknown top-level member", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"model":"x"}`, dataset.RuleUnknownKey},
		{"no messages", `{"tools":[]}`, dataset.RuleMissingMessages},
		{"empty messages", `{"messages":[]}`, dataset.RuleMissingMessages},
		{"a message that is not an object", `{"messages":["hi"]}`, dataset.RuleMessageNotObject},
		{"a message without a role", `{"messages":[{"content":"a"}]}`, dataset.RuleMissingRole},
		{"the legacy function role", `{"messages":[{"role":"function","name":"f","content":"a"}]}`, dataset.RuleUnknownRole},
		{"an unknown message key", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","refusal":null}]}`, dataset.RuleUnknownMessageKey},
		{"weight on a user message", `{"messages":[{"role":"user","content":"a","weight":1},{"role":"assistant","content":"b"}]}`, dataset.RuleUnknownMessageKey},
		{"a user message without content", `{"messages":[{"role":"user"},{"role":"assistant","content":"b"}]}`, dataset.RuleMissingContent},
		{"an assistant message with neither content nor tool calls", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null}]}`, dataset.RuleMissingContent},
		{"content that is a number", `{"messages":[{"role":"user","content":5},{"role":"assistant","content":"b"}]}`, dataset.RuleInvalidContent},
		{"an image in an assistant message", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`, dataset.RuleInvalidContent},
		{"a name that is not a string", `{"messages":[{"role":"user","content":"a","name":1},{"role":"assistant","content":"b"}]}`, dataset.RuleInvalidName},
		{"weight 0.5", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","weight":0.5}]}`, dataset.RuleInvalidWeight},
		{"no assistant message", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"}]}`, dataset.RuleNoAssistantMessage},
		{"tool_calls empty", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","tool_calls":[]}]}`, dataset.RuleToolCallMalformed},
		{"a tool call without an id", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, dataset.RuleToolCallMalformed},
		{"a tool call of another type", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"custom","function":{"name":"f","arguments":"{}"}}]}]}`, dataset.RuleToolCallMalformed},
		{"arguments as an object, not a JSON string", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}]}`, dataset.RuleToolCallMalformed},
		{"arguments that are not JSON", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"city\": \"Par"}}]}]}`, dataset.RuleToolCallArgumentsNotJSON},
		{"a tool message without tool_call_id", `{"messages":[{"role":"user","content":"a"},{"role":"tool","content":"r"},{"role":"assistant","content":"b"}]}`, dataset.RuleMissingToolCallID},
		{"a tool message answering no earlier call", `{"messages":[{"role":"user","content":"a"},{"role":"tool","tool_call_id":"c9","content":"r"},{"role":"assistant","content":"b"}]}`, dataset.RuleToolCallIDUnknown},
		{"a tool message before the call it answers", `{"messages":[{"role":"user","content":"a"},{"role":"tool","tool_call_id":"c","content":"r"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, dataset.RuleToolCallIDUnknown},
		{"tools not an array", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"tools":{}}`, dataset.RuleInvalidTools},
		{"a tool without a name", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"tools":[{"type":"function","function":{}}]}`, dataset.RuleInvalidTools},
		{"parallel_tool_calls not a boolean", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"parallel_tool_calls":"yes"}`, dataset.RuleInvalidParallelToolCalls},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkRule(t, dataset.ValidateChat([]byte(tt.row)), tt.rule)
		})
	}
}

// TestValidatePreferenceRules has one case per rule of OpenAI's
// preference format that ValidatePreference checks.
func TestValidatePreferenceRules(t *testing.T) {
	t.Parallel()
	const in = `{"messages":[{"role":"user","content":"q"}]}`
	tests := []struct {
		name string
		row  string
		rule string
	}{
		{"a user input and two assistant outputs", `{"input":` + in + `,"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, ""},
		{"outputs with tool calls answering the input's tools", `{"input":{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}]},"preferred_output":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, ""},
		{"no input", `{"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleMissingInput},
		{"input not an object", `{"input":[],"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleMissingInput},
		{"unknown member", `{"input":` + in + `,"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}],"margin":1}`, dataset.RuleUnknownKey},
		{"unknown input member", `{"input":{"messages":[{"role":"user","content":"q"}],"model":"x"},"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleUnknownKey},
		{"empty input messages", `{"input":{"messages":[]},"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleMissingMessages},
		{"two preferred messages", `{"input":` + in + `,"preferred_output":[{"role":"assistant","content":"a"},{"role":"assistant","content":"a2"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleOutputNotSingleAssistant},
		{"no non-preferred output", `{"input":` + in + `,"preferred_output":[{"role":"assistant","content":"a"}]}`, dataset.RuleOutputNotSingleAssistant},
		{"a user message as output", `{"input":` + in + `,"preferred_output":[{"role":"user","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleOutputNotSingleAssistant},
		{"output arguments not JSON", `{"input":` + in + `,"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{"}}]}]}`, dataset.RuleToolCallArgumentsNotJSON},
		{"an input tool message answering nothing", `{"input":{"messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"c","content":"r"}]},"preferred_output":[{"role":"assistant","content":"a"}],"non_preferred_output":[{"role":"assistant","content":"b"}]}`, dataset.RuleToolCallIDUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkRule(t, dataset.ValidatePreference([]byte(tt.row)), tt.rule)
		})
	}
}

func checkRule(t *testing.T, err error, rule string) {
	t.Helper()
	if rule == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var fe *dataset.FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a FormatError with rule %s", err, rule)
	}
	if fe.Rule != rule {
		t.Errorf("rule = %s (%v), want %s", fe.Rule, err, rule)
	}
	if fe.Pointer == "" && rule != dataset.RuleNotJSON {
		t.Errorf("no pointer in %v", err)
	}
}

// TestGoldenRowsPassOpenAIChecksAndDecodeIntoOpenAIParams reads every sft
// and dpo golden file: each row passes the validator and each message
// decodes into openai-go's message parameter types without losing a
// member (its re-encoding is the same JSON value), tools into its tool
// parameter type.
func TestGoldenRowsPassOpenAIChecksAndDecodeIntoOpenAIParams(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sft.jsonl", "dpo.jsonl", "unicode.jsonl"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			file, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			rows := lines(t, file)
			if len(rows) == 0 {
				t.Fatal("no rows")
			}
			for i, row := range rows {
				var r struct {
					Messages []json.RawMessage `json:"messages"`
					Tools    []json.RawMessage `json:"tools"`
					Input    *struct {
						Messages []json.RawMessage `json:"messages"`
						Tools    []json.RawMessage `json:"tools"`
					} `json:"input"`
					Preferred    []json.RawMessage `json:"preferred_output"`
					NonPreferred []json.RawMessage `json:"non_preferred_output"`
				}
				if err := json.Unmarshal(row, &r); err != nil {
					t.Fatalf("row %d: %v", i, err)
				}
				validate := dataset.ValidateChat
				msgs, tools := r.Messages, r.Tools
				if r.Input != nil {
					validate = dataset.ValidatePreference
					msgs = append(append(append([]json.RawMessage{}, r.Input.Messages...), r.Preferred...), r.NonPreferred...)
					tools = r.Input.Tools
				}
				if err := validate(row); err != nil {
					t.Errorf("row %d refused: %v", i, err)
				}
				for j, m := range msgs {
					var p openai.ChatCompletionMessageParamUnion
					if err := json.Unmarshal(m, &p); err != nil {
						t.Errorf("row %d message %d does not decode into openai-go: %v", i, j, err)
						continue
					}
					if p.GetRole() == nil {
						t.Errorf("row %d message %d decoded into no variant: %s", i, j, m)
						continue
					}
					back, err := json.Marshal(p)
					if err != nil {
						t.Fatal(err)
					}
					// openai-go writes a null member as absent, which
					// means the same.
					if !jsonEqual(t, back, dropNulls(t, m)) {
						t.Errorf("row %d message %d changes through openai-go:\n got %s\nwant %s", i, j, back, m)
					}
				}
				for j, tl := range tools {
					var p openai.ChatCompletionToolUnionParam
					if err := json.Unmarshal(tl, &p); err != nil || p.OfFunction == nil {
						t.Errorf("row %d tool %d does not decode into openai-go's function tool: %v", i, j, err)
					}
				}
				if bytes.Contains(row, []byte("\u2028")) {
					t.Errorf("row %d holds a raw U+2028", i)
				}
			}
		})
	}
}

// sameMessage reports whether a message in a chat row is the recorded
// one: the same JSON value once the members that say nothing (null, an
// empty annotations) are left out of the recorded one.
func sameMessage(t testing.TB, got, recorded []byte) bool {
	t.Helper()
	return jsonEqual(t, got, dropNulls(t, recorded))
}

// dropNulls removes a message's null members and an empty annotations.
func dropNulls(t testing.TB, msg json.RawMessage) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if string(v) == "null" || k == "annotations" && string(v) == "[]" {
			delete(m, k)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
