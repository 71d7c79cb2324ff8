package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
)

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr   string
		public bool
	}{
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"fc00::1", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"::", false},
		{"224.0.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:8.8.8.8", true},
	} {
		if got := PublicAddr(netip.MustParseAddr(tc.addr)); got != tc.public {
			t.Errorf("PublicAddr(%s) = %v, want %v", tc.addr, got, tc.public)
		}
	}
}

func TestUpstream_RefusesPrivateTargetsUnlessAllowed(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer ts.Close()
	// "localhost" resolves to loopback: refused after resolution.
	u, err := newUpstream(Upstream{Name: "x", BaseURL: strings.Replace(ts.URL, "127.0.0.1", "localhost", 1)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.post(context.Background(), ProtocolChat, []byte(`{}`), false); !errors.Is(err, errPrivateTarget) {
		t.Fatalf("loopback target: %v", err)
	}
	u, _ = newUpstream(Upstream{Name: "x", BaseURL: ts.URL, AllowPrivate: true}, 0)
	resp, err := u.post(context.Background(), ProtocolChat, []byte(`{}`), false)
	if err != nil {
		t.Fatalf("allow_private: %v", err)
	}
	resp.Body.Close()
}

func TestUpstream_NeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	followed := false
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed = true })
	ts := httptest.NewServer(mux)
	defer ts.Close()
	u, _ := newUpstream(Upstream{Name: "x", BaseURL: ts.URL + "/v1/", AllowPrivate: true, APIKey: "k"}, 0)
	resp, err := u.post(context.Background(), ProtocolChat, []byte(`{}`), true)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || followed {
		t.Errorf("status %d, followed %v", resp.StatusCode, followed)
	}
}

func TestNewPolicy(t *testing.T) {
	t.Parallel()
	ups := []Upstream{{Name: "open", BaseURL: "https://a.example/v1"}, {Name: "acme-only", BaseURL: "https://b.example/v1", Tenants: []string{"acme"}},
		{Name: "star", BaseURL: "https://c.example/v1", Tenants: []string{"*"}}}
	s := func(v string) *string { return &v }
	raw := func(v string) json.RawMessage { return json.RawMessage(v) }
	tests := []struct {
		name   string
		in     PolicyInput
		tenant string
		code   string
		ptr    string
	}{
		{"ok", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m")}, "x", "", ""},
		{"allow-listed", PolicyInput{Name: s("p"), Upstream: s("acme-only"), Model: s("m")}, "acme", "", ""},
		{"star", PolicyInput{Name: s("p"), Upstream: s("star"), Model: s("m")}, "x", "", ""},
		{"not allow-listed", PolicyInput{Name: s("p"), Upstream: s("acme-only"), Model: s("m")}, "other", gyre.CodeUpstreamNotAllowed, "/upstream"},
		{"unknown upstream", PolicyInput{Name: s("p"), Upstream: s("nope"), Model: s("m")}, "x", gyre.CodeUpstreamNotAllowed, "/upstream"},
		{"no name", PolicyInput{Upstream: s("open"), Model: s("m")}, "x", gyre.CodeInvalidBody, "/name"},
		{"dot name", PolicyInput{Name: s(".."), Upstream: s("open"), Model: s("m")}, "x", gyre.CodeInvalidBody, "/name"},
		{"no upstream", PolicyInput{Name: s("p"), Model: s("m")}, "x", gyre.CodeInvalidBody, "/upstream"},
		{"no model", PolicyInput{Name: s("p"), Upstream: s("open")}, "x", gyre.CodeInvalidBody, "/model"},
		{"empty tokenizer", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), Tokenizer: s("")}, "x", gyre.CodeInvalidBody, "/tokenizer"},
		{"override not an object", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), SamplingOverrides: raw(`[]`)}, "x", gyre.CodeInvalidBody, "/sampling_overrides"},
		{"override of the model", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), SamplingOverrides: raw(`{"model":"x"}`)}, "x", gyre.CodeInvalidBody, "/sampling_overrides/model"},
		{"override of tools", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), SamplingOverrides: raw(`{"tools":[]}`)}, "x", gyre.CodeInvalidBody, "/sampling_overrides/tools"},
		{"prices without output", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), Prices: raw(`{"input":1}`)}, "x", gyre.CodeInvalidBody, "/prices/output"},
		{"prices unknown member", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), Prices: raw(`{"input":1,"output":1,"x":1}`)}, "x", gyre.CodeInvalidBody, "/prices"},
		{"negative price", PolicyInput{Name: s("p"), Upstream: s("open"), Model: s("m"), Prices: raw(`{"input":1,"output":-1}`)}, "x", gyre.CodeInvalidBody, "/prices/output"},
	}
	for _, tc := range tests {
		_, err := NewPolicy(tc.in, ups, tc.tenant)
		var ge *gyre.Error
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.code != "" && (!errors.As(err, &ge) || ge.Code != tc.code || ge.Pointer != tc.ptr):
			t.Errorf("%s: %v, want %s at %s", tc.name, err, tc.code, tc.ptr)
		}
	}
}

