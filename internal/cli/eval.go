package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// exitError ends a command with a given exit code; err, when set, is
// printed as the command's error.
type exitError struct {
	code int
	err  error
}

// Error is the message of the wrapped error, or the exit code.
func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

// Unwrap returns the wrapped error.
func (e exitError) Unwrap() error { return e.err }

// exitCode returns the code an exitError asks for.
func exitCode(err error) (int, bool) {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code, true
	}
	return 0, false
}

// evalConfigErr is a configuration error of gyre eval run: exit 1
// (SPEC §7.2, promptfoo's convention), not the usage exit 2.
func evalConfigErr(format string, args ...any) error {
	return exitError{code: eval.ExitError, err: fmt.Errorf(format, args...)}
}

func (a *app) evalCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Run suites against a Harness API v1 server, show, compare and regrade experiments",
		Long: `Evaluate an agent harness: gyre eval run drives a Harness API v1 server
through every case of a suite, grades what comes back and records the
experiment; gyre eval show prints one; gyre eval compare diffs two; gyre eval
regrade grades one's stored runs again.

Results go to the embedded store (--data, --db) or, with --server and --key,
to a running gyre serve.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(a.evalRunCommand(), a.evalShowCommand(), a.evalCompareCommand(), a.evalRegradeCommand())
	return cmd
}

// evalRunFlags are the flags of gyre eval run.
type evalRunFlags struct {
	harness, apiKey, model, resume, retryErrors, junit string
	server, key, tenant, blob, fixtureAddr, publicURL  string
	repetitions, concurrency, retries                  int
	timeout, queueTimeout                              time.Duration
	failUnder, caseThreshold, maxErrorRate, maxUnsc    float64
	asJSON, force, failedIsFailure                     bool
}

func (a *app) evalRunCommand() *cobra.Command {
	var f evalRunFlags
	cmd := &cobra.Command{
		Use:   "run SUITE --harness URL",
		Short: "Run a suite against a harness and grade it",
		Long: `Run every (case, repetition) of SUITE against the Harness API v1 server at
--harness, grade the runs with the suite's graders and record the experiment.

Before any run: the harness's capabilities are read once and snapshotted (a
contract_version other than v1 fails), every case input is checked against the
harness's input_schema (or the default {question: string}), --model needs
accepts.model_override, and cases with files need accepts.file_urls or
accepts.files. Any failure there exits 1 and creates nothing.

Runs go at most min(--concurrency, limits.max_concurrent_runs) at a time. A
run's timeout starts at its first "running" poll; a run past it is stopped
(when the harness accepts stop) and counts as failed and timed out. Transport
errors, 5xx and invalid answers are errors, retried --retries times with a new
run; 429/503 with Retry-After slow the experiment down without spending a
retry. A harness status "failed" is an error unless --failed-is-failure.

Each run ends passed, failed, unscored (every grader abstained) or error.
Exit codes, in this order: 1 when nothing was scored, the error rate is above
--max-error-rate or the unscored rate above --max-unscored-rate (and on every
configuration error); 100 when the pass rate is below --fail-under or, without
it, when any case's pass rate is below --case-threshold; else 0.

