package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines decodes the JSON log records written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// engine opens a fresh, migrated store for one test.
type engine struct {
	name string
	open func(t *testing.T) store.Store
}

// sqliteEngine opens a store in a fresh data directory.
var sqliteEngine = engine{name: "sqlite", open: func(t *testing.T) store.Store {
	return openStore(t, storeopen.Options{DataDir: t.TempDir()})
}}

// engines are the stores every auth and key test runs against: SQLite,
// and PostgreSQL, whose subtests skip when no server is configured.
func engines() []engine { return []engine{sqliteEngine, postgresEngine} }

func openStore(t *testing.T, o storeopen.Options) store.Store {
	t.Helper()
	o.Clock = clock.Real{}
	o.Migrate = true
	st, err := storeopen.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// env is a running server on one store, with one tenant and its admin key.
type env struct {
	t      *testing.T
	st     store.Store
	srv    *Server
	ts     *httptest.Server
	logs   *syncBuffer
	tenant gyre.Tenant
	admin  string // the admin key's secret
}

func newEnv(t *testing.T, e engine, cfg Config) *env {
	t.Helper()
	st := e.open(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := New(cfg, Deps{Store: st, Logger: log, Clock: clock.Real{}, Metrics: telemetry.NewMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	en := &env{t: t, st: st, srv: srv, logs: logs}
	en.tenant, en.admin = en.newTenant("acme")
	en.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(en.ts.Close)
	return en
}

// newTenant creates a tenant and an admin key for it in the store.
func (e *env) newTenant(name string) (gyre.Tenant, string) {
	e.t.Helper()
	ctx := context.Background()
	tn, err := e.st.CreateTenant(ctx, name)
	if err != nil {
		e.t.Fatalf("create tenant: %v", err)
	}
	_, secret := e.newKey(tn.ID, auth.KeyRequest{Role: gyre.RoleAdmin})
	return tn, secret
}

// newKey creates a key in the store and returns it with its secret.
func (e *env) newKey(tenantID string, req auth.KeyRequest) (gyre.APIKey, string) {
	e.t.Helper()
	k, secret, err := auth.CreateKey(context.Background(), e.st, tenantID, req)
	if err != nil {
		e.t.Fatalf("create key: %v", err)
	}
	return k, secret
}

// response is an answered request.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorBody decodes the answer as gyre's error shape.
func (r response) errorBody(t *testing.T) errorDetail {
	t.Helper()
	var b struct {
		Error *errorDetail `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || b.Error == nil {
		t.Fatalf("status %d body %q is not an error body: %v", r.status, r.body, err)
	}
	return *b.Error
}

// wantError checks status, code and pointer of an error answer.
func (r response) wantError(t *testing.T, status int, code, pointer string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	d := r.errorBody(t)
	if d.Code != code || d.Pointer != pointer {
		t.Fatalf("error = %+v, want code %q pointer %q", d, code, pointer)
	}
	if d.Message == "" {
		t.Fatalf("error %+v has no message", d)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
}

// do sends a request; key "" sends no Authorization header. Extra headers
// come as name, value pairs.
func (e *env) do(method, path, key string, body io.Reader, headers ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) json(method, path, key, body string, headers ...string) response {
	e.t.Helper()
	return e.do(method, path, key, strings.NewReader(body), headers...)
}

// createdKey is the decoded answer of POST /api/v1/keys.
type createdKey struct {
	ID       string    `json:"id"`
	Key      string    `json:"key"`
	Role     gyre.Role `json:"role"`
	AgentIDs []string  `json:"agent_ids"`
	Name     string    `json:"name"`
}

// createKey creates a key through the API.
func (e *env) createKey(adminKey, body string) createdKey {
	e.t.Helper()
	r := e.json(http.MethodPost, "/api/v1/keys", adminKey, body)
	if r.status != http.StatusCreated {
		e.t.Fatalf("POST /api/v1/keys %s: status %d %s", body, r.status, r.body)
	}
	var k createdKey
	if err := json.Unmarshal(r.body, &k); err != nil {
		e.t.Fatal(err)
	}
	return k
}
