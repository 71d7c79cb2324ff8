package harnesscheck

import (
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/eval"
)

func TestPathProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path       string
		fail, warn bool
	}{
		{"out.txt", false, false},
		{"out/answer.txt", false, false},
		{"a/b/c.d", false, false},
		{"..hidden/x", false, false},
		{"/etc/passwd", true, false},
		{`\\server\share`, true, false},
		{`C:\Windows\x`, true, false},
		{"c:/x", true, false},
		{"../x", true, false},
		{"a/../../x", true, false},
		{`a\..\x`, true, false},
		{"a/..", true, false},
		{"", false, true},
		{"a//b", false, true},
		{"./a", false, true},
		{"a/", false, true},
		{"a\x00b", false, true},
		{`a\b`, false, true},
	}
	for _, tc := range tests {
		fail, warn := pathProblem(tc.path)
		if (fail != "") != tc.fail || (warn != "") != tc.warn {
			t.Errorf("pathProblem(%q) = %q, %q; want fail=%v warn=%v", tc.path, fail, warn, tc.fail, tc.warn)
		}
	}
}

// FuzzPathProblem: a path pathProblem passes is relative, has no ..
// segment, and is one gyre eval fetches.
func FuzzPathProblem(f *testing.F) {
	for _, s := range []string{"a/b", "/a", "../a", "a/./b", `a\..\b`, "C:x", "é/ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		fail, warn := pathProblem(p)
		if fail != "" && warn != "" {
			t.Fatalf("both fail %q and warn %q", fail, warn)
		}
		if fail != "" || warn != "" {
			return
		}
		if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
			t.Fatalf("%q is absolute, yet passes", p)
		}
		for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
			if seg == ".." {
				t.Fatalf("%q has a .. segment, yet passes", p)
			}
		}
		if _, err := eval.WorkspacePath(p); err != nil {
			t.Fatalf("%q passes but gyre eval refuses it: %v", p, err)
		}
	})
}

func TestIDQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target string
		others []string
		want   string
		ok     bool
	}{
		{"0198c6a2-1b3c-7def-8000-000000000001", nil, "0198C6A2", true},
		{"0198c6a2-1b3c-7def-8000-000000000001", []string{"0198c6a2-1b3c-7def-8000-000000000002"}, "0198C6A2-1B3C-7DEF-8000-000000000001", true},
		{"0198c6a2-1b3c-7def-8000-000000000001", []string{"0198c6a2-ffff-7def-8000-000000000002"}, "0198C6A2-1", true},
		{"abcdef12", nil, "ABCDEF12", true},
		{"abcdef1", nil, "", false},
		{"run-42", nil, "", false},
		{"sess_0198c6a21b3c", nil, "", false},
	}
	for _, tc := range tests {
		got, ok := idQuery(tc.target, tc.others)
		if got != tc.want || ok != tc.ok {
			t.Errorf("idQuery(%q, %q) = %q, %v; want %q, %v", tc.target, tc.others, got, ok, tc.want, tc.ok)
		}
		if ok && !idMatches(tc.target, got) {
			t.Errorf("idQuery(%q) = %q, which does not match its own id", tc.target, got)
		}
		for _, o := range tc.others {
			if ok && idMatches(o, got) {
				t.Errorf("idQuery(%q) = %q also matches %q", tc.target, got, o)
			}
		}
	}
}

func TestTitleProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		title, want string
		ok          bool
	}{
		{"Where is order 1042?", "IS ORDER", true},
		{"Refund", "rEFUND", true},
		{"abc", "ABC", true},
		{"   ", "", false},
		{"deadbeefcafe", "DBEEFC", true},
		{"0123456789abcdef0123456789abcdef", "", false},
		{"0123456789abcdef 0123456789abcdef", "89ABCDEF 0123456", true},
	}
	for _, tc := range tests {
		got, ok := titleProbe(tc.title)
		if got != tc.want || ok != tc.ok {
			t.Errorf("titleProbe(%q) = %q, %v; want %q, %v", tc.title, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzTitleProbe: a probe is a piece of the title, case aside, that does
// not look like an id.
func FuzzTitleProbe(f *testing.F) {
	for _, s := range []string{"Where is order 1042?", "ǅemal", "İstanbul", "ﬀ ligature", "0198c6a2-1b3c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, title string) {
		p, ok := titleProbe(title)
		if !ok {
			return
		}
		if !strings.Contains(strings.ToLower(title), strings.ToLower(p)) {
			t.Fatalf("probe %q is not in title %q, case aside", p, title)
		}
		if _, idLike := hexID(p); idLike {
			t.Fatalf("probe %q looks like an id", p)
		}
	})
}

func TestNoMatchQueryIsNotAnID(t *testing.T) {
	t.Parallel()
	for range 50 {
		q := noMatchQuery()
		if _, idLike := hexID(q); idLike {
			t.Fatalf("%q looks like an id", q)
		}
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text":        "plain text",
		"tab\tkept":         "tab\tkept",
		"esc\x1b[31mred":    "esc\ufffd[31mred",
		"bell\a nul\x00":    "bell\ufffd nul\ufffd",
		"c1\u009bx del\x7f": "c1\ufffdx del\ufffd",
		"bad utf8 \xff":     "bad utf8 \ufffd",
		"é ü 中文 \u2028 ok":  "é ü 中文 \u2028 ok",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}