Ctrl-C stops launching runs, stops those in flight and saves what finished;
--resume ID continues the experiment, --retry-errors ID re-runs its errored
pairs. Fixture files go to harnesses that accept file_urls as signed URLs
served by a listener of this command (--fixture-addr, --public-url), or as
s3:// URLs when the blob store (--blob) is S3.`,
		Example: `  gyre eval run suites/refunds.yaml --harness http://localhost:8000
  GYRE_HARNESS_KEY=… gyre eval run refunds/ --harness https://agent.internal --repetitions 5 --fail-under 0.9 --junit report.xml
  gyre eval run refunds.yaml --harness http://localhost:8000 --server https://gyre.example.com --key $GYRE_KEY --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return evalConfigErr("gyre eval run takes one SUITE (a suite file or directory), got %d arguments", len(args))
			}
			return a.evalRun(cmd, args[0], &f)
		},
	}
	// Every configuration error of eval run exits 1, flag syntax included.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: eval.ExitError, err: err} })
	fs := cmd.Flags()
	fs.StringVar(&f.harness, "harness", "", "base URL of the Harness API v1 server [$GYRE_HARNESS]")
	fs.StringVar(&f.apiKey, "api-key", "", "x-api-key for the harness [$GYRE_HARNESS_KEY]")
	fs.IntVar(&f.repetitions, "repetitions", 0, "runs per case (default: the case's, the suite's, or 1)")
	fs.IntVar(&f.concurrency, "concurrency", eval.DefaultConcurrency, "most runs in flight (the harness's max_concurrent_runs lowers it)")
	fs.DurationVar(&f.timeout, "timeout", 0, "run timeout from the first running poll (default: the case's, the suite's, or 300s)")
	fs.DurationVar(&f.queueTimeout, "queue-timeout", 0, "longest time a run may stay queued (default: the run's timeout)")
	fs.StringVar(&f.model, "model", "", "model to run on (needs accepts.model_override)")
	fs.IntVar(&f.retries, "retries", eval.DefaultRetries, "retries of a run that errored (transport, 5xx, invalid answer)")
	fs.Float64Var(&f.failUnder, "fail-under", math.NaN(), "exit 100 when the pass rate is below this fraction in [0,1]")
	fs.Float64Var(&f.caseThreshold, "case-threshold", 1, "run pass rate a case needs to pass")
	fs.Float64Var(&f.maxErrorRate, "max-error-rate", 0, "exit 1 when errors/runs is above this")
	fs.Float64Var(&f.maxUnsc, "max-unscored-rate", 0.2, "exit 1 when unscored/runs is above this")
	fs.BoolVar(&f.failedIsFailure, "failed-is-failure", false, "count a run the harness reports failed as failed, not error")
	fs.StringVar(&f.resume, "resume", "", "continue experiment ID: re-poll runs in flight, skip finished pairs")
	fs.StringVar(&f.retryErrors, "retry-errors", "", "re-run the errored pairs of experiment ID")
	fs.BoolVar(&f.force, "force", false, "resume even when the harness revision, suite version or model changed")
	fs.StringVar(&f.junit, "junit", "", "write a JUnit XML report here")
	fs.BoolVar(&f.asJSON, "json", false, "print the summary as JSON on stdout")
	fs.StringVar(&f.server, "server", "", "record into this gyre serve instead of the embedded store [$GYRE_SERVER]")
	fs.StringVar(&f.key, "key", "", "evaluator key for --server [$GYRE_KEY]")
	fs.StringVar(&f.tenant, "tenant", "default", "tenant of the embedded store to record into")
	fs.StringVar(&f.blob, "blob", "", "blob store of the embedded mode: empty for a directory in --data, file:///dir or s3://bucket?… [$GYRE_BLOB]")
	fs.StringVar(&f.fixtureAddr, "fixture-addr", "127.0.0.1:0", "listen address of the signed fixture URLs")
	fs.StringVar(&f.publicURL, "public-url", "", "base URL harnesses reach the fixture listener at (default http://<fixture-addr>)")
	return cmd
}

// envDefault fills a flag that was not set from the environment.
func (a *app) envDefault(fs *pflag.FlagSet, flag, env string, dst *string) {
	if f := fs.Lookup(flag); f != nil && f.Changed {
		return
	}
	if v, ok := a.res.lookupEnv(env); ok {
		*dst = v
	}
}

// evalRun is gyre eval run.
func (a *app) evalRun(cmd *cobra.Command, suitePath string, f *evalRunFlags) error {
	fs := cmd.Flags()
	a.envDefault(fs, "harness", "GYRE_HARNESS", &f.harness)
	a.envDefault(fs, "api-key", "GYRE_HARNESS_KEY", &f.apiKey)
	a.envDefault(fs, "server", "GYRE_SERVER", &f.server)
	a.envDefault(fs, "key", "GYRE_KEY", &f.key)
	a.envDefault(fs, "blob", "GYRE_BLOB", &f.blob)
	c, _, err := a.config(cmd, false)
	if err != nil {
		return exitError{code: eval.ExitError, err: err}
	}
	if f.harness == "" {
		return evalConfigErr("--harness URL is required")
	}
	cfg := eval.Config{
		Repetitions: f.repetitions, Concurrency: f.concurrency, Timeout: f.timeout, QueueTimeout: f.queueTimeout,
		Model: f.model, Retries: f.retries, FailedIsFailure: f.failedIsFailure, Resume: f.resume,
		RetryErrors: f.retryErrors, Force: f.force,
		Criteria: eval.Criteria{CaseThreshold: f.caseThreshold, MaxErrorRate: f.maxErrorRate, MaxUnscoredRate: f.maxUnsc},
	}
	if !math.IsNaN(f.failUnder) {
		fu := f.failUnder
		cfg.Criteria.FailUnder = &fu
	}
	switch {
	case fs.Changed("repetitions") && f.repetitions < 1:
		return evalConfigErr("--repetitions must be at least 1")
	case f.concurrency < 1:
		return evalConfigErr("--concurrency must be at least 1")
	case f.retries < 0:
		return evalConfigErr("--retries must not be negative")
	case fs.Changed("timeout") && f.timeout <= 0, fs.Changed("queue-timeout") && f.queueTimeout <= 0:
		return evalConfigErr("--timeout and --queue-timeout must be positive durations")
	case (f.server == "") != (f.key == ""):
		return evalConfigErr("--server and --key go together")
	}
	for _, id := range []string{f.resume, f.retryErrors} {
		if id != "" {
			if _, err := uuid.Parse(id); err != nil {
				return evalConfigErr("%q is not an experiment id", id)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return evalConfigErr("%v", err)
	}
	if _, err := net.ResolveTCPAddr("tcp", f.fixtureAddr); err != nil {
		return evalConfigErr("--fixture-addr %q: %v", f.fixtureAddr, err)
	}
	if f.publicURL != "" {
		if err := checkPublicURL(f.publicURL); err != nil {
			return evalConfigErr("--public-url: %v", err)
		}
	}
	s, err := suite.Load(suitePath, suite.Options{})
	if err != nil {
		return evalConfigErr("%v", err)
	}
	client, err := eval.NewClient(f.harness, f.apiKey, nil, eval.Limits{})
	if err != nil {
		return evalConfigErr("--harness: %v", err)
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	ioCtx := context.WithoutCancel(ctx)
	log := a.logger(c)

	var (
		rec      eval.Recorder
		fixtures = &eval.Fixtures{Dir: s.FixturesDir}
		// Command graders run in the CLI (SPEC §8); judges through the
		// config file's policies:.
		env = grade.Env{Logger: log, AllowCommand: func(grade.Subject, []string) bool { return true }}
		// recordJudge stores judge calls where the runs go: in the
		// embedded store (a server records its own).
		recordJudge func(context.Context, store.GradingCall) error
	)
	if f.server != "" {
		rr, err := eval.NewRemoteRecorder(f.server, f.key, nil)
		if err != nil {
			return evalConfigErr("--server: %v", err)
		}
		rec = rr
		fixtures.Tenant = "server"
	} else {
		st, err := openStore(ioCtx, c, log)
		if err != nil {
			return err
		}
		defer st.Close()
		if err := bootstrap(ioCtx, st, c, log); err != nil {
			return err
		}
		tenant, err := tenantByName(ioCtx, st, f.tenant)
		if err != nil {
			return evalConfigErr("%v", err)
		}
		blobs, err := blobstore.Open(ioCtx, f.blob, c.Data)
		if err != nil {
			return evalConfigErr("--blob: %v", err)
		}
		defer blobs.Close()
		rec = &eval.StoreRecorder{Store: st, Blobs: blobs, Tenant: tenant.ID}
		env.Subject = grade.Subject{TenantID: tenant.ID, TenantName: tenant.Name}
		recordJudge = st.RecordGradingCall
		fixtures.Tenant, fixtures.Blobs = tenant.ID, blobs
		fixtures.StoreURLs = strings.HasPrefix(f.blob, "s3:")
	}
	if len(s.Fixtures) > 0 && !fixtures.StoreURLs {
		closeFn, err := serveFixtures(ctx, fixtures, f.fixtureAddr, f.publicURL, log)
		if err != nil {
			return err
		}
		defer closeFn()
	}

	if env.Judge, err = cliJudge(c, recordJudge, log); err != nil {
		return evalConfigErr("%v", err)
	}

	var progress eval.Progress = eval.NewLineProgress(a.stderr, clock.Real{})
	if isTerminalWriter(a.stderr) {
		progress = eval.NewBarProgress(a.stderr)
	}
	runner, err := eval.NewRunner(cfg, eval.Deps{
		Client: client, Recorder: rec, Fixtures: fixtures, Logger: log, Clock: clock.Real{}, Progress: progress,
		GradeEnv: env,
	})
	if err != nil {
		return evalConfigErr("%v", err)
	}
	res, err := runner.Run(ctx, s)
	var ce *eval.ConfigError
	if errors.As(err, &ce) {
		return exitError{code: eval.ExitError, err: ce}
	}
	if err != nil {
		return err
	}
	if f.junit != "" {
		if err := writeJUnitFile(f.junit, res); err != nil {
			return err
		}
	}
	if f.asJSON {
		if err := writeJSONTo(a.stdout, res.Report.Summary); err != nil {
			return err
		}
	} else {
		printReport(a.stdout, res.Report)
	}
	if res.Interrupted {
		fmt.Fprintf(a.stderr, "interrupted: finished runs are saved; continue with --resume %s\n", res.Experiment.ID)
		return exitError{code: eval.ExitError}
	}
	if res.ExitCode != eval.ExitOK {
		return exitError{code: res.ExitCode, err: errors.New(res.Report.ExitReason)}
	}
	return nil
}

// cliJudge is the CLI evaluator's judge: the config file's policies:
// over its upstreams:, called from this process, each call recorded with
// record when set. Without policies it is nil and judges abstain with
// judge_unavailable.
func cliJudge(c Config, record func(context.Context, store.GradingCall) error, log *slog.Logger) (grade.Judge, error) {
	if len(c.Policies) == 0 {
		return nil, nil
	}
	pols, err := c.JudgePolicies()
	if err != nil {
		return nil, err
	}
	j, err := gateway.NewJudge(gateway.JudgeConfig{Upstreams: c.judgeUpstreams()}, gateway.JudgeDeps{
		Policy: func(_ context.Context, _, name string) (gateway.Policy, bool, error) {
			p, ok := pols[name]
			return p, ok, nil
		},
		Record: record, Clock: clock.Real{}, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	return j, nil
}

// serveFixtures starts the listener of signed fixture URLs and points the
// fixtures' signer at it.
func serveFixtures(ctx context.Context, fx *eval.Fixtures, addr, publicURL string, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fixture listener: %w", err)
	}
	base := strings.TrimRight(publicURL, "/")
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	signer, err := eval.NewFixtureSigner(base, clock.Real{})
	if err != nil {
		ln.Close()
		return nil, err
	}
	fx.Signer = signer
	srv := &http.Server{Handler: fx.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	log.Debug("serving fixtures", slog.String("addr", ln.Addr().String()), slog.String("public_url", base))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func writeJUnitFile(path string, res *eval.Result) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	if err := eval.WriteJUnit(out, res.Report.Summary, res.Runs); err != nil {
		out.Close()
		return fmt.Errorf("junit: %w", err)
	}
	return out.Close()
}

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(100**v, 'f', 1, 64) + "%"
}

func orDashStr(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// printReport writes the human summary of an experiment.
func printReport(w io.Writer, r eval.Report) {
	fmt.Fprintf(w, "experiment %s\n", r.ExperimentID)
	fmt.Fprintf(w, "suite      %s@%s\n", r.Suite, r.SuiteVersion)
	fmt.Fprintf(w, "harness    %s\n", r.Harness)
	fmt.Fprintf(w, "model      %s\n", orDashStr(r.Model))
	fmt.Fprintf(w, "runs       %d: %d passed, %d failed (%d timed out), %d unscored, %d errors\n",
		r.Runs, r.Passed, r.Failed, r.TimedOut, r.Unscored, r.Errors)
	rate := pct(r.PassRate)
	if r.PassRateInterval != nil {
		rate += fmt.Sprintf(" (95%% CI %s to %s)", pct(&r.PassRateInterval.Low), pct(&r.PassRateInterval.High))
	}
	fmt.Fprintf(w, "pass rate  %s\n", rate)
	fmt.Fprintf(w, "cases      %d: %d passed, %d failed (threshold %s)\n\n", r.Cases, r.CasesPassed, r.CasesFailed, strconv.FormatFloat(r.CaseThreshold, 'f', -1, 64))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tPASSED\tFAILED\tUNSCORED\tERRORS\tPASS RATE\tPASS@K\tPASS^K\tLATENCY")
	for _, c := range r.CaseResults {
		rate := "-"
		if c.PassRate != nil {
			rate = pct(&c.PassRate.Value)
		}
		at, hat := "-", "-"
		if n := len(c.AtK); n > 0 {
			k := c.AtK[n-1]
			at = fmt.Sprintf("@%d %s", k.K, strconv.FormatFloat(k.PassAt, 'f', 2, 64))
			hat = fmt.Sprintf("^%d %s", k.K, strconv.FormatFloat(k.PassHat, 'f', 2, 64))
		}
		lat := "-"
		if c.LatencyMS != nil {
			lat = (time.Duration(*c.LatencyMS) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", c.CaseID, c.Result, c.Passed, c.Failed, c.Unscored, c.Errors, rate, at, hat, lat)
	}
	tw.Flush()
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warn)
	}
	fmt.Fprintf(w, "\nexit %d: %s\n", r.ExitCode, r.ExitReason)
}

// experimentReader reads experiments for show and compare: from the
// embedded store or a gyre serve.
func (a *app) experimentReader(cmd *cobra.Command, server, key, tenant string, fn func(ctx context.Context, rec eval.Recorder) error) error {
	fs := cmd.Flags()
	a.envDefault(fs, "server", "GYRE_SERVER", &server)
	a.envDefault(fs, "key", "GYRE_KEY", &key)
	if (server == "") != (key == "") {
		return usagef("--server and --key go together")
	}
	ctx := cmd.Context()
	if server != "" {
		rr, err := eval.NewRemoteRecorder(server, key, nil)
		if err != nil {
			return usageError{err}
		}
		return fn(ctx, rr)
	}
	return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
		t, err := tenantByName(ctx, st, tenant)
		if err != nil {
			return err
		}
		return fn(ctx, &eval.StoreRecorder{Store: st, Tenant: t.ID})
	})
}

// loadExperiment reads an experiment and its runs.
func loadExperiment(ctx context.Context, rec eval.Recorder, id string) (store.Experiment, []store.RunRecord, error) {
	if _, err := uuid.Parse(id); err != nil {
		return store.Experiment{}, nil, usagef("%q is not an experiment id", id)
	}
	e, err := rec.Experiment(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return e, nil, fmt.Errorf("no experiment %s", id)
	}
	if err != nil {
		return e, nil, err
	}
	runs, err := rec.Runs(ctx, id)
	return e, runs, err
}

func (a *app) evalShowCommand() *cobra.Command {
	var (
		asJSON              bool
		server, key, tenant string
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print an experiment and its runs",
		Long: `Print experiment ID: its summary, its capabilities snapshot and every run
