package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/secret"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// Config is what gyre serve runs with; the operator commands use its
// Data, DB and LogLevel. Every field has a flag, an environment variable
// GYRE_<FLAG> and a config-file key (the flag name with underscores), and
// a value comes from the first of these that sets it: flag, environment,
// config file, default (SPEC §2).
type Config struct {
	// Addr is the host:port gyre serve listens on (--addr, default
	// 127.0.0.1:7070). Port 0 picks a free port.
	Addr string
	// Data is the data directory: the SQLite database, the default blob
	// directory and the bootstrap admin.key (--data, default ./gyre-data).
	Data string
	// DB selects the store: empty for SQLite at <Data>/gyre.db, a
	// postgres:// URL for PostgreSQL, or the path (or sqlite: URL) of a
	// SQLite file elsewhere (--db).
	DB string
	// Blob is the blob store URL: empty for file://<Data>/blobs, or
	// file:///dir or s3://bucket?… (--blob).
	Blob string
	// PublicURL is the base URL clients reach the server at, written into
	// URLs the server hands out (--public-url). Empty means
	// http://<listening address>, which is refused when Addr binds every
	// interface.
	PublicURL string
	// MetricsAddr, when set, serves /metrics without authentication on
	// this separate host:port (--metrics-addr).
	MetricsAddr string
	// MaxBodyBytes caps request bodies of gyre's own APIs, after
	// decompression (--max-body-bytes, default 4MiB).
	MaxBodyBytes int64
	// LogLevel is debug, info, warn or error (--log-level, default info).
	LogLevel string
	// BootstrapAdminKeyFile is where the first admin key is written on an
	// empty store (--bootstrap-admin-key-file). Empty means
	// <Data>/admin.key on SQLite and no bootstrap on PostgreSQL.
	BootstrapAdminKeyFile string
	// DefaultPolicy names the policy a tenant's rollouts use when neither
	// their batch nor their agent's promotion names one (--default-policy);
	// each tenant resolves the name among its own policies. Empty: none,
	// and such rollouts' gateway answers 503 no_policy (SPEC §6.1).
	DefaultPolicy string
	// GatewayMaxBodyBytes caps LLM gateway request bodies, after
	// decompression (--gateway-max-body-bytes, default 32MiB).
	GatewayMaxBodyBytes int64
	// GatewayFlushInterval bounds how long a gateway record waits in
	// memory before it is written (--gateway-flush-interval, default 200ms).
	GatewayFlushInterval time.Duration
	// Upstreams are the LLM servers policies may route to: the config
	// file's upstreams: section only, never a flag or environment
	// variable, because they carry secrets (SPEC §6.1).
	Upstreams []UpstreamConfig
	// Limits are the rate limits of SPEC §2 by tenant name ("*" for every
	// tenant without an entry of its own) and surface: the config file's
	// limits: section only. Empty limits nothing.
	Limits ratelimit.Config
	// CommandAllow is gyre serve's allow-list of command graders: the
	// config file's graders.command.allow only. Empty refuses every
	// command grader (SPEC §8); the CLI evaluator runs them without it.
	CommandAllow grade.CommandAllowList
	// Policies are the CLI evaluator's judge policies: the config file's
	// policies: section, over its upstreams:. gyre serve refuses them
	// (its policies live in the store).
	Policies []PolicyConfig
	// HarnessAllowPrivate lets registered harnesses live at loopback,
	// private and link-local addresses (--harness-allow-private, default
	// false), which are refused otherwise, as for upstreams.
	HarnessAllowPrivate bool
	// SecretKey is GYRE_SECRET_KEY, the key that encrypts registered
	// harnesses' API keys at rest (package secret documents its format).
	// It comes from the environment only — never a flag, which any user
	// of the machine can read, nor the config file — and is never shown.
	// Empty: harnesses with an API key are refused.
	SecretKey string
}

// UpstreamConfig is one entry of the config file's upstreams: section.
type UpstreamConfig struct {
	// Name is how policies refer to the upstream.
	Name string
	// BaseURL is the API root, e.g. http://10.0.0.5:8000/v1.
	BaseURL string
	// APIKeyEnv names the environment variable holding the upstream's
	// key; empty sends none.
	APIKeyEnv string
	// APIKey is the value of APIKeyEnv, read when the configuration is
	// resolved; never shown.
	APIKey string
	// Tenants allow-lists tenant names; empty or "*" allows every tenant.
	Tenants []string
	// AllowPrivate allows loopback, private and link-local targets.
	AllowPrivate bool
	// Protocols are the wire protocols the upstream speaks (chat,
	// responses, messages); nil means [chat].
	Protocols []gateway.Protocol
	// Line is where the entry starts in the config file, for messages.
	Line int
}

