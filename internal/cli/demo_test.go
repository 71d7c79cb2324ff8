package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"./gyre-data", "./gyre-data"},
		{"/tmp/a_b-c.d", "/tmp/a_b-c.d"},
		{"my data", "'my data'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"", "''"},
	} {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// The next commands carry the store flags the demo ran with, never a
// database password.
func TestDemoNext(t *testing.T) {
	t.Parallel()
	const id, prev = "01a2-this", "01a1-prev"
	cmds := func(steps []demoStep) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.cmd)
		}
		return out
	}

	def := Defaults()
	got := cmds(demoNext(def, id, nil, "gyre-data/demo"))
	want := []string{
		"gyre eval show 01a2-this",
		"gyre eval compare 01a2-this <next demo's id>",
		"go run ./examples/harness",
		"gyre harness check http://127.0.0.1:8080",
		"gyre eval run gyre-data/demo --harness http://127.0.0.1:8080",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("default store (-want +got):\n%s", diff)
	}

	c := Defaults()
	c.Data, c.DB = "/srv/my data", "postgres://gyre:s3cret@db:5432/gyre"
	p := prev
	got = cmds(demoNext(c, id, &p, "/srv/my data/demo"))
	flags := " --data '/srv/my data' --db postgres://gyre:xxxxx@db:5432/gyre"
	want = []string{
		"gyre eval show 01a2-this" + flags,
		"gyre eval compare 01a1-prev 01a2-this" + flags,
		"go run ./examples/harness",
		"gyre harness check http://127.0.0.1:8080",
		"gyre eval run '/srv/my data/demo' --harness http://127.0.0.1:8080" + flags,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("custom store (-want +got):\n%s", diff)
	}
	for _, s := range got {
		if strings.Contains(s, "s3cret") {
			t.Errorf("%q shows the password", s)
		}
	}
	if d := storeDescription(c); strings.Contains(d, "s3cret") || !strings.HasPrefix(d, "PostgreSQL ") {
		t.Errorf("storeDescription = %q", d)
	}
	if d := storeDescription(def); d != "SQLite gyre-data/gyre.db" {
		t.Errorf("storeDescription = %q", d)
	}
}
