package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
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

// demoFlags are gyre demo's flags.
type demoFlags struct {
	repetitions int
	asJSON      bool
	serve       bool
	addr        string
	// Hidden, for tests that size the loop down: production questions,
	// promotion repetitions, worker concurrency.
	turns, promotionReps, concurrency int
}

func (a *app) demoCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole loop offline: production turns to a promoted policy, and an experiment",
		Long: `Show gyre's main job, offline, in one process, on --data (default ./gyre-data):

  serve       gyre serve on a free loopback port, with the scripted demo model
              (no language model: deterministic, gyre demo upstream) as its
              upstream "scripted-demo-model" in <data>/demo/gyre.yaml
  policies    demo-base (the default policy) and demo-candidate on it
  turns       the example agent (examples/agent, re-executed as gyre demo
              agent) answers customer questions through the agent's policy
              endpoint and captures each turn through the SDK
  tasks       tasks from those turns, and from a rollout suite written for
              the agent (demo-support-desk-agent)
  batch       gyre worker runs the agent for every task through the gateway;
              the verifiers grade each rollout; cases meeting the agent's
              infrastructure trouble on purpose end excluded or unscored,
              not failed
  training    the batch's training-grade yield and the reasons for the rest
  dataset     an sft export with its manifest, in <data>/demo
  promotion   demo-candidate over demo-base on the suite's tasks without
              trouble: the gate's decision
  experiment  the evaluator: the embedded suite against the example desk
              harness (rule-based), as gyre eval run does

demo-base makes a known mistake (it refunds and cancels without looking the
order up); demo-candidate does not, so the promotion passes the gate. Each run
is a new agent, demo-1, demo-2, …, so a second run on the same data shows every
stage again. Each stage prints one block on stdout (--json: one summary at the
end), progress goes to stderr; the end names the UI and commands to explore.
--serve keeps the server up until Ctrl-C. Exit 0 when every stage ran, 1 when
one failed (the output names it).`,
		Example: `  gyre demo
  gyre demo --serve
  gyre demo --data /tmp/gyre-demo --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitError{code: ExitError, err: fmt.Errorf("gyre demo takes no arguments, got %q", args)}
			}
			return a.demo(cmd, f)
		},
	}
	// Every error of gyre demo exits 1, flag syntax included.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: ExitError, err: err} })
	cmd.AddCommand(a.demoUpstreamCommand(), a.demoAgentCommand())
	fs := cmd.Flags()
	fs.IntVar(&f.repetitions, "repetitions", demoRepetitions, "runs per case of the experiment")
	fs.BoolVar(&f.asJSON, "json", false, "print every stage's figures as one JSON summary on stdout")
	fs.BoolVar(&f.serve, "serve", false, "keep the server up after the stages, until Ctrl-C")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:0", "address of the demo's gyre serve (port 0: a free one)")
	fs.IntVar(&f.turns, "turns", demo.DefaultTurns, "production questions the agent answers")
	fs.IntVar(&f.promotionReps, "promotion-repetitions", demo.DefaultRepetitions, "the promotion's rollouts per task and side")
	fs.IntVar(&f.concurrency, "concurrency", demo.DefaultConcurrency, "gyre worker's concurrency")
	for _, n := range []string{"turns", "promotion-repetitions", "concurrency"} {
		_ = fs.MarkHidden(n)
	}
	return cmd
}

// demoExperiment runs the evaluator experiment as gyre demo always has:
// the embedded suite against the example desk harness, through gyre eval
// run's code path, recorded into the store. sub resolves settings without
// gyre eval's own variables (demoHiddenEnv).
func (a *app) demoExperiment(cmd *cobra.Command, sub *app, c Config, repetitions int) (demo.ExperimentStage, error) {
	suiteDir, err := demo.WriteSuite(filepath.Join(c.Data, "demo"))
	if err != nil {
		return demo.ExperimentStage{}, err
	}
	// The kit logs every run at info: keep its warnings only, unless the
	// user asked for debug logs.
	level, _ := telemetry.ParseLevel(c.LogLevel)
	h, err := demo.StartHarness(telemetry.NewLogger(a.stderr, max(level, slog.LevelWarn), telemetry.LogAuto), "")
	if err != nil {
		return demo.ExperimentStage{}, err
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
			return demo.ExperimentStage{}, runErr
		}
		return demo.ExperimentStage{}, fmt.Errorf("no experiment summary: %q", strings.TrimSpace(out.String()))
	}
	if runErr != nil {
		return demo.ExperimentStage{}, runErr
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
		return demo.ExperimentStage{}, err
	}
	st := demo.ExperimentStage{
		ID: sum.ExperimentID, Suite: sum.Suite, SuiteVersion: sum.SuiteVersion, Harness: h.URL, Cases: sum.Cases, Runs: sum.Runs,
		Passed: sum.Passed, Failed: sum.Failed, Errors: sum.Errors, PassRate: sum.PassRate, ExitCode: sum.ExitCode,
		SuiteDir: suiteDir, FailedCases: []string{}, ExpectedFailures: demo.ExpectedFailures, Previous: prevID,
	}
	for _, cr := range rep.CaseResults {
		if cr.Result == "failed" {
			st.FailedCases = append(st.FailedCases, cr.CaseID)
		}
	}
	return st, nil
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

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