with status, classification, timed_out, error, model, verdicts and trajectory
validity. --json prints {"experiment":{…summary…,"capabilities":{…}},"runs":[…]}.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.experimentReader(cmd, server, key, tenant, func(ctx context.Context, rec eval.Recorder) error {
				e, runs, err := loadExperiment(ctx, rec, args[0])
				if err != nil {
					return err
				}
				show := eval.Show(e, runs)
				if asJSON {
					return writeJSONTo(a.stdout, show)
				}
				printShow(a.stdout, e, show)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the experiment as JSON")
	cmd.Flags().StringVar(&server, "server", "", "read from this gyre serve [$GYRE_SERVER]")
	cmd.Flags().StringVar(&key, "key", "", "reader or evaluator key for --server [$GYRE_KEY]")
	cmd.Flags().StringVar(&tenant, "tenant", "default", "tenant of the embedded store")
	return cmd
}

func printShow(w io.Writer, e store.Experiment, s eval.ShowJSON) {
	x := s.Experiment
	fmt.Fprintf(w, "experiment %s  suite %s@%s  harness %s  model %s\n", x.ExperimentID, x.Suite, x.SuiteVersion, x.Harness, orDashStr(x.Model))
	state := "unfinished"
	if e.FinishedAt != nil {
		state = "finished " + e.FinishedAt.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "created %s, %s\n", e.CreatedAt.Format(time.RFC3339), state)
	fmt.Fprintf(w, "runs %d: %d passed, %d failed (%d timed out), %d unscored, %d errors; pass rate %s; exit %d\n\n",
		x.Runs, x.Passed, x.Failed, x.TimedOut, x.Unscored, x.Errors, pct(x.PassRate), x.ExitCode)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tREP\tRUN\tSTATUS\tCLASS\tMODEL\tTRAJECTORY\tDETAIL")
	for _, r := range s.Runs {
		class := orDashStr(r.Classification)
		if r.TimedOut {
			class += " (timed out)"
		}
		traj := "-"
		if len(r.Trajectory) > 0 && string(r.Trajectory) != "null" {
			var ti eval.TrajectoryInfo
			if err := json.Unmarshal(r.Trajectory, &ti); err == nil {
				traj = "invalid"
				if ti.Valid {
					traj = "valid"
				}
				if ti.SchemaVersion != nil {
					traj += " " + *ti.SchemaVersion
				}
			}
		}
		detail := orDashStr(r.Error)
		if detail == "-" {
			var failing []string
			for _, v := range r.Verdicts {
				if v.Pass != nil && !*v.Pass {
					failing = append(failing, v.Grader+": "+v.Reason)
				}
			}
			if len(failing) > 0 {
				detail = strings.Join(failing, "; ")
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.CaseID, r.Repetition, orDashStr(r.RunID), orDashStr(r.Status),
			class, orDashStr(r.Model), traj, oneLineText(detail, 120))
	}
	tw.Flush()
}

func oneLineText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (a *app) evalCompareCommand() *cobra.Command {
	var (
		asJSON, failOnRegression bool
		server, key, tenant      string
	)
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "Diff experiment B against experiment A, case by case",
		Long: `Compare two experiments case by case: pass-rate change, new failures (cases
that passed in A and fail in B), fixed cases, latency, tokens and cost, with a
paired bootstrap interval (10,000 resamples) on the mean per-case pass-rate
difference. With --fail-on-regression, exit 100 when B regressed: a new
failure, or an interval of the mean difference entirely below zero.`,
		Args: argsUsage(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var regressed bool
			err := a.experimentReader(cmd, server, key, tenant, func(ctx context.Context, rec eval.Recorder) error {
				ea, ra, err := loadExperiment(ctx, rec, args[0])
				if err != nil {
					return err
				}
				eb, rb, err := loadExperiment(ctx, rec, args[1])
				if err != nil {
					return err
				}
				seed := eval.ConfigOf(eb).Seed
				if seed == 0 {
					seed = 1
				}
				c := eval.Compare(ea, ra, eb, rb, seed)
				regressed = c.Regression
				if asJSON {
					return writeJSONTo(a.stdout, c)
				}
				printComparison(a.stdout, c)
				return nil
			})
			if err != nil {
				return err
			}
			if regressed && failOnRegression {
				return exitError{code: eval.ExitFailed, err: errors.New("regression")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	cmd.Flags().BoolVar(&failOnRegression, "fail-on-regression", false, "exit 100 when B regressed against A")
	cmd.Flags().StringVar(&server, "server", "", "read from this gyre serve [$GYRE_SERVER]")
	cmd.Flags().StringVar(&key, "key", "", "reader or evaluator key for --server [$GYRE_KEY]")
	cmd.Flags().StringVar(&tenant, "tenant", "default", "tenant of the embedded store")
	return cmd
}

func signed(v *float64, format func(float64) string) string {
	if v == nil {
		return "-"
	}
	s := format(*v)
	if *v > 0 {
		s = "+" + s
	}
	return s
}

func printComparison(w io.Writer, c eval.Comparison) {
	fmt.Fprintf(w, "A %s  pass rate %s\nB %s  pass rate %s\n\n", c.A, pct(c.PassRateA), c.B, pct(c.PassRateB))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tA\tB\tΔ PASS RATE\tCHANGE\tΔ LATENCY\tΔ TOKENS\tΔ COST")
	side := func(s *eval.CaseSide) string {
		if s == nil {
			return "-"
		}
		return s.Result + " " + pct(s.PassRate)
	}
	pp := func(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "pp" }
	ms := func(v float64) string { return (time.Duration(v) * time.Millisecond).String() }
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	usd := func(v float64) string { return "$" + strconv.FormatFloat(v, 'f', 4, 64) }
	for _, d := range c.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.CaseID, side(d.A), side(d.B), signed(d.PassRateDelta, pp),
			d.Change, signed(d.LatencyDeltaMS, ms), signed(d.TokensDelta, num), signed(d.CostDeltaUSD, usd))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nnew failures: %s\nfixed:        %s\n", listOrNone(c.NewFailures), listOrNone(c.Fixed))
	if c.MeanDelta != nil {
		ci := ""
		if c.Interval != nil {
			ci = fmt.Sprintf(" (95%% CI %s to %s, paired bootstrap over %d cases, seed %d)", signed(&c.Interval.Low, pp), signed(&c.Interval.High, pp), c.Paired, c.Seed)
		}
		fmt.Fprintf(w, "mean per-case pass-rate change: %s%s\n", signed(c.MeanDelta, pp), ci)
	}
	if c.Regression {
		fmt.Fprintf(w, "regression: %s\n", c.RegressionReason)
	} else {
		fmt.Fprintln(w, "no regression")
	}
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
