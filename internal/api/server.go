package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/promotion/runner"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// DefaultMaxBlobBytes bounds the routes that stream a body into the blob
// store (fixtures, blobs such as trajectories) instead of into memory: the
// evaluator's trajectory limit (SPEC §7.2), counted after decompression.
const DefaultMaxBlobBytes = 256 << 20

// Defaults for the zero fields of Config.
const (
	DefaultMaxBodyBytes      = 4 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultHandlerTimeout    = time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultReadyTimeout      = 5 * time.Second
)

// Config tunes the server. The zero value of every field means its default.
type Config struct {
	// PublicURL is the base URL clients reach this server at (SPEC §2),
	// used for URLs the server writes into responses.
	PublicURL string
	// MaxBodyBytes caps request bodies, after decompression (default 4 MiB).
	MaxBodyBytes int64
	// MaxBlobBytes caps the bodies of the routes that stream into the blob
	// store — fixtures and blobs (default 256 MiB).
	MaxBlobBytes int64
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default
	// 2 min). There is no write timeout: handlers are bounded by
	// HandlerTimeout instead, and streaming routes manage their own
	// deadlines through http.ResponseController.
	ReadTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (default 2 min).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the size of request headers (default 64 KiB).
	MaxHeaderBytes int
	// HandlerTimeout bounds the context of each handler (default 1 min).
	HandlerTimeout time.Duration
	// ShutdownTimeout bounds draining in-flight requests on shutdown
	// (default 30 s); connections still open then are closed.
	ShutdownTimeout time.Duration
	// ReadyTimeout bounds the store check of /readyz (default 5 s).
	ReadyTimeout time.Duration
	// AllowCommand decides whether a suite of the tenant named tenantName
	// may declare a command grader running the executable argv0 (gyre.yaml
	// graders.command.allow). nil refuses every command grader: POST
	// /api/v1/suites and /api/v1/tasks/from-turns answer 422
	// grader_not_allowed (SPEC §8).
	AllowCommand func(tenantName, argv0 string) bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxBlobBytes == 0 {
		c.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	set(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&c.ReadTimeout, DefaultReadTimeout)
	set(&c.IdleTimeout, DefaultIdleTimeout)
	set(&c.HandlerTimeout, DefaultHandlerTimeout)
	set(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.ReadyTimeout, DefaultReadyTimeout)
	return c
}

// Validate reports the first field of c that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxBodyBytes < 0 || c.MaxBlobBytes < 0:
		return fmt.Errorf("max body bytes must be positive, not %d", c.MaxBodyBytes)
	case c.MaxHeaderBytes < 0:
		return fmt.Errorf("max header bytes must be positive, not %d", c.MaxHeaderBytes)
	}
	for name, d := range map[string]time.Duration{
		"read header timeout": c.ReadHeaderTimeout,
		"read timeout":        c.ReadTimeout,
		"idle timeout":        c.IdleTimeout,
		"handler timeout":     c.HandlerTimeout,
		"shutdown timeout":    c.ShutdownTimeout,
		"ready timeout":       c.ReadyTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("%s must be positive, not %s", name, d)
		}
	}
	return nil
}

