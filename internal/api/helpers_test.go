package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
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

// engine opens fresh, migrated stores on one database engine.
type engine struct {
	name string
	// open opens a fresh store whose times come from clk, adjusted by opts.
	open func(t testing.TB, clk clock.Clock, opts ...storeOption) store.Store
}

// storeOption adjusts the options an engine opens a store with.
type storeOption func(*storeopen.Options)

// injectedLeaseClock makes PostgreSQL decide leases and deadlines on the
// store's clock instead of the database's, so that a fake clock moves them,
// as SQLite always does. gyre serve runs without it.
func injectedLeaseClock(o *storeopen.Options) { o.InjectedLeaseClock = true }

// sqliteIn is the SQLite engine on the data directory dir, or on a fresh
// directory for each store when dir is "".
func sqliteIn(dir string) engine {
	return engine{name: "sqlite", open: func(t testing.TB, clk clock.Clock, opts ...storeOption) store.Store {
		d := dir
		if d == "" {
			d = t.TempDir()
		}
		return openStore(t, storeopen.Options{DataDir: d, Clock: clk}, opts...)
	}}
}

var (
	// sqliteEngine opens a store in a fresh data directory.
	sqliteEngine = sqliteIn("")
	// postgresEngine opens a store in a fresh schema of the PostgreSQL
	// server named by GYRE_TEST_POSTGRES_URL; without one, tests on it skip
	// (or fail when GYRE_REQUIRE_POSTGRES=1).
	postgresEngine = engine{name: "postgres", open: func(t testing.TB, clk clock.Clock, opts ...storeOption) store.Store {
		u := storetest.PostgresURL(t)
		schema := storetest.NewPostgresSchema(t, u)
		return openStore(t, storeopen.Options{DB: storetest.SearchPathURL(t, u, schema), Clock: clk}, opts...)
	}}
)

// engines are the engines the store-heavy tests run on: SQLite, and
// PostgreSQL, whose subtests skip when no server is configured.
func engines() []engine { return []engine{sqliteEngine, postgresEngine} }

