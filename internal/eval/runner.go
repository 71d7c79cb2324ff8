package eval

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// Defaults of SPEC §7.2.
const (
	DefaultConcurrency  = 4
	DefaultRetries      = 2
	DefaultTimeout      = 300 * time.Second
	DefaultRepetitions  = 1
	DefaultRetryBackoff = 2 * time.Second
	DefaultStopWait     = 30 * time.Second
	DefaultSlotHold     = 60 * time.Second
	DefaultInvalidPolls = 3
	DefaultPollInitial  = 100 * time.Millisecond
	DefaultPollMax      = 2 * time.Second
)

// Config is what one `gyre eval run` runs with (SPEC §7.2). The zero
// value of a duration or count means its default.
type Config struct {
	// Repetitions, when set, overrides every case's and the suite's.
	Repetitions int
	// Concurrency is the most runs in flight; the harness's
	// limits.max_concurrent_runs lowers it (default 4).
	Concurrency int
	// Timeout, when set, overrides every case's and the suite's run
	// timeout (built in: 300 s). The clock starts at the first poll that
	// reports running.
	Timeout time.Duration
	// QueueTimeout bounds the time a run may stay queued (default: the
	// run's timeout).
	QueueTimeout time.Duration
	// Model is sent as the run's model; it needs accepts.model_override.
	Model string
	// Retries is how often a run that errored on transport, a 5xx or an
	// invalid response is tried again with a new run. Negative means 0.
	Retries int
	// FailedIsFailure classifies a harness status failed, or cancelled
	// that gyre did not request, as failed instead of error.
	FailedIsFailure bool
	// Criteria decide the exit code.
	Criteria Criteria
	// Resume continues experiment Resume: re-polls runs still in flight,
	// skips passed, failed and unscored pairs, runs the rest.
	Resume string
	// RetryErrors re-runs only the errored pairs of experiment RetryErrors.
	RetryErrors string
	// Force resumes even when the harness revision, suite version or
	// model changed.
	Force bool
	// Seed seeds bootstrap intervals; 0 picks a random one, recorded on
	// the experiment.
	Seed uint64
	// Limits bound what is read from the harness.
	Limits Limits
	// RetryBackoff is the first wait before a retry, doubling each time
	// (default 2 s).
	RetryBackoff time.Duration
	// StopWait bounds the wait for a terminal status after a stop
	// (default 30 s); SlotHold is how long a stopped run keeps its slot
	// without one (default 60 s).
	StopWait, SlotHold time.Duration
	// InvalidPolls is how many failed polls in a row are tolerated before
	// the run counts as an error (default 3).
	InvalidPolls int
	// PollInitial and PollMax shape the polling backoff (default 100 ms
	// doubling up to 2 s); the first poll follows the creation at once.
	PollInitial, PollMax time.Duration
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.StopWait <= 0 {
		c.StopWait = DefaultStopWait
	}
	if c.SlotHold <= 0 {
		c.SlotHold = DefaultSlotHold
	}
	if c.InvalidPolls <= 0 {
		c.InvalidPolls = DefaultInvalidPolls
	}
	if c.PollInitial <= 0 {
		c.PollInitial = DefaultPollInitial
	}
	if c.PollMax <= 0 {
		c.PollMax = DefaultPollMax
	}
	c.Limits = c.Limits.withDefaults()
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	rate := func(name string, v float64) error {
		if math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("%s must be a fraction from 0 to 1, not %v", name, v)
		}
		return nil
	}
	switch {
	case c.Repetitions < 0:
		return fmt.Errorf("repetitions must be positive, not %d", c.Repetitions)
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency must be positive, not %d", c.Concurrency)
	case c.Timeout < 0 || c.QueueTimeout < 0:
		return errors.New("timeouts must be positive")
	case c.Resume != "" && c.RetryErrors != "":
		return errors.New("resume and retry-errors exclude each other")
	}
	if c.Criteria.FailUnder != nil {
		if err := rate("fail-under", *c.Criteria.FailUnder); err != nil {
			return err
		}
	}
	for name, v := range map[string]float64{
		"case-threshold": c.Criteria.CaseThreshold, "max-error-rate": c.Criteria.MaxErrorRate,
		"max-unscored-rate": c.Criteria.MaxUnscoredRate,
	} {
		if err := rate(name, v); err != nil {
			return err
		}
	}
	return nil
}

// ConfigError is a problem found before any run was created: exit 1
// (SPEC §7.2). Code is a stable snake_case code.
type ConfigError struct {
	Code    string
	Message string
}

