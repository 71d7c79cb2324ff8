package jsonpointer

import (
	"slices"
	"testing"
)

func TestSplitAndResolve(t *testing.T) {
	t.Parallel()
	doc := map[string]any{"a/b": []any{"x", map[string]any{"~k": 1.0}}, "": "empty"}
	for _, tc := range []struct {
		p    string
		toks []string
		ok   bool
		want any
		hit  bool
	}{
		{p: "", toks: nil, ok: true, want: doc, hit: true},
		{p: "/", toks: []string{""}, ok: true, want: "empty", hit: true},
		{p: "/a~1b/1/~0k", toks: []string{"a/b", "1", "~k"}, ok: true, want: 1.0, hit: true},
		{p: "/a~1b/01", toks: []string{"a/b", "01"}, ok: true},
		{p: "/a~1b/+1", toks: []string{"a/b", "+1"}, ok: true},
		{p: "/a~1b/-0", toks: []string{"a/b", "-0"}, ok: true},
		{p: "/a~1b/2", toks: []string{"a/b", "2"}, ok: true},
		{p: "/missing", toks: []string{"missing"}, ok: true},
		{p: "a", ok: false},
		{p: "/a~2", ok: false},
		{p: "/a~", ok: false},
	} {
		toks, err := Split(tc.p)
		if (err == nil) != tc.ok || !slices.Equal(toks, tc.toks) {
			t.Errorf("Split(%q) = %q, %v; want %q, ok %v", tc.p, toks, err, tc.toks, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		got, hit := Resolve(doc, toks)
		if hit != tc.hit || (hit && tc.p != "" && got != tc.want) {
			t.Errorf("Resolve(%q) = %v, %v; want %v, %v", tc.p, got, hit, tc.want, tc.hit)
		}
	}
}
