package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/demo"
	"github.com/gyrehq/gyre/internal/demo/scripted"
)

// demoUpstreamName is the scripted model's upstream in the demo's gyre.yaml.
const demoUpstreamName = "scripted-demo-model"

// demoGyre runs gyre commands in-process for the demo, with its own
// environment: the demo's store (GYRE_DATA, GYRE_DB) and log level, and
// none of the user's GYRE_* or OPENAI_* variables, so that a GYRE_SERVER
// or GYRE_KEY set for another server never reaches the demo's.
type demoGyre struct {
	stdin  io.Reader
	stderr io.Writer
	env    map[string]string
	lookup func(string) (string, bool)
}

// Command runs gyre with args and returns its stdout.
func (g demoGyre) Command(ctx context.Context, args ...string) ([]byte, error) {
	var out bytes.Buffer
	sub := &app{stdin: strings.NewReader(""), stdout: &out, stderr: g.stderr, res: resolver{lookupEnv: func(k string) (string, bool) {
		if v, ok := g.env[k]; ok {
			return v, true
		}
		if strings.HasPrefix(k, "GYRE_") || strings.HasPrefix(k, "OPENAI_") {
			return "", false
		}
		return g.lookup(k)
	}}}
	root := sub.rootCommand()
	root.SetArgs(args)
	root.SetIn(sub.stdin)
	root.SetOut(&out)
	root.SetErr(g.stderr)
	err := root.ExecuteContext(ctx)
	return out.Bytes(), err
}

