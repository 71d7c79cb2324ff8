package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/harnesscheck"
)

func (a *app) harnessCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "harness",
		Short: "Check an agent harness against Harness API v1",
		Long: `Commands for agent harnesses: servers that implement Harness API v1 so that
gyre eval can drive them. gyre harness check tests one for conformance.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(a.harnessCheckCommand())
	return cmd
}

// harnessCheckFlags are the flags of gyre harness check.
type harnessCheckFlags struct {
	apiKey, fixtureAddr, publicURL string
	timeout                        time.Duration
	asJSON                         bool
}

func (a *app) harnessCheckCommand() *cobra.Command {
	var f harnessCheckFlags
	cmd := &cobra.Command{
		Use:   "check URL",
		Short: "Check a harness's conformance to Harness API v1",
		Long: `Check the Harness API v1 server at URL and print one line per check:

  PASS|FAIL|WARN|SKIP <check>: <detail>

The checks, in order: capabilities (GET /capabilities against the contract's
OpenAPI document, formats asserted), contract_version (v1), check_input
(against input_schema, or the default question schema), run (check_input end
to end: create, poll, a terminal status with a model), fixtures (a fixture
delivered the way accepts declares: a URL the harness must fetch from this
command's listener, and a multipart part), trajectory (valid ATIF),
stop (a stopped run goes cancelled), listing.query, listing.pagination,
listing.time_range and listing.session_id (GET /runs semantics), and
workspace (listed paths are workspace-relative, files match the listing).
Every answer is validated against the contract. A check that cannot apply is
SKIP with the reason.

The check creates a few runs of the harness's check_input. Redirects are
never followed; the key goes to URL's origin only. It exits 1 when a check
fails, 0 otherwise (warnings and skips do not fail). --json prints the
checks as [{"check","result","detail"}].`,
		Example: `  gyre harness check http://127.0.0.1:8080
  GYRE_HARNESS_KEY=… gyre harness check https://agent.internal --json
  gyre harness check https://agent.internal --fixture-addr 0.0.0.0:7071 --public-url http://ci-runner:7071`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.harnessCheck(cmd, args[0], &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.apiKey, "api-key", "", "x-api-key for the harness [$GYRE_HARNESS_KEY]")
	fs.DurationVar(&f.timeout, "timeout", harnesscheck.DefaultRunTimeout, "longest wait for one run to reach a terminal status")
	fs.BoolVar(&f.asJSON, "json", false, "print the checks as a JSON list")
	fs.StringVar(&f.fixtureAddr, "fixture-addr", harnesscheck.DefaultFixtureAddr, "listen address of the fixture URL the fixtures check serves")
	fs.StringVar(&f.publicURL, "public-url", "", "base URL the harness reaches that listener at (default http://<fixture-addr>)")
	return cmd
}

// harnessCheck is gyre harness check.
func (a *app) harnessCheck(cmd *cobra.Command, url string, f *harnessCheckFlags) error {
	if !cmd.Flags().Changed("api-key") {
		if v, ok := a.res.lookupEnv("GYRE_HARNESS_KEY"); ok {
			f.apiKey = v
		}
	}
	if f.timeout <= 0 {
		return usagef("--timeout must be a positive duration")
	}
	c, _, err := a.config(cmd, false)
	if err != nil {
		return err
	}
	cfg := harnesscheck.Config{
		URL:         url,
		APIKey:      f.apiKey,
		RunTimeout:  f.timeout,
		FixtureAddr: f.fixtureAddr,
		PublicURL:   f.publicURL,
		Logger:      a.logger(c),
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if !f.asJSON {
		cfg.OnCheck = func(c harnesscheck.Check) { fmt.Fprintln(a.stdout, c.String()) }
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := harnesscheck.Run(ctx, cfg)
	if rep == nil {
		return err
	}
	if f.asJSON {
		if werr := writeJSONTo(a.stdout, rep); werr != nil {
			return werr
		}
	}
	fmt.Fprintf(a.stderr, "%d checks: %d passed, %d failed, %d warned, %d skipped\n", len(rep),
		rep.Count(harnesscheck.Pass), rep.Count(harnesscheck.Fail), rep.Count(harnesscheck.Warn), rep.Count(harnesscheck.Skip))
	switch {
	case err != nil:
		return exitError{code: ExitError, err: fmt.Errorf("harness check interrupted: %w", err)}
	case rep.Failed():
		return exitError{code: ExitError}
	}
	return nil
}