// Deps are the server's collaborators.
type Deps struct {
	// Store is required.
	Store store.Store
	// Logger receives access and error logs; nil discards them.
	Logger *slog.Logger
	// Clock times requests; nil is the wall clock.
	Clock clock.Clock
	// Metrics is the server's registry; nil creates a fresh one.
	Metrics *telemetry.Metrics
	// Blobs holds fixtures, bodies and artifacts. Required by the routes
	// that store blobs; nil answers them 503.
	Blobs *blobstore.Store
	// Rollouts runs claims, leases and outputs. Required by the flywheel/1
	// rollout routes; nil answers them 503.
	Rollouts *rollout.Service
	// Gateway serves the LLM gateway and the policy endpoint; nil answers
	// them 503 and allows no policy upstream.
	Gateway *gateway.Gateway
	// Tracing takes a server span per request; nil records none.
	Tracing *telemetry.Tracing
	// Limiter holds the rate limits of SPEC §2 (the gateway's own routes
	// take theirs from the gateway); nil limits nothing.
	Limiter *ratelimit.Limiter
	// UI is the web UI, served under /ui/ with "/" redirecting there;
	// nil serves no UI.
	UI http.Handler
	// Datasets builds datasets; the server wakes it when one is created.
	// nil makes a builder that nothing runs: datasets are then built by
	// whichever replica runs one (an empty selection is built at once).
	Datasets *build.Builder
	// Promotions drives promotions; the server wakes it when one is
	// created. nil leaves them to whichever replica runs a runner.
	Promotions *runner.Runner
	// Harnesses is the harness registry. nil makes one without
	// GYRE_SECRET_KEY (harnesses with an API key are refused) that allows
	// no private harness address.
	Harnesses *harness.Registry
}

// Server is gyre serve's HTTP server.
type Server struct {
	cfg       Config
	store     store.Store
	log       *slog.Logger
	clock     clock.Clock
	metrics   *telemetry.Metrics
	blobs     *blobstore.Store
	rollout   *rollout.Service
	gateway   *gateway.Gateway
	limiter   *ratelimit.Limiter
	datasets  *build.Builder
	promos    *runner.Runner
	harnesses *harness.Registry
	ui        http.Handler
	tracer    trace.Tracer
	auth      *auth.Authenticator
	mux       *http.ServeMux
	patterns  map[string]bool
}

// New returns a Server with its routes registered.
func New(cfg Config, d Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("api config: %w", err)
	}
	if d.Store == nil {
		return nil, errors.New("api: a store is required")
	}
	if d.Logger == nil {
		d.Logger = telemetry.Discard()
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Metrics == nil {
		d.Metrics = telemetry.NewMetrics()
	}
	s := &Server{
		cfg:       cfg,
		store:     d.Store,
		log:       d.Logger,
		clock:     d.Clock,
		metrics:   d.Metrics,
		blobs:     d.Blobs,
		rollout:   d.Rollouts,
		gateway:   d.Gateway,
		limiter:   d.Limiter,
		datasets:  d.Datasets,
		promos:    d.Promotions,
		harnesses: d.Harnesses,
		ui:        d.UI,
		tracer:    d.Tracing.Tracer(),
		auth:      auth.NewAuthenticator(d.Store),
		mux:       http.NewServeMux(),
		patterns:  map[string]bool{},
	}
	if err := d.Limiter.Register(d.Metrics.Registry); err != nil {
		return nil, fmt.Errorf("api: rate limit metrics: %w", err)
	}
	if s.datasets == nil {
		var blobs build.Blobs
		if d.Blobs != nil {
			blobs = d.Blobs
		}
		s.datasets = build.New(d.Store, blobs, d.Logger)
	}
	if s.harnesses == nil {
		s.harnesses = harness.New(d.Store, nil, harness.Config{})
	}
	s.routes()
	return s, nil
}

// Handler is the server's whole HTTP handler, for httptest or a custom
// listener.
func (s *Server) Handler() http.Handler { return s }

// MetricsHandler serves /metrics without authentication, for a separate
// listener (--metrics-addr) that only operators reach. Every other path
// answers 404.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	return mux
}

// Serve answers requests on ln until ctx is cancelled, then shuts down
// gracefully: it stops accepting, drains in-flight requests for up to
// ShutdownTimeout, then closes what is left. It returns nil after a
// graceful shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, s)
}

// ServeMetrics serves MetricsHandler on ln until ctx is cancelled, with
// the same timeouts and shutdown as Serve.
func (s *Server) ServeMetrics(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, s.MetricsHandler())
}

func (s *Server) serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// The gateway learns from the connection whether a stream's
		// last write, which carries [DONE], went out.
		ConnContext: gateway.DeliveryContext,
	}
	ln = gateway.DeliveryListener(ln)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", slog.String("addr", ln.Addr().String()))
	if s.rollout != nil {
		s.rollout.Close() // long-polls answer an empty claim at once
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = fmt.Errorf("drain %s: %w", ln.Addr(), err)
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("serve %s: %w", ln.Addr(), serr)
	}
	return err
}