// GatewayUpstreams converts the configured upstreams for the gateway.
func (c Config) GatewayUpstreams() []gateway.Upstream {
	out := make([]gateway.Upstream, len(c.Upstreams))
	for i, u := range c.Upstreams {
		out[i] = gateway.Upstream{Name: u.Name, BaseURL: u.BaseURL, APIKey: u.APIKey, Tenants: u.Tenants, AllowPrivate: u.AllowPrivate,
			Protocols: u.Protocols}
	}
	return out
}

// Defaults returns the built-in configuration.
func Defaults() Config {
	return Config{
		Addr:                 "127.0.0.1:7070",
		Data:                 "./gyre-data",
		MaxBodyBytes:         api.DefaultMaxBodyBytes,
		LogLevel:             "info",
		GatewayMaxBodyBytes:  gateway.DefaultMaxBodyBytes,
		GatewayFlushInterval: gateway.DefaultFlushInterval,
	}
}

// Validate reports every setting of c that cannot work, naming each by
// its flag.
func (c Config) Validate() error {
	var errs []error
	add := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	wildcard := false
	if host, err := splitAddr(c.Addr); err != nil {
		add("addr", "%v", err)
	} else {
		wildcard = isWildcard(host)
	}
	if c.Data == "" {
		add("data", "must not be empty")
	}
	if _, err := storeopen.Engine(storeopen.Options{DB: c.DB}); err != nil {
		add("db", "%v", redactErr(err, c.DB))
	}
	if c.Blob != "" {
		if u, err := url.Parse(c.Blob); err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
			add("blob", "want empty (a directory in --data), a file:// URL or an s3:// URL")
		}
	}
	if c.PublicURL == "" {
		if wildcard {
			add("public-url", "is required when --addr %s listens on every interface: set the URL clients use to reach this server", c.Addr)
		}
	} else if err := checkPublicURL(c.PublicURL); err != nil {
		add("public-url", "%v", err)
	}
	if c.MetricsAddr != "" {
		if _, err := splitAddr(c.MetricsAddr); err != nil {
			add("metrics-addr", "%v", err)
		} else if c.MetricsAddr == c.Addr {
			add("metrics-addr", "must differ from --addr")
		}
	}
	if c.MaxBodyBytes < 1024 {
		add("max-body-bytes", "must be at least 1KiB, not %d bytes", c.MaxBodyBytes)
	}
	if _, err := telemetry.ParseLevel(c.LogLevel); err != nil {
		add("log-level", "%v", err)
	}
	if c.DefaultPolicy != "" && !gateway.ValidName(c.DefaultPolicy) {
		add("default-policy", "%q is not a policy name: want 1 to 255 characters from [A-Za-z0-9._-]", c.DefaultPolicy)
	}
	if c.GatewayMaxBodyBytes < 1024 {
		add("gateway-max-body-bytes", "must be at least 1KiB, not %d bytes", c.GatewayMaxBodyBytes)
	}
	if c.SecretKey != "" {
		if _, err := secret.ParseKey(c.SecretKey); err != nil {
			errs = append(errs, err)
		}
	}
	if c.GatewayFlushInterval <= 0 || c.GatewayFlushInterval > 5*time.Second {
		add("gateway-flush-interval", "must be more than 0 and at most 5s, not %s", c.GatewayFlushInterval)
	}
	errs = append(errs, validateUpstreams(c.Upstreams)...)
	if err := c.CommandAllow.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.JudgePolicies(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// envNameRE is the grammar of an environment variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateUpstreams checks the upstreams: section, naming each entry by
// its index, name and line.
func validateUpstreams(ups []UpstreamConfig) []error {
	var errs []error
	seen := map[string]int{}
	for i, u := range ups {
		where := fmt.Sprintf("upstreams[%d]", i)
		if u.Name != "" {
			where += " (" + u.Name + ")"
		}
		if u.Line > 0 {
			where += fmt.Sprintf(" at line %d", u.Line)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
		}
		switch {
		case u.Name == "":
			bad("name is required")
		case !gateway.ValidName(u.Name):
			bad("name %q must be 1 to 255 characters from [A-Za-z0-9._-]", u.Name)
		default:
			if j, dup := seen[u.Name]; dup {
				bad("name %q is already used by upstreams[%d]", u.Name, j)
			}
			seen[u.Name] = i
		}
		if u.BaseURL == "" {
			bad("base_url is required")
		} else if err := gateway.CheckBaseURL(u.BaseURL); err != nil {
			bad("base_url: %v", err)
		}
		if u.APIKeyEnv != "" && !envNameRE.MatchString(u.APIKeyEnv) {
			bad("api_key_env %q is not an environment variable name", u.APIKeyEnv)
		}
		for _, t := range u.Tenants {
			if t == "" {
				bad("tenants has an empty entry")
			}
		}
	}
	return errs
}

// splitAddr checks a host:port listen address and returns its host.
func splitAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("want host:port, not %q", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return host, nil
}

// isWildcard reports whether a listen host binds every interface.
func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func checkPublicURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %q", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want an http:// or https:// URL, not %q", s)
	case u.Host == "":
		return fmt.Errorf("URL %q has no host", s)
	case u.User != nil:
		return fmt.Errorf("URL must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("URL %q must not have a query or fragment", s)
	}
	return nil
}

