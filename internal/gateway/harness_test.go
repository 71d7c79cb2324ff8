package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// engine opens a fresh store whose every time comes from clk.
type engine struct {
	name string
	open func(t *testing.T, clk clock.Clock) (store.Store, string)
}

var (
	sqliteEngine = engine{name: "sqlite", open: func(t *testing.T, clk clock.Clock) (store.Store, string) {
		dir := t.TempDir()
		return openStore(t, storeopen.Options{DataDir: dir, Clock: clk}), dir
	}}
	postgresEngine = engine{name: "postgres", open: func(t *testing.T, clk clock.Clock) (store.Store, string) {
		u := storetest.PostgresURL(t)
		schema := storetest.NewPostgresSchema(t, u)
		return openStore(t, storeopen.Options{DB: storetest.SearchPathURL(t, u, schema), Clock: clk, InjectedLeaseClock: true}), t.TempDir()
	}}
)

func openStore(t *testing.T, o storeopen.Options) store.Store {
	t.Helper()
	o.Migrate = true
	st, err := storeopen.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// forEachEngine runs f on SQLite and on PostgreSQL (skipped without one).
func forEachEngine(t *testing.T, f func(t *testing.T, eng engine)) {
	t.Helper()
	for _, eng := range []engine{sqliteEngine, postgresEngine} {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			f(t, eng)
		})
	}
}

// syncBuffer is a log sink safe for concurrent writers.
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

// upstream is a controllable OpenAI-compatible server. Its handler is
// swapped per test; every request it receives is kept.
type upstream struct {
	ts      *httptest.Server
	mu      sync.Mutex
	handler func(w http.ResponseWriter, r *http.Request, body []byte)
	bodies  [][]byte
	headers []http.Header
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.handler = func(w http.ResponseWriter, r *http.Request, body []byte) { answerText(w, body, "hello") }
	u.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, body)
		u.headers = append(u.headers, r.Header.Clone())
		h := u.handler
		u.mu.Unlock()
		h(w, r, body)
	}))
	t.Cleanup(u.ts.Close)
	return u
}

func (u *upstream) set(h func(w http.ResponseWriter, r *http.Request, body []byte)) {
	u.mu.Lock()
	u.handler = h
	u.mu.Unlock()
}

// last returns the last request body the upstream received, decoded.
func (u *upstream) last(t *testing.T) map[string]any {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		t.Fatal("the upstream received no request")
	}
	var m map[string]any
	if err := json.Unmarshal(u.bodies[len(u.bodies)-1], &m); err != nil {
		t.Fatalf("upstream body %s: %v", u.bodies[len(u.bodies)-1], err)
	}
	return m
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

var upstreamUsage = `{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":3}}`

// answerText answers a whole chat completion with content.
func answerText(w http.ResponseWriter, body []byte, content string) {
	var req struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":%s}`,
		req.Model, content, upstreamUsage)
}

// answerToolCall answers a whole chat completion with one tool call.
func answerToolCall(w http.ResponseWriter, id, name, args string) {
	w.Header().Set("Content-Type", "application/json")
	a, _ := json.Marshal(args)
	fmt.Fprintf(w, `{"id":"chatcmpl-2","object":"chat.completion","created":1700000000,"model":"served-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":%s}`,
		id, name, a, upstreamUsage)
}

