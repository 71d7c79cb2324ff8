package api

import (
	"errors"
	"testing"

	"github.com/gyrehq/gyre"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/":            "/",
		"/a/b":         "/a/b",
		"/a/b/":        "/a/b/",
		"/a//b":        "/a/b",
		"/a/./b":       "/a/b",
		"/a/../b":      "/b",
		"/a/..":        "/",
		"":             "/",
		"a":            "/a",
		"/api/v1/keys": "/api/v1/keys",
	} {
		if got := cleanPath(in); got != want {
			t.Errorf("cleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEscapePointer(t *testing.T) {
	t.Parallel()
	if got := escapePointer("a/b~c"); got != "a~1b~0c" {
		t.Fatalf("escapePointer = %q", got)
	}
}

func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{
		`{"role":"reader"}`, `{"role":"agent","agent_ids":["a"]}`, `{"x":1}`, `[]`, `null`, ``,
		`{"role":"a","role":"b"}`, `{"agent_ids":[1]}`, "{\"name\":\"\xff\"}", `{"role":"r"} x`, `{"a":{"b":[{}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var dst struct {
			Role     gyre.Role `json:"role"`
			AgentIDs []string  `json:"agent_ids"`
			Name     string    `json:"name"`
		}
		err := decodeObject(b, &dst)
		if err == nil {
			return
		}
		var ge *gyre.Error
		if !errors.As(err, &ge) || ge.Code != gyre.CodeInvalidBody {
			t.Fatalf("decodeObject(%q) = %v, want an invalid_body *gyre.Error", b, err)
		}
	})
}