// publicURL is c.PublicURL, or http://<addr> with the address the server
// actually listens on.
func (c Config) publicURL(listening net.Addr) string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	return "http://" + listening.String()
}

// setting binds one Config field to its flag, environment variable and
// config-file key.
type setting struct {
	flag  string
	usage string
	// serve marks settings only gyre serve (and gyre config) take; the
	// others are global flags every command takes.
	serve  bool
	secret bool // shown redacted by gyre config
	// boolean lets the flag stand alone for true (--flag, as --flag=true).
	boolean bool
	get     func(*Config) string
	set     func(*Config, string) error
}

func (s setting) env() string { return "GYRE_" + strings.ToUpper(strings.ReplaceAll(s.flag, "-", "_")) }
func (s setting) key() string { return strings.ReplaceAll(s.flag, "-", "_") }

func str(f func(*Config) *string) (func(*Config) string, func(*Config, string) error) {
	return func(c *Config) string { return *f(c) },
		func(c *Config, v string) error { *f(c) = v; return nil }
}

// settings is every configurable field, in the order gyre config shows.
var settings = func() []setting {
	mk := func(flag, usage string, serve bool, f func(*Config) *string) setting {
		get, set := str(f)
		return setting{flag: flag, usage: usage, serve: serve, get: get, set: set}
	}
	db := mk("db", "store: empty for SQLite in --data, a postgres:// URL, or a SQLite file path", false, func(c *Config) *string { return &c.DB })
	db.secret = true
	return []setting{
		mk("addr", "address to listen on, host:port", true, func(c *Config) *string { return &c.Addr }),
		mk("data", "data directory (SQLite database, blobs, admin.key)", false, func(c *Config) *string { return &c.Data }),
		db,
		mk("blob", "blob store: empty for a directory in --data, file:///dir or s3://bucket?…", true, func(c *Config) *string { return &c.Blob }),
		mk("public-url", "base URL clients reach this server at (default http://<addr>; required when --addr listens on every interface)", true, func(c *Config) *string { return &c.PublicURL }),
		mk("metrics-addr", "also serve /metrics without a key on this host:port", true, func(c *Config) *string { return &c.MetricsAddr }),
		{
			flag: "max-body-bytes", usage: "request body limit of gyre's own APIs, after decompression (e.g. 4MiB, 512KiB, 1000000)", serve: true,
			get: func(c *Config) string { return formatBytes(c.MaxBodyBytes) },
			set: func(c *Config, v string) error {
				n, err := parseBytes(v)
				if err != nil {
					return err
				}
				c.MaxBodyBytes = n
				return nil
			},
		},
		mk("log-level", "log level: debug, info, warn or error", false, func(c *Config) *string { return &c.LogLevel }),
		mk("bootstrap-admin-key-file", "write the first admin key of an empty store here (default <data>/admin.key on SQLite; PostgreSQL bootstraps only with this flag)", true, func(c *Config) *string { return &c.BootstrapAdminKeyFile }),
		mk("default-policy", "policy name a new batch resolves to, and the policy endpoint serves, when neither the batch nor the agent's promoted policy names one", true, func(c *Config) *string { return &c.DefaultPolicy }),
		{
			flag: "gateway-max-body-bytes", usage: "request body limit of the LLM gateway, after decompression", serve: true,
			get: func(c *Config) string { return formatBytes(c.GatewayMaxBodyBytes) },
			set: func(c *Config, v string) error {
				n, err := parseBytes(v)
				if err != nil {
					return err
				}
				c.GatewayMaxBodyBytes = n
				return nil
			},
		},
		{
			flag: "harness-allow-private", usage: "let registered harnesses live at loopback, private and link-local addresses (true or false)", serve: true, boolean: true,
			get: func(c *Config) string { return strconv.FormatBool(c.HarnessAllowPrivate) },
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(strings.TrimSpace(v))
				if err != nil {
					return fmt.Errorf("want true or false, not %q", v)
				}
				c.HarnessAllowPrivate = b
				return nil
			},
		},
		{
			flag: "gateway-flush-interval", usage: "longest time an LLM gateway record waits in memory before it is written (e.g. 200ms)", serve: true,
			get: func(c *Config) string { return c.GatewayFlushInterval.String() },
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(strings.TrimSpace(v))
				if err != nil {
					return fmt.Errorf("invalid duration %q: want e.g. 200ms or 1s", v)
				}
				c.GatewayFlushInterval = d
				return nil
			},
		},
	}
}()