// Error returns "code: message".
func (e *ConfigError) Error() string { return e.Code + ": " + e.Message }

func configErr(code, format string, args ...any) *ConfigError {
	return &ConfigError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Progress receives the runner's progress. Implementations are safe for
// concurrent use.
type Progress interface {
	// Start announces how many runs this invocation will run.
	Start(total int)
	// Done reports a finished run.
	Done(r store.RunRecord)
	// Warn reports something the user should know.
	Warn(msg string)
	// Finish ends the display.
	Finish()
}

// Deps are the runner's collaborators.
type Deps struct {
	// Client calls the harness. Required.
	Client *Client
	// Recorder persists the experiment. Required.
	Recorder Recorder
	// Fixtures deliver case files; required when a case has files.
	Fixtures *Fixtures
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Clock stamps records; nil is the wall clock.
	Clock clock.Clock
	// Progress shows progress; nil shows nothing.
	Progress Progress
	// GradeEnv is what graders may use (judge, command allow-list).
	GradeEnv grade.Env
}

// Runner runs experiments against one harness.
type Runner struct {
	cfg      Config
	client   *Client
	rec      Recorder
	fixtures *Fixtures
	log      *slog.Logger
	clock    clock.Clock
	progress Progress
	env      grade.Env
}

// NewRunner returns a Runner.
func NewRunner(cfg Config, d Deps) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Client == nil || d.Recorder == nil {
		return nil, errors.New("eval: a client and a recorder are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Progress == nil {
		d.Progress = nopProgress{}
	}
	return &Runner{cfg: cfg.withDefaults(), client: d.Client, rec: d.Recorder, fixtures: d.Fixtures,
		log: d.Logger, clock: d.Clock, progress: d.Progress, env: d.GradeEnv}, nil
}

type nopProgress struct{}

func (nopProgress) Start(int)            {}
func (nopProgress) Done(store.RunRecord) {}
func (nopProgress) Warn(string)          {}
func (nopProgress) Finish()              {}

// ExperimentConfig is the experiment's config snapshot: the settings that
// shaped it. It never holds a secret.
type ExperimentConfig struct {
	Repetitions     int      `json:"repetitions,omitempty"`
	Concurrency     int      `json:"concurrency"`
	Timeout         string   `json:"timeout,omitempty"`
	QueueTimeout    string   `json:"queue_timeout,omitempty"`
	Model           string   `json:"model,omitempty"`
	Retries         int      `json:"retries"`
	FailedIsFailure bool     `json:"failed_is_failure"`
	FailUnder       *float64 `json:"fail_under"`
	CaseThreshold   float64  `json:"case_threshold"`
	MaxErrorRate    float64  `json:"max_error_rate"`
	MaxUnscoredRate float64  `json:"max_unscored_rate"`
	Seed            uint64   `json:"seed"`
	Cases           int      `json:"cases"`
	PlannedRuns     int      `json:"planned_runs"`
}

// Result is the outcome of Run. It holds no run record: they are in the
// recorder (AllRuns), and the report was built from there.
type Result struct {
	Experiment store.Experiment
	Report     Report
	// Interrupted is set when ctx ended before every run finished; the
	// experiment can be resumed.
	Interrupted bool
	// PeakConcurrency is the most runs that were in flight at once.
	PeakConcurrency int
	// ExitCode is the code of SPEC §7.2 (1 when interrupted).
	ExitCode int
}

// casePlan is one case to run, with its graders, repetitions and
// timeouts.
type casePlan struct {
	c       suite.Case
	reps    int
	graders grade.Suite
	timeout time.Duration
	queue   time.Duration
}

// pair is one (case, repetition) to run. Pairs are made as they are
// launched, never all at once: an experiment's size costs no memory.
type pair struct {
	*casePlan
	rep int
	// prev is the stored record when resuming.
	prev *store.RunRecord
}

// experiment is the state of one Run shared by its pairs.
type experiment struct {
	id       string
	caps     harnesskit.Capabilities
	accepts  harnesskit.Accepts
	provides harnesskit.Provides
	lim      *limiter
	// interrupt ends when the user interrupts: no new run is launched and
	// in-flight runs are stopped.
	interrupt context.Context

	mu    sync.Mutex
	fatal error
}

func pairKey(caseID string, rep int) string { return fmt.Sprintf("%s\x00%d", caseID, rep) }

func (x *experiment) setFatal(err error) {
	x.mu.Lock()
	if x.fatal == nil {
		x.fatal = err
	}
	x.mu.Unlock()
}

func (x *experiment) fatalErr() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.fatal
}

