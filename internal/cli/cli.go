package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of the gyre binary.
const (
	ExitOK    = 0 // success
	ExitError = 1 // the command failed
	ExitUsage = 2 // the command line or configuration is wrong
)

// usageError is a mistake in the command line or the configuration: exit
// code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Main runs gyre with the process's arguments, streams and environment,
// and returns the exit code.
func Main() int {
	return Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv)
}

// Run runs gyre with args (without the program name) and returns the exit
// code. Results go to stdout, diagnostics to stderr; lookupEnv reads the
// environment.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, res: resolver{lookupEnv: lookupEnv}}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if code, ok := exitCode(err); ok { // commands with exit codes of their own (gyre eval run)
		if errors.Unwrap(err) != nil {
			fmt.Fprintf(stderr, "gyre: %v\n", err)
		}
		return code
	}
	fmt.Fprintf(stderr, "gyre: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	return ExitError
}

// app holds what every command shares.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	res            resolver
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "gyre",
		Short: "gyre makes AI agents measurably better at their own job",
		Long: `gyre is a self-hostable platform around an agent a team already runs:
production turns and suites become tasks, tasks become rollouts through a
recording LLM gateway, verifiers grade them and mark the trustworthy ones
training grade, gyre dataset exports them as frozen sft, dpo, rl or atif
files, gyre policy promote lets a candidate policy reach production only
through a paired-statistics gate, and gyre eval runs suites against an agent
harness; gyre serve also serves a web UI under /ui/. gyre demo runs the
whole loop offline. Not built yet: capture over OTLP, retention (no
sweeper, no erasing a conversation) and rotating GYRE_SECRET_KEY; the
README lists what is missing.

gyre serve runs the control plane. The operator commands (migrate, tenants,
keys) work on its store directly, with the same --data and --db flags, and
are safe while it runs. The admin commands (suites, tasks, batches,
rollouts, turns, policy, agents, dataset) talk to a running gyre serve over
its HTTP API: --server URL, the key from --key-file or GYRE_KEY, a table for
people or the API's JSON with --json.

Exit codes: 0 success, 1 the command failed (a server's refusal is printed
with its status, code and pointer), 2 the command line or configuration is
wrong.

Configuration comes from flags, then GYRE_<FLAG> environment variables (for
example GYRE_DATA for --data), then the YAML file named by --config or
GYRE_CONFIG, then built-in defaults.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRunE,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.SetHelpCommand(&cobra.Command{Hidden: true}) // "gyre help x" is "gyre x --help"
	pf := root.PersistentFlags()
	pf.String("config", "", "YAML config file whose keys are the flag names with underscores [$GYRE_CONFIG]")
	bindFlags(pf, false)

	root.AddCommand(
		a.serveCommand(),
		a.configCommand(),
		a.migrateCommand(),
		a.tenantsCommand(),
		a.keysCommand(),
		a.versionCommand(),
		a.evalCommand(),
		a.workerCommand(),
		a.atifCommand(),
		a.harnessCommand(),
		a.lintCommand(),
		a.demoCommand(),
		a.suitesCommand(),
		a.tasksCommand(),
		a.batchesCommand(),
		a.rolloutsCommand(),
		a.turnsCommand(),
		a.policyCommand(),
		a.agentsCommand(),
		a.promotionsCommand(),
		a.datasetCommand(),
	)
	return root
}

// groupRunE runs a command that only groups others: without a
// subcommand it shows its help and fails as a usage error.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
		}
		return usageError{errors.New(msg)}
	}
	cmd.SetOut(cmd.ErrOrStderr())
	_ = cmd.Help()
	return usagef("%s needs a command", cmd.CommandPath())
}

// argsUsage wraps an argument validator so its failures exit with 2.
func argsUsage(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// requireFlags fails as a usage error when one of the named flags is unset.
func requireFlags(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if f := cmd.Flags().Lookup(n); f == nil || !f.Changed {
			missing = append(missing, "--"+n)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return usagef("%s: missing required flag %s", cmd.CommandPath(), missing[0])
	}
	return usagef("%s: missing required flags %s", cmd.CommandPath(), strings.Join(missing, ", "))
}

// config resolves the configuration of cmd; serve says whether the serve
// settings apply. Configuration errors are usage errors.
func (a *app) config(cmd *cobra.Command, serve bool) (Config, map[string]source, error) {
	c, from, err := a.res.resolve(cmd.Flags(), serve)
	if err != nil {
		return Config{}, nil, usageError{err}
	}
	if err := c.Validate(); err != nil {
		return Config{}, nil, usageError{fmt.Errorf("invalid configuration:\n%w", indent(err))}
	}
	return c, from, nil
}

// indent puts each line of a joined error on its own indented line.
func indent(err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return errors.New(strings.Join(lines, "\n"))
}