// sse writes one SSE data event and flushes it.
func sse(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func chunkJSON(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-s","object":"chat.completion.chunk","created":1700000000,"model":"served-model","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"usage":null}`, delta, f)
}

func usageChunk() string {
	return `{"id":"chatcmpl-s","object":"chat.completion.chunk","created":1700000000,"model":"served-model","choices":[],"usage":` + upstreamUsage + `}`
}

// streamText streams content in pieces, then the usage chunk when the
// request asked for it, then [DONE] unless noDone.
// streamFirstAlone streams a text answer whose first event goes out
// alone: the rest follows when the client has the first (next is
// closed), so the gateway's answer is a chunked body.
func streamFirstAlone(w http.ResponseWriter, next <-chan struct{}) {
	startStream(w)
	sse(w, chunkJSON(`{"role":"assistant","content":"a"}`, ""))
	select {
	case <-next:
	case <-time.After(10 * time.Second):
	}
	sse(w, chunkJSON(`{"content":"b"}`, ""))
	sse(w, chunkJSON(`{}`, "stop"))
	sse(w, "[DONE]")
}

// gates hands out one gate per request: the test closes the current one
// when its client has the first event.
type gates struct {
	mu   sync.Mutex
	next chan struct{}
}

// open starts a new gate and returns it, for the next request.
func (g *gates) open() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next = make(chan struct{})
	return g.next
}

func (g *gates) current() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next
}

func streamText(w http.ResponseWriter, body []byte, pieces []string, noDone bool) {
	startStream(w)
	sse(w, chunkJSON(`{"role":"assistant","content":""}`, ""))
	for _, p := range pieces {
		c, _ := json.Marshal(p)
		sse(w, chunkJSON(`{"content":`+string(c)+`}`, ""))
	}
	sse(w, chunkJSON(`{}`, "stop"))
	if strings.Contains(string(body), `"include_usage":true`) {
		sse(w, usageChunk())
	}
	if !noDone {
		sse(w, "[DONE]")
	}
}

// tickClock is a fake clock that moves forward a microsecond at every
// reading, as a real clock does between two events: the watermark
// argument of SPEC §6.3 relies on a credential read, the acceptance of the
// output and the seal happening at distinct instants.
type tickClock struct{ *clock.Fake }

func (c tickClock) Now() time.Time {
	c.Advance(time.Microsecond)
	return c.Fake.Now()
}

// harness is a gyre server with the gateway in front of an upstream stub,
// on a fake clock, with one tenant, its keys and a policy "p1".
type harness struct {
	t       *testing.T
	clk     *clock.Fake
	st      store.Store
	dir     string
	gw      *gateway.Gateway
	svc     *rollout.Service
	srv     *api.Server
	ts      *httptest.Server
	up      *upstream
	blobs   *blobstore.Store
	metrics *telemetry.Metrics
	spans   *tracetest.SpanRecorder
	logs    *syncBuffer
	tenant  gyre.Tenant
	admin   string
	agent   string
	secrets []string // every secret issued during the test
}

type harnessOpts struct {
	gw       gateway.Config
	noPolicy bool
	// limits are rate limits for the server and the gateway, on the
	// harness's fake clock.
	limits ratelimit.Config
	// plainServer serves without gateway.DeliveryListener, as a server
	// other than gyre's would: the gateway then flushes [DONE] itself.
	plainServer bool
	// wrapListener, if set, wraps the server's connections first.
	wrapListener func(net.Listener) net.Listener
	// gatewayStore, if set, wraps the store the gateway reads.
	gatewayStore func(gateway.Store) gateway.Store
	// stubProtocols are the protocols the stub upstream declares (nil:
	// the default, chat).
	stubProtocols []gateway.Protocol
	// s3OnPostgres keeps blobs in S3 (GYRE_TEST_S3_URL, under a prefix
	// of the test's own) when the store is PostgreSQL, as a multi-replica
	// deployment does.
	s3OnPostgres bool
}

var start = time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)

func newHarness(t *testing.T, eng engine, o harnessOpts) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(start), logs: &syncBuffer{}}
	clk := tickClock{h.clk}
	h.st, h.dir = eng.open(t, clk)
	h.up = newUpstream(t)
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	blobURL := ""
	if o.s3OnPostgres && eng.name == "postgres" {
		if blobURL = os.Getenv("GYRE_TEST_S3_URL"); blobURL == "" {
			t.Fatal("GYRE_TEST_S3_URL is not set: run the PostgreSQL tests through scripts/testenv.sh, which starts an S3 server")
		}
		sep := "?"
		if strings.Contains(blobURL, "?") {
			sep = "&"
		}
		blobURL += sep + "prefix=test-" + strings.ToLower(rand.Text()) + "/"
	}
	h.blobs, err = blobstore.Open(context.Background(), blobURL, h.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.blobs.Close() })
	var handler http.Handler
	h.ts = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	if o.wrapListener != nil {
		h.ts.Listener = o.wrapListener(h.ts.Listener)
	}
	if !o.plainServer {
		h.ts.Listener = gateway.DeliveryListener(h.ts.Listener)
		h.ts.Config.ConnContext = gateway.DeliveryContext
	}
	h.ts.Start()
	t.Cleanup(h.ts.Close)
	h.svc, err = rollout.New(rollout.Config{PublicURL: h.ts.URL}, rollout.Deps{Store: h.st, Clock: clk, Logger: log, Blobs: h.blobs})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.gw
	cfg.Upstreams = append([]gateway.Upstream{{Name: "stub", BaseURL: h.up.ts.URL + "/v1", AllowPrivate: true, APIKey: "upstream-secret-key-0123456789",
		Protocols: o.stubProtocols}}, cfg.Upstreams...)
	h.secrets = append(h.secrets, "upstream-secret-key-0123456789")
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = 20 * time.Millisecond
	}
	h.metrics = telemetry.NewMetrics()
	h.spans = tracetest.NewSpanRecorder()
	tracing := telemetry.NewTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans)))
	limiter, err := ratelimit.New(o.limits, clk, func(ctx context.Context, id string) (string, error) {
		tn, err := h.st.TenantByID(ctx, id)
		return tn.Name, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var gst gateway.Store = h.st
	if o.gatewayStore != nil {
		gst = o.gatewayStore(h.st)
	}
	h.gw, err = gateway.New(cfg, gateway.Deps{Store: gst, Blobs: h.blobs, Clock: clk, Logger: log, Registerer: h.metrics.Registry, Limiter: limiter, Tracing: tracing})
	if err != nil {
		t.Fatal(err)
	}
	h.srv, err = api.New(api.Config{}, api.Deps{Store: h.st, Logger: log, Clock: clk, Metrics: h.metrics, Blobs: h.blobs,
		Rollouts: h.svc, Gateway: h.gw, Limiter: limiter, Tracing: tracing})
	if err != nil {
		t.Fatal(err)
	}
	handler = h.srv.Handler()
	if err := h.gw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.gw.Stop(context.Background()) })
	h.tenant, err = h.st.CreateTenant(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	h.admin = h.key(gyre.RoleAdmin)
	h.agent = h.key(gyre.RoleAgent)
	if !o.noPolicy {
		h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"p1","upstream":"stub","model":"served-model",
			"tokenizer":"tok-1","sampling_overrides":{"temperature":1.0},"prices":{"input":1,"cached_input":0.5,"output":2}}`, http.StatusCreated)
	}
	return h
}

