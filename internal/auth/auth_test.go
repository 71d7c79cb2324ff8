package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		secret, hash, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !WellFormed(secret) {
			t.Fatalf("NewKey() = %q, not well formed", secret)
		}
		if len(secret) != len(KeyPrefix)+43 {
			t.Fatalf("len(%q) = %d, want %d", secret, len(secret), len(KeyPrefix)+43)
		}
		if hash != Hash(secret) {
			t.Fatalf("hash of %q does not match Hash", secret)
		}
		if seen[secret] {
			t.Fatalf("NewKey repeated %q", secret)
		}
		seen[secret] = true
	}
}

func TestEqual(t *testing.T) {
	t.Parallel()
	a, b := Hash("gyre_a"), Hash("gyre_b")
	if !Equal(a, a) || Equal(a, b) {
		t.Fatal("Equal does not compare hashes")
	}
}

func TestParseBearer(t *testing.T) {
	t.Parallel()
	good, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		header string
		ok     bool
	}{
		{"Bearer " + good, true},
		{"bearer " + good, true},
		{"BEARER  " + good, true},
		{"", false},
		{"Bearer", false},
		{"Bearer ", false},
		{"Basic " + good, false},
		{good, false},
		{"Bearer " + good + " extra", false},
		{"Bearer " + good + "x", false},
		{"Bearer " + good[:len(good)-1], false},
		{"Bearer " + strings.Replace(good, "gyre_", "gyrX_", 1), false},
		{"Bearer " + good[:len(good)-1] + "=", false},
		{"Bearer " + good[:len(good)-1] + "+", false},
	}
	for _, tt := range tests {
		got, ok := ParseBearer(tt.header)
		if ok != tt.ok {
			t.Errorf("ParseBearer(%q) ok = %v, want %v", tt.header, ok, tt.ok)
		}
		if ok && got != good {
			t.Errorf("ParseBearer(%q) = %q, want the key", tt.header, got)
		}
	}
}

func FuzzParseBearer(f *testing.F) {
	good, _, _ := NewKey()
	f.Add("Bearer " + good)
	f.Add("Bearer gyre_")
	f.Add("bearer\t" + good)
	f.Fuzz(func(t *testing.T, h string) {
		k, ok := ParseBearer(h)
		if ok && (!WellFormed(k) || !strings.Contains(h, k)) {
			t.Fatalf("ParseBearer(%q) = %q, true: not a key from the header", h, k)
		}
	})
}

// fakeKeys is a KeyFinder with a function field.
type fakeKeys struct {
	byHash func(ctx context.Context, hash [32]byte) (gyre.APIKey, error)
}

func (f fakeKeys) KeyByHash(ctx context.Context, hash [32]byte) (gyre.APIKey, error) {
	return f.byHash(ctx, hash)
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	live, _, _ := NewKey()
	revoked, _, _ := NewKey()
	broken, _, _ := NewKey()
	unknown, _, _ := NewKey()
	now := time.Now()
	keys := fakeKeys{byHash: func(_ context.Context, h [32]byte) (gyre.APIKey, error) {
		switch {
		case Equal(h, Hash(live)):
			return gyre.APIKey{ID: "k1", TenantID: "t1", Role: gyre.RoleAgent, AgentIDs: []string{"a"}}, nil
		case Equal(h, Hash(revoked)):
			return gyre.APIKey{ID: "k2", TenantID: "t1", Role: gyre.RoleAdmin, RevokedAt: &now}, nil
		case Equal(h, Hash(broken)):
			return gyre.APIKey{}, errors.New("database is on fire")
		}
		return gyre.APIKey{}, store.ErrNotFound
	}}
	a := NewAuthenticator(keys)

	tests := []struct {
		name    string
		headers []string
		code    string // "" for success, "internal" for a store failure
	}{
		{"live key", []string{"Bearer " + live}, ""},
		{"missing", nil, gyre.CodeUnauthorized},
		{"blank", []string{"  "}, gyre.CodeUnauthorized},
		{"malformed", []string{"Token " + live}, gyre.CodeUnauthorized},
		{"not a gyre key", []string{"Bearer sk-123"}, gyre.CodeUnauthorized},
		{"two headers", []string{"Bearer " + live, "Bearer " + live}, gyre.CodeUnauthorized},
		{"unknown", []string{"Bearer " + unknown}, gyre.CodeUnauthorized},
		{"revoked", []string{"Bearer " + revoked}, gyre.CodeUnauthorized},
		{"store failure", []string{"Bearer " + broken}, gyre.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, h := range tt.headers {
				r.Header.Add("Authorization", h)
			}
			p, err := a.Authenticate(r)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("Authenticate: %v", err)
				}
				want := Principal{TenantID: "t1", KeyID: "k1", Role: gyre.RoleAgent, AgentIDs: []string{"a"}}
				if p.TenantID != want.TenantID || p.KeyID != want.KeyID || p.Role != want.Role || !p.AllowsAgent("a") || p.AllowsAgent("b") {
					t.Fatalf("Authenticate = %+v, want %+v", p, want)
				}
				return
			}
			if got := gyre.ErrorCode(err); got != tt.code {
				t.Fatalf("Authenticate error %v has code %q, want %q", err, got, tt.code)
			}
			for _, k := range []string{live, revoked, broken, unknown} {
				if strings.Contains(err.Error(), k) {
					t.Fatalf("error %q contains the key", err)
				}
			}
		})
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	key, _, _ := NewKey()
	a := NewAuthenticator(fakeKeys{byHash: func(_ context.Context, h [32]byte) (gyre.APIKey, error) {
		if Equal(h, Hash(key)) {
			return gyre.APIKey{ID: "k", TenantID: "t", Role: gyre.RoleReader}, nil
		}
		return gyre.APIKey{}, store.ErrNotFound
	}})
	var gotErr error
	onError := func(w http.ResponseWriter, _ *http.Request, err error) {
		gotErr = err
		w.WriteHeader(gyre.StatusOf(gyre.ErrorCode(err)))
	}
	var seen Principal
	h := a.Middleware(onError)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = FromContext(r.Context())
	}))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || seen.KeyID != "k" || seen.TenantID != "t" {
		t.Fatalf("with a key: status %d, principal %+v", w.Code, seen)
	}

	seen = Principal{}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusUnauthorized || seen.KeyID != "" || gyre.ErrorCode(gotErr) != gyre.CodeUnauthorized {
		t.Fatalf("without a key: status %d, principal %+v, error %v", w.Code, seen, gotErr)
	}
}

