package gateway

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/hangup"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// Store is what the gateway needs of gyre's store.
type Store interface {
	store.GatewayStore
	TenantByID(ctx context.Context, id string) (gyre.Tenant, error)
}

// Deps are the gateway's collaborators.
type Deps struct {
	// Store is required.
	Store Store
	// Blobs stores request and response bodies; nil records no bodies
	// (and no rollout is then training grade).
	Blobs BlobStore
	// Clock stamps records; nil is the wall clock.
	Clock clock.Clock
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Registerer takes the gateway's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Tracing takes a client span per upstream call; nil records none.
	Tracing *telemetry.Tracing
	// Limiter holds the gateway surface's rate limits (SPEC §2), a bucket
	// per rollout and per tenant; nil limits nothing.
	Limiter *ratelimit.Limiter
}

// Gateway serves the LLM gateway routes. Start its Recorder before
// serving and Stop it after the HTTP server drained.
type Gateway struct {
	cfg       Config
	st        Store
	clock     clock.Clock
	log       *slog.Logger
	rec       *Recorder
	m         *metrics
	upstreams map[string]*upstream
	redact    *redactor // every upstream's key, nil when none
	policies  sync.Map  // tenantID + "\x00" + name → Policy (policies never change)
	tenants   sync.Map  // tenantID → name
	limiter   *ratelimit.Limiter
	tracer    trace.Tracer
	// blobReader reads recorded bodies back, to resolve a Responses
	// previous_response_id from a flushed record; nil when Blobs cannot.
	blobReader BlobReader
}

// New returns a Gateway.
func New(cfg Config, d Deps) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	if d.Store == nil {
		return nil, errors.New("gateway: a store is required")
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, st: d.Store, clock: d.Clock, log: d.Logger, upstreams: map[string]*upstream{}, limiter: d.Limiter,
		tracer: d.Tracing.Tracer()}
	for _, u := range cfg.Upstreams {
		up, err := newUpstream(u, cfg.ResponseHeaderTimeout)
		if err != nil {
			return nil, err
		}
		g.upstreams[u.Name] = up
	}
	g.redact = newRedactor(cfg.Upstreams)
	if br, ok := d.Blobs.(BlobReader); ok {
		g.blobReader = br
	}
	g.rec = newRecorder(d.Store, d.Blobs, d.Clock, d.Logger, cfg)
	g.m = newMetrics(d.Registerer, func() float64 { return float64(g.rec.Pending()) })
	g.rec.metrics = g.m
	return g, nil
}

// Recorder returns the gateway's recorder.
func (g *Gateway) Recorder() *Recorder { return g.rec }

// Start starts the recorder: the replica's registration, flushes and
// revocation checks.
func (g *Gateway) Start(ctx context.Context) error { return g.rec.Start(ctx) }

// Stop flushes what is left and retires the replica; call it after the
// HTTP server has drained.
func (g *Gateway) Stop(ctx context.Context) error { return g.rec.Stop(ctx) }

// Upstreams lists the configured upstreams, for policy validation.
func (g *Gateway) Upstreams() []Upstream {
	out := make([]Upstream, 0, len(g.cfg.Upstreams))
	for _, u := range g.cfg.Upstreams {
		u.APIKey = "" // never handed out
		out = append(out, u)
	}
	return out
}

// MaxBodyBytes is the request body limit of the gateway routes.
func (g *Gateway) MaxBodyBytes() int64 { return g.cfg.MaxBodyBytes }

