// Command harness is an example Harness API v1 server built with
// harnesskit: the support-desk agent of package desk, with two tools
// (lookup_order, issue_refund) over an in-memory order system. With
// OPENAI_BASE_URL or OPENAI_API_KEY set it asks an OpenAI-compatible model
// (package llm); otherwise it runs the desk's deterministic rule-based
// policy, so it works offline. See README.md.
//
//	go run ./examples/harness --addr 127.0.0.1:8080 --api-key dev-key
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/examples/harness/desk/llm"
	"github.com/gyrehq/gyre/harnesskit"
)

// defaultModel is the model asked when OPENAI_MODEL and --model are unset.
const defaultModel = "gpt-4.1-mini"

// config is everything the command reads from flags and the environment.
type config struct {
	addr, apiKey      string
	model             string
	openAIBaseURL     string
	openAIKey         string
	maxConcurrentRuns int
	workspaceDir      string
}

// usesModel reports whether the desk asks a model rather than its rules.
func (c config) usesModel() bool { return c.openAIBaseURL != "" || c.openAIKey != "" }

// parseConfig reads flags from args and the OPENAI_* variables from getenv.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{openAIBaseURL: getenv("OPENAI_BASE_URL"), openAIKey: getenv("OPENAI_API_KEY")}
	model := getenv("OPENAI_MODEL")
	if model == "" {
		model = defaultModel
	}
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&c.apiKey, "api-key", getenv("HARNESS_API_KEY"), "require this x-api-key on every request (default $HARNESS_API_KEY; empty: no auth)")
	fs.StringVar(&c.model, "model", model, "default model when a model is configured (default $OPENAI_MODEL, else "+defaultModel+")")
	fs.IntVar(&c.maxConcurrentRuns, "max-concurrent-runs", 4, "runs executed at once")
	fs.StringVar(&c.workspaceDir, "workspace-dir", "", "directory for run workspaces (default: the system temp dir)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.maxConcurrentRuns < 1 {
		return c, errors.New("--max-concurrent-runs must be at least 1")
	}
	return c, nil
}

// newServer builds the harness for c: the desk on a model when one is
// configured, else on its rules.
func newServer(c config, log *slog.Logger) (*harnesskit.Server, error) {
	dc := desk.Config{
		MaxConcurrentRuns: c.maxConcurrentRuns,
		APIKey:            c.apiKey,
		WorkspaceDir:      c.workspaceDir,
		Logger:            log,
	}
	if c.usesModel() {
		p, err := llm.New(c.openAIBaseURL, c.openAIKey)
		if err != nil {
			return nil, err
		}
		dc.Policy, dc.Model = p, c.model
	}
	return desk.New(dc)
}

// serve listens on c.addr and serves the harness until ctx ends, then
// shuts down: the listener first, then the runs (given 10 s to finish).
// ready, when set, is told the address it listens on.
func serve(ctx context.Context, c config, log *slog.Logger, ready func(net.Addr)) error {
	h, err := newServer(c, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		_ = h.Close()
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       5 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	mode := "rules"
	if c.usesModel() {
		mode = "model " + c.model
	}
	log.Info("harness listening", "addr", ln.Addr().String(), "policy", mode, "auth", c.apiKey != "")
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		_ = h.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errors.Join(srv.Shutdown(shutdownCtx), h.Shutdown(shutdownCtx))
	_ = h.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("runs still going at shutdown were cancelled")
		return nil
	}
	return err
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, c, log, nil); err != nil {
		log.Error("harness failed", "error", err)
		os.Exit(1)
	}
}