// source says where a resolved setting came from.
type source struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

// bindFlags registers the settings a command takes on fs, with their
// defaults in the help text.
func bindFlags(fs *pflag.FlagSet, serve bool) {
	def := Defaults()
	for _, s := range settings {
		if s.serve && !serve {
			continue
		}
		fs.String(s.flag, s.get(&def), s.usage+" [$"+s.env()+"]")
		if s.boolean {
			fs.Lookup(s.flag).NoOptDefVal = "true"
		}
	}
}

// resolver computes a Config from flags, environment, config file and
// defaults.
type resolver struct {
	lookupEnv func(string) (string, bool)
}

// resolve computes the Config for a command whose flags are fs (the
// global ones included); serve says whether the serve settings apply. It
// also returns where each setting came from.
func (r resolver) resolve(fs *pflag.FlagSet, serve bool) (Config, map[string]source, error) {
	doc, path, err := r.loadFile(fs)
	if err != nil {
		return Config{}, nil, err
	}
	file := doc.settings
	c := Defaults()
	from := map[string]source{}
	for _, s := range settings {
		if s.serve && !serve {
			continue
		}
		var v, src string
		if f := fs.Lookup(s.flag); f != nil && f.Changed {
			v, src = f.Value.String(), "flag --"+s.flag
		} else if ev, ok := r.lookupEnv(s.env()); ok {
			v, src = ev, "env "+s.env()
		} else if fv, ok := file[s.key()]; ok {
			v, src = fv, "file "+path
		} else {
			src = "default"
			v = s.get(&c)
		}
		if err := s.set(&c, v); err != nil {
			return Config{}, nil, fmt.Errorf("--%s (from %s): %w", s.flag, src, err)
		}
		shown := s.get(&c)
		if s.secret {
			shown = redactURL(shown)
		}
		from[s.flag] = source{Value: shown, Source: src}
	}
	if serve {
		if v, ok := r.lookupEnv(secret.EnvVar); ok {
			c.SecretKey = v
		}
		c.Limits = doc.limits
		c.CommandAllow = doc.commandAllow
		if doc.hasPolicies {
			return Config{}, nil, fmt.Errorf("config file %s: %w", path, errServePolicies)
		}
	} else {
		c.Policies = doc.policies
	}
	// gyre serve routes to every upstream; the CLI evaluator's judge only
	// to those its policies name, whose keys alone it reads.
	var used map[string]bool
	if !serve {
		used = map[string]bool{}
		for _, p := range c.Policies {
			var in struct {
				Upstream string `json:"upstream"`
			}
			_ = json.Unmarshal(p.Doc, &in)
			used[in.Upstream] = true
		}
	}
	if len(doc.upstreams) > 0 && (serve || len(c.Policies) > 0) {
		c.Upstreams = doc.upstreams
		var errs []error
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			if u.APIKeyEnv == "" || (used != nil && !used[u.Name]) {
				continue
			}
			v, ok := r.lookupEnv(u.APIKeyEnv)
			if !ok || v == "" {
				errs = append(errs, fmt.Errorf("upstreams[%d] (%s) in %s: environment variable %s, named by api_key_env, is not set",
					i, u.Name, path, u.APIKeyEnv))
			}
			u.APIKey = v
		}
		if err := errors.Join(errs...); err != nil {
			return Config{}, nil, err
		}
	}
	return c, from, nil
}