// key creates a key of the tenant and returns its secret.
func (h *harness) key(role gyre.Role, agents ...string) string {
	h.t.Helper()
	_, secret, err := auth.CreateKey(context.Background(), h.st, h.tenant.ID, auth.KeyRequest{Role: role, AgentIDs: agents})
	if err != nil {
		h.t.Fatal(err)
	}
	h.secrets = append(h.secrets, secret)
	return secret
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (h *harness) do(method, path, key string, body []byte, headers ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (h *harness) mustJSON(method, path, key, body string, want int, headers ...string) response {
	h.t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r := h.do(method, path, key, b, headers...)
	if r.status != want {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	return r
}

// rollout makes a one-task batch with extra batch members and claims its
// rollout.
func (h *harness) rollout(extra string) flywheel.RolloutRequest {
	h.t.Helper()
	name := fmt.Sprintf("s%d", time.Now().UnixNano())
	h.mustJSON(http.MethodPost, "/api/v1/suites", h.admin, fmt.Sprintf(`{"name":%q,"cases":[{"id":"c0","input":{"q":"refund"},
		"graders":[{"contains":"refund"}]}]}`, name), http.StatusCreated)
	r := h.do(http.MethodPost, "/api/v1/tasks", h.admin, []byte(fmt.Sprintf(`{"suite":%q}`, name)))
	var tasks struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &tasks); err != nil || len(tasks.Items) != 1 {
		h.t.Fatalf("tasks: %d %s", r.status, r.body)
	}
	h.mustJSON(http.MethodPost, "/api/v1/batches", h.admin, fmt.Sprintf(`{"agent_id":"agent-1","task_ids":[%q]%s}`,
		tasks.Items[0].TaskID, extra), http.StatusCreated)
	c := h.mustJSON(http.MethodPost, "/agents/agent-1/claim", h.agent, "", http.StatusOK)
	var claim flywheel.ClaimResponse
	if err := json.Unmarshal(c.body, &claim); err != nil || len(claim.Rollouts) != 1 {
		h.t.Fatalf("claim: %s (%v)", c.body, err)
	}
	rr := claim.Rollouts[0]
	lt, _ := rr.LeaseToken.Get()
	h.secrets = append(h.secrets, rr.APIKey, lt, gatewayToken(rr))
	return rr
}

// gatewayToken is the token in a rollout's llm_url.
func gatewayToken(rr flywheel.RolloutRequest) string {
	_, rest, _ := strings.Cut(rr.LLMURL, "/gw/")
	return strings.TrimSuffix(rest, "/v1")
}

// postStream starts a streamed chat completion on rr's gateway with a
// plain HTTP client, for tests that read the raw stream.
func (h *harness) postStream(rr flywheel.RolloutRequest) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, h.ts.URL+"/gw/"+gatewayToken(rr)+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+rr.APIKey)
	return h.ts.Client().Do(req)
}