// openStore opens and migrates a store, closed when the test ends.
func openStore(t testing.TB, o storeopen.Options, opts ...storeOption) store.Store {
	t.Helper()
	o.Migrate = true
	for _, opt := range opts {
		opt(&o)
	}
	st, err := storeopen.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// blobBackend opens a fresh, empty blob store for one test.
type blobBackend struct {
	name string
	open func(t *testing.T) *blobstore.Store
}

// fileBlobs is a blob store in a fresh directory.
var fileBlobs = blobBackend{name: "file", open: func(t *testing.T) *blobstore.Store {
	b, err := blobstore.Open(t.Context(), "", t.TempDir())
	if err != nil {
		t.Fatalf("open blob store: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}}

// s3Blobs is a blob store under a fresh prefix of the S3 bucket named by
// GYRE_TEST_S3_URL (scripts/testenv.sh starts one); without it the test
// skips, or fails when GYRE_REQUIRE_S3 is set.
var s3Blobs = blobBackend{name: "s3", open: func(t *testing.T) *blobstore.Store {
	base := os.Getenv("GYRE_TEST_S3_URL")
	if base == "" {
		if r := os.Getenv("GYRE_REQUIRE_S3"); r != "" && r != "0" {
			t.Fatal("GYRE_REQUIRE_S3 is set but GYRE_TEST_S3_URL is not")
		}
		t.Skip("SKIPPING S3 catalog tests: GYRE_TEST_S3_URL is not set (run through scripts/testenv.sh)")
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	b, err := blobstore.Open(t.Context(), base+sep+"prefix=api-"+strings.ToLower(rand.Text()), "")
	if err != nil {
		t.Fatalf("open S3 blob store: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}}

// env is a running server on one store, with one tenant and its admin key.
type env struct {
	t      *testing.T
	st     store.Store
	srv    *Server
	ts     *httptest.Server
	logs   *syncBuffer
	tenant gyre.Tenant
	admin  string // the admin key's secret

	clk   *clock.Fake      // withFakeClock's clock, else nil
	blobs *blobstore.Store // withBlobs's store, else nil
	svc   *rollout.Service // withRollouts's service, else nil
	agent string           // with withRollouts, an agent key's secret
}

// envOption adds to what newEnv sets up.
type envOption func(*envOptions)

type envOptions struct {
	clk      *clock.Fake
	blobs    *blobBackend
	rollouts *rollout.Config
	limits   ratelimit.Config
	// wrapRolloutStore, when set, wraps the store the rollout service uses.
	wrapRolloutStore func(store.Store) store.Store
	// claimWaiting is the rollout service's Deps.Waiting.
	claimWaiting func()
	// logTap sees every log record the server writes.
	logTap   func(slog.Record)
	gradeEnv func(store.Store) grade.Env
	// harnesses makes the server's harness registry on the env's store.
	harnesses func(store.Store) *harness.Registry
}

// withHarnesses gives the server the harness registry reg makes on the
// env's store.
func withHarnesses(reg func(store.Store) *harness.Registry) envOption {
	return func(o *envOptions) { o.harnesses = reg }
}

// withClaimWaiting has the rollout service call f each time a claim
// starts waiting (rollout.Deps.Waiting).
func withClaimWaiting(f func()) envOption {
	return func(o *envOptions) { o.claimWaiting = f }
}

// withLogTap has tap see every log record the server writes, besides
// env.logs.
func withLogTap(tap func(slog.Record)) envOption {
	return func(o *envOptions) { o.logTap = tap }
}

// tapHandler passes each record to tap, then to the Handler.
type tapHandler struct {
	slog.Handler
	tap func(slog.Record)
}

func (h tapHandler) Handle(ctx context.Context, r slog.Record) error {
	h.tap(r.Clone())
	return h.Handler.Handle(ctx, r)
}

func (h tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return tapHandler{h.Handler.WithAttrs(as), h.tap}
}

func (h tapHandler) WithGroup(name string) slog.Handler {
	return tapHandler{h.Handler.WithGroup(name), h.tap}
}

// withRolloutStore makes the rollout service use wrap(the env's store),
// e.g. to hold claims in the store.
func withRolloutStore(wrap func(store.Store) store.Store) envOption {
	return func(o *envOptions) { o.wrapRolloutStore = wrap }
}

// withGradeEnv grades the env's rollouts with the grade.Env env returns
// for the env's store (judge, command allow-list), as gyre serve does.
func withGradeEnv(env func(store.Store) grade.Env) envOption {
	return func(o *envOptions) { o.gradeEnv = env }
}

// withLimits gives the server rate limits (SPEC §2) on the env's clock.
func withLimits(cfg ratelimit.Config) envOption {
	return func(o *envOptions) { o.limits = cfg }
}

// withFakeClock runs the env on a fake clock starting at start, env.clk:
// the store's times, the server's request timing and the rollout service.
func withFakeClock(start time.Time) envOption {
	return func(o *envOptions) { o.clk = clock.NewFake(start) }
}

// withBlobs gives the server a blob store from b, env.blobs.
func withBlobs(b blobBackend) envOption {
	return func(o *envOptions) { o.blobs = &b }
}

// withRollouts gives the server the rollout service, env.svc, configured
// by cfg (PublicURL defaults to https://gyre.example.com/base/), with
// PostgreSQL's leases on the env's clock (injectedLeaseClock), and creates
// an agent key, env.agent.
func withRollouts(cfg rollout.Config) envOption {
	return func(o *envOptions) { o.rollouts = &cfg }
}

// newEnv starts a server with cfg on a fresh store of eng, as opts say,
// and creates the tenant "acme" with an admin key.
func newEnv(t *testing.T, eng engine, cfg Config, opts ...envOption) *env {
	t.Helper()
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	e := &env{t: t, logs: &syncBuffer{}, clk: o.clk}
	var clk clock.Clock = clock.Real{}
	if o.clk != nil {
		clk = o.clk
	}
	var storeOpts []storeOption
	if o.rollouts != nil {
		storeOpts = append(storeOpts, injectedLeaseClock)
	}
	e.st = eng.open(t, clk, storeOpts...)
	var h slog.Handler = slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})
	if o.logTap != nil {
		h = tapHandler{h, o.logTap}
	}
	log := slog.New(h)
	deps := Deps{Store: e.st, Logger: log, Clock: clk, Metrics: telemetry.NewMetrics()}
	if o.blobs != nil {
		e.blobs = o.blobs.open(t)
		deps.Blobs = e.blobs
	}
	if o.rollouts != nil {
		rc := *o.rollouts
		if rc.PublicURL == "" {
			rc.PublicURL = "https://gyre.example.com/base/"
		}
		rst := e.st
		if o.wrapRolloutStore != nil {
			rst = o.wrapRolloutStore(e.st)
		}
		rd := rollout.Deps{Store: rst, Clock: clk, Logger: log, Waiting: o.claimWaiting}
		if o.gradeEnv != nil {
			rd.Grader = rollout.NewGrader(e.st, rollout.GraderDeps{Logger: log, Env: o.gradeEnv(e.st)})
		}
		svc, err := rollout.New(rc, rd)
		if err != nil {
			t.Fatal(err)
		}
		e.svc = svc
		deps.Rollouts = svc
	}
	if o.harnesses != nil {
		deps.Harnesses = o.harnesses(e.st)
	}
	if o.limits != nil {
		l, err := ratelimit.New(o.limits, clk, func(ctx context.Context, id string) (string, error) {
			tn, err := e.st.TenantByID(ctx, id)
			return tn.Name, err
		})
		if err != nil {
			t.Fatal(err)
		}
		deps.Limiter = l
	}
	srv, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.tenant, e.admin = e.newTenant("acme")
	e.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(e.ts.Close)
	if o.rollouts != nil {
		e.agent = e.key(gyre.RoleAgent)
	}
	return e
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

// key creates a key of the env's tenant with role, limited to agentIDs
// when any are given, and returns its secret.
func (e *env) key(role gyre.Role, agentIDs ...string) string {
	e.t.Helper()
	_, secret := e.newKey(e.tenant.ID, auth.KeyRequest{Role: role, AgentIDs: agentIDs})
	return secret
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