// configFile is a parsed config file: the flat settings, by key, and the
// upstreams: and limits: sections.
type configFile struct {
	settings     map[string]string
	upstreams    []UpstreamConfig
	limits       ratelimit.Config
	commandAllow grade.CommandAllowList
	policies     []PolicyConfig
	hasPolicies  bool
}

// loadFile reads the config file named by --config or GYRE_CONFIG, if
// any. Unknown keys are an error that names the key and its line.
func (r resolver) loadFile(fs *pflag.FlagSet) (configFile, string, error) {
	path := ""
	if f := fs.Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	} else if v, ok := r.lookupEnv("GYRE_CONFIG"); ok {
		path = v
	}
	if path == "" {
		return configFile{}, "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return configFile{}, "", fmt.Errorf("read config file: %w", err)
	}
	doc, err := parseConfigDoc(b)
	if err != nil {
		return configFile{}, "", fmt.Errorf("config file %s: %w", path, err)
	}
	return doc, path, nil
}

// parseConfigFile parses a YAML mapping of setting keys to scalars and
// returns the settings (the upstreams: section aside).
func parseConfigFile(b []byte) (map[string]string, error) {
	doc, err := parseConfigDoc(b)
	return doc.settings, err
}

// The config file's nested sections.
const (
	upstreamsKey = "upstreams"
	limitsKey    = "limits"
)

// parseConfigDoc parses a YAML mapping of setting keys to scalars, plus
// the nested sections upstreams: and limits:.
func parseConfigDoc(b []byte) (configFile, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return configFile{settings: map[string]string{}}, nil // an empty file sets nothing
		}
		return configFile{}, fmt.Errorf("not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return configFile{}, fmt.Errorf("line %d: only one YAML document is allowed", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return configFile{settings: map[string]string{}}, nil
	}
	if root.Kind != yaml.MappingNode {
		return configFile{}, fmt.Errorf("line %d: want a mapping of settings (key: value)", root.Line)
	}
	known := make([]string, len(settings), len(settings)+2)
	for i, s := range settings {
		known[i] = s.key()
	}
	sectionKeys := []string{upstreamsKey, limitsKey, gradersKey, policiesKey}
	known = append(known, sectionKeys...)
	out := configFile{settings: map[string]string{}}
	sections := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if slices.Contains(sectionKeys, k.Value) {
			if sections[k.Value] {
				return configFile{}, fmt.Errorf("line %d: key %q is set twice", k.Line, k.Value)
			}
			sections[k.Value] = true
			var err error
			switch k.Value {
			case upstreamsKey:
				out.upstreams, err = parseUpstreams(v)
			case limitsKey:
				out.limits, err = parseLimits(v)
			case gradersKey:
				out.commandAllow, err = parseGraders(v)
			case policiesKey:
				out.hasPolicies = true
				out.policies, err = parsePolicies(v)
			}
			if err != nil {
				return configFile{}, err
			}
			continue
		}
		if !slices.Contains(known, k.Value) {
			msg := fmt.Sprintf("line %d: unknown key %q", k.Line, k.Value)
			if alt := strings.ReplaceAll(k.Value, "-", "_"); alt != k.Value && slices.Contains(known, alt) {
				msg += fmt.Sprintf(" (did you mean %q?)", alt)
			} else {
				msg += " (known keys: " + strings.Join(known, ", ") + ")"
			}
			return configFile{}, errors.New(msg)
		}
		if _, dup := out.settings[k.Value]; dup {
			return configFile{}, fmt.Errorf("line %d: key %q is set twice", k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return configFile{}, fmt.Errorf("line %d: %s must be a single value", v.Line, k.Value)
		}
		if v.Tag == "!!null" {
			out.settings[k.Value] = ""
			continue
		}
		out.settings[k.Value] = v.Value
	}
	return out, nil
}

// upstreamKeys are the keys of one upstreams: entry.
var upstreamKeys = []string{"name", "base_url", "api_key_env", "tenants", "allow_private", "protocols"}