// Reasons a recorded call did not count (SPEC §6.3).
const (
	ReasonUpstreamError       = "upstream_error"
	ReasonUpstreamUnreachable = "upstream_unreachable"
	ReasonUpstreamRedirect    = "upstream_redirect"
	ReasonUpstreamBroken      = "upstream_stream_broken"
	ReasonStreamIncomplete    = "stream_incomplete"
	ReasonResponseTooLarge    = "response_too_large"
	ReasonClientDisconnected  = "client_disconnected"
	ReasonRevoked             = "revoked"
	ReasonInvalidRequest      = "invalid_request"
	ReasonBodyTooLarge        = "body_too_large"
	ReasonNoPolicy            = "no_policy"
	ReasonBudgetExhausted     = "rollout_budget_exhausted"
	ReasonLimitsUnreadable    = "limits_unreadable"
	ReasonUpstreamCredential  = "upstream_echoed_credential"
	ReasonUnsupportedProtocol = "unsupported_protocol"
	// ReasonUnknownPrevious: a previous_response_id that names no
	// response of the rollout.
	ReasonUnknownPrevious = "unknown_previous_response"
	// ReasonNotCompleted: a Responses answer whose status is neither
	// completed nor incomplete (failed, cancelled, queued, in progress).
	ReasonNotCompleted = "response_not_completed"
)

// tokenLen is the length of a gateway token: 256 bits in base64url.
const tokenLen = 43

// tokenHash checks a path token's shape and returns its SHA-256.
func tokenHash(token string) ([32]byte, bool) {
	if len(token) != tokenLen {
		return [32]byte{}, false
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return [32]byte{}, false
		}
	}
	return sha256.Sum256([]byte(token)), true
}

// apiKey returns the key a request presents: Authorization: Bearer, or
// x-api-key.
func apiKey(r *http.Request) (string, bool) {
	if vs := r.Header.Values("Authorization"); len(vs) > 0 {
		if len(vs) > 1 {
			return "", false
		}
		scheme, key, ok := strings.Cut(strings.TrimSpace(vs[0]), " ")
		key = strings.TrimSpace(key)
		if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
			return "", false
		}
		return key, true
	}
	if vs := r.Header.Values("X-Api-Key"); len(vs) == 1 && strings.TrimSpace(vs[0]) != "" {
		return strings.TrimSpace(vs[0]), true
	}
	return "", false
}

