package supportdesk

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/openai/openai-go/v3/option"

	"github.com/gyrehq/gyre/flywheel"
)

// Main runs the agent with the process's environment: args are the
// command-line arguments without the program name. It returns the exit
// code: 0 answered, 1 the turn failed, 2 bad usage.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// SIGTERM (gyre worker at the deadline) or Ctrl-C end the turn; the
	// report is still written with the calls made so far.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, stdin, stdout, stderr, os.LookupEnv)
}

// Run is Main with its context and environment given. lookupEnv reads the
// agent's own settings (AGENT_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY and
// the GYRE_CAPTURE_* variables of production mode); gyre worker's side
// channel (GYRE_ROLLOUT_ID, GYRE_REPORT, …) is read by the flywheel SDK
// from the process environment.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	env := func(name, def string) string {
		if v, ok := lookupEnv(name); ok && v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	artifacts := fs.String("artifacts", "", "directory to write the transcript and order state to (default $GYRE_ARTIFACTS_DIR)")
	model := fs.String("model", env("AGENT_MODEL", "gpt-4o-mini"), "chat model [$AGENT_MODEL]")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	wenv, underWorker := flywheel.LoadAgentEnv()
	capture, err := captureFromEnv(lookupEnv, underWorker)
	if err != nil {
		fmt.Fprintln(stderr, "agent:", err)
		return 2
	}
	input, err := readInput(wenv, underWorker, fs.Args(), stdin)
	if err != nil {
		fmt.Fprintln(stderr, "agent:", err)
		return 2
	}
	if underWorker && !wenv.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, wenv.Deadline)
		defer cancel()
	}
	if *artifacts == "" && underWorker {
		*artifacts = wenv.ArtifactsDir
	}
	rec := flywheel.NewRecorder()
	fingerprint := map[string]any{"agent": "gyre-example-support-desk", "version": "1", "model_asked": *model}
	rec.SetAgentFingerprint(fingerprint)
	var opts []option.RequestOption
	if v := env("OPENAI_BASE_URL", ""); v != "" {
		opts = append(opts, option.WithBaseURL(v))
	}
	if v := env("OPENAI_API_KEY", ""); v != "" {
		opts = append(opts, option.WithAPIKey(v))
	}
	a := newAgent(*model, rec, opts...)
	answer, runErr := a.run(ctx, input)
	if runErr == nil {
		rec.SetSuccess(true)
		fmt.Fprintln(stdout, answer)
	} else {
		fmt.Fprintln(stderr, "agent:", runErr)
	}
	if *artifacts != "" {
		if err := writeArtifacts(*artifacts, a); err != nil {
			fmt.Fprintln(stderr, "agent: artifacts:", err)
		}
	}
	code := 0
	if runErr != nil {
		code = 1
	}
	if capture != nil {
		// A failed turn is captured too, with no final text: production
		// capture records what happened, not only what went well.
		if err := capture.send(ctx, input, answer, runErr == nil, rec.ToolCalls(), fingerprint, stderr); err != nil {
			fmt.Fprintln(stderr, "agent: capture:", err)
			code = 1
		}
	}
	// The report carries every executed call, even when the turn failed:
	// a complete list is honest, a partial one never is. Outside gyre
	// worker there is no GYRE_REPORT, and nothing is written.
	if err := rec.WriteReport(answer); err != nil {
		fmt.Fprintln(stderr, "agent: report:", err)
		return 1
	}
	return code
}

// readInput is the customer's message: the turn input under gyre worker,
// otherwise the arguments, otherwise stdin.
func readInput(env flywheel.AgentEnv, underWorker bool, args []string, stdin io.Reader) (string, error) {
	if underWorker {
		return env.TurnInput()
	}
	if len(args) > 0 {
		return strings.Join(args, " "), nil
	}
	if stdin == nil {
		return "", errors.New("no question: pass it as arguments or on stdin")
	}
	b, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
	if err != nil {
		return "", err
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s, nil
	}
	return "", errors.New("no question: pass it as arguments or on stdin")
}

func writeArtifacts(dir string, a *agent) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{"transcript.json": a.transcript, "orders.json": a.orders.Snapshot()} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