// Run runs the suite against the harness and records the experiment. The
// checks of SPEC §7.2 come first; a failing one returns a *ConfigError
// and creates nothing. Cancelling ctx interrupts the experiment: no new
// run starts, in-flight runs are stopped (when the harness accepts stop)
// and what finished is saved; Result.Interrupted is then set.
func (r *Runner) Run(ctx context.Context, s *suite.Suite) (*Result, error) {
	cfg := r.cfg
	// Everything after the interrupt still needs I/O: stop calls and
	// records go through ioCtx, which the interrupt does not cancel.
	ioCtx := context.WithoutCancel(ctx)

	caps, raw, err := r.client.Capabilities(ctx)
	if err != nil {
		return nil, configErr("harness_unavailable", "%v", err)
	}
	if v := caps.Version(); v != harnesskit.ContractVersion {
		return nil, configErr("unsupported_contract_version", "the harness implements contract_version %q; gyre speaks %q", truncate(v, 64), harnesskit.ContractVersion)
	}
	x := &experiment{caps: caps, interrupt: ctx}
	if caps.Accepts != nil {
		x.accepts = *caps.Accepts
	}
	if caps.Provides != nil {
		x.provides = *caps.Provides
	}
	if cfg.Model != "" && !x.accepts.ModelOverride {
		return nil, configErr("model_override_unsupported", "--model %s needs a harness that accepts model_override, and this one does not", cfg.Model)
	}
	if err := r.checkCases(s, caps, x.accepts); err != nil {
		return nil, err
	}
	plans, err := r.plan(s)
	if err != nil {
		return nil, err
	}
	planned := 0
	for _, p := range plans {
		planned += p.reps
	}

	seed := cfg.Seed
	var (
		exp   store.Experiment
		prior []store.RunRecord
		// selected says whether a pair runs, and its stored record.
		selected = func(string, int) (bool, *store.RunRecord) { return true, nil }
	)
	switch {
	case cfg.Resume != "" || cfg.RetryErrors != "":
		id := cfg.Resume
		if id == "" {
			id = cfg.RetryErrors
		}
		exp, prior, err = r.reopen(ctx, id, s, caps)
		if err != nil {
			return nil, err
		}
		var old ExperimentConfig
		if json.Unmarshal(exp.Config, &old) == nil && old.Seed != 0 {
			seed = old.Seed
		}
		selected = selectPairs(prior, cfg.RetryErrors != "")
	default:
		if seed == 0 {
			seed = randomSeed()
		}
		ec := ExperimentConfig{
			Repetitions: cfg.Repetitions, Concurrency: cfg.Concurrency, Model: cfg.Model, Retries: cfg.Retries,
			FailedIsFailure: cfg.FailedIsFailure, FailUnder: cfg.Criteria.FailUnder,
			CaseThreshold: cfg.Criteria.CaseThreshold, MaxErrorRate: cfg.Criteria.MaxErrorRate,
			MaxUnscoredRate: cfg.Criteria.MaxUnscoredRate, Seed: seed, Cases: len(s.Cases), PlannedRuns: planned,
		}
		if cfg.Timeout > 0 {
			ec.Timeout = cfg.Timeout.String()
		}
		if cfg.QueueTimeout > 0 {
			ec.QueueTimeout = cfg.QueueTimeout.String()
		}
		cj, err := json.Marshal(ec)
		if err != nil {
			return nil, err
		}
		exp, err = r.rec.CreateExperiment(ctx, store.NewExperiment{
			Suite: s.Name, SuiteVersion: s.VersionID(), Harness: r.client.BaseURL(), Capabilities: raw, Config: cj,
		})
		if err != nil {
			return nil, fmt.Errorf("create experiment: %w", err)
		}
	}
	x.id = exp.ID

	if r.needsFixtures(plans) {
		if r.fixtures == nil {
			return nil, configErr("fixtures_unavailable", "cases have files but no fixture source is configured")
		}
		if err := r.fixtures.Prepare(ctx, s); err != nil {
			return nil, fmt.Errorf("prepare fixtures: %w", err)
		}
	}

	limit := cfg.Concurrency
	if l := caps.Limits; l != nil && l.MaxConcurrentRuns != nil && *l.MaxConcurrentRuns < limit {
		limit = *l.MaxConcurrentRuns
	}
	x.lim = newLimiter(limit)
	total := 0
	for _, p := range plans {
		for rep := 1; rep <= p.reps; rep++ {
			if ok, _ := selected(p.c.ID, rep); ok {
				total++
			}
		}
	}
	r.log.Debug("experiment started", slog.String("experiment_id", exp.ID), slog.String("suite", s.Name),
		slog.String("suite_version", s.VersionID()), slog.Int("runs", total), slog.Int("concurrency", limit))

	// Each run record goes to the recorder as it is made and is not kept;
	// the summary keeps per-case samples only. The experiment is the prior
	// records of a resume overlaid with this run's: a prior record counts
	// unless its pair runs again.
	sm := newSummarizer(exp, len(s.Cases), cfg.Criteria, seed)
	var smMu sync.Mutex
	count := func(rec store.RunRecord) {
		smMu.Lock()
		sm.add(rec)
		smMu.Unlock()
	}
	planReps := make(map[string]int, len(plans))
	for _, p := range plans {
		planReps[p.c.ID] = p.reps
	}
	for _, p := range prior {
		if ok, _ := selected(p.CaseID, p.Repetition); ok && p.Repetition <= planReps[p.CaseID] {
			continue // counted when it ran, or below if it never does
		}
		count(p)
	}
	r.progress.Start(total)
	var (
		wg      sync.WaitGroup
		stopped bool
	)
	for i := range plans {
		for rep := 1; rep <= plans[i].reps; rep++ {
			ok, prev := selected(plans[i].c.ID, rep)
			if !ok {
				continue
			}
			if !stopped {
				if err := x.lim.acquire(ctx); err != nil {
					stopped = true
				} else if x.fatalErr() != nil {
					x.lim.release()
					stopped = true
				}
			}
			if stopped {
				// Not run: the stored record, if any, still counts.
				if prev != nil {
					count(*prev)
				}
				continue
			}
			p := pair{casePlan: &plans[i], rep: rep, prev: prev}
			wg.Go(func() {
				defer x.lim.release()
				rec, err := r.runPair(ioCtx, x, p)
				if err != nil {
					x.setFatal(err)
					return
				}
				count(rec)
				if rec.Classification != "" {
					r.progress.Done(rec)
				}
			})
		}
	}
	wg.Wait()
	r.progress.Finish()
	if err := x.fatalErr(); err != nil {
		return nil, fmt.Errorf("experiment %s: %w", exp.ID, err)
	}

	_, peak := x.lim.state()
	res := &Result{Experiment: exp, PeakConcurrency: peak, Interrupted: ctx.Err() != nil}
	res.Report = sm.report()
	for _, w := range res.Report.Warnings {
		r.progress.Warn(w)
		r.log.Warn(w, slog.String("experiment_id", exp.ID))
	}
	res.ExitCode = res.Report.ExitCode
	if res.Interrupted {
		res.ExitCode = ExitError
		res.Report.ExitCode, res.Report.ExitReason = ExitError, "interrupted"
		return res, nil
	}
	summary, err := json.Marshal(res.Report)
	if err != nil {
		return nil, err
	}
	model := ""
	if res.Report.Model != nil {
		model = *res.Report.Model
	}
	if err := r.rec.Finish(ioCtx, exp.ID, model, summary); err != nil {
		return nil, fmt.Errorf("finish experiment: %w", err)
	}
	if e, err := r.rec.Experiment(ioCtx, exp.ID); err == nil {
		res.Experiment = e
	}
	return res, nil
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := binary.LittleEndian.Uint64(b[:])
	if s == 0 {
		s = 1
	}
	return s
}

