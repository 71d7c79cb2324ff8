package cli

import (
	"strings"
	"testing"
)

// GYRE_SECRET_KEY comes from the environment only, for gyre serve; it is
// never shown as a setting, and a malformed one fails validation without
// being repeated. --harness-allow-private is an ordinary setting.
func TestResolve_SecretKeyFromTheEnvironmentOnly(t *testing.T) {
	t.Parallel()
	const good = "4242424242424242424242424242424242424242424242424242424242424242"
	env := map[string]string{"GYRE_SECRET_KEY": good, "GYRE_HARNESS_ALLOW_PRIVATE": "true"}
	r := resolver{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	c, from, err := r.resolve(serveFlags(t), true)
	if err != nil {
		t.Fatal(err)
	}
	if c.SecretKey != good || !c.HarnessAllowPrivate {
		t.Fatalf("config: secret key set %v, allow private %v", c.SecretKey == good, c.HarnessAllowPrivate)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for name, s := range from {
		if strings.Contains(s.Value, good) {
			t.Fatalf("setting %s shows the secret key", name)
		}
	}
	// The other commands never read it.
	if c, _, err := r.resolve(serveFlags(t), false); err != nil || c.SecretKey != "" {
		t.Fatalf("non-serve resolve: secret key set %v, %v", c.SecretKey != "", err)
	}
	const bad = "my passphrase"
	env["GYRE_SECRET_KEY"] = bad
	c, _, err = r.resolve(serveFlags(t), true)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "GYRE_SECRET_KEY") || strings.Contains(err.Error(), bad) {
		t.Fatalf("Validate with a malformed key: %v", err)
	}
}
