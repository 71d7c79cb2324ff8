package cli

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	// The example agent's code, run from the gyre binary so that gyre demo
	// needs no Go toolchain: this makes openai-go a dependency of the
	// binary, an exception to its being a test-only dependency elsewhere.
	"github.com/gyrehq/gyre/examples/agent/supportdesk"
)

// demoAgentCommand is the hidden gyre demo agent: the example
// support-desk agent (examples/agent) as a gyre subcommand. gyre demo
// re-executes gyre itself (os.Executable) with it, for production turns
// and as gyre worker's agent.
func (a *app) demoAgentCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "agent [-model M] [-artifacts DIR] [QUESTION...]",
		Short:              "Run the example support-desk agent (examples/agent) from the gyre binary",
		Hidden:             true,
		DisableFlagParsing: true, // the agent parses its own flags
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if code := supportdesk.Run(ctx, args, a.stdin, a.stdout, a.stderr, a.res.lookupEnv); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	}
}