// parseUpstreams parses the upstreams: section: a list of mappings with
// exactly the keys of upstreamKeys, scalars except tenants and protocols
// (lists).
func parseUpstreams(n *yaml.Node) ([]UpstreamConfig, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: upstreams must be a list of upstreams (- name: …, base_url: …)", n.Line)
	}
	out := make([]UpstreamConfig, 0, len(n.Content))
	for i, item := range n.Content {
		where := fmt.Sprintf("line %d: upstreams[%d]", item.Line, i)
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s must be a mapping (name, base_url, api_key_env, tenants, allow_private, protocols)", where)
		}
		u := UpstreamConfig{Line: item.Line}
		seen := map[string]bool{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			if !slices.Contains(upstreamKeys, k.Value) {
				return nil, fmt.Errorf("line %d: upstreams[%d]: unknown key %q (known keys: %s)", k.Line, i, k.Value, strings.Join(upstreamKeys, ", "))
			}
			if seen[k.Value] {
				return nil, fmt.Errorf("line %d: upstreams[%d]: key %q is set twice", k.Line, i, k.Value)
			}
			seen[k.Value] = true
			if k.Value == "tenants" {
				if v.Kind != yaml.SequenceNode {
					return nil, fmt.Errorf("line %d: upstreams[%d]: tenants must be a list of tenant names (or [\"*\"])", v.Line, i)
				}
				u.Tenants = []string{}
				for _, t := range v.Content {
					if t.Kind != yaml.ScalarNode || t.Tag == "!!null" {
						return nil, fmt.Errorf("line %d: upstreams[%d]: tenants entries must be tenant names", t.Line, i)
					}
					u.Tenants = append(u.Tenants, t.Value)
				}
				continue
			}
			if k.Value == "protocols" {
				ps, err := parseProtocols(v, i)
				if err != nil {
					return nil, err
				}
				u.Protocols = ps
				continue
			}
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: upstreams[%d]: %s must be a single value", v.Line, i, k.Value)
			}
			val := v.Value
			if v.Tag == "!!null" {
				val = ""
			}
			switch k.Value {
			case "name":
				u.Name = val
			case "base_url":
				u.BaseURL = val
			case "api_key_env":
				u.APIKeyEnv = val
			case "allow_private":
				b, err := strconv.ParseBool(val)
				if err != nil || (v.Tag != "!!bool" && v.Tag != "!!str") {
					return nil, fmt.Errorf("line %d: upstreams[%d]: allow_private must be true or false, not %q", v.Line, i, val)
				}
				u.AllowPrivate = b
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// parseProtocols parses an upstream's protocols: a non-empty list of
// distinct protocol names.
func parseProtocols(v *yaml.Node, i int) ([]gateway.Protocol, error) {
	known := make([]string, len(gateway.Protocols))
	for j, p := range gateway.Protocols {
		known[j] = string(p)
	}
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		return nil, fmt.Errorf("line %d: upstreams[%d]: protocols must be a non-empty list of %s", v.Line, i, strings.Join(known, ", "))
	}
	out := make([]gateway.Protocol, 0, len(v.Content))
	for j, n := range v.Content {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			return nil, fmt.Errorf("line %d: upstreams[%d]: protocols[%d] must be one of %s", n.Line, i, j, strings.Join(known, ", "))
		}
		p, err := gateway.ParseProtocol(n.Value)
		if err != nil {
			return nil, fmt.Errorf("line %d: upstreams[%d]: protocols[%d]: %w", n.Line, i, j, err)
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("line %d: upstreams[%d]: protocols[%d]: %s is listed twice", n.Line, i, j, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// redactErr replaces a secret-bearing URL in err's message by its
// redacted form.
func redactErr(err error, rawURL string) string {
	msg := err.Error()
	if r := redactURL(rawURL); r != rawURL {
		msg = strings.ReplaceAll(msg, rawURL, r)
	}
	return msg
}

// redactURL hides the password of a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

// parseBytes parses a size: a number of bytes, optionally with a unit
// B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes such as 4MiB or 1000000", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	units := map[string]int64{
		"": 1, "b": 1,
		"k": 1000, "kb": 1000, "m": 1000 * 1000, "mb": 1000 * 1000, "g": 1000 * 1000 * 1000, "gb": 1000 * 1000 * 1000,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	}
	mult, ok := units[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (want B, KB, MB, GB, KiB, MiB or GiB)", s, strings.TrimSpace(t[i:]))
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * mult, nil
}

// formatBytes writes n in the largest binary unit that divides it.
func formatBytes(n int64) string {
	switch {
	case n > 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n > 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n > 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}
