package harnesskit_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

// A capabilities snapshot through the types loses nothing: unknown members,
// at the top and nested, come back byte for byte.
func TestCapabilities_KeepsUnknownMembers(t *testing.T) {
	t.Parallel()
	in := `{"contract_version":"v1","agent":"acme","revision":"abc123","branch":null,` +
		`"input_schema":{"type":"object","required":["question"]},"check_input":{"question":"2+2?"},` +
		`"provides":{"trajectory":true,"tool_calls":true,"thinking":false,"token_usage":false,"artifacts":false,"workspace":true,"run_listing":false,"x_video":true},` +
		`"accepts":{"files":false,"file_urls":true,"model_override":false,"stop":true},` +
		`"limits":{"max_concurrent_runs":4,"max_tokens":100000},` +
		`"vendor":{"name":"Acme","tier":[1,2]},"Agent":"case differs"}`
	var c harnesskit.Capabilities
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	if c.Agent != "acme" {
		t.Errorf("Agent = %q: a differently-cased key must not override it", c.Agent)
	}
	if string(c.Extra["vendor"]) != `{"name":"Acme","tier":[1,2]}` || string(c.Extra["Agent"]) != `"case differs"` {
		t.Errorf("Extra = %v", c.Extra)
	}
	if c.Branch != nil || c.Revision == nil || *c.Revision != "abc123" {
		t.Errorf("Revision/Branch = %v/%v", c.Revision, c.Branch)
	}
	if string(c.Provides.Extra["x_video"]) != "true" || string(c.Limits.Extra["max_tokens"]) != "100000" {
		t.Error("nested unknown members lost")
	}
	if *c.Limits.MaxConcurrentRuns != 4 || !c.Accepts.FileURLs || c.Accepts.Files {
		t.Error("known members lost")
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	delete(a, "branch") // null is the default and is omitted
	if !reflect.DeepEqual(a, b) {
		t.Errorf("round trip changed the document:\n in %s\nout %s", in, out)
	}
}

func TestCapabilities_Version(t *testing.T) {
	t.Parallel()
	if v := (harnesskit.Capabilities{}).Version(); v != "v1" {
		t.Errorf("default Version() = %q", v)
	}
	if v := (harnesskit.Capabilities{ContractVersion: "v2"}).Version(); v != "v2" {
		t.Errorf("Version() = %q", v)
	}
}

func TestExtra_NamedMembersWin(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(harnesskit.RunCreated{RunID: "r1", Extra: map[string]json.RawMessage{"run_id": json.RawMessage(`"shadow"`), "a": nil}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"run_id":"r1","a":null}` {
		t.Errorf("got %s", b)
	}
	b, err = json.Marshal(harnesskit.RunMetadata{Extra: map[string]json.RawMessage{"z": json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"z":1}` {
		t.Errorf("got %s", b)
	}
}

func TestTypes_RoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		in   string
	}{
		{"RunRequest", &harnesskit.RunRequest{}, `{"input":{"question":"2+2?","n":1.50},"model":"gpt-x","metadata":{"experiment_id":"e","case_id":"c","repetition":2,"trace":"t"},"files":[{"name":"a.csv","url":"s3://b/k","context":"sales"}]}`},
		{"RunStatus", &harnesskit.RunStatus{}, `{"status":"completed","answer":"4","output":{"value":4},"model":"m","artifacts":[{"name":"report","path":"out/r.md","content_type":"text/markdown","size":3}],"error":"partial","usage":{"tokens":7}}`},
		{"RunList", &harnesskit.RunList{}, `{"runs":[{"run_id":"r","title":"t","user_id":"u","client_id":"c","created_at":"2025-01-31T12:00:00","session_id":"s"}],"total":1,"next":null}`},
		{"FileList", &harnesskit.FileList{}, `{"files":[{"path":"a/b.txt","size":12,"content_type":"text/plain"}]}`},
		{"RunCreated", &harnesskit.RunCreated{}, `{"run_id":"r-1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := json.Unmarshal([]byte(tt.in), tt.v); err != nil {
				t.Fatal(err)
			}
			out, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			var a, b any
			_ = json.Unmarshal([]byte(tt.in), &a)
			_ = json.Unmarshal(out, &b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("round trip changed the document:\n in %s\nout %s", tt.in, out)
			}
		})
	}
	// Input is kept verbatim, never rewritten.
	var r harnesskit.RunRequest
	if err := json.Unmarshal([]byte(`{"input":{"n":1.50, "q":"<b>"}}`), &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Input) != `{"n":1.50, "q":"<b>"}` {
		t.Errorf("Input = %s", r.Input)
	}
}

func TestLists_NilEncodesAsEmpty(t *testing.T) {
	t.Parallel()
	for _, v := range []any{harnesskit.RunList{}, harnesskit.FileList{}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != `{"runs":[],"total":0}` && string(b) != `{"files":[]}` {
			t.Errorf("got %s", b)
		}
	}
}

func TestRunRequest_InputIsRequired(t *testing.T) {
	t.Parallel()
	if b, err := json.Marshal(harnesskit.RunRequest{}); err == nil {
		t.Errorf("marshalled %s without input", b)
	}
	b, err := json.Marshal(harnesskit.RunRequest{Input: json.RawMessage(`{}`)})
	if err != nil || string(b) != `{"input":{}}` {
		t.Errorf("got %s, %v", b, err)
	}
}

func TestUnmarshal_RejectsNonObjects(t *testing.T) {
	t.Parallel()
	var c harnesskit.Capabilities
	if err := json.Unmarshal([]byte(`[]`), &c); err == nil {
		t.Error("decoded an array as Capabilities")
	}
	if err := json.Unmarshal([]byte(`{"agent":7}`), &c); err == nil {
		t.Error("decoded a numeric agent")
	}
	c = harnesskit.Capabilities{Agent: "keep"}
	if err := json.Unmarshal([]byte(`null`), &c); err != nil || c.Agent != "keep" {
		t.Errorf("null changed the value: %+v, %v", c, err)
	}
}

// Through an encoder that does not escape HTML, nothing inside the types
// escapes it either.
func TestMarshal_NoHTMLEscaping(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(harnesskit.RunRequest{Input: json.RawMessage(`{"q":"<b>&"}`), Model: ptr("a&b")}); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != `{"input":{"q":"<b>&"},"model":"a&b"}`+"\n" {
		t.Errorf("got %s", got)
	}
}

func ptr[T any](v T) *T { return &v }
