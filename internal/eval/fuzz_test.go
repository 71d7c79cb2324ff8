package eval

import (
	"net/url"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

// FuzzDecodeRunStatus: a harness's RunStatus is untrusted input. Decoding
// never panics, and what it accepts keeps the rules the runner relies on.
func FuzzDecodeRunStatus(f *testing.F) {
	for _, s := range []string{
		`{"status":"completed","answer":"a","model":"m"}`,
		`{"status":"running","model":"m","output":null}`,
		`{"status":"completed","output":{"x":[1,2]},"model":"m","artifacts":[{"name":"a","path":"p"}]}`,
		`{"status":"failed","error":"boom","model":"m","extra":{"k":1}}`,
		`{"status":"completed","model":""}`, `[]`, `null`, `{"model":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeRunStatus(b)
		if err != nil {
			return
		}
		if strings.TrimSpace(st.Model) == "" || !st.Status.Valid() {
			t.Fatalf("accepted %q: model %q status %q", b, st.Model, st.Status)
		}
		if st.Status == harnesskit.StatusCompleted && st.Answer == nil && st.Output == nil {
			t.Fatalf("accepted a completed run without answer and output: %q", b)
		}
	})
}

// FuzzWorkspacePath: an accepted workspace path never escapes the run's
// files endpoint.
func FuzzWorkspacePath(f *testing.F) {
	for _, s := range []string{"a.txt", "dir/b c.txt", "../x", "/abs", "a//b", "%2e%2e/x", "a\\..\\b", "é/ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		esc, err := WorkspacePath(p)
		if err != nil {
			return
		}
		u, perr := url.Parse("http://h/runs/r/files/" + esc)
		if perr != nil {
			t.Fatalf("%q escaped to %q, which does not parse: %v", p, esc, perr)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("%q escaped to %q with a query or fragment", p, esc)
		}
		for _, seg := range strings.Split(u.EscapedPath(), "/")[5:] {
			dec, _ := url.PathUnescape(seg)
			if dec == "" || dec == "." || dec == ".." || strings.Contains(dec, "/") {
				t.Fatalf("%q escaped to %q with segment %q", p, esc, seg)
			}
		}
	})
}