// client is the official OpenAI SDK pointed at a rollout's llm_url, with
// no retries so every call is one request.
func (h *harness) client(rr flywheel.RolloutRequest, opts ...option.RequestOption) *openai.Client {
	c := openai.NewClient(append([]option.RequestOption{option.WithBaseURL(rr.LLMURL), option.WithAPIKey(rr.APIKey),
		option.WithMaxRetries(0), option.WithHTTPClient(h.ts.Client())}, opts...)...)
	return &c
}

// submit posts a rollout's output.
func (h *harness) submit(rr flywheel.RolloutRequest, output string) {
	h.t.Helper()
	lt, _ := rr.LeaseToken.Get()
	h.mustJSON(http.MethodPost, "/rollouts/"+rr.RolloutID+"/output", h.agent, output, http.StatusOK, "Lease-Token", lt)
}

// settle runs the job queue until the submitted rollout is graded and
// reconciled: flushes make the records durable and move the watermark
// past the seal; the fake clock moves so that retried jobs are due.
func (h *harness) settle(id string) {
	h.t.Helper()
	ctx := context.Background()
	for range 100 {
		h.flush()
		h.clk.Advance(time.Second)
		if _, err := h.svc.Grader().RunOnce(ctx, "test", time.Minute); err != nil {
			h.t.Fatal(err)
		}
		if v := h.view(id); v.Reconciliation != nil {
			return
		}
		// The replica's flush watermark also moves on its own beat, which
		// runs on real time: give it a moment before the next round.
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("rollout %s did not reconcile", id)
}

// flush waits for the requests in flight (a client may have its answer
// before the gateway has recorded it) and makes every record durable.
func (h *harness) flush() {
	h.t.Helper()
	for range 500 {
		if err := h.gw.Recorder().Flush(context.Background()); err != nil {
			h.t.Fatal(err)
		}
		if h.gw.Recorder().Idle() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatal("the gateway never became idle")
}

// view is GET /api/v1/rollouts/{id}.
type view struct {
	State   string `json:"state"`
	Gateway struct {
		Completions int `json:"completions"`
		Failed      int `json:"failed"`
		Calls       []struct {
			Seq       int             `json:"seq"`
			Protocol  string          `json:"protocol"`
			Status    int             `json:"status"`
			Counted   bool            `json:"counted"`
			Reason    *string         `json:"reason"`
			LatencyMS *float64        `json:"latency_ms"`
			Usage     json.RawMessage `json:"usage"`
			CostUSD   *float64        `json:"cost_usd"`
			Requested *string         `json:"requested_model"`
			Emitted   []string        `json:"emitted_tool_call_ids"`
			Consumed  []string        `json:"consumed_tool_call_ids"`
		} `json:"calls"`
	} `json:"gateway"`
	ToolCallJoins []struct {
		ToolCallID    *string `json:"tool_call_id"`
		Name          string  `json:"name"`
		CompletionSeq *int    `json:"completion_seq"`
		Ambiguous     bool    `json:"ambiguous"`
	} `json:"tool_call_joins"`
	Reconciliation       *string         `json:"reconciliation"`
	ReconciliationReason *string         `json:"reconciliation_reason"`
	ServerFingerprint    json.RawMessage `json:"server_fingerprint"`
	AgentFingerprint     json.RawMessage `json:"agent_fingerprint"`
	TrainingGrade        *bool           `json:"training_grade"`
	Reasons              []string        `json:"not_training_grade_reasons"`
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func (h *harness) view(id string) view {
	h.t.Helper()
	r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+id, h.admin, "", http.StatusOK)
	var v view
	if err := json.Unmarshal(r.body, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// calls returns the rollout's stored records.
func (h *harness) calls(id string) []store.GatewayCall {
	h.t.Helper()
	cs, err := h.st.GatewayCalls(context.Background(), h.tenant.ID, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return cs
}

// blob reads a stored blob.
func (h *harness) blob(key string) []byte {
	h.t.Helper()
	rc, err := h.blobs.Get(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// apiErr is an OpenAI-shaped error answer.
type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func wantOpenAIError(t *testing.T, r response, status int, code string) {
	t.Helper()
	var e apiErr
	if r.status != status || json.Unmarshal(r.body, &e) != nil || e.Error.Code != code || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("got %d %s, want %d with OpenAI error code %s", r.status, r.body, status, code)
	}
}