// demo is gyre demo: the flywheel stages, then the experiment.
func (a *app) demo(cmd *cobra.Command, f demoFlags) error {
	if f.repetitions < 1 {
		return exitError{code: ExitError, err: errors.New("--repetitions must be at least 1")}
	}
	if f.turns < 1 || f.promotionReps < 1 || f.concurrency < 1 {
		return exitError{code: ExitError, err: errors.New("--turns, --promotion-repetitions and --concurrency must be at least 1")}
	}
	// The demo resolves its settings and runs the experiment without the
	// eval-only variables (see demoHiddenEnv).
	sub := &app{stdin: a.stdin, stdout: io.Discard, stderr: a.stderr, res: resolver{lookupEnv: func(k string) (string, bool) {
		if slices.Contains(demoHiddenEnv, k) {
			return "", false
		}
		return a.res.lookupEnv(k)
	}}}
	c, _, err := sub.config(cmd, false)
	if err != nil {
		return exitError{code: ExitError, err: err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	sum := &demo.Summary{Explore: []string{}}
	show := func(b demo.Block) {
		if !f.asJSON {
			b.Print(a.stdout)
		}
	}
	fail := func(stage string, err error) error {
		msg := err.Error()
		sum.Failed, sum.Error = &stage, &msg
		if f.asJSON {
			_ = writeJSONTo(a.stdout, sum)
		} else {
			fmt.Fprintf(a.stdout, "\n== stage %s FAILED\n   %s\n", stage, msg)
		}
		return exitError{code: ExitError, err: fmt.Errorf("gyre demo: stage %s failed: %w", stage, err)}
	}

	// serve: the scripted upstream, gyre.yaml naming it, gyre serve.
	dir := filepath.Join(c.Data, "demo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("serve", err)
	}
	up, err := scripted.Start("127.0.0.1:0", nil)
	if err != nil {
		return fail("serve", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = up.Close(sctx)
	}()
	cfgPath := filepath.Join(dir, "gyre.yaml")
	if err := os.WriteFile(cfgPath, []byte(demoConfigYAML(up.URL)), 0o644); err != nil {
		return fail("serve", err)
	}
	addr, err := demoAddr(f.addr)
	if err != nil {
		return fail("serve", err)
	}
	env := map[string]string{"GYRE_DATA": c.Data, "GYRE_LOG_LEVEL": "warn"}
	if c.DB != "" {
		env["GYRE_DB"] = c.DB
	}
	if c.LogLevel == "debug" {
		env["GYRE_LOG_LEVEL"] = "debug"
	}
	g := demoGyre{stdin: a.stdin, stderr: a.stderr, env: env, lookup: a.res.lookupEnv}
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	serveDone := make(chan error, 1)
	serveArgs := []string{"serve", "--addr", addr, "--config", cfgPath}
	if strings.HasPrefix(c.DB, "postgres://") || strings.HasPrefix(c.DB, "postgresql://") {
		// PostgreSQL gets a first admin key only when asked; SQLite
		// writes <data>/admin.key on its own.
		serveArgs = append(serveArgs, "--bootstrap-admin-key-file", filepath.Join(dir, "admin.key"))
	}
	go func() {
		_, err := g.Command(serveCtx, serveArgs...)
		serveDone <- err
	}()
	defer func() { stopServe(); <-serveDone }()
	server := "http://" + addr
	fmt.Fprintf(a.stderr, "gyre demo: gyre serve on %s with the %s at %s as its upstream\n", server, scripted.Name, up.URL)
	if err := waitReady(ctx, server, serveDone); err != nil {
		return fail("serve", err)
	}
	adminKey, err := demoAdminKey(ctx, g, c.Data, dir)
	if err != nil {
		return fail("serve", err)
	}
	sum.Serve = demo.ServeStage{URL: server, UI: server + "/ui/", Store: storeDescription(c) + ", blobs in " + filepath.Join(c.Data, "blobs"),
		Config: cfgPath, AdminKeyFile: adminKey, Upstream: demoUpstreamName, UpstreamURL: up.URL, Models: scripted.Models}
	show(sum.Serve.Block())

	exe, err := os.Executable()
	if err != nil {
		return fail("agent", fmt.Errorf("find gyre's own executable: %w", err))
	}
	err = demo.RunLoop(ctx, g, demo.LoopConfig{
		Server: server, AdminKeyFile: adminKey, Dir: dir, Agent: []string{exe, "demo", "agent"}, Upstream: demoUpstreamName,
		Turns: f.turns, Repetitions: f.promotionReps, Concurrency: f.concurrency, Progress: a.stderr, Block: show,
	}, sum)
	if err != nil {
		stage := "flywheel"
		var se *demo.StageError
		if errors.As(err, &se) {
			stage, err = se.Stage, se.Err
		}
		return fail(stage, err)
	}

	exp, err := a.demoExperiment(cmd, sub, c, f.repetitions)
	if err != nil {
		return fail("experiment", err)
	}
	sum.Experiment = &exp
	show(exp.Block())

	sum.Explore = demoExplore(c, sum, server, adminKey, exp)
	if f.asJSON {
		if err := writeJSONTo(a.stdout, sum); err != nil {
			return err
		}
	} else {
		printDemoEnd(a.stdout, sum, cfgPath)
	}
	fmt.Fprintf(a.stderr, "gyre demo: every stage ran in %s\n", time.Since(start).Round(100*time.Millisecond))
	if f.serve {
		fmt.Fprintf(a.stderr, "gyre demo: serving %s (UI %s) until Ctrl-C\n", server, sum.Serve.UI)
		select {
		case <-ctx.Done():
		case err := <-serveDone:
			serveDone <- err
		}
	}
	return nil
}

// demoConfigYAML is the demo's gyre.yaml: the scripted model as the one
// upstream, demo-base as the default policy.
func demoConfigYAML(upstreamURL string) string {
	return `# gyre demo's configuration for its gyre serve, written on every run.
# The upstream is the scripted demo model (gyre demo upstream): no language
# model, deterministic, serving the models demo-base and demo-candidate.
# To use a real model, point an upstream at it, e.g.
#   - name: openai
#     base_url: https://api.openai.com/v1
#     api_key_env: OPENAI_API_KEY
# and create the two policies on it with real model names:
#   gyre policy create --name base-v1 --upstream openai --model gpt-4o-mini
upstreams:
  - name: ` + demoUpstreamName + `
    base_url: ` + upstreamURL + `
    allow_private: true
default_policy: ` + demo.BasePolicy + `
`
}

// demoAddr resolves --addr: a port of 0 becomes a free one, so the
// demo knows its server's URL before the server starts.
func demoAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr: %w", err)
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls the server's /readyz until it answers 200.
func waitReady(ctx context.Context, server string, serveDone chan error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gyre serve on %s is not ready after a minute", server)
		}
		select {
		case err := <-serveDone:
			serveDone <- err
			return fmt.Errorf("gyre serve stopped: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// demoAdminKey is the admin key file the demo uses: the one gyre serve
// wrote on the first start of a SQLite store (<data>/admin.key), else a
// key made for the demo in <data>/demo/admin.key.
func demoAdminKey(ctx context.Context, g demoGyre, data, dir string) (string, error) {
	p := filepath.Join(data, "admin.key")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	p = filepath.Join(dir, "admin.key")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out, err := g.Command(ctx, "keys", "create", "--tenant", "default", "--role", "admin", "--name", "gyre demo")
	if err != nil {
		return "", fmt.Errorf("gyre keys create: %w", err)
	}
	return p, os.WriteFile(p, out, 0o600)
}

// demoExplore is the commands to run next, against the demo's server.
func demoExplore(c Config, sum *demo.Summary, server, keyFile string, exp demo.ExperimentStage) []string {
	s := " --server " + server
	steps := demoNext(c, exp.ID, exp.Previous, exp.SuiteDir)
	out := []string{
		"export GYRE_KEY=$(cat " + shellQuote(keyFile) + ")",
		"gyre turns list --agent " + sum.Agent.ID + s,
		"gyre batches list --agent " + sum.Agent.ID + s,
		"gyre batches show " + sum.Batch.ID + s,
		"gyre rollouts list --batch " + sum.Batch.ID + s,
		"gyre promotions show " + sum.Promotion.ID + s,
		"gyre agents show " + sum.Agent.ID + s,
		"gyre dataset list" + s,
	}
	for _, st := range steps[:min(2, len(steps))] {
		if !strings.Contains(st.cmd, "<") {
			out = append(out, st.cmd)
		}
	}
	return out
}

// printDemoEnd prints where to look next and how to use a real model.
func printDemoEnd(w io.Writer, sum *demo.Summary, cfgPath string) {
	fmt.Fprintf(w, "\n== explore\n")
	fmt.Fprintf(w, "   web UI    %s (sign in with the admin key in %s); gyre demo --serve keeps it up\n", sum.Serve.UI, sum.Serve.AdminKeyFile)
	fmt.Fprintln(w, "   commands  (from a checkout, `go run ./cmd/gyre` stands for gyre; these need gyre demo --serve running)")
	for _, c := range sum.Explore {
		fmt.Fprintf(w, "     %s\n", c)
	}
	fmt.Fprintf(w, "\n== a real model\n")
	fmt.Fprintf(w, "   The upstream %q in %s is the scripted demo model. For a real one, add it to\n", demoUpstreamName, cfgPath)
	fmt.Fprintln(w, "   your gyre.yaml (upstreams: name, base_url, api_key_env), run gyre serve --config gyre.yaml, and create")
	fmt.Fprintln(w, "   the two policies with real model names instead of demo-base and demo-candidate:")
	fmt.Fprintln(w, "     gyre policy create --name base-v1 --upstream openai --model gpt-4o-mini")
	fmt.Fprintln(w, "     gyre policy create --name candidate-v1 --upstream openai --model gpt-4o")
	fmt.Fprintln(w, "   then promote: gyre policy promote --agent AGENT --candidate candidate-v1 --suite SUITE --wait")
}
