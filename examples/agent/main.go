// Command agent is a small support-desk agent: an OpenAI chat model with
// three tools over an in-memory order system (lookup_order, cancel_order,
// issue_refund). It is an ordinary program — it reads its question, prints
// its answer — that also speaks gyre's side channel when it runs under
// gyre worker: it records its tool calls with flywheel.Recorder, writes
// the report to GYRE_REPORT and its files to GYRE_ARTIFACTS_DIR.
//
// On its own:
//
//	OPENAI_API_KEY=sk-… go run ./examples/agent "Please refund order C3, it arrived broken."
//
// Under gyre worker (see README.md):
//
//	gyre worker --server http://127.0.0.1:7070 --agent support-bot --key-file agent.key \
//	    --env AGENT_MODEL -- ./support-agent
package main

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

	"github.com/gyrehq/gyre/flywheel"
)

func main() { os.Exit(run()) }

func run() int {
	artifacts := flag.String("artifacts", "", "directory to write the transcript and order state to (default $GYRE_ARTIFACTS_DIR)")
	model := flag.String("model", envOr("AGENT_MODEL", "gpt-4o-mini"), "chat model [$AGENT_MODEL]")
	flag.Parse()

	// SIGTERM (gyre worker at the deadline) or Ctrl-C end the turn; the
	// report is still written with the calls made so far.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env, underWorker := flywheel.LoadAgentEnv()
	input, err := readInput(env, underWorker)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 2
	}
	if underWorker && !env.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, env.Deadline)
		defer cancel()
	}
	if *artifacts == "" && underWorker {
		*artifacts = env.ArtifactsDir
	}

	rec := flywheel.NewRecorder()
	rec.SetAgentFingerprint(map[string]any{"agent": "gyre-example-support-desk", "version": "1", "model_asked": *model})
	a := newAgent(*model, rec)
	answer, runErr := a.run(ctx, input)
	if runErr == nil {
		rec.SetSuccess(true)
		fmt.Println(answer)
	} else {
		fmt.Fprintln(os.Stderr, "agent:", runErr)
	}
	if *artifacts != "" {
		if err := writeArtifacts(*artifacts, a); err != nil {
			fmt.Fprintln(os.Stderr, "agent: artifacts:", err)
		}
	}
	// The report carries every executed call, even when the turn failed:
	// a complete list is honest, a partial one never is.
	if err := rec.WriteReport(answer); err != nil {
		fmt.Fprintln(os.Stderr, "agent: report:", err)
		return 1
	}
	if runErr != nil {
		return 1
	}
	return 0
}

// readInput is the customer's message: the turn input under gyre worker,
// otherwise the arguments, otherwise stdin.
func readInput(env flywheel.AgentEnv, underWorker bool) (string, error) {
	if underWorker {
		return env.TurnInput()
	}
	if flag.NArg() > 0 {
		return strings.Join(flag.Args(), " "), nil
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
