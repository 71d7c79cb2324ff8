package grade

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestItem_OmitsAdvisoryFields(t *testing.T) {
	t.Parallel()
	forbidden := []string{"reward", "success", "agent_fingerprint"}
	// Every JSON key of the item, by reflection and by encoding.
	typ := reflect.TypeOf(Item{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		for _, bad := range forbidden {
			if strings.EqualFold(tag, bad) || strings.EqualFold(f.Name, strings.ReplaceAll(bad, "_", "")) {
				t.Errorf("Item has field %s (json %q): advisory %s must not reach graders", f.Name, tag, bad)
			}
		}
	}
	b, err := json.Marshal(Item{Kind: KindRollout})
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, bad := range forbidden {
		if _, ok := keys[bad]; ok {
			t.Errorf("encoded item has key %q", bad)
		}
	}
	want := []string{"schema", "kind", "input", "final_text", "answer", "output", "tool_calls",
		"tool_calls_omitted_count", "emitted_tool_calls", "artifacts", "llm_calls", "usage", "steps",
		"trajectory_valid", "provides_tool_calls"}
	for _, k := range want {
		if _, ok := keys[k]; !ok {
			t.Errorf("encoded item lacks key %q (every key is always present)", k)
		}
	}
	if len(keys) != len(want) {
		t.Errorf("encoded item has %d keys, want %d: %s", len(keys), len(want), b)
	}
	if keys["schema"] != ItemSchema {
		t.Errorf("schema = %v, want %s", keys["schema"], ItemSchema)
	}
}

func TestItem_ToolCallsNullVersusEmptyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		wantNil  bool
		wantJSON string
	}{
		{`{"kind":"rollout","tool_calls":null}`, true, `"tool_calls":null`},
		{`{"kind":"rollout"}`, true, `"tool_calls":null`},
		{`{"kind":"rollout","tool_calls":[]}`, false, `"tool_calls":[]`},
	} {
		var it Item
		if err := json.Unmarshal([]byte(tc.in), &it); err != nil {
			t.Fatal(err)
		}
		if (it.ToolCalls == nil) != tc.wantNil {
			t.Errorf("%s: ToolCalls nil = %v, want %v", tc.in, it.ToolCalls == nil, tc.wantNil)
		}
		b, _ := json.Marshal(it)
		if !strings.Contains(string(b), tc.wantJSON) {
			t.Errorf("%s re-encoded as %s, want %s", tc.in, b, tc.wantJSON)
		}
	}
}

func TestItem_DecodesFlywheelToolCallRecord(t *testing.T) {
	t.Parallel()
	rec := `{"name":"issue_refund","arguments":{"order_id":"1042"},"outcome":"ok","status_code":201,
		"output":{"refund_id":"r_9"},"error":null,"error_class":null,"latency_ms":12.5,"agent_name":null,
		"tool_call_id":"call_1","entity_ids":{"id":"r_9"}}`
	var c ToolCall
	if err := json.Unmarshal([]byte(rec), &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != "issue_refund" || c.Outcome != OutcomeOK || *c.StatusCode != 201 || c.EntityIDs["id"] != "r_9" ||
		*c.ToolCallID != "call_1" || *c.LatencyMS != 12.5 {
		t.Errorf("decoded %+v", c)
	}
}

func TestArtifact_AcceptsFlywheelAndItemForms(t *testing.T) {
	t.Parallel()
	digest := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in         string
		wantErr    bool
		digestOnly bool
		skipped    string
		content    string
	}{
		{in: `"` + digest + `"`, digestOnly: true},
		{in: `"skipped:too_large:2000000000"`, skipped: "skipped:too_large:2000000000"},
		{in: `"skipped:symlink"`, skipped: "skipped:symlink"},
		{in: `{"sha256":"` + digest + `","size_bytes":2,"content":"hi"}`, content: "hi"},
		{in: `{"sha256":"` + digest + `","size_bytes":null,"content":null,"skipped":null}`, digestOnly: true},
		{in: `{"sha256":null,"size_bytes":null,"content":null,"skipped":"skipped:symlink"}`, skipped: "skipped:symlink"},
		{in: `"not-a-digest"`, wantErr: true},
		{in: `"` + strings.ToUpper(digest) + `"`, wantErr: true},
		{in: `{"sha256":"` + digest + `","extra":1}`, wantErr: true},
		{in: `{"sha256":"` + digest + `","skipped":"skipped:symlink"}`, wantErr: true},
		{in: `{"content":"x"}`, wantErr: true},
	} {
		var a Artifact
		err := json.Unmarshal([]byte(tc.in), &a)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if a.DigestOnly() != tc.digestOnly || a.Skipped != tc.skipped || (tc.content != "" && *a.Content != tc.content) {
			t.Errorf("%s: got %+v", tc.in, a)
		}
		// The item form round-trips.
		b, _ := json.Marshal(a)
		var back Artifact
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, a) {
			t.Errorf("%s: round trip %s -> %+v (%v)", tc.in, b, back, err)
		}
	}
}

func TestItem_ValidateRejectsUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		it   Item
		ok   bool
	}{
		{"rollout", Item{Kind: KindRollout}, true},
		{"run", Item{Kind: KindRun}, true},
		{"no kind", Item{}, false},
		{"bad schema", Item{Kind: KindRun, Schema: "gyre.graded-item/2"}, false},
		{"bad outcome", Item{Kind: KindRollout, ToolCalls: []ToolCall{{Name: "x", Outcome: "maybe"}}}, false},
		{"empty outcome", Item{Kind: KindRollout, ToolCalls: []ToolCall{{Name: "x"}}}, false},
		{"negative omitted", Item{Kind: KindRollout, ToolCallsOmittedCount: -1}, false},
	} {
		if err := tc.it.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
