package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/worker"
)

func (a *app) workerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --server URL --agent ID [flags] -- CMD [ARGS...]",
		Short: "Run an agent on the control plane's rollouts",
		Long: `Run the agent side of flywheel/1: claim rollouts of --agent from the gyre
server at --server, run CMD once per rollout, and submit what it produced.

Each run of CMD gets an environment built from an allow-list, never the
worker's whole environment: PATH, HOME, LANG, TZ and TMPDIR, the variables
named with --env or in --env-file, then the rollout's own:

  OPENAI_BASE_URL, OPENAI_API_BASE  the rollout's LLM gateway URL
  OPENAI_API_KEY                    the rollout's gateway key
  GYRE_ROLLOUT_ID                   the rollout id
  GYRE_TURN_INPUT_FILE              a file holding the turn input
  GYRE_TURN_INPUT                   the turn input itself, when under 64 KiB
  GYRE_ARTIFACTS_DIR                an absolute directory for artifacts
  GYRE_DEADLINE_TS                  the deadline, epoch seconds
  GYRE_REPORT                       where to write an optional JSON report

The turn input is also written to CMD's stdin. Without a report, CMD's
stdout is the final answer and its tool calls count as not reported.
CMD runs in its own process group: at the rollout's deadline it gets
SIGTERM, then SIGKILL 10 seconds later.

The agent key comes from --key-file or GYRE_KEY; --key works but shows in
ps. The worker never passes its key, other GYRE_* variables or provider
credentials (*_API_KEY, *_BASE_URL, OPENAI_*, ANTHROPIC_*, AZURE_OPENAI_*)
to CMD unless named with --env.

On SIGINT or SIGTERM the worker stops claiming, releases rollouts it has
not started, and lets running ones finish until their deadline or --drain;
then it stops them and reports them cancelled. A second signal ends the
drain at once.

Flags not given on the command line are read from GYRE_<FLAG> variables
(for example GYRE_SERVER, GYRE_AGENT, GYRE_CONCURRENCY).`,
		Example: `  GYRE_KEY=$(cat agent.key) gyre worker --server http://127.0.0.1:7070 --agent support-bot -- python agent.py
  gyre worker --server https://gyre.example.com --agent support-bot --key-file agent.key \
      --concurrency 4 --env AGENT_MODEL --env-file agent.env -- ./support-agent`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s: missing the agent command: put it after --, e.g. gyre worker --server URL --agent ID -- ./agent", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runWorker(cmd, args)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // everything after CMD is CMD's
	f.String("server", "", "URL of the gyre server [$GYRE_SERVER]")
	f.String("agent", "", "agent id whose rollouts to run [$GYRE_AGENT]")
	f.String("key", "", "agent key (shows in ps: prefer --key-file or $GYRE_KEY)")
	f.String("key-file", "", "file holding the agent key [$GYRE_KEY_FILE]")
	f.Int("concurrency", 1, "rollouts run at once [$GYRE_CONCURRENCY]")
	f.Duration("lease", flywheel.DefaultLease, "lease length asked for at claim; the server may clamp it [$GYRE_LEASE]")
	f.String("root", "./gyre-worker", "directory for artifacts and per-rollout files [$GYRE_ROOT]")
	f.Duration("drain", flywheel.DefaultDrain, "on SIGINT/SIGTERM, how long running rollouts may go on [$GYRE_DRAIN]")
	f.StringArray("env", nil, "pass the worker's variable NAME to the agent, or set NAME=VALUE (repeatable)")
	f.StringArray("env-file", nil, "file of NAME=VALUE lines to set and bare NAME lines to pass (repeatable)")
	f.Duration("poll-wait", flywheel.DefaultPollWait, "long-poll of each claim (0 disables) [$GYRE_POLL_WAIT]")
	f.String("worker-id", "", "id sent with claims (default: host name and a random id kept in --root) [$GYRE_WORKER_ID]")
	return cmd
}

// workerSettings are gyre worker's resolved flags.
type workerSettings struct {
	server, agent, key, root, workerID string
	concurrency                        int
	lease, drain, pollWait             time.Duration
	env                                worker.EnvSpec
	argv                               []string
}

// value returns a flag's value, or GYRE_<FLAG> when the flag is not set.
func (a *app) value(cmd *cobra.Command, name string) (string, bool) {
	if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
		return fl.Value.String(), true
	}
	env := "GYRE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if v, ok := a.res.lookupEnv(env); ok {
		return v, true // set, even to "", counts (docs/cli.md)
	}
	if fl := cmd.Flags().Lookup(name); fl != nil {
		return fl.DefValue, false
	}
	return "", false
}

