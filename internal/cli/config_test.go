package cli

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"free port", func(c *Config) { c.Addr = "127.0.0.1:0" }, ""},
		{"wildcard with public url", func(c *Config) { c.Addr = ":7070"; c.PublicURL = "https://gyre.example.com" }, ""},
		{"ipv6 loopback", func(c *Config) { c.Addr = "[::1]:7070" }, ""},
		{"empty host is wildcard", func(c *Config) { c.Addr = ":7070" }, "--public-url: is required"},
		{"0.0.0.0 is wildcard", func(c *Config) { c.Addr = "0.0.0.0:7070" }, "--public-url: is required"},
		{":: is wildcard", func(c *Config) { c.Addr = "[::]:7070" }, "--public-url: is required"},
		{"no port", func(c *Config) { c.Addr = "localhost" }, "--addr: want host:port"},
		{"bad port", func(c *Config) { c.Addr = "localhost:99999" }, "--addr: port"},
		{"no data", func(c *Config) { c.Data = "" }, "--data: must not be empty"},
		{"postgres", func(c *Config) { c.DB = "postgres://u@h/db" }, ""},
		{"sqlite path", func(c *Config) { c.DB = "/var/lib/gyre/x.db" }, ""},
		{"unknown db scheme", func(c *Config) { c.DB = "mysql://h/db" }, "--db:"},
		{"s3 blob", func(c *Config) { c.Blob = "s3://bucket?region=eu-west-1" }, ""},
		{"gs blob", func(c *Config) { c.Blob = "gs://bucket" }, "--blob:"},
		{"public url with path", func(c *Config) { c.PublicURL = "https://x.example/gyre" }, ""},
		{"public url with query", func(c *Config) { c.PublicURL = "https://x.example/?a=1" }, "--public-url:"},
		{"public url with credentials", func(c *Config) { c.PublicURL = "https://u:p@x.example" }, "--public-url:"},
		{"public url relative", func(c *Config) { c.PublicURL = "/gyre" }, "--public-url:"},
		{"metrics addr", func(c *Config) { c.MetricsAddr = "127.0.0.1:9090" }, ""},
		{"metrics addr same as addr", func(c *Config) { c.MetricsAddr = c.Addr }, "--metrics-addr: must differ"},
		{"metrics addr malformed", func(c *Config) { c.MetricsAddr = "9090" }, "--metrics-addr:"},
		{"tiny body limit", func(c *Config) { c.MaxBodyBytes = 10 }, "--max-body-bytes"},
		{"log level", func(c *Config) { c.LogLevel = "trace" }, "--log-level"},
	}
	for _, tt := range tests {
		c := Defaults()
		tt.edit(&c)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: Validate = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c := Defaults()
	c.Addr, c.LogLevel = "nope", "loud"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "--addr") || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("Validate = %v, want both problems", err)
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4MiB", 4 << 20, true},
		{"4 MiB", 4 << 20, true},
		{"4mib", 4 << 20, true},
		{"512KiB", 512 << 10, true},
		{"1GiB", 1 << 30, true},
		{"1000000", 1000000, true},
		{"10B", 10, true},
		{"2MB", 2000000, true},
		{"3k", 3000, true},
		{"", 0, false},
		{"MiB", 0, false},
		{"-1", 0, false},
		{"1.5MiB", 0, false},
		{"4XB", 0, false},
		{"99999999999999999999", 0, false},
		{"9999999999GiB", 0, false},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok {
			if back, err := parseBytes(formatBytes(got)); err != nil || back != got {
				t.Errorf("formatBytes(%d) = %q does not parse back", got, formatBytes(got))
			}
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"4MiB", "1", "10 kb", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("parseBytes(%q) = %d", s, n)
		}
	})
}

func TestParseConfigFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     map[string]string
		err      string
	}{
		{"empty", "", map[string]string{}, ""},
		{"comment only", "# nothing\n", map[string]string{}, ""},
		{"values", "addr: 127.0.0.1:1\ndata: d\nmax_body_bytes: 1MiB\n", map[string]string{"addr": "127.0.0.1:1", "data": "d", "max_body_bytes": "1MiB"}, ""},
		{"null is empty", "db: ~\n", map[string]string{"db": ""}, ""},
		{"number as text", "max_body_bytes: 1048576\n", map[string]string{"max_body_bytes": "1048576"}, ""},
		{"unknown key", "addr: x\nport: 1\n", nil, `line 2: unknown key "port"`},
		{"kebab key", "log-level: info\n", nil, `did you mean "log_level"`},
		{"duplicate key", "data: a\ndata: b\n", nil, "set twice"},
		{"nested value", "addr:\n  host: x\n", nil, "must be a single value"},
		{"list", "- a\n", nil, "want a mapping"},
		{"two documents", "data: a\n---\ndata: b\n", nil, "only one YAML document"},
		{"not yaml", "data: [\n", nil, "not valid YAML"},
	}
	for _, tt := range tests {
		got, err := parseConfigFile([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tt.name, k, got[k], v)
			}
		}
	}
}

func FuzzParseConfigFile(f *testing.F) {
	for _, s := range []string{"addr: x\n", "- a", "a: {b: c}", "data: ~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseConfigFile([]byte(s))
		if err != nil {
			return
		}
		for k := range m {
			found := false
			for _, st := range settings {
				found = found || st.key() == k
			}
			if !found {
				t.Fatalf("parseConfigFile(%q) accepted unknown key %q", s, k)
			}
		}
	})
}
