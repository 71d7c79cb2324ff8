package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/ratelimit"
)

func TestParseConfigDoc_Limits(t *testing.T) {
	t.Parallel()
	doc, err := parseConfigDoc([]byte(`
addr: 127.0.0.1:1
limits:
  "*":
    turns:  {per_key: 100/s, per_tenant: 1000/s}
    claims: {per_key: 50/s}
  acme:
    gateway: {per_key: "20/s burst 40", per_tenant: 200/s}
    admin:   {per_tenant: 600/m}
`))
	if err != nil {
		t.Fatal(err)
	}
	if doc.settings["addr"] != "127.0.0.1:1" || len(doc.settings) != 1 {
		t.Errorf("settings %v", doc.settings)
	}
	r := func(events int, per time.Duration, burst int) *ratelimit.Rate {
		return &ratelimit.Rate{Events: events, Per: per, Burst: burst}
	}
	want := ratelimit.Config{
		"*": {
			ratelimit.Turns:  {PerKey: r(100, time.Second, 100), PerTenant: r(1000, time.Second, 1000)},
			ratelimit.Claims: {PerKey: r(50, time.Second, 50)},
		},
		"acme": {
			ratelimit.Gateway: {PerKey: r(20, time.Second, 40), PerTenant: r(200, time.Second, 200)},
			ratelimit.Admin:   {PerTenant: r(600, time.Minute, 600)},
		},
	}
	if got, exp := limitsString(doc.limits), limitsString(want); got != exp {
		t.Errorf("limits\n got %s\nwant %s", got, exp)
	}
}

// limitsString prints a limits config in a stable order.
func limitsString(c ratelimit.Config) string {
	var b strings.Builder
	for _, tenant := range []string{"*", "acme", "beta"} {
		for _, s := range ratelimit.Surfaces {
			l, ok := c[tenant][s]
			if !ok {
				continue
			}
			b.WriteString(tenant + "." + string(s) + ":")
			if l.PerKey != nil {
				b.WriteString(" key " + l.PerKey.String())
			}
			if l.PerTenant != nil {
				b.WriteString(" tenant " + l.PerTenant.String())
			}
			b.WriteString("; ")
		}
	}
	return b.String()
}

func TestParseConfigDoc_LimitErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"limits: 5\n", `line 1: limits must map tenant names (or "*") to their limits`},
		{"limits:\n  acme: 5\n", "line 2: limits.acme must map surfaces (turns, claims, gateway, admin) to rates"},
		{"limits:\n  a/b:\n    turns: {per_key: 1/s}\n", `line 2: limits: "a/b" is not "*" or a tenant name`},
		{"limits:\n  acme:\n    heartbeats: {per_key: 1/s}\n", `line 3: limits.acme: unknown surface "heartbeats" (known: turns, claims, gateway, admin)`},
		{"limits:\n  acme:\n    turns: 1/s\n", "line 3: limits.acme.turns must be a mapping with per_key and/or per_tenant"},
		{"limits:\n  acme:\n    turns: {}\n", "line 3: limits.acme.turns needs per_key, per_tenant or both"},
		{"limits:\n  acme:\n    turns: {per_user: 1/s}\n", `line 3: limits.acme.turns: unknown key "per_user" (known keys: per_key, per_tenant)`},
		{"limits:\n  acme:\n    turns: {per_key: 1/s, per_key: 2/s}\n", "per_key is set twice"},
		{"limits:\n  acme:\n    turns: {per_key: 1/day}\n", `line 3: limits.acme.turns.per_key: rate "1/day": the unit must be s, m or h`},
		{"limits:\n  acme:\n    turns: {per_key: 0/s}\n", "at least 1"},
		{"limits:\n  acme:\n    turns:\n      per_key: [1/s]\n", "line 4: limits.acme.turns.per_key must be a rate such as 100/s"},
		{"limits:\n  acme:\n    turns: {per_key: 1/s}\n    turns: {per_key: 2/s}\n", "line 4: limits.acme.turns is set twice"},
		{"limits:\n  acme: {}\n  acme: {}\n", `line 3: limits: tenant "acme" is set twice`},
		{"limits: {}\nlimits: {}\n", `line 2: key "limits" is set twice`},
		{"limit: {}\n", `unknown key "limit"`},
	} {
		_, err := parseConfigDoc([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestResolve_LimitsFromTheConfigFileOnly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gyre.yaml")
	if err := os.WriteFile(path, []byte("limits:\n  acme:\n    turns: {per_key: 10/s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := serveFlags(t, "--config", path)
	r := resolver{lookupEnv: func(string) (string, bool) { return "", false }}
	c, _, err := r.resolve(fs, true)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits["acme"][ratelimit.Turns]; l.PerKey == nil || l.PerKey.String() != "10/s" || l.PerTenant != nil {
		t.Fatalf("limits = %s", limitsString(c.Limits))
	}
	if c, _, err := r.resolve(fs, false); err != nil || c.Limits != nil {
		t.Fatalf("a command other than serve got limits %v (%v)", c.Limits, err)
	}
}