func TestPolicy_CanonicalIgnoresSpelling(t *testing.T) {
	t.Parallel()
	ups := []Upstream{{Name: "u", BaseURL: "https://a.example/v1"}}
	s := func(v string) *string { return &v }
	f := false
	a, _ := NewPolicy(PolicyInput{Name: s("p"), Upstream: s("u"), Model: s("m"), SamplingOverrides: json.RawMessage(`{"temperature":1.0,"top_p":0.90}`),
		Prices: json.RawMessage(`{"output":2e0,"input":1}`), CaptureTokens: &f}, ups, "t")
	b, _ := NewPolicy(PolicyInput{Name: s("p"), Upstream: s("u"), Model: s("m"), SamplingOverrides: json.RawMessage(`{"top_p":0.9,"temperature":1}`),
		Prices: json.RawMessage(`{"input":1.0,"output":2}`)}, ups, "t")
	ca, sa, err1 := a.Canonical()
	cb, sb, err2 := b.Canonical()
	if err1 != nil || err2 != nil || sa != sb || string(ca) != string(cb) {
		t.Errorf("equivalent policies differ:\n%s\n%s", ca, cb)
	}
	if string(ca) != `{"model":"m","name":"p","prices":{"input":1,"output":2},"sampling_overrides":{"temperature":1,"top_p":0.9},"upstream":"u"}` {
		t.Errorf("canonical %s", ca)
	}
}

func TestPrices_Cost(t *testing.T) {
	t.Parallel()
	half := 0.5
	p := Prices{Input: 2, CachedInput: &half, Output: 8}
	// (1000 − 200)·2 + 200·0.5 + 100·8 per million.
	if got := p.Cost(1000, 200, 100); got != (1600+100+800)/1e6 {
		t.Errorf("cost %v", got)
	}
	p.CachedInput = nil // cached tokens priced as input
	if got := p.Cost(1000, 200, 0); got != 2000/1e6 {
		t.Errorf("cost without a cached price %v", got)
	}
	if got := p.Cost(10, 50, 0); got != 20/1e6 {
		t.Errorf("cached tokens beyond the prompt: %v", got)
	}
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	ok := Config{Upstreams: []Upstream{{Name: "a", BaseURL: "http://x/v1"}}}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"duplicate upstream":  {Upstreams: []Upstream{{Name: "a", BaseURL: "http://x"}, {Name: "a", BaseURL: "http://y"}}},
		"bad name":            {Upstreams: []Upstream{{Name: "a b", BaseURL: "http://x"}}},
		"credentials in url":  {Upstreams: []Upstream{{Name: "a", BaseURL: "http://u:p@x"}}},
		"not http":            {Upstreams: []Upstream{{Name: "a", BaseURL: "ftp://x"}}},
		"slow revocation":     {RevokeCheckEvery: 900 * 1e6, GrantCacheTTL: 200 * 1e6},
		"bad default policy":  {DefaultPolicy: "a/b"},
		"ttl under two beats": {ReplicaTTL: 300 * 1e6, FlushInterval: 200 * 1e6},
	} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
