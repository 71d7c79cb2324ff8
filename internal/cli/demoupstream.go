package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/demo/scripted"
)

// demoUpstreamCommand is gyre demo upstream: the scripted demo model on
// its own, for the tutorial and for trying an agent offline.
func (a *app) demoUpstreamCommand() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "upstream [--addr HOST:PORT]",
		Short: "Serve the scripted demo model (an OpenAI-compatible upstream) until Ctrl-C",
		Long: `Serve the scripted demo model that gyre demo uses as its upstream: an
OpenAI-compatible Chat Completions server (streaming too, with tool calls and
usage) that plays the example support-desk agent's model (examples/agent)
deterministically. It is no language model, and says so in its answers and
its /v1/models list.

It serves two model names: demo-candidate looks every order up and cancels or
refunds only as the order's status allows; demo-base refunds and cancels at
once, without looking the order up (a mistake the graders tool_called
lookup_order and all_tools_ok catch). Any other model name is a 404.

The first line on stdout is the base URL, http://HOST:PORT/v1 (with the port
chosen when --addr ends in :0); then it serves until SIGINT or SIGTERM.`,
		Example: `  gyre demo upstream
  gyre demo upstream --addr 127.0.0.1:8400`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			u, err := scripted.Start(addr, nil)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, u.URL)
			fmt.Fprintf(a.stderr, "gyre demo upstream: the %s serves %s on %s until Ctrl-C\n",
				scripted.Name, strings.Join(scripted.Models, " and "), u.URL)
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return u.Close(sctx)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "address to listen on (port 0: a free one)")
	return cmd
}