// handlerFunc is a route handler: it answers, or returns an error for
// writeError to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// access says who may call a route.
type access struct {
	// roles open the route to keys with these roles (admin always). nil
	// means the route needs no key.
	roles []gyre.Role
	// quiet logs successful requests at debug level (probes, scrapes).
	quiet bool
	// blobBody gives the route the blob limit (Config.MaxBlobBytes)
	// instead of the body limit: it streams into the blob store.
	blobBody bool
	// ownMediaType lets the handler take bodies that are not JSON (raw
	// bytes, YAML) and check their Content-Type itself. Every other route
	// answers a body declared as anything but JSON with 415.
	ownMediaType bool
}

var (
	public    = access{quiet: true}
	anyKey    = access{roles: gyre.Roles, quiet: true}
	adminOnly = access{roles: []gyre.Role{gyre.RoleAdmin}}
	// agentOnly is the flywheel/1 surface: /turns, claim, heartbeat,
	// release, output. Handlers also check the key's agent allow-list.
	agentOnly = access{roles: []gyre.Role{gyre.RoleAgent}}
	// reader opens a GET to readers (and admins).
	reader = access{roles: []gyre.Role{gyre.RoleReader}}
)

// handle registers h under pattern ("METHOD /path/{param}") with the
// body limit, handler timeout and access check every route gets.
func (s *Server) handle(pattern string, a access, h handlerFunc) {
	_, route, ok := strings.Cut(pattern, " ")
	if !ok {
		panic("api: route pattern without a method: " + pattern)
	}
	s.patterns[pattern] = true
	surface := surfaceOf(pattern)
	params := patternParams(route)

	var next http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.roles != nil {
			p, ok := auth.FromContext(r.Context())
			if ok {
				infoFrom(r.Context()).keyID = p.KeyID
			}
			if err := auth.Require(r.Context(), a.roles...); err != nil {
				s.writeError(w, r, err)
				return
			}
			if surface != "" && s.limiter != nil {
				if err := s.rateLimit(w, r, surface, p.TenantID, p.KeyID); err != nil {
					s.writeError(w, r, err)
					return
				}
			}
		}
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
	if a.roles != nil {
		next = s.auth.Middleware(s.writeError)(next)
	}
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := infoFrom(r.Context())
		info.route = route
		info.public = a.quiet
		if err := checkParams(r, params); err != nil {
			s.writeError(w, r, err)
			return
		}
		if !a.ownMediaType {
			if err := requireJSONBody(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		limit := s.cfg.MaxBodyBytes
		if a.blobBody {
			limit = s.cfg.MaxBlobBytes
		}
		if err := bodyLimit(w, r, limit); err != nil {
			s.writeError(w, r, err)
			return
		}
		r, cancel := requestTimeout(r, s.cfg.HandlerTimeout)
		defer cancel()
		next.ServeHTTP(w, r)
	}))
}

// routes is the route table.
func (s *Server) routes() {
	s.handle("GET /healthz", public, s.healthz)
	s.handle("GET /readyz", public, s.readyz)
	s.handle("GET /metrics", anyKey, s.metricsRoute)

	s.handle("POST /api/v1/keys", adminOnly, s.createKey)
	s.handle("GET /api/v1/keys", adminOnly, s.listKeys)
	s.handle("DELETE /api/v1/keys/{id}", adminOnly, s.revokeKey)

	// Each concept registers its routes from its own file.
	s.turnRoutes()
	s.catalogRoutes()
	s.rolloutRoutes()
	s.experimentRoutes()
	s.regradeRoutes()
	s.gatewayRoutes()
	s.agentRoutes()
	s.recordedRoutes()
	s.harnessRoutes()
	s.datasetRoutes()
	s.groupRoutes()
	s.promotionRoutes()
	s.uiRoutes()
}
