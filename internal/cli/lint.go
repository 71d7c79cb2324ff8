package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/harnesscheck"
)

func (a *app) lintCommand() *cobra.Command {
	var (
		agent, apiKey string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "lint SUITE",
		Short: "Check a suite, optionally against a harness",
		Long: `Check the suite SUITE (a YAML, JSON or JSONL file, or a suite directory)
without running it: syntax and unknown keys, unique case ids, grader configs,
fixture names and presence (the first of these errors stops the lint), then
cases without deciding graders and unused fixtures (warnings).

With --agent URL it also fetches the harness's capabilities and checks every
case input against its input_schema (or the default question schema: an
object with a required string "question"), exactly as gyre eval run does
before it starts, and that cases with files can be delivered (the harness
accepts files or file_urls).

Problems print as "ERROR|WARN file:line: /json/pointer (case id): message".
It exits 1 when there is an error, 0 otherwise. --json prints
{"path","suite","cases","agent","problems":[{"severity","file","line",
"pointer","case_id","message"}],"errors","warnings"}.`,
		Example: `  gyre lint suites/refunds.yaml
  gyre lint suites/refunds/ --agent http://127.0.0.1:8080 --api-key dev-key`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("api-key") {
				if v, ok := a.res.lookupEnv("GYRE_HARNESS_KEY"); ok {
					apiKey = v
				}
			}
			rep := harnesscheck.Lint(cmd.Context(), harnesscheck.LintConfig{Path: args[0], AgentURL: agent, APIKey: apiKey})
			if asJSON {
				if err := writeJSONTo(a.stdout, rep); err != nil {
					return err
				}
			} else {
				for _, p := range rep.Problems {
					fmt.Fprintln(a.stdout, p.String())
				}
				fmt.Fprintln(a.stdout, lintSummary(rep))
			}
			if rep.Failed() {
				return exitError{code: ExitError}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&agent, "agent", "", "check the cases against the harness at this URL")
	fs.StringVar(&apiKey, "api-key", "", "x-api-key for the harness [$GYRE_HARNESS_KEY]")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// lintSummary is the last line of gyre lint: what was linted and the
// counts.
func lintSummary(r harnesscheck.LintReport) string {
	var b strings.Builder
	if r.Suite != "" {
		fmt.Fprintf(&b, "suite %s (%d %s)", r.Suite, r.Cases, noun(r.Cases, "case"))
	} else {
		fmt.Fprintf(&b, "%s", r.Path)
	}
	if r.Agent != nil {
		fmt.Fprintf(&b, " checked against %s", *r.Agent)
	}
	fmt.Fprintf(&b, ": %d %s, %d %s", r.Errors, noun(r.Errors, "error"), r.Warnings, noun(r.Warnings, "warning"))
	return b.String()
}

// noun returns singular or plural by n.
func noun(n int, singular string) string {
	if n == 1 {
		return singular
	}
	return singular + "s"
}
