package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/promotion/runner"
	"github.com/gyrehq/gyre/internal/ratelimit"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/secret"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
	"github.com/gyrehq/gyre/internal/ui"
)

func (a *app) serveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane",
		Long: `Run the gyre control plane: the admin API under /api/v1, the flywheel/1
routes, the LLM gateway under /gw/ and the policy endpoint, the web UI
under /ui/ (sign in with a reader or admin key), /healthz, /readyz and
/metrics, until SIGINT or SIGTERM, then drain in-flight requests, flush the
gateway's records and exit 0.

The gateway routes to the upstreams of the config file's upstreams: section
(name, base_url, api_key_env, tenants, allow_private); upstreams exist only
there, never in flags or the environment, because they carry secrets. Judge
graders call the tenant's policy they name, else the --default-policy one, on
those upstreams; policies live in the store (POST /api/v1/policies), so a
policies: section is refused. Command graders run only for executables the
graders.command.allow section lists (absolute paths, optionally per tenant).

The store is SQLite in --data unless --db names a PostgreSQL database; its
migrations run at start. On the first start with an empty SQLite store, gyre
creates the tenant "default" and one admin key, and writes the key to
<data>/admin.key (mode 0600); the log shows only the file's path. On
PostgreSQL, a first admin key is created only with --bootstrap-admin-key-file;
otherwise run "gyre tenants create NAME".

Registered harnesses (POST /api/v1/harnesses, for the web UI's sessions
browser) keep their API key encrypted with GYRE_SECRET_KEY, 32 random bytes as
64 hex digits or base64 (openssl rand -hex 32), read from the environment only;
without it, a harness with an API key is refused. Harnesses at loopback,
private and link-local addresses are refused unless --harness-allow-private.

/metrics needs a key of any role, unless --metrics-addr serves it without one
on a separate address.`,
		Example: `  gyre serve
  gyre serve --addr :7070 --public-url https://gyre.example.com
  GYRE_DB=postgres://gyre@db/gyre gyre serve --bootstrap-admin-key-file /run/secrets/admin.key`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := a.config(cmd, true)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				// After the first signal, a second one ends the process at
				// once instead of waiting for the drain.
				<-ctx.Done()
				stop()
			}()
			return a.serve(ctx, c)
		},
	}
	bindFlags(cmd.Flags(), true)
	return cmd
}