func TestRequire(t *testing.T) {
	t.Parallel()
	ctxFor := func(role gyre.Role, agents ...string) context.Context {
		p := Principal{TenantID: "t", KeyID: "k", Role: role}
		if agents != nil {
			p.AgentIDs = agents
		}
		return WithPrincipal(context.Background(), p)
	}
	tests := []struct {
		name  string
		ctx   context.Context
		roles []gyre.Role
		code  string
	}{
		{"no principal", context.Background(), []gyre.Role{gyre.RoleReader}, gyre.CodeUnauthorized},
		{"admin on admin route", ctxFor(gyre.RoleAdmin), []gyre.Role{gyre.RoleAdmin}, ""},
		{"admin on reader route", ctxFor(gyre.RoleAdmin), []gyre.Role{gyre.RoleReader}, ""},
		{"admin on agent route", ctxFor(gyre.RoleAdmin), []gyre.Role{gyre.RoleAgent}, ""},
		{"reader on reader route", ctxFor(gyre.RoleReader), []gyre.Role{gyre.RoleReader}, ""},
		{"reader on admin route", ctxFor(gyre.RoleReader), []gyre.Role{gyre.RoleAdmin}, gyre.CodeForbidden},
		{"agent on admin route", ctxFor(gyre.RoleAgent, "a"), []gyre.Role{gyre.RoleAdmin}, gyre.CodeForbidden},
		{"agent on reader route", ctxFor(gyre.RoleAgent), []gyre.Role{gyre.RoleReader}, gyre.CodeForbidden},
		{"evaluator on evaluator or reader route", ctxFor(gyre.RoleEvaluator), []gyre.Role{gyre.RoleReader, gyre.RoleEvaluator}, ""},
		{"inference on agent route", ctxFor(gyre.RoleInference), []gyre.Role{gyre.RoleAgent}, gyre.CodeForbidden},
	}
	for _, tt := range tests {
		err := Require(tt.ctx, tt.roles...)
		got := ""
		if err != nil {
			got = gyre.ErrorCode(err)
		}
		if got != tt.code {
			t.Errorf("%s: Require = %v, want code %q", tt.name, err, tt.code)
		}
	}
}

func TestRequireAgent(t *testing.T) {
	t.Parallel()
	limited := WithPrincipal(context.Background(), Principal{Role: gyre.RoleAgent, AgentIDs: []string{"bot-1", "bot-2"}})
	open := WithPrincipal(context.Background(), Principal{Role: gyre.RoleAgent})
	tests := []struct {
		name  string
		ctx   context.Context
		agent string
		code  string
	}{
		{"listed", limited, "bot-2", ""},
		{"not listed", limited, "bot-3", gyre.CodeForbidden},
		{"no allow-list", open, "anything", ""},
		{"no principal", context.Background(), "bot-1", gyre.CodeUnauthorized},
	}
	for _, tt := range tests {
		err := RequireAgent(tt.ctx, tt.agent)
		got := ""
		if err != nil {
			got = gyre.ErrorCode(err)
		}
		if got != tt.code {
			t.Errorf("%s: RequireAgent = %v, want code %q", tt.name, err, tt.code)
		}
	}
}