// checkCases checks every case before any run (SPEC §7.2): its input
// against the harness's input_schema (or the default question schema),
// and that its files can be delivered. It reports every bad case.
func (r *Runner) checkCases(s *suite.Suite, caps harnesskit.Capabilities, acc harnesskit.Accepts) error {
	schema, err := CompileInputSchema(caps.InputSchema)
	if err != nil {
		return configErr("invalid_input_schema", "the harness's %v", err)
	}
	var bad []string
	for _, c := range s.Cases {
		if err := schema.Check(c.Input); err != nil {
			which := "input_schema"
			if !schema.Declared {
				which = "default question schema (an object with a required string question)"
			}
			bad = append(bad, fmt.Sprintf("case %s: input does not match the harness's %s: %v", c.ID, which, err))
		}
	}
	if len(bad) > 0 {
		return configErr("invalid_case_input", "%s", strings.Join(bad, "\n"))
	}
	for _, c := range s.Cases {
		if len(c.Files) > 0 && !acc.FileURLs && !acc.Files {
			bad = append(bad, fmt.Sprintf("case %s has files, and the harness accepts neither file_urls nor files", c.ID))
		}
	}
	if len(bad) > 0 {
		return configErr("files_unsupported", "%s", strings.Join(bad, "\n"))
	}
	return nil
}

