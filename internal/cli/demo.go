package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/demo"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// demoRepetitions is the default of gyre demo --repetitions.
const demoRepetitions = 3

// demoHiddenEnv are the variables gyre eval run reads that gyre demo must
// not: the demo's harness is its own, and it records into --data/--db with
// blobs in the data directory (the desk cannot fetch s3:// fixture URLs).
var demoHiddenEnv = []string{"GYRE_HARNESS", "GYRE_HARNESS_KEY", "GYRE_SERVER", "GYRE_KEY", "GYRE_BLOB"}

func (a *app) demoCommand() *cobra.Command {
	var (
		repetitions int
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an experiment against the example support-desk harness, offline",
		Long: `Show gyre's main job on the embedded defaults: start the example support-desk
harness (examples/harness, its rule-based policy: no model, no network)
in-process on 127.0.0.1, write the embedded demo suite to <data>/demo, and run
it exactly as gyre eval run would, recording the experiment into the embedded
store (--data, --db). Progress goes to stderr; the summary and the commands to
try next to stdout.

One case of the suite fails on purpose, so the pass rate is below 100%. gyre
eval run exits 100 on such a result; gyre demo exits 0 whenever the experiment
ran, and 1 on any error.`,
		Example: `  gyre demo
  gyre demo --data /tmp/gyre-demo --repetitions 5
  gyre demo --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitError{code: ExitError, err: fmt.Errorf("gyre demo takes no arguments, got %q", args)}
			}
			return a.demo(cmd, repetitions, asJSON)
		},
	}
	// Every error of gyre demo exits 1, flag syntax included.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: ExitError, err: err} })
	cmd.AddCommand(a.demoUpstreamCommand(), a.demoAgentCommand())
	cmd.Flags().IntVar(&repetitions, "repetitions", demoRepetitions, "runs per case")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON on stdout")
	return cmd
}

// demoJSON is gyre demo --json: the summary of gyre eval run --json plus
// a "demo" member.
type demoJSON struct {
	eval.Summary
	Demo demoInfo `json:"demo"`
}

// demoInfo says where the demo's suite and results are and what to try
// next.
type demoInfo struct {
	Suite            string   `json:"suite"`
	Data             string   `json:"data"`
	Store            string   `json:"store"`
	ExpectedFailures []string `json:"expected_failures"`
	FailedCases      []string `json:"failed_cases"`
	PreviousID       *string  `json:"previous_experiment_id"`
	Next             []string `json:"next"`
}

// demo is gyre demo.
func (a *app) demo(cmd *cobra.Command, repetitions int, asJSON bool) error {
	if repetitions < 1 {
		return exitError{code: ExitError, err: errors.New("--repetitions must be at least 1")}
	}
	// The demo resolves its settings and runs the experiment without the
	// eval-only variables (see demoHiddenEnv).
	sub := &app{stdin: a.stdin, stdout: io.Discard, stderr: a.stderr, res: resolver{lookupEnv: func(k string) (string, bool) {
		if slices.Contains(demoHiddenEnv, k) {
			return "", false
		}
		return a.res.lookupEnv(k)
	}}}
	c, _, err := sub.config(cmd, false)
	if err != nil {
		return exitError{code: ExitError, err: err}
	}
	suiteDir, err := demo.WriteSuite(filepath.Join(c.Data, "demo"))
	if err != nil {
		return err
	}
	// The kit logs every run at info: keep its warnings only, unless the
	// user asked for debug logs.
	level, _ := telemetry.ParseLevel(c.LogLevel)
	h, err := demo.StartHarness(telemetry.NewLogger(a.stderr, max(level, slog.LevelWarn), telemetry.LogAuto), "")
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	}()
	fmt.Fprintf(a.stderr, "gyre demo: the example support desk (rule-based, offline) is serving Harness API v1 on %s\n", h.URL)
	fmt.Fprintf(a.stderr, "gyre demo: running the suite in %s, as gyre eval run does\n", suiteDir)

	// The experiment runs through gyre eval run itself; its --json
	// summary names the experiment, which is then read back from the store.
	var out bytes.Buffer
	sub.stdout = &out
	f := evalRunFlags{
		harness: h.URL, repetitions: repetitions, concurrency: eval.DefaultConcurrency, retries: eval.DefaultRetries,
		failUnder: math.NaN(), caseThreshold: 1, maxUnsc: 0.2, tenant: "default", fixtureAddr: "127.0.0.1:0", asJSON: true,
	}
	runErr := sub.evalRun(cmd, suiteDir, &f)
	if code, ok := exitCode(runErr); ok && code == eval.ExitFailed {
		runErr = nil // a failed case is what the demo shows, not an error
	}
	var sum eval.Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.ExperimentID == "" {
		if runErr != nil {
			return runErr
		}
		return fmt.Errorf("no experiment summary: %q", strings.TrimSpace(out.String()))
	}

	var (
		rep    eval.Report
		prevID *string
	)
	err = sub.withStore(cmd, func(ctx context.Context, st store.Store) error {
		t, err := tenantByName(ctx, st, f.tenant)
		if err != nil {
			return err
		}
		e, runs, err := loadExperiment(ctx, &eval.StoreRecorder{Store: st, Tenant: t.ID}, sum.ExperimentID)
		if err != nil {
			return err
		}
		rep = eval.ReportOf(e, runs)
		prevID, err = previousDemo(ctx, st, t.ID, e)
		return err
	})
	if err != nil {
		return errors.Join(runErr, err)
	}

	info := demoInfo{
		Suite: suiteDir, Data: c.Data, Store: storeDescription(c),
		ExpectedFailures: demo.ExpectedFailures, FailedCases: []string{}, PreviousID: prevID, Next: []string{},
	}
	for _, cr := range rep.CaseResults {
		if cr.Result == "failed" {
			info.FailedCases = append(info.FailedCases, cr.CaseID)
		}
	}
	steps := demoNext(c, sum.ExperimentID, prevID, suiteDir)
	for _, st := range steps {
		if !strings.Contains(st.cmd, "<") {
			info.Next = append(info.Next, st.cmd)
		}
	}
	if asJSON {
		if err := writeJSONTo(a.stdout, demoJSON{Summary: sum, Demo: info}); err != nil {
			return err
		}
	} else {
		printReport(a.stdout, rep)
		printDemoEpilogue(a.stdout, sum, info, steps, h.URL)
	}
	return runErr
}

// previousDemo returns the id of the newest finished experiment of the
// demo suite, other than e, created no later than e, if any.
func previousDemo(ctx context.Context, st store.Store, tenantID string, e store.Experiment) (*string, error) {
	page := store.Page{Limit: 100}
	for range 10 { // the newest 1,000 experiments are plenty
		exps, next, err := st.ListExperiments(ctx, tenantID, page)
		if err != nil {
			return nil, fmt.Errorf("list experiments: %w", err)
		}
		for _, x := range exps {
			if x.ID != e.ID && x.Suite == e.Suite && x.FinishedAt != nil && !x.CreatedAt.After(e.CreatedAt) {
				return &x.ID, nil
			}
		}
		if next == "" {
			break
		}
		page.Cursor = next
	}
	return nil, nil
}

// storeDescription says where the store of c is, without secrets.
func storeDescription(c Config) string {
	switch {
	case c.DB == "":
		return "SQLite " + filepath.Join(c.Data, "gyre.db")
	case strings.HasPrefix(c.DB, "postgres://"), strings.HasPrefix(c.DB, "postgresql://"):
		return "PostgreSQL " + redactURL(c.DB)
	default:
		return "SQLite " + c.DB
	}
}

// demoStep is one command to try after the demo and what it shows.
type demoStep struct{ cmd, note string }

// demoNext is the commands to try after the demo, with the store flags
// the demo ran with.
func demoNext(c Config, id string, prevID *string, suiteDir string) []demoStep {
	var flags string
	if c.Data != Defaults().Data {
		flags += " --data " + shellQuote(c.Data)
	}
	if c.DB != "" {
		flags += " --db " + shellQuote(redactURL(c.DB))
	}
	next := []demoStep{{"gyre eval show " + id + flags, "every run of this experiment: answer, verdicts, trajectory"}}
	if prevID != nil {
		next = append(next, demoStep{"gyre eval compare " + *prevID + " " + id + flags, "this experiment against the previous demo's, case by case"})
	} else {
		next = append(next, demoStep{"gyre eval compare " + id + " <next demo's id>" + flags, "after a second gyre demo: the two experiments, case by case"})
	}
	return append(next,
		demoStep{"go run ./examples/harness", "the same desk as a server on http://127.0.0.1:8080; then, in another shell,"},
		demoStep{"gyre harness check http://127.0.0.1:8080", "its Harness API v1 conformance, check by check,"},
		demoStep{"gyre eval run " + shellQuote(suiteDir) + " --harness http://127.0.0.1:8080" + flags, "and the demo suite against it (exit 100: a case fails)"},
	)
}

// printDemoEpilogue explains the result and lists the next commands.
func printDemoEpilogue(w io.Writer, sum eval.Summary, info demoInfo, steps []demoStep, harnessURL string) {
	fmt.Fprintf(w, "\nThis was a real experiment: %d runs (%d cases, repeated) of the suite in %s against the\n",
		sum.Runs, sum.Cases, info.Suite)
	fmt.Fprintf(w, "example support desk (examples/harness, rule-based, offline), served in-process on %s.\n", harnessURL)
	switch {
	case len(info.FailedCases) == 0:
		fmt.Fprintln(w, "Every case passed.")
	case slices.Equal(info.FailedCases, info.ExpectedFailures):
		fmt.Fprintf(w, "%s fails on purpose: the customer wants no refund, but the desk's rules read any\n", strings.Join(info.FailedCases, ", "))
		fmt.Fprintln(w, "mention of a refund as a request for one and refund the order anyway.")
	default:
		fmt.Fprintf(w, "Failed cases: %s.\n", strings.Join(info.FailedCases, ", "))
	}
	if sum.ExitCode == eval.ExitFailed {
		fmt.Fprintln(w, "gyre eval run would exit 100 on this result (a case failed); gyre demo exits 0 because it only demonstrates.")
	}
	fmt.Fprintf(w, "\nThe experiment is stored in %s; fixtures and trajectories under %s.\n", info.Store, filepath.Join(info.Data, "blobs"))
	fmt.Fprintln(w, "Try next (from a checkout, `go run ./cmd/gyre` stands for gyre):")
	for _, st := range steps {
		fmt.Fprintf(w, "  # %s\n  %s\n", st.note, st.cmd)
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
