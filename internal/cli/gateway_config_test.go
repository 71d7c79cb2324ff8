package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseConfigDoc_Upstreams(t *testing.T) {
	t.Parallel()
	doc, err := parseConfigDoc([]byte(`
addr: 127.0.0.1:1
upstreams:
  - name: local-vllm
    base_url: http://10.0.0.5:8000/v1
    api_key_env: VLLM_KEY
    tenants: ["*"]
    allow_private: true
  - name: openai
    base_url: https://api.openai.com/v1
    tenants: [acme, beta]
    protocols: [chat, responses]
default_policy: prod-v1
`))
	if err != nil {
		t.Fatal(err)
	}
	if doc.settings["addr"] != "127.0.0.1:1" || doc.settings["default_policy"] != "prod-v1" || len(doc.settings) != 2 {
		t.Errorf("settings %v", doc.settings)
	}
	if len(doc.upstreams) != 2 {
		t.Fatalf("upstreams %+v", doc.upstreams)
	}
	u := doc.upstreams[0]
	if u.Name != "local-vllm" || u.BaseURL != "http://10.0.0.5:8000/v1" || u.APIKeyEnv != "VLLM_KEY" || !u.AllowPrivate ||
		strings.Join(u.Tenants, ",") != "*" || u.Line != 4 || u.Protocols != nil {
		t.Errorf("upstream 0 = %+v", u)
	}
	if v := doc.upstreams[1]; v.AllowPrivate || strings.Join(v.Tenants, ",") != "acme,beta" || v.APIKeyEnv != "" ||
		fmt.Sprint(v.Protocols) != "[chat responses]" {
		t.Errorf("upstream 1 = %+v", v)
	}
}

func TestParseConfigDoc_UpstreamErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"upstreams: x\n", "line 1: upstreams must be a list"},
		{"upstreams:\n  - x\n", "line 2: upstreams[0] must be a mapping"},
		{"upstreams:\n  - name: a\n    url: http://x\n", `line 3: upstreams[0]: unknown key "url" (known keys: name, base_url, api_key_env, tenants, allow_private, protocols)`},
		{"upstreams:\n  - name: a\n    protocols: chat\n", "line 3: upstreams[0]: protocols must be a non-empty list of chat, responses, messages"},
		{"upstreams:\n  - name: a\n    protocols: []\n", "line 3: upstreams[0]: protocols must be a non-empty list"},
		{"upstreams:\n  - name: a\n    protocols: [chat, completions]\n", `line 3: upstreams[0]: protocols[1]: unknown protocol "completions" (known: chat, responses, messages)`},
		{"upstreams:\n  - name: a\n    protocols: [chat, chat]\n", "line 3: upstreams[0]: protocols[1]: chat is listed twice"},
		{"upstreams:\n  - name: a\n    name: b\n", `line 3: upstreams[0]: key "name" is set twice`},
		{"upstreams:\n  - name: a\n    tenants: acme\n", "line 3: upstreams[0]: tenants must be a list"},
		{"upstreams:\n  - name: a\n    allow_private: maybe\n", `line 3: upstreams[0]: allow_private must be true or false, not "maybe"`},
		{"upstreams:\n  - name: [a]\n", "line 2: upstreams[0]: name must be a single value"},
		{"upstreams: []\nupstreams: []\n", `line 2: key "upstreams" is set twice`},
		{"upstream: []\n", `unknown key "upstream"`},
	} {
		_, err := parseConfigDoc([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
	// The flat parser of the settings ignores the section.
	m, err := parseConfigFile([]byte("upstreams: []\ndata: d\n"))
	if err != nil || len(m) != 1 || m["data"] != "d" {
		t.Errorf("parseConfigFile = %v %v", m, err)
	}
}

func TestConfigValidate_Gateway(t *testing.T) {
	t.Parallel()
	ok := UpstreamConfig{Name: "u", BaseURL: "http://10.0.0.5/v1", Line: 3}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"an upstream", func(c *Config) { c.Upstreams = []UpstreamConfig{ok} }, ""},
		{"default policy", func(c *Config) { c.DefaultPolicy = "prod-v1" }, ""},
		{"bad default policy", func(c *Config) { c.DefaultPolicy = "a/b" }, "--default-policy"},
		{"no name", func(c *Config) { c.Upstreams = []UpstreamConfig{{BaseURL: "http://x", Line: 3}} }, "upstreams[0] at line 3: name is required"},
		{"duplicate", func(c *Config) { c.Upstreams = []UpstreamConfig{ok, ok} }, `upstreams[1] (u) at line 3: name "u" is already used by upstreams[0]`},
		{"no base url", func(c *Config) { c.Upstreams = []UpstreamConfig{{Name: "u"}} }, "upstreams[0] (u): base_url is required"},
		{"credentials", func(c *Config) { c.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: "https://k:s@x/v1"}} }, "must not carry credentials"},
		{"env name", func(c *Config) { c.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: "http://x", APIKeyEnv: "A-B"}} }, "not an environment variable name"},
		{"body limit", func(c *Config) { c.GatewayMaxBodyBytes = 1 }, "--gateway-max-body-bytes"},
		{"flush interval", func(c *Config) { c.GatewayFlushInterval = time.Minute }, "--gateway-flush-interval"},
	} {
		c := Defaults()
		tc.edit(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestResolve_UpstreamKeysFromTheEnvironment(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gyre.yaml")
	if err := os.WriteFile(path, []byte("upstreams:\n  - name: u\n    base_url: http://x/v1\n    api_key_env: U_KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := serveFlags(t, "--config", path, "--gateway-flush-interval", "50ms")
	env := map[string]string{"U_KEY": "sk-secret"}
	r := resolver{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	c, from, err := r.resolve(fs, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Upstreams) != 1 || c.Upstreams[0].APIKey != "sk-secret" || c.GatewayFlushInterval != 50*time.Millisecond {
		t.Errorf("config %+v", c)
	}
	for _, s := range from {
		if strings.Contains(s.Value, "sk-secret") {
			t.Errorf("a setting shows the upstream key")
		}
	}
	if g := c.GatewayUpstreams(); len(g) != 1 || g[0].APIKey != "sk-secret" || g[0].BaseURL != "http://x/v1" {
		t.Errorf("gateway upstreams %+v", g)
	}
	delete(env, "U_KEY")
	if _, _, err := r.resolve(fs, true); err == nil || !strings.Contains(err.Error(), "environment variable U_KEY, named by api_key_env, is not set") {
		t.Errorf("missing key: %v", err)
	}
	// Commands other than serve do not need the upstreams' keys.
	if _, _, err := r.resolve(fs, false); err != nil {
		t.Errorf("non-serve resolve: %v", err)
	}
}

// serveFlags is gyre serve's flag set, with --config, parsed from args.
func serveFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("config", "", "")
	bindFlags(fs, true)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}