// serve runs the server with c until ctx is cancelled.
func (a *app) serve(ctx context.Context, c Config) error {
	log := a.logger(c)
	tuneGC(a.res.lookupEnv)
	st, err := openStore(ctx, c, log)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := bootstrap(ctx, st, c, log); err != nil {
		return err
	}
	// Opening the blob store checks the --blob setting and that the
	// bucket is reachable before serving.
	blobs, err := blobstore.Open(ctx, c.Blob, c.Data)
	if err != nil {
		return err
	}
	defer blobs.Close()

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var mln net.Listener
	if c.MetricsAddr != "" {
		if mln, err = net.Listen("tcp", c.MetricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("listen for metrics: %w", err)
		}
	}
	closeListeners := func() {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
	}
	grader, err := newServeGrader(st, blobs, c, log)
	if err != nil {
		closeListeners()
		return err
	}
	rollouts, err := rollout.New(rollout.Config{PublicURL: c.publicURL(ln.Addr()), GradeLease: serveGradeLease},
		rollout.Deps{Store: st, Clock: clock.Real{}, Logger: log, Grader: grader})
	if err != nil {
		closeListeners()
		return err
	}
	metrics := telemetry.NewMetrics()
	tracing, err := a.tracing(ctx)
	if err != nil {
		closeListeners()
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn("trace export at shutdown", slog.Any("error", err))
		}
	}()
	limiter, err := ratelimit.New(c.Limits, clock.Real{}, func(ctx context.Context, id string) (string, error) {
		t, err := st.TenantByID(ctx, id)
		return t.Name, err
	})
	if err != nil {
		closeListeners()
		return err
	}
	gw, err := gateway.New(gateway.Config{
		Upstreams:     c.GatewayUpstreams(),
		DefaultPolicy: c.DefaultPolicy,
		MaxBodyBytes:  c.GatewayMaxBodyBytes,
		FlushInterval: c.GatewayFlushInterval,
		ReplicaID:     gatewayReplicaPrefix(),
	}, gateway.Deps{Store: st, Blobs: blobs, Clock: clock.Real{}, Logger: log, Registerer: metrics.Registry, Limiter: limiter, Tracing: tracing})
	if err != nil {
		closeListeners()
		return err
	}
	datasets := build.New(st, blobs, log)
	promotions := runner.New(runner.Config{}, runner.Deps{Store: st, Clock: clock.Real{}, Logger: log,
		Failed: gw.Recorder().ForgetAll})
	var sealKey *secret.Key
	if c.SecretKey != "" {
		if sealKey, err = secret.ParseKey(c.SecretKey); err != nil {
			closeListeners()
			return err
		}
		log.Info("harness API keys are encrypted with GYRE_SECRET_KEY", slog.String("key_id", sealKey.ID()))
	} else {
		log.Info("GYRE_SECRET_KEY is not set: harnesses with an API key cannot be registered")
	}
	harnesses := harness.New(st, sealKey, harness.Config{AllowPrivate: c.HarnessAllowPrivate})
	webUI, err := ui.New(ui.Config{PublicURL: c.publicURL(ln.Addr())}, ui.Deps{Store: st, Blobs: blobs, Logger: log, Clock: clock.Real{}, Datasets: datasets, Harnesses: harnesses})
	if err != nil {
		closeListeners()
		return err
	}
	srv, err := api.New(api.Config{
		PublicURL:    c.publicURL(ln.Addr()),
		MaxBodyBytes: c.MaxBodyBytes,
		AllowCommand: c.CommandAllow.Allows,
	}, api.Deps{Store: st, Logger: log, Clock: clock.Real{}, Metrics: metrics, Blobs: blobs, Rollouts: rollouts, Gateway: gw, Limiter: limiter, Tracing: tracing, Datasets: datasets,
		Promotions: promotions, UI: webUI, Harnesses: harnesses})
	if err != nil {
		closeListeners()
		return err
	}
	// The gateway's recorder registers this replica and flushes records
	// until the listeners have drained; then it writes what is left and
	// retires the replica, so no rollout waits on it.
	if err := gw.Start(ctx); err != nil {
		closeListeners()
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := gw.Stop(sctx); err != nil {
			log.Error("gateway stop", slog.Any("error", err))
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watchdog and grader stop only after the listeners have drained,
	// so that no accepted output waits for a grader that already left.
	jobsCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	jobsDone := make(chan struct{})
	buildsDone := make(chan struct{})
	promotionsDone := make(chan struct{})
	go func() { rollouts.Run(jobsCtx); close(jobsDone) }()
	go func() {
		datasets.Run(jobsCtx, gw.Recorder().ReplicaID(), serveDatasetEvery, serveDatasetLease)
		close(buildsDone)
	}()
	go func() {
		promotions.Run(jobsCtx, gw.Recorder().ReplicaID(), servePromotionEvery)
		close(promotionsDone)
	}()
	defer func() { stopJobs(); <-jobsDone; <-buildsDone; <-promotionsDone }()
	errc := make(chan error, 2)
	n := 1
	go func() { errc <- srv.Serve(ctx, ln); cancel() }()
	attrs := []any{
		slog.String("addr", ln.Addr().String()),
		slog.String("public_url", c.publicURL(ln.Addr())),
		slog.String("ui_url", strings.TrimSuffix(c.publicURL(ln.Addr()), "/")+ui.Prefix),
		slog.String("store", st.Engine()),
		slog.String("data", c.Data),
		slog.String("gateway_replica", gw.Recorder().ReplicaID()),
		slog.Int("upstreams", len(c.Upstreams)),
		slog.Bool("rate_limits", limiter != nil),
		slog.Bool("tracing", a.tracingEnabled()),
	}
	if mln != nil {
		n++
		go func() { errc <- srv.ServeMetrics(ctx, mln); cancel() }()
		attrs = append(attrs, slog.String("metrics_addr", mln.Addr().String()))
	}
	log.Info("listening", attrs...)
	var errs []error
	for range n {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// A grading job's lease is renewed while the job runs (its judges may call
// models for minutes, each call at most serveJudgeTimeout), so it can be
// short: a job whose replica died is taken up again within a minute.
const (
	serveJudgeTimeout = time.Minute
	serveGradeLease   = time.Minute
)

// A dataset build holds its job's lease while it writes; a replica that
// dies mid-build leaves it to another after the lease, which rebuilds the
// same bytes. A build that outlives its lease may run twice: both write
// the same file, and the first outcome stands.
const (
	serveDatasetEvery = 5 * time.Second
	serveDatasetLease = 10 * time.Minute
)

// servePromotionEvery is how often a replica looks for due promotion jobs;
// a waiting promotion is due again every runner.DefaultPoll, and a look
// holds its lease (runner.DefaultLease, renewed) only while it lasts.
const servePromotionEvery = time.Second

// newServeGrader is the grader of accepted rollouts: judge graders call
// the tenant's policy (the one they name, else the default policy) on the
// operator's upstreams and record each call as a grading call; command
// graders run only when gyre.yaml graders.command.allow lists their
// executable for the tenant, checked again at every run.
func newServeGrader(st store.Store, blobs gateway.BlobReader, c Config, log *slog.Logger) (*rollout.Grader, error) {
	judge, err := gateway.NewJudge(gateway.JudgeConfig{Upstreams: c.GatewayUpstreams(), DefaultPolicy: c.DefaultPolicy, Timeout: serveJudgeTimeout},
		gateway.JudgeDeps{Policy: gateway.StorePolicies(st), Record: st.RecordGradingCall, Clock: clock.Real{}, Logger: log})
	if err != nil {
		return nil, err
	}
	allow := c.CommandAllow
	return rollout.NewGrader(st, rollout.GraderDeps{Logger: log, Blobs: blobs, Env: grade.Env{
		Logger: log,
		Judge:  judge,
		AllowCommand: func(s grade.Subject, argv []string) bool {
			return len(argv) > 0 && allow.Allows(s.TenantName, argv[0])
		},
	}}), nil
}

// gatewayReplicaPrefix names this host's gateway replicas in the
// replicas table: "gw-" and the host name, made a valid name.
func gatewayReplicaPrefix() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "gw"
	}
	b := []byte(h)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			b[i] = '-'
		}
	}
	return "gw-" + string(b[:min(len(b), 64)])
}