// authenticate admits a request by the rollout's gateway token and api
// key. Unknown and malformed tokens and wrong keys are all 401
// invalid_api_key, so the answer tells nothing about a token's shape.
func (g *Gateway) authenticate(ctx context.Context, r *http.Request, token string) (store.GatewayAccess, *apiError) {
	h, ok := tokenHash(token)
	if !ok {
		return store.GatewayAccess{}, errInvalidKey
	}
	key, ok := apiKey(r)
	if !ok {
		return store.GatewayAccess{}, errInvalidKey
	}
	a, err := g.rec.access(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		return a, errInvalidKey
	}
	if err != nil {
		return a, g.failed(ctx, "gateway credential read failed", err,
			&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot check credentials right now."})
	}
	kh := sha256.Sum256([]byte(key))
	if subtle.ConstantTimeCompare(kh[:], a.KeyHash[:]) != 1 {
		return a, errInvalidKey
	}
	if !a.Usable() {
		return a, errExpired
	}
	return a, nil
}

// admit authenticates a request, then takes its rate-limit tokens, so a
// request without the rollout's key never spends them.
func (g *Gateway) admit(ctx context.Context, r *http.Request, token string) (store.GatewayAccess, *apiError) {
	a, aerr := g.authenticate(ctx, r, token)
	if aerr == nil {
		aerr = g.rateLimit(ctx, a)
	}
	return a, aerr
}

// rateLimit takes a token from the rollout's and its tenant's gateway
// buckets, or answers 429 rate_limited with Retry-After. Nothing is
// recorded for a refused request: it never reached an upstream.
func (g *Gateway) rateLimit(ctx context.Context, a store.GatewayAccess) *apiError {
	if g.limiter == nil {
		return nil
	}
	d, err := g.limiter.Allow(ctx, ratelimit.Gateway, a.TenantID, "rollout:"+a.RolloutID)
	if err != nil {
		return g.failed(ctx, "gateway rate limit check failed", err,
			&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot check rate limits right now."})
	}
	if !d.Allowed {
		return rateLimited(d.RetryAfterSeconds())
	}
	return nil
}

// ServeChat serves POST /gw/{token}/v1/chat/completions.
func (g *Gateway) ServeChat(w http.ResponseWriter, r *http.Request, token string) {
	g.ServeRollout(w, r, token, ProtocolChat)
}

// ServeRollout serves a rollout's call on protocol p: POST
// /gw/{token}/v1/chat/completions, /v1/responses or /v1/messages. A
// protocol the gateway does not serve yet answers 404
// unsupported_endpoint.
func (g *Gateway) ServeRollout(w http.ResponseWriter, r *http.Request, token string, p Protocol) {
	spec := specFor(p)
	if spec == nil {
		g.ServeUnsupported(w, r)
		return
	}
	c := g.newCall(w, r, rolloutRoute(p), spec)
	defer c.cancel(nil)
	a, aerr := g.admit(c.ctx, r, token)
	if aerr != nil {
		c.refuse(aerr)
		return
	}
	rolloutID := a.RolloutID
	c.rec.TenantID, c.rec.AgentID, c.rec.RolloutID = a.TenantID, a.AgentID, &rolloutID
	inflight := g.rec.attach(c.fl, rolloutID)
	if err := g.rec.touch(c.ctx, rolloutID); err != nil {
		if errors.Is(err, store.ErrGatewayClosed) {
			c.refuse(errExpired)
			return
		}
		c.refuse(g.failed(c.ctx, "gateway touch failed", err,
			&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot record calls right now."},
			slog.String("rollout_id", rolloutID)))
		return
	}
	if !c.prepare() {
		return
	}
	// The batch's policy was resolved once, when it was created: a later
	// promotion or rollback never switches a rollout mid-conversation.
	if !c.choosePolicy(a.Policy) {
		return
	}
	if len(a.Limits) > 0 {
		if aerr, reason := g.checkBudget(c.ctx, a, inflight); aerr != nil {
			c.reject(aerr, reason)
			return
		}
	}
	if !c.resolvePrevious() {
		return
	}
	c.proxy()
}

// ServeProduction serves the policy endpoint POST
// /agents/{agent_id}/v1/chat/completions for a caller the API server has
// authenticated (an inference or agent key allowed for the agent): the
// agent's promoted policy, else the tenant's default, recorded as
// production traffic (no rollout). The promoted policy is read from the
// store on every request, never cached, so a promotion or rollback
// reaches every replica at once.
func (g *Gateway) ServeProduction(w http.ResponseWriter, r *http.Request, tenantID, agentID string) {
	g.ServeAgent(w, r, tenantID, agentID, ProtocolChat)
}

// ServeAgent serves the policy endpoint on protocol p: POST
// /agents/{agent_id}/v1/chat/completions, /v1/responses or /v1/messages
// (see ServeProduction). A protocol the gateway does not serve yet
// answers 404 unsupported_endpoint.
func (g *Gateway) ServeAgent(w http.ResponseWriter, r *http.Request, tenantID, agentID string, p Protocol) {
	spec := specFor(p)
	if spec == nil {
		g.ServeUnsupported(w, r)
		return
	}
	c := g.newCall(w, r, productionRoute(p), spec)
	defer c.cancel(nil)
	c.rec.TenantID, c.rec.AgentID = tenantID, agentID
	promoted, err := g.st.AgentPolicy(c.ctx, tenantID, agentID)
	if err != nil {
		c.refuse(g.failed(c.ctx, "agent policy read failed", err,
			&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot read policies right now."}))
		return
	}
	if !c.prepare() {
		return
	}
	if !c.choosePolicy(nil, promoted) {
		return
	}
	if !c.resolvePrevious() {
		return
	}
	c.proxy()
}

// ServeModels serves GET /gw/{token}/v1/models: the policy's model and
// every model the agent asked for in the rollout.
func (g *Gateway) ServeModels(w http.ResponseWriter, r *http.Request, token string) {
	c := g.newCall(w, r, routeModels, chatSpec{})
	defer c.cancel(nil)
	a, aerr := g.admit(c.ctx, r, token)
	if aerr != nil {
		c.refuse(aerr)
		return
	}
	defer g.rec.finish(c.fl, nil)
	pol, _, aerr := g.policyFor(c.ctx, a.TenantID, a.Policy)
	if aerr != nil {
		g.answerError(w, routeModels, aerr)
		return
	}
	// The waiting records first: one written meanwhile is then in the
	// store's answer, never in neither.
	pending := g.rec.pendingModels(a.RolloutID)
	asked, err := g.st.GatewayRequestedModels(c.ctx, a.RolloutID)
	if err != nil {
		g.answerError(w, routeModels, g.failed(c.ctx, "requested models read failed", err,
			&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot list models right now."}))
		return
	}
	asked = append(asked, pending...)
	slices.Sort(asked)
	models := []string{pol.Model}
	for _, m := range slices.Compact(asked) {
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, m := range models {
		out.Data = append(out.Data, model{ID: m, Object: "model", OwnedBy: "gyre"})
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
	g.m.answered(routeModels, http.StatusOK)
}

// ServeUnsupported answers every other path under /gw/{token}/: 404
// unsupported_endpoint, whatever the token.
func (g *Gateway) ServeUnsupported(w http.ResponseWriter, r *http.Request) {
	g.answerError(w, "/gw/{token}/", errUnsupported)
}

func (g *Gateway) answerError(w http.ResponseWriter, route string, e *apiError) {
	writeAPIError(w, e)
	g.m.answered(route, e.Status)
}

// tenantName returns a tenant's name, for upstream allow-lists.
func (g *Gateway) tenantName(ctx context.Context, tenantID string) (string, error) {
	if v, ok := g.tenants.Load(tenantID); ok {
		return v.(string), nil
	}
	t, err := g.st.TenantByID(ctx, tenantID)
	if err != nil {
		return "", err
	}
	g.tenants.Store(tenantID, t.Name)
	return t.Name, nil
}

// policyFor resolves the policy of a request: the first name given (a
// rollout's batch's, or the agent's promoted one on the policy
// endpoint), else the server's default.
func (g *Gateway) policyFor(ctx context.Context, tenantID string, names ...*string) (*Policy, *upstream, *apiError) {
	name := ""
	for _, n := range names {
		if n != nil && *n != "" {
			name = *n
			break
		}
	}
	if name == "" {
		name = g.cfg.DefaultPolicy
	}
	if name == "" {
		return nil, nil, errNoPolicy
	}
	unavailable := func(msg string) *apiError {
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeNoPolicy, Message: msg}
	}
	key := tenantID + "\x00" + name
	var pol Policy
	if v, ok := g.policies.Load(key); ok {
		pol = v.(Policy)
	} else {
		sp, err := g.st.GetPolicy(ctx, tenantID, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, unavailable(fmt.Sprintf("Policy %q does not exist in this tenant.", name))
		}
		if err != nil {
			return nil, nil, g.failed(ctx, "policy read failed", err,
				&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot read policies right now."})
		}
		if pol, err = ParsePolicy(sp.Body); err != nil {
			return nil, nil, unavailable(fmt.Sprintf("Policy %q cannot be read.", name))
		}
		g.policies.Store(key, pol)
	}
	up, ok := g.upstreams[pol.Upstream]
	tenant, err := g.tenantName(ctx, tenantID)
	if hangup.ClientGone(ctx, err) {
		return nil, nil, g.failed(ctx, "tenant read failed", err, nil)
	}
	if !ok || err != nil || !up.AllowsTenant(tenant) {
		return nil, nil, &apiError{Status: http.StatusServiceUnavailable, Code: CodeUpstreamUnavailable,
			Message: fmt.Sprintf("Policy %q routes to upstream %q, which this server does not offer to this tenant.", name, pol.Upstream)}
	}
	return &pol, up, nil
}

// DefaultPolicy is the policy a rollout uses when neither its batch nor
// its agent's promotion names one; "" when the server has none.
func (g *Gateway) DefaultPolicy() string { return g.cfg.DefaultPolicy }

// checkBudget refuses a request past one of the batch's limits: usage is
// what the rollout's recorded calls spent (durable records, and this
// replica's waiting ones), concurrency what this replica has in flight.
//
// Limits that cannot be read fail closed: the request is refused with a
// server error rather than run without a budget.
func (g *Gateway) checkBudget(ctx context.Context, a store.GatewayAccess, inflight int) (*apiError, string) {
	l, err := gyre.DecodeLimits(a.Limits)
	if err != nil {
		g.log.LogAttrs(ctx, slog.LevelError, "batch limits unreadable", slog.String("rollout_id", a.RolloutID),
			slog.String("batch_id", a.BatchID), slog.Any("error", err))
		return errLimitsUnreadable, ReasonLimitsUnreadable
	}
	if aerr := g.overBudget(ctx, a, l, inflight); aerr != nil {
		return aerr, ReasonBudgetExhausted
	}
	return nil, ""
}

// overBudget refuses a request past one of the limits l.
func (g *Gateway) overBudget(ctx context.Context, a store.GatewayAccess, l gyre.Limits, inflight int) *apiError {
	if l.MaxConcurrentRequests != nil && int64(inflight) > *l.MaxConcurrentRequests {
		return errBudget(fmt.Sprintf("max_concurrent_requests is %d", *l.MaxConcurrentRequests))
	}
	if l.MaxCompletions == nil && l.MaxTotalTokens == nil && l.MaxCostUSD == nil {
		return nil
	}
	u, err := g.rec.usage(ctx, a.RolloutID, func(ctx context.Context) (store.GatewayUsage, error) {
		return g.st.GatewayUsage(ctx, a.RolloutID)
	})
	if err != nil {
		return g.failed(ctx, "gateway usage read failed", err,
			&apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal, Message: "The gateway cannot check this rollout's budget right now."})
	}
	switch {
	case l.MaxCompletions != nil && int64(u.Completions) >= *l.MaxCompletions:
		return errBudget(fmt.Sprintf("max_completions %d reached", *l.MaxCompletions))
	case l.MaxTotalTokens != nil && u.TotalTokens >= *l.MaxTotalTokens:
		return errBudget(fmt.Sprintf("max_total_tokens %d reached", *l.MaxTotalTokens))
	case l.MaxCostUSD != nil && u.CostUSD >= *l.MaxCostUSD:
		return errBudget(fmt.Sprintf("max_cost_usd %g reached", *l.MaxCostUSD))
	}
	return nil
}

// readBody reads a request body, already capped by the server, undoing a
// gzip Content-Encoding under the same cap.
func readBody(r *http.Request, max int64) ([]byte, *apiError) {
	if r.ContentLength > max {
		return nil, bodyTooLarge(max)
	}
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		if r.ContentLength > 0 {
			// The size is known (net/http reads no more than it): one
			// buffer of it, not a growing one.
			b := make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, b); err != nil {
				return nil, readError(err, max)
			}
			return b, nil
		}
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, errInvalid("", "The request body is not valid gzip.")
		}
		defer zr.Close()
		body = zr
	default:
		return nil, &apiError{Status: http.StatusUnsupportedMediaType, Code: CodeInvalidRequest,
			Message: fmt.Sprintf("Content-Encoding %q is not supported.", enc)}
	}
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, readError(err, max)
	}
	if int64(len(b)) > max {
		return nil, bodyTooLarge(max)
	}
	return b, nil
}

func bodyTooLarge(max int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
		Message: fmt.Sprintf("The request body is larger than the gateway's limit of %d bytes.", max)}
}

// readError is the answer to a body that could not be read: too large
// when the server's cap stopped it.
func readError(err error, max int64) *apiError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return bodyTooLarge(max)
	}
	return errInvalid("", "The request body could not be read.")
}
