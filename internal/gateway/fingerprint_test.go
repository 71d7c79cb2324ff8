package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

func TestJoinToolCalls(t *testing.T) {
	t.Parallel()
	call := func(seq int, emitted, consumed []string) store.GatewayCall {
		c := store.GatewayCall{Seq: seq}
		c.EmittedIDs, c.ConsumedIDs = emitted, consumed
		return c
	}
	calls := []store.GatewayCall{
		call(1, []string{"a", "dup"}, nil),
		call(2, []string{"dup", "twice"}, []string{"a"}),
		call(3, []string{"twice"}, []string{"dup"}),
		call(4, []string{"dup"}, nil),
		call(5, []string{"never-consumed"}, nil),
		call(6, []string{"never-consumed"}, nil),
	}
	id := func(s string) *string { return &s }
	seq := func(n int) *int { return &n }
	tests := []struct {
		name      string
		id        *string
		seq       *int
		ambiguous bool
	}{
		{"emitted once", id("a"), seq(1), false},
		// Emitted by 1, 2 and 4, consumed first by 3: the latest before 3.
		{"emitted several times", id("dup"), seq(2), true},
		// Emitted by 2 and 3, never consumed: the latest.
		{"emitted twice, not consumed", id("twice"), seq(3), true},
		{"latest emitter when never consumed", id("never-consumed"), seq(6), true},
		{"never emitted", id("ghost"), nil, false},
		{"no id", nil, nil, false},
	}
	var reported []ReportedToolCall
	for _, tc := range tests {
		reported = append(reported, ReportedToolCall{ToolCallID: tc.id, Name: tc.name})
	}
	got := JoinToolCalls(reported, calls)
	if len(got) != len(tests) {
		t.Fatalf("%d joins", len(got))
	}
	for i, tc := range tests {
		j := got[i]
		if j.Name != tc.name || (j.CompletionSeq == nil) != (tc.seq == nil) || (tc.seq != nil && *j.CompletionSeq != *tc.seq) ||
			j.Ambiguous != tc.ambiguous {
			t.Errorf("%s: %+v (seq %v), want seq %v ambiguous %v", tc.name, j, deref(j.CompletionSeq), deref(tc.seq), tc.ambiguous)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestCallFingerprint_Golden(t *testing.T) {
	t.Parallel()
	req, e := parseChatRequest([]byte(`{"model":"x","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],
		"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"temperature":0.50,"n":1,"stop":["\n"],
		"tool_choice":"auto","user":"not-sampling"}`))
	if e != nil {
		t.Fatal(e)
	}
	f := req.forward(Policy{Model: "served", SamplingOverrides: map[string]json.RawMessage{"seed": json.RawMessage("7")}})
	tok := "llama3"
	fp := callFingerprint(req.messages, f.members, &tok)
	// The prompt hash is the SHA-256 of the JCS of the messages array.
	sum := sha256.Sum256([]byte(`[{"content":"hi","role":"user"},{"content":"yo","role":"assistant"}]`))
	if fp.PromptSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("prompt_sha256 %s", fp.PromptSHA256)
	}
	tools, _ := jcs.Hash([]byte(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`))
	if fp.ToolsSHA256 == nil || *fp.ToolsSHA256 != tools {
		t.Errorf("tools_sha256 %v", fp.ToolsSHA256)
	}
	if string(fp.Sampling) != `{"n":1,"seed":7,"stop":["\n"],"temperature":0.5,"tool_choice":"auto"}` {
		t.Errorf("sampling %s", fp.Sampling)
	}
	if fp.Tokenizer == nil || *fp.Tokenizer != "llama3" {
		t.Errorf("tokenizer %v", fp.Tokenizer)
	}
	// Pinned: a change here changes every stored fingerprint.
	if fp.PromptSHA256 != "c250886073cb6456f10150766a9fab9bb8b5b77db57103943a440c3d3c42794f" {
		t.Errorf("prompt_sha256 %s moved from its pinned value", fp.PromptSHA256)
	}
}

func TestServerFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(prompt string, tools *string, sampling, tok string) json.RawMessage {
		tk := &tok
		if tok == "" {
			tk = nil
		}
		b, _ := json.Marshal(CallFingerprint{PromptSHA256: prompt, ToolsSHA256: tools, Sampling: json.RawMessage(sampling), Tokenizer: tk})
		return b
	}
	t1 := "tools-1"
	mk := func(seq int, counted bool, f json.RawMessage) store.GatewayCall {
		c := store.GatewayCall{Seq: seq}
		c.Counted, c.Fingerprint = counted, f
		return c
	}
	calls := []store.GatewayCall{
		mk(1, true, fp("p1", &t1, `{"temperature":1}`, "tok")),
		mk(2, false, fp("failed", nil, `{}`, "tok")),
		mk(3, true, fp("p2", &t1, `{"temperature":1}`, "tok")),
		mk(4, true, fp("p3", nil, `{"temperature":0}`, "tok")),
	}
	got := string(ServerFingerprint(calls))
	want := `{"prompt_sha256":["p1","p2","p3"],"sampling":[{"temperature":1},{"temperature":0}],"tokenizer":"tok","tools_sha256":["tools-1"]}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if ServerFingerprint(calls[1:2]) != nil {
		t.Error("a rollout without counted completions has a fingerprint")
	}
}
