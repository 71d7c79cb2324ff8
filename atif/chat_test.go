package atif_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre/atif"
)

func TestToChat(t *testing.T) {
	t.Parallel()
	tr, err := atif.Parse([]byte(`{
	  "schema_version": "ATIF-v1.7",
	  "agent": {"name": "a", "version": "1"},
	  "steps": [
	    {"step_id": 1, "source": "system", "message": "You are terse."},
	    {"step_id": 2, "source": "user", "message": "old context", "is_copied_context": true},
	    {"step_id": 3, "source": "user", "message": [{"type": "text", "text": "What is in"}, {"type": "image", "source": {"media_type": "image/png", "path": "images/x.png"}}]},
	    {"step_id": 4, "source": "agent", "message": "", "reasoning_content": "look first",
	     "tool_calls": [
	       {"tool_call_id": "c1", "function_name": "ls", "arguments": {"path": "/", "all": true}},
	       {"tool_call_id": "c2", "function_name": "pwd", "arguments": {}}],
	     "observation": {"results": [
	       {"source_call_id": "c1", "content": "bin etc"},
	       {"source_call_id": "c2"},
	       {"content": "$ "},
	       {"subagent_trajectory_ref": [{"trajectory_path": "sub.json"}]}]}},
	    {"step_id": 5, "source": "agent", "message": "copied", "is_copied_context": true},
	    {"step_id": 6, "source": "agent", "message": "Done."},
	    {"step_id": 7, "source": "system", "message": "context compacted",
	     "observation": {"results": [{"content": "summary so far"}]}}
	  ]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(atif.ToChat(tr))
	if err != nil {
		t.Fatal(err)
	}
	want := `[
	  {"role": "system", "content": "You are terse."},
	  {"role": "user", "content": [{"type": "text", "text": "What is in"}, {"type": "image_url", "image_url": {"url": "images/x.png"}}]},
	  {"role": "assistant", "content": null, "reasoning_content": "look first", "tool_calls": [
	    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\":\"/\",\"all\":true}"}},
	    {"id": "c2", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]},
	  {"role": "tool", "content": "bin etc", "tool_call_id": "c1"},
	  {"role": "tool", "content": "", "tool_call_id": "c2"},
	  {"role": "user", "content": "$ "},
	  {"role": "assistant", "content": "Done."},
	  {"role": "system", "content": "context compacted"},
	  {"role": "user", "content": "summary so far"}
	]`
	if diff := cmp.Diff(jsonValue(t, want), jsonValue(t, string(got))); diff != "" {
		t.Errorf("ToChat (-want +got):\n%s", diff)
	}
}

// TestToChatTestdata converts every valid sample and checks that the
// messages are what the OpenAI API accepts: each decodes as a chat message
// parameter of its role, and each tool message answers a call made by an
// earlier assistant message.
func TestToChatTestdata(t *testing.T) {
	t.Parallel()
	for name, b := range readFiles(t, "valid") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr, err := atif.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			msgs := atif.ToChat(tr)
			kept := 0
			for _, s := range tr.Steps {
				if !s.Copied() {
					kept++
				}
			}
			if len(msgs) < kept {
				t.Errorf("%d messages for %d steps not copied", len(msgs), kept)
			}
			calls := map[string]bool{}
			for i, m := range msgs {
				raw, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				var p openai.ChatCompletionMessageParamUnion
				if err := json.Unmarshal(raw, &p); err != nil {
					t.Fatalf("message %d: %v\n%s", i, err, raw)
				}
				if role := p.GetRole(); role == nil || *role != m.Role {
					t.Errorf("message %d: openai reads role %v, want %q", i, role, m.Role)
				}
				switch m.Role {
				case atif.RoleAssistant:
					if p.OfAssistant == nil || len(p.OfAssistant.ToolCalls) != len(m.ToolCalls) {
						t.Errorf("message %d: openai reads %+v", i, p.OfAssistant)
					}
					for _, c := range m.ToolCalls {
						calls[c.ID] = true
						var args map[string]any
						if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
							t.Errorf("message %d: arguments %q are not a JSON object", i, c.Function.Arguments)
						}
					}
				case atif.RoleTool:
					if !calls[m.ToolCallID] {
						t.Errorf("message %d answers %q, which no earlier assistant message called", i, m.ToolCallID)
					}
				}
			}
		})
	}
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return v
}
