package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

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
		{"messages null", `{"messages":null}`, CodeInvalidRequest, "messages"},
		{"duplicate among many members", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"b":0,"messages":[]}`, CodeInvalidRequest, "b"},
		{"number out of range", `{"messages":[{"role":"user","content":1e999}]}`, CodeInvalidRequest, "messages[0]"},
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
		`{"messages":[{"role":"tool","tool_call_id":"\u0061","content":"x"}],"model":"\u00e9","stream":false}`,
		`{"messages":[{"role":"user","content":"\ud800"}]}`, `{"messages":[{"a":1,"a":2}]}`, `{"messages":null}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":0,"messages":[]}`,
		`{"messages":[1e999]}`, `{"messages":[{"n":1e999}]}`, ` {"messages":[] } `, `{"messages":[]`, `{"messages":[]}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, e := parseChatRequest(b)
		sameAsReference(t, b, req, e)
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

// BenchmarkParseChatRequest parses a short request (the gateway benchmark's)
// and a ten-turn conversation with tool calls.
func BenchmarkParseChatRequest(b *testing.B) {
	var long strings.Builder
	long.WriteString(`{"model":"agent-model","stream":true,"temperature":0.2,"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"order":{"type":"string"}}}}}],"messages":[{"role":"system","content":"You are a support agent."}`)
	for i := range 5 {
		fmt.Fprintf(&long, `,{"role":"user","content":"Please look up order %d and refund it if it was late."}`, i)
		fmt.Fprintf(&long, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"lookup","arguments":"{\"order\":\"%d\"}"}}]}`, i, i)
		fmt.Fprintf(&long, `,{"role":"tool","tool_call_id":"call_%d","content":"{\"late\":true,\"amount\":12.5}"}`, i)
	}
	long.WriteString(`]}`)
	for _, tc := range []struct{ name, body string }{
		{"short", `{"model":"agent-model","stream":true,"messages":[{"role":"system","content":"You are a support agent."},{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`},
		{"conversation", long.String()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body := []byte(tc.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, e := parseChatRequest(body); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// TestParseChatRequest_SameAsReference holds parseChatRequest to a
// reference built on encoding/json and jcs.Canonicalize, on bodies that
// take each rule.
func TestParseChatRequest_SameAsReference(t *testing.T) {
	t.Parallel()
	var many strings.Builder
	many.WriteString(`{"messages":[]`)
	for i := range 40 {
		fmt.Fprintf(&many, `,"k%d":%d`, i, i)
	}
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{"content":"2","tool_call_id":"b","role":"tool"},{"role":"tool","tool_call_id":7},{"role":"tool","tool_call_id":null}]}`,
		`{"messages":[{"role":"tool","tool_call_id":"\u0061\n","content":"x"}],"model":"\u00e9","stream":false}`,
		`{"messages":[{"role":"user","content":"\ud800"}]}`, `{"messages":[{"a":{"b":1,"b":2}}]}`, `{"messages":null}`,
		`{"messages":[1]}`, `{"messages":{}}`, `{"messages":[],"stream":null,"model":null,"stream_options":null}`,
		`{"messages":[],"stream":1}`, `{"messages":[],"model":["m"]}`, `{"messages":[],"stream_options":[]}`,
		many.String() + `}`, many.String() + `,"k39":0}`, many.String() + `,"messages":[]}`,
		`{"messages":[{"n":1e999}]}`, ` {"messages":[] } `, `{"messages":[]`, `{"messages":[]}x`, `[]`, `"x"`, ``,
		`{"a":1,"a":2,"messages":[}`, `{"messages":[{"x":[` + strings.Repeat("[", 30) + strings.Repeat("]", 30) + `]}]}`,
	} {
		req, e := parseChatRequest([]byte(body))
		sameAsReference(t, []byte(body), req, e)
	}
}

// sameAsReference fails t unless req and e are what referenceParse makes
// of body.
func sameAsReference(t *testing.T, body []byte, req *request, e *apiError) {
	t.Helper()
	want, we := referenceParse(body)
	switch {
	case (e == nil) != (we == nil):
		t.Fatalf("%q: error %+v, reference %+v", body, e, we)
	case e != nil:
		if *e != *we {
			t.Fatalf("%q: error %+v, reference %+v", body, e, we)
		}
		return
	}
	got := fmt.Sprintf("%q %q %q %v %v", req.members, req.messages, req.consumed, req.stream, deref(req.model))
	if ref := fmt.Sprintf("%q %q %q %v %v", want.members, want.messages, want.consumed, want.stream, deref(want.model)); got != ref {
		t.Fatalf("%q:\n got       %s\n reference %s", body, got, ref)
	}
}

// referenceParse is parseChatRequest written plainly with encoding/json and
// jcs.Canonicalize: slower, and the oracle the fast one is held to.
func referenceParse(body []byte) (*request, *apiError) {
	if !utf8.Valid(body) {
		return nil, errInvalid("", "The request body is not valid UTF-8.")
	}
	if !json.Valid(body) {
		return nil, syntaxError(body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return nil, errInvalid("", "The request body must be a JSON object.")
	}
	req := &request{itemsKey: "messages"}
	seen := map[string]bool{}
	for dec.More() {
		tok, _ := dec.Token()
		key := tok.(string)
		var raw json.RawMessage
		_ = dec.Decode(&raw)
		if seen[key] {
			return nil, errInvalid(key, fmt.Sprintf("Member %q appears more than once.", key))
		}
		seen[key] = true
		req.members = append(req.members, member{key: key, val: raw})
	}
	msgs, ok := req.get("messages")
	if !ok {
		return nil, &apiError{Status: 400, Code: "missing_required_parameter", Param: "messages",
			Message: "Missing required parameter: 'messages'."}
	}
	var raws []json.RawMessage
	if isNull(msgs) || json.Unmarshal(msgs, &raws) != nil {
		return nil, errInvalid("messages", "'messages' must be an array of message objects.")
	}
	req.messages = make([][]byte, len(raws))
	for i, m := range raws {
		param := fmt.Sprintf("messages[%d]", i)
		if m[0] != '{' {
			return nil, errInvalid(param, fmt.Sprintf("'%s' must be an object.", param))
		}
		c, err := jcs.Canonicalize(m)
		if err != nil {
			return nil, errInvalid(param, fmt.Sprintf("'%s' is not I-JSON (RFC 7493): %v", param, err))
		}
		req.messages[i] = c
		var head map[string]json.RawMessage // exact member names
		_ = json.Unmarshal(c, &head)
		var role, id string
		if json.Unmarshal(head["role"], &role) == nil && role == "tool" && json.Unmarshal(head["tool_call_id"], &id) == nil &&
			string(head["tool_call_id"]) != "null" {
			req.consumed = append(req.consumed, id)
		}
	}
	if v, ok := req.get("stream"); ok && !isNull(v) {
		if err := json.Unmarshal(v, &req.stream); err != nil {
			return nil, errInvalid("stream", "'stream' must be a boolean.")
		}
	}
	if v, ok := req.get("stream_options"); ok && !isNull(v) && v[0] != '{' {
		return nil, errInvalid("stream_options", "'stream_options' must be an object.")
	}
	if v, ok := req.get("model"); ok && !isNull(v) {
		var m string
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, errInvalid("model", "'model' must be a string.")
		}
		req.model = &m
	}
	return req, nil
}
