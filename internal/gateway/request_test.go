package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/jcs"
)

func TestParseChatRequest_Refusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, code, param string
	}{
		{"not an object", `[]`, CodeInvalidRequest, ""},
		{"not json", `{"messages":`, CodeInvalidRequest, "messages"},
		{"trailing data", `{"messages":[]} {}`, CodeInvalidRequest, ""},
		{"duplicate member", `{"messages":[],"messages":[]}`, CodeInvalidRequest, "messages"},
		{"no messages", `{"model":"m"}`, "missing_required_parameter", "messages"},
		{"messages not an array", `{"messages":{}}`, CodeInvalidRequest, "messages"},
		{"message not an object", `{"messages":["hi"]}`, CodeInvalidRequest, "messages[0]"},
		{"message not I-JSON", `{"messages":[{"role":"user","content":"a","content":"b"}]}`, CodeInvalidRequest, "messages[0]"},
		{"lone surrogate", `{"messages":[{"role":"user","content":"\ud800"}]}`, CodeInvalidRequest, "messages[0]"},
		{"stream not a boolean", `{"messages":[],"stream":"yes"}`, CodeInvalidRequest, "stream"},
		{"stream_options not an object", `{"messages":[],"stream":true,"stream_options":true}`, CodeInvalidRequest, "stream_options"},
		{"model not a string", `{"messages":[],"model":7}`, CodeInvalidRequest, "model"},
		{"invalid utf-8", "{\"messages\":[],\"x\":\"\xff\"}", CodeInvalidRequest, ""},
	} {
		_, e := parseChatRequest([]byte(tc.body))
		if e == nil || e.Status != 400 || e.Code != tc.code || e.Param != tc.param {
			t.Errorf("%s: %+v, want 400 %s at %q", tc.name, e, tc.code, tc.param)
		}
	}
}

func TestForward_ReplacesOnlyWhatThePolicySays(t *testing.T) {
	t.Parallel()
	temp := json.RawMessage(`0.7`)
	tok := "tok"
	pol := Policy{Name: "p", Upstream: "u", Model: "served", Tokenizer: &tok,
		SamplingOverrides: map[string]json.RawMessage{"temperature": temp, "seed": json.RawMessage(`42`)}}
	tests := []struct {
		name, body  string
		want        string
		clientUsage bool
		agent       map[string]string
		added       []string
	}{
		{
			name:  "replace in place, append what is missing, keep the rest byte for byte",
			body:  `{"model":"gpt-x", "x_unknown" : {"b":1,"a":[1.50,"\u00e9"]},"temperature":0.2,"messages":[{"role":"user","content":"hi"}]}`,
			want:  `{"model":"served","x_unknown":{"b":1,"a":[1.50,"\u00e9"]},"temperature":0.7,"messages":[{"content":"hi","role":"user"}],"seed":42}`,
			agent: map[string]string{"model": `"gpt-x"`, "temperature": `0.2`}, added: []string{"seed"},
		},
		{
			name:  "streams ask for usage",
			body:  `{"messages":[],"stream":true}`,
			want:  `{"messages":[],"stream":true,"model":"served","seed":42,"temperature":0.7,"stream_options":{"include_usage":true}}`,
			agent: map[string]string{}, added: []string{"model", "seed", "temperature", "stream_options"},
		},
		{
			name:  "other stream options are kept",
			body:  `{"messages":[],"stream":true,"stream_options":{"x":1,"include_usage":false},"model":"m"}`,
			want:  `{"messages":[],"stream":true,"stream_options":{"x":1,"include_usage":true},"model":"served","seed":42,"temperature":0.7}`,
			agent: map[string]string{"stream_options": `{"x":1,"include_usage":false}`, "model": `"m"`}, added: []string{"seed", "temperature"},
		},
		{
			name:        "a client that asked for usage keeps it",
			body:        `{"messages":[],"stream":true,"stream_options":{"include_usage":true}}`,
			want:        `{"messages":[],"stream":true,"stream_options":{"include_usage":true},"model":"served","seed":42,"temperature":0.7}`,
			clientUsage: true, agent: map[string]string{}, added: []string{"model", "seed", "temperature"},
		},
	}
	for _, tc := range tests {
		req, e := parseChatRequest([]byte(tc.body))
		if e != nil {
			t.Fatalf("%s: %v", tc.name, e)
		}
		f := req.forward(pol)
		if string(f.body) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, f.body, tc.want)
		}
		if f.clientUsage != tc.clientUsage {
			t.Errorf("%s: clientUsage = %v", tc.name, f.clientUsage)
		}
		if len(f.agent) != len(tc.agent) || strings.Join(f.absent, ",") != strings.Join(tc.added, ",") {
			t.Errorf("%s: agent values %s, added %v", tc.name, asStrings(f.agent), f.absent)
		}
		for k, v := range tc.agent {
			if string(f.agent[k]) != v {
				t.Errorf("%s: agent %s = %s, want %s", tc.name, k, f.agent[k], v)
			}
		}
		// head + messages + tail is the body: the stored request rebuilds.
		var msgs bytes.Buffer
		writeMessages(&msgs, req.messages)
		if got := string(f.head) + msgs.String() + string(f.tail); got != string(f.body) {
			t.Errorf("%s: head/tail do not rebuild the body:\n%s", tc.name, got)
		}
	}
}

func asStrings(m map[string]json.RawMessage) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func TestParseChatRequest_ConsumedToolCallIDsAndCanonicalMessages(t *testing.T) {
	t.Parallel()
	body := `{"messages":[
		{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"a","content":"1"},
		{"content":"2","tool_call_id":"b","role":"tool"},
		{"role":"user","tool_call_id":"not-a-tool-message","content":"x"}]}`
	req, e := parseChatRequest([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	if strings.Join(req.consumed, ",") != "a,b" {
		t.Errorf("consumed = %v", req.consumed)
	}
	for i, m := range req.messages {
		c, err := jcs.Canonicalize(m)
		if err != nil || !bytes.Equal(c, m) {
			t.Errorf("message %d is not canonical: %s", i, m)
		}
	}
}

func TestForward_CaptureTokens(t *testing.T) {
	t.Parallel()
	req, _ := parseChatRequest([]byte(`{"messages":[],"logprobs":false}`))
	f := req.forward(Policy{Model: "m", CaptureTokens: true})
	if string(f.body) != `{"messages":[],"logprobs":true,"model":"m","return_token_ids":true}` {
		t.Errorf("body %s", f.body)
	}
}

func FuzzParseChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"t"}]}],"stream_options":{"a":1}}`,
		`{"messages":[]}`, `[]`, `{"messages":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, e := parseChatRequest(b)
		if e != nil {
			if e.Status != 400 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		fw := req.forward(Policy{Model: "m", SamplingOverrides: map[string]json.RawMessage{"temperature": json.RawMessage("1")}})
		if !json.Valid(fw.body) {
			t.Fatalf("forwarded body is not JSON: %s", fw.body)
		}
		var msgs bytes.Buffer
		writeMessages(&msgs, req.messages)
		if string(fw.head)+msgs.String()+string(fw.tail) != string(fw.body) {
			t.Fatal("head/tail do not rebuild the body")
		}
	})
}