func (a *app) workerSettings(cmd *cobra.Command, args []string, log *slog.Logger) (workerSettings, error) {
	s := workerSettings{argv: args}
	var ok bool
	if s.server, ok = a.value(cmd, "server"); !ok || s.server == "" {
		return s, usagef("%s: --server (or GYRE_SERVER) is required", cmd.CommandPath())
	}
	if s.agent, ok = a.value(cmd, "agent"); !ok || s.agent == "" {
		return s, usagef("%s: --agent (or GYRE_AGENT) is required", cmd.CommandPath())
	}
	if err := flywheel.ValidateAgentID(s.agent); err != nil {
		return s, usagef("--agent: %v", err)
	}
	key, err := a.agentKey(cmd, log)
	if err != nil {
		return s, err
	}
	s.key = key
	if s.root, _ = a.value(cmd, "root"); s.root == "" {
		return s, usagef("--root must not be empty")
	}
	s.workerID, _ = a.value(cmd, "worker-id")
	v, _ := a.value(cmd, "concurrency")
	if s.concurrency, err = strconv.Atoi(v); err != nil || s.concurrency < 1 || s.concurrency > 1024 {
		return s, usagef("--concurrency: want a number from 1 to 1024, not %q", v)
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
		zero bool
	}{{"lease", &s.lease, false}, {"drain", &s.drain, true}, {"poll-wait", &s.pollWait, true}} {
		v, _ := a.value(cmd, d.name)
		if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst < 0 || (!d.zero && *d.dst == 0) {
			return s, usagef("--%s: want a positive duration such as 30s or 5m, not %q", d.name, v)
		}
	}
	if s.pollWait == 0 {
		s.pollWait = -1 // flywheel.Serve: negative disables the long-poll
	}
	if s.drain == 0 {
		s.drain = time.Nanosecond // stop at once
	}
	envs, _ := cmd.Flags().GetStringArray("env")
	for _, e := range envs {
		if err := s.env.ParseEnvFlag(e); err != nil {
			return s, usagef("--env: %v", err)
		}
	}
	files, _ := cmd.Flags().GetStringArray("env-file")
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			return s, usagef("--env-file: %v", err)
		}
		err = s.env.ParseEnvFile(fh)
		fh.Close()
		if err != nil {
			return s, usagef("--env-file %s: %v", name, err)
		}
	}
	if _, err := exec.LookPath(s.argv[0]); err != nil {
		return s, usagef("agent command: %v", err)
	}
	return s, nil
}

// agentKey reads the agent key: --key-file, else --key (with a warning),
// else GYRE_KEY, else GYRE_KEY_FILE.
func (a *app) agentKey(cmd *cobra.Command, log *slog.Logger) (string, error) {
	keyFlag := cmd.Flags().Lookup("key").Changed
	fileFlag := cmd.Flags().Lookup("key-file").Changed
	readFile := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", usagef("--key-file: %v", err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", usagef("--key-file: %s is empty", path)
		}
		return k, nil
	}
	switch {
	case keyFlag && fileFlag:
		return "", usagef("--key and --key-file are exclusive")
	case fileFlag:
		return readFile(cmd.Flags().Lookup("key-file").Value.String())
	case keyFlag:
		log.Warn("--key puts the agent key on the command line, where ps shows it; use --key-file or GYRE_KEY")
		if k := cmd.Flags().Lookup("key").Value.String(); k != "" {
			return k, nil
		}
		return "", usagef("--key is empty")
	}
	if k, ok := a.res.lookupEnv("GYRE_KEY"); ok && strings.TrimSpace(k) != "" {
		return strings.TrimSpace(k), nil
	}
	if p, ok := a.res.lookupEnv("GYRE_KEY_FILE"); ok && p != "" {
		return readFile(p)
	}
	return "", usagef("%s: an agent key is required: --key-file F or GYRE_KEY", cmd.CommandPath())
}

func (a *app) runWorker(cmd *cobra.Command, args []string) error {
	c, _, err := a.config(cmd, false)
	if err != nil {
		return err
	}
	log := a.logger(c)
	s, err := a.workerSettings(cmd, args, log)
	if err != nil {
		return err
	}
	version := readBuildInfo().Version
	client, err := flywheel.NewClient(s.server, s.key, flywheel.WithUserAgent("gyre-worker/"+version))
	if err != nil {
		return usagef("--server: %v", err)
	}
	runner, err := worker.NewRunner(worker.Config{
		Argv: s.argv, Env: s.env, LookupEnv: a.res.lookupEnv, Preflight: true, Logger: log,
	})
	if err != nil {
		return usageError{err}
	}

	// The first SIGINT or SIGTERM starts the drain; a second ends it.
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case sig := <-sigs:
			log.Info("stopping: no more claims; draining running rollouts", slog.String("signal", sig.String()), slog.Duration("drain", s.drain))
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			log.Warn("second signal: stopping running rollouts now", slog.String("signal", sig.String()))
			close(stop)
		case <-done:
		}
	}()

	err = flywheel.Serve(ctx, flywheel.ServeConfig{
		Client: client, AgentID: s.agent, Concurrency: s.concurrency, Lease: s.lease, Root: s.root,
		Drain: s.drain, Stop: stop, PollWait: s.pollWait, WorkerID: s.workerID, WorkerVersion: version, Logger: log,
	}, runner)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}