// plan lists every case with its graders, repetitions and timeouts.
// Flags override the case, which overrides the suite defaults, which
// override the built-in defaults.
func (r *Runner) plan(s *suite.Suite) ([]casePlan, error) {
	out := make([]casePlan, 0, len(s.Cases))
	for _, c := range s.Cases {
		g, err := c.Compile()
		if err != nil {
			return nil, configErr("invalid_graders", "case %s: %v", c.ID, err)
		}
		timeout := firstPositive(r.cfg.Timeout, c.Timeout, s.Defaults.Timeout, DefaultTimeout)
		out = append(out, casePlan{
			c: c, graders: g, timeout: timeout, queue: firstPositive(r.cfg.QueueTimeout, timeout),
			reps: firstPositive(r.cfg.Repetitions, c.Repetitions, s.Defaults.Repetitions, DefaultRepetitions),
		})
	}
	return out, nil
}

func firstPositive[T int | time.Duration](vals ...T) T {
	for _, v := range vals {
		if v > 0 {
			return v
		}
	}
	return 0
}

func (r *Runner) needsFixtures(plans []casePlan) bool {
	for _, p := range plans {
		if len(p.c.Files) > 0 {
			return true
		}
	}
	return false
}

// reopen loads an experiment to resume or retry, refusing (unless Force)
// when the harness revision, the suite version or the model changed.
func (r *Runner) reopen(ctx context.Context, id string, s *suite.Suite, caps harnesskit.Capabilities) (store.Experiment, []store.RunRecord, error) {
	exp, err := r.rec.Experiment(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Experiment{}, nil, configErr("experiment_not_found", "no experiment %s", id)
	}
	if err != nil {
		return store.Experiment{}, nil, fmt.Errorf("read experiment %s: %w", id, err)
	}
	if exp.Suite != s.Name {
		return store.Experiment{}, nil, configErr("resume_mismatch", "experiment %s ran suite %q, not %q", id, exp.Suite, s.Name)
	}
	var changes []string
	if exp.SuiteVersion != s.VersionID() {
		changes = append(changes, fmt.Sprintf("suite version %s is now %s", exp.SuiteVersion, s.VersionID()))
	}
	var old harnesskit.Capabilities
	if err := json.Unmarshal(exp.Capabilities, &old); err == nil && deref(old.Revision) != deref(caps.Revision) {
		changes = append(changes, fmt.Sprintf("harness revision %q is now %q", deref(old.Revision), deref(caps.Revision)))
	}
	var oldCfg ExperimentConfig
	_ = json.Unmarshal(exp.Config, &oldCfg)
	if oldCfg.Model != r.cfg.Model {
		changes = append(changes, fmt.Sprintf("model %q is now %q", oldCfg.Model, r.cfg.Model))
	}
	if len(changes) > 0 && !r.cfg.Force {
		return store.Experiment{}, nil, configErr("resume_mismatch", "experiment %s cannot be continued: %s (use --force to continue anyway)", id, strings.Join(changes, "; "))
	}
	runs, err := r.rec.Runs(ctx, id)
	if err != nil {
		return store.Experiment{}, nil, fmt.Errorf("read runs of %s: %w", id, err)
	}
	return exp, runs, nil
}

// selectPairs says which pairs a resume or a retry runs, and their
// stored records. Resume skips passed, failed and unscored pairs and
// re-polls runs still in flight; retryErrors keeps only errored pairs.
func selectPairs(prior []store.RunRecord, retryErrors bool) func(caseID string, rep int) (bool, *store.RunRecord) {
	byKey := map[string]*store.RunRecord{}
	for i := range prior {
		byKey[pairKey(prior[i].CaseID, prior[i].Repetition)] = &prior[i]
	}
	return func(caseID string, rep int) (bool, *store.RunRecord) {
		prev := byKey[pairKey(caseID, rep)]
		if retryErrors {
			return prev != nil && prev.Classification == string(grade.Errored), prev
		}
		if prev != nil {
			switch prev.Classification {
			case string(grade.Passed), string(grade.Failed), string(grade.Unscored):
				return false, nil
			}
		}
		return true, prev
	}
}
