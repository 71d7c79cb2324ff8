package harnesscheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/clock"
)

// Result is the outcome of one check.
type Result string

// The outcomes of a check. Only Fail makes a report fail.
const (
	Pass Result = "PASS"
	Fail Result = "FAIL"
	Warn Result = "WARN"
	Skip Result = "SKIP"
)

// The checks, by the names the report prints (SPEC §7.3).
const (
	CheckCapabilities      = "capabilities"
	CheckContractVersion   = "contract_version"
	CheckInput             = "check_input"
	CheckRun               = "run"
	CheckFixtures          = "fixtures"
	CheckTrajectory        = "trajectory"
	CheckStop              = "stop"
	CheckListingQuery      = "listing.query"
	CheckListingPagination = "listing.pagination"
	CheckListingTimeRange  = "listing.time_range"
	CheckListingSessionID  = "listing.session_id"
	CheckWorkspace         = "workspace"
)

// Names lists every check in report order.
var Names = []string{
	CheckCapabilities, CheckContractVersion, CheckInput, CheckRun, CheckFixtures,
	CheckTrajectory, CheckStop, CheckListingQuery, CheckListingPagination,
	CheckListingTimeRange, CheckListingSessionID, CheckWorkspace,
}

// Check is the outcome of one check with what it found.
type Check struct {
	// Name is one of Names.
	Name string `json:"check"`
	// Result is PASS, FAIL, WARN or SKIP.
	Result Result `json:"result"`
	// Detail says what was checked and found, or why the check was skipped.
	Detail string `json:"detail"`
}

// String returns the report line "RESULT name: detail".
func (c Check) String() string { return fmt.Sprintf("%s %s: %s", c.Result, c.Name, c.Detail) }

// Report is every check of one harness, in the order of Names.
type Report []Check

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	for _, c := range r {
		if c.Result == Fail {
			return true
		}
	}
	return false
}