// bootstrap creates the tenant "default" and its first admin key on an
// empty store (SPEC §3), writing the key to a new file of mode 0600: by
// default <data>/admin.key on SQLite; on PostgreSQL only when
// --bootstrap-admin-key-file names one. The store makes sure that of
// several replicas exactly one creates the key. An existing key file is
// never rewritten.
func bootstrap(ctx context.Context, st store.Store, c Config, log *slog.Logger) error {
	path := c.BootstrapAdminKeyFile
	if path == "" {
		if st.Engine() != "sqlite" {
			return nil
		}
		path = filepath.Join(c.Data, "admin.key")
		if err := os.MkdirAll(c.Data, 0o700); err != nil {
			return fmt.Errorf("bootstrap: create data directory: %w", err)
		}
	}
	if _, err := os.Lstat(path); err == nil {
		tenants, err := st.ListTenants(ctx)
		if err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		if len(tenants) == 0 {
			return fmt.Errorf("bootstrap: %s exists but the store is empty: move the old key file away so that gyre can write the new admin key there", path)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	secret, hash, err := auth.NewKey()
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	created, key, err := st.BootstrapIfEmpty(ctx, store.Bootstrap{
		TenantName: gyre.DefaultTenant,
		Key:        store.NewKey{Name: "bootstrap admin", Role: gyre.RoleAdmin, Hash: hash},
	})
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if !created {
		return nil
	}
	if err := writeKeyFile(path, secret); err != nil {
		return fmt.Errorf("bootstrap: admin key %s was created but could not be saved (create another with gyre keys create --tenant %s --role admin): %w",
			key.ID, gyre.DefaultTenant, err)
	}
	log.Info("created the default tenant and its admin key",
		slog.String("tenant", gyre.DefaultTenant),
		slog.String("key_id", key.ID),
		slog.String("key_file", path))
	return nil
}

// writeKeyFile writes secret to a new file of mode 0600; it never
// replaces an existing file.
func writeKeyFile(path, secret string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// serveGCPercent is gyre serve's garbage-collection target unless GOGC is
// set. A server's live heap is small and its allocation rate high (every
// intake batch is parsed, validated and hashed), so collecting at 4× the
// live heap instead of 2× trades a few MiB for a fifth to a third more
// intake and claim throughput (see the benchmarks in internal/api).
const serveGCPercent = 400

func tuneGC(lookupEnv func(string) (string, bool)) {
	if _, set := lookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
}

// tracingEnabled reports whether spans are exported: SPEC §2 turns
// OpenTelemetry on when OTEL_EXPORTER_OTLP_ENDPOINT (or the traces-only
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and OTEL_SDK_DISABLED=true
// turns it off as in every OpenTelemetry SDK.
func (a *app) tracingEnabled() bool {
	if v, _ := a.res.lookupEnv("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return false
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v, _ := a.res.lookupEnv(k); strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// tracing starts the OTLP/HTTP span exporter when tracing is enabled.
func (a *app) tracing(ctx context.Context) (*telemetry.Tracing, error) {
	if !a.tracingEnabled() {
		return telemetry.NoTracing(), nil
	}
	t, err := telemetry.StartTracing(ctx, readBuildInfo().Version)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return t, nil
}