// Get returns the check named name.
func (r Report) Get(name string) (Check, bool) {
	for _, c := range r {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Count returns how many checks had result res.
func (r Report) Count(res Result) int {
	n := 0
	for _, c := range r {
		if c.Result == res {
			n++
		}
	}
	return n
}

// WriteText writes one line per check.
func (r Report) WriteText(w io.Writer) error {
	for _, c := range r {
		if _, err := fmt.Fprintln(w, c.String()); err != nil {
			return err
		}
	}
	return nil
}

// Defaults of Config.
const (
	DefaultRunTimeout      = 2 * time.Minute
	DefaultCallTimeout     = 30 * time.Second
	DefaultDownloadTimeout = 5 * time.Minute
	DefaultFixtureAddr     = "127.0.0.1:0"
	DefaultPollInterval    = 100 * time.Millisecond
	// maxPollInterval caps the backoff between polls.
	maxPollInterval = 2 * time.Second
)

// Config configures a conformance check. Only URL is required.
type Config struct {
	// URL is the harness's base URL: http or https, without credentials,
	// query or fragment.
	URL string
	// APIKey is sent as x-api-key, to the harness's own origin only.
	APIKey string
	// RunTimeout bounds the wait for one run to reach a terminal status
	// (default 2 minutes).
	RunTimeout time.Duration
	// CallTimeout bounds one JSON call (default 30 s); DownloadTimeout one
	// trajectory or workspace file (default 5 minutes).
	CallTimeout, DownloadTimeout time.Duration
	// PollInterval is the first wait between polls of a run; it doubles up
	// to 2 s (default 100 ms).
	PollInterval time.Duration
	// FixtureAddr is where the fixtures check listens to serve its fixture
	// when the harness accepts file_urls (default 127.0.0.1:0).
	FixtureAddr string
	// PublicURL is the base URL the harness reaches that listener at
	// (default http://<the listener's address>).
	PublicURL string
	// HTTPClient supplies the transport to the harness; nil uses a clone of
	// http.DefaultTransport. Its redirect policy is always replaced: the
	// checks never follow a redirect.
	HTTPClient *http.Client
	// Logger receives progress at debug level and trouble at warn level.
	// Default: discard.
	Logger *slog.Logger
	// Clock measures run durations. Default: the wall clock.
	Clock clock.Clock
	// OnCheck, when set, is called with each check as soon as it and every
	// check before it in Names are decided, so a caller can print the
	// report as it grows. Run's Report holds the same checks.
	OnCheck func(Check)
}

// withDefaults fills every zero field.
func (c Config) withDefaults() Config {
	if c.RunTimeout == 0 {
		c.RunTimeout = DefaultRunTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.DownloadTimeout == 0 {
		c.DownloadTimeout = DefaultDownloadTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.FixtureAddr == "" {
		c.FixtureAddr = DefaultFixtureAddr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if _, err := parseBaseURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RunTimeout", c.RunTimeout}, {"CallTimeout", c.CallTimeout}, {"DownloadTimeout", c.DownloadTimeout}, {"PollInterval", c.PollInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if c.FixtureAddr != "" {
		if _, _, err := net.SplitHostPort(c.FixtureAddr); err != nil {
			errs = append(errs, fmt.Errorf("fixture address %q: %w", c.FixtureAddr, err))
		}
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("public url %q: want an http:// or https:// base URL without query or fragment", c.PublicURL))
		}
	}
	return errors.Join(errs...)
}

// createdRun is a run the checks created.
type createdRun struct {
	id      string
	purpose string
	// final is the terminal RunStatus once seen; nil before.
	final *harnesskit.RunStatus
}

// checker holds one conformance check's state.
type checker struct {
	cfg  Config
	c    *client
	ct   *contract
	log  *slog.Logger
	done map[string]Check
	// emitted counts the checks of Names already passed to OnCheck.
	emitted int
	// interrupted is closed when the caller's context ends: a check that
	// fails then is reported as interrupted, not failed.
	interrupted <-chan struct{}

	caps    harnesskit.Capabilities
	rawCaps map[string]json.RawMessage
	// input is the run input the run checks send; nil when there is none,
	// with noInput saying why.
	input   json.RawMessage
	noInput string
	// main is the run check's run, nil when it could not be created.
	main    *createdRun
	created []*createdRun
	fx      *fixtureServer
}

// Run checks the harness at cfg.URL against Harness API v1 and returns one
// Check per name in Names. It creates a few runs of the harness's
// check_input (SPEC §7.3). The error is a configuration problem (nothing
// was checked) or the context's error when ctx ended first (the checks not
// reached are skipped).
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	base, err := parseBaseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	ct, err := loadContract()
	if err != nil {
		return nil, err
	}
	k := &checker{
		cfg:  cfg,
		c:    newClient(base, cfg.APIKey, cfg.HTTPClient, cfg.CallTimeout, cfg.DownloadTimeout),
		ct:   ct,
		log:  cfg.Logger,
		done: map[string]Check{},

		interrupted: ctx.Done(),
	}
	defer k.cleanup(ctx)
	k.run(ctx)
	reason := "not reached"
	if ctx.Err() != nil {
		reason = "interrupted"
	}
	k.skip(reason, Names...)
	rep := make(Report, 0, len(Names))
	for _, n := range Names {
		rep = append(rep, k.done[n])
	}
	return rep, ctx.Err()
}

// set records the outcome of check name, once.
func (k *checker) set(name string, res Result, format string, args ...any) {
	if _, ok := k.done[name]; ok {
		return
	}
	if res == Fail {
		select {
		case <-k.interrupted:
			res, format, args = Skip, "interrupted", nil
		default:
		}
	}
	c := Check{Name: name, Result: res, Detail: printable(fmt.Sprintf(format, args...))}
	k.log.Debug("harness check", slog.String("check", name), slog.String("result", string(res)), slog.String("detail", c.Detail))
	k.done[name] = c
	k.emit()
}

// emit passes the decided checks at the front of Names to OnCheck.
func (k *checker) emit() {
	for k.emitted < len(Names) {
		c, ok := k.done[Names[k.emitted]]
		if !ok {
			return
		}
		k.emitted++
		if k.cfg.OnCheck != nil {
			k.cfg.OnCheck(c)
		}
	}
}

// skip marks every named check not yet done as skipped for reason.
func (k *checker) skip(reason string, names ...string) {
	for _, n := range names {
		k.set(n, Skip, "%s", reason)
	}
}

// run runs the checks in order, skipping what cannot apply.
func (k *checker) run(ctx context.Context) {
	if !k.checkCapabilities(ctx) {
		if ctx.Err() == nil {
			k.skip("no usable capabilities", Names...)
		}
		return
	}
	if !k.checkContractVersion() {
		k.skip("the harness does not implement Harness API v1", Names...)
		return
	}
	k.checkInput()
	steps := []func(context.Context){k.checkRun, k.checkFixtures, k.checkTrajectory, k.checkStop, k.checkListing, k.checkWorkspace}
	for _, step := range steps {
		if ctx.Err() != nil {
			return
		}
		step(ctx)
	}
}

// cleanup stops the runs the checks left running (when the harness
// accepts stop) and closes the fixture listener.
func (k *checker) cleanup(ctx context.Context) {
	if k.fx != nil {
		k.fx.close()
	}
	if k.caps.Accepts == nil || !k.caps.Accepts.Stop {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.CallTimeout)
	defer cancel()
	for _, r := range k.created {
		if r.final != nil {
			continue
		}
		a, err := k.c.do(ctx, request{op: opStop, path: runPath(r.id) + "/stop", limit: maxErrorBody})
		if err != nil || a.status/100 != 2 {
			k.log.Warn("could not stop a run the check left running", slog.String("run_id", r.id))
		}
	}
}

// provides and accepts return the capability flags, false when absent.
func (k *checker) provides() harnesskit.Provides {
	if k.caps.Provides == nil {
		return harnesskit.Provides{}
	}
	return *k.caps.Provides
}

func (k *checker) accepts() harnesskit.Accepts {
	if k.caps.Accepts == nil {
		return harnesskit.Accepts{}
	}
	return *k.caps.Accepts
}

// checkCapabilities fetches and validates GET /capabilities. It reports
// whether the capabilities could be read at all.
func (k *checker) checkCapabilities(ctx context.Context) bool {
	a, err := k.c.do(ctx, request{op: opCapabilities, path: "/capabilities", limit: MaxCapabilitiesBytes})
	if err != nil {
		k.set(CheckCapabilities, Fail, "%v", err)
		return false
	}
	_, verr := k.c.expect(k.ct, opCapabilities, a)
	if verr != nil && a.status != http.StatusOK {
		k.set(CheckCapabilities, Fail, "%v", verr)
		return false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(a.body, &raw); err != nil || raw == nil {
		if verr == nil {
			verr = errors.New("GET /capabilities answer is not a JSON object")
		}
		k.set(CheckCapabilities, Fail, "%v", verr)
		return false
	}
	var caps harnesskit.Capabilities
	decodeErr := json.Unmarshal(a.body, &caps)
	if verr != nil {
		k.set(CheckCapabilities, Fail, "%v", verr)
		if decodeErr != nil {
			return false
		}
	} else if decodeErr != nil {
		k.set(CheckCapabilities, Fail, "capabilities do not decode: %v", decodeErr)
		return false
	}
	k.caps, k.rawCaps = caps, raw
	if l := caps.Limits; l != nil && l.MaxConcurrentRuns != nil && *l.MaxConcurrentRuns < 1 {
		k.set(CheckCapabilities, Fail, "limits.max_concurrent_runs is %d: gyre runs min(this, --concurrency) at once, so it must be at least 1", *l.MaxConcurrentRuns)
	}
	k.set(CheckCapabilities, Pass, "%s", describeCaps(caps))
	return true
}

// describeCaps summarises capabilities in one line.
func describeCaps(c harnesskit.Capabilities) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent %q", oneLine(c.Agent, 80))
	if c.Revision != nil {
		fmt.Fprintf(&b, ", revision %s", oneLine(*c.Revision, 40))
	}
	flags := func(label string, names []string, on []bool) {
		var set []string
		for i, n := range names {
			if on[i] {
				set = append(set, n)
			}
		}
		if len(set) == 0 {
			set = []string{"nothing"}
		}
		fmt.Fprintf(&b, "; %s %s", label, strings.Join(set, ", "))
	}
	var p harnesskit.Provides
	if c.Provides != nil {
		p = *c.Provides
	}
	var a harnesskit.Accepts
	if c.Accepts != nil {
		a = *c.Accepts
	}
	flags("provides", []string{"trajectory", "tool_calls", "thinking", "token_usage", "artifacts", "workspace", "run_listing"},
		[]bool{p.Trajectory, p.ToolCalls, p.Thinking, p.TokenUsage, p.Artifacts, p.Workspace, p.RunListing})
	flags("accepts", []string{"files", "file_urls", "model_override", "stop"},
		[]bool{a.Files, a.FileURLs, a.ModelOverride, a.Stop})
	if c.Limits != nil && c.Limits.MaxConcurrentRuns != nil {
		fmt.Fprintf(&b, "; max_concurrent_runs %d", *c.Limits.MaxConcurrentRuns)
	}
	return b.String()
}

// checkContractVersion requires contract_version v1 (its default when
// absent). It reports whether the other checks apply.
func (k *checker) checkContractVersion() bool {
	raw, ok := k.rawCaps["contract_version"]
	if !ok {
		k.set(CheckContractVersion, Pass, "not declared: v1 by default")
		return true
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		k.set(CheckContractVersion, Fail, "contract_version must be a string, not %s", oneLine(string(raw), 60))
		return false
	}
	if v != harnesskit.ContractVersion {
		k.set(CheckContractVersion, Fail, "contract_version %q: gyre speaks Harness API %s only", oneLine(v, 40), harnesskit.ContractVersion)
		return false
	}
	k.set(CheckContractVersion, Pass, "%s", v)
	return true
}
