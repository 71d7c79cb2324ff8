package gyre_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/mdfence"
)

// tutorialSkip is the note (an HTML comment on the line before a block)
// that keeps a block of docs/tutorial.md out of the test: the build step,
// which the test does itself.
const tutorialSkip = "tutorial-test: skip"

// tutorialTimeout bounds the tutorial's run once the binaries are built.
const tutorialTimeout = 5 * time.Minute

// tutorialScript returns the tutorial's sh blocks as one bash script, in
// document order, each preceded by a line on stderr naming where it is in
// docs/tutorial.md, and the number of blocks it holds.
func tutorialScript(t *testing.T, doc string) (string, int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	n := 0
	for _, blk := range mdfence.Parse(doc) {
		if blk.Lang != "sh" || strings.HasPrefix(blk.Note, tutorialSkip) {
			continue
		}
		fmt.Fprintf(&b, "printf '\\n=== docs/tutorial.md:%d (%s)\\n' >&2\n%s", blk.Line, strings.ReplaceAll(blk.Heading, "'", ""), blk.Text)
		n++
	}
	return b.String(), n
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tutorialEnv is the environment the tutorial runs in: this process's,
// without gyre's and the model providers' variables (a developer's
// GYRE_KEY or OPENAI_BASE_URL must not change what the tutorial does),
// with bin first on PATH and the ports the tutorial reads from its
// variables.
func tutorialEnv(bin string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "GYRE_"), strings.HasPrefix(name, "OPENAI_"),
			strings.HasPrefix(name, "ANTHROPIC_"), strings.HasPrefix(name, "OTEL_"), name == "PATH":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return append(env, extra...)
}

// stopGroup ends every process of the process group pgid: SIGTERM, so
// that gyre worker and gyre serve stop their own children, then SIGKILL
// for whatever is left after a bound.
func stopGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // the group is gone
	}
	for range 100 {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// TestTutorial_RunsFromNothingToAPromotedPolicy runs docs/tutorial.md as a
// new user would: every sh block, in order, in one bash (set -euo
// pipefail) in an empty directory, with the gyre binary and the example
// agent built into a directory on PATH, and the servers the tutorial
// starts in the background on free ports. It then checks what the
// tutorial promises: turns captured, a batch graded, a dataset with rows,
// and the candidate promoted. Every process it started is stopped at the
// end, also when it fails.
func TestTutorial_RunsFromNothingToAPromotedPolicy(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds gyre and runs the tutorial: not in -short")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the tutorial needs %s on PATH: %v", tool, err)
		}
	}
	doc, err := os.ReadFile("docs/tutorial.md")
	if err != nil {
		t.Fatal(err)
	}
	script, blocks := tutorialScript(t, string(doc))
	if blocks < 10 {
		t.Fatalf("docs/tutorial.md has %d sh blocks to run, want the whole loop (at least 10)", blocks)
	}

	// The binaries, built once, as the tutorial's first (skipped) block
	// builds them.
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/gyre", "./examples/agent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(bin, "agent"), filepath.Join(bin, "support-agent")); err != nil {
		t.Fatal(err)
	}

	work := filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), tutorialTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = work
	cmd.Env = tutorialEnv(bin, "GYRE_ADDR="+freeAddr(t), "MODEL_ADDR="+freeAddr(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A background process that kept bash's stdout would hold Wait until
	// it ends; the tutorial sends theirs to log files, and this bounds a
	// slip.
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The servers and the worker the tutorial starts with & share bash's
	// process group: stop them whatever happens.
	defer stopGroup(cmd.Process.Pid)
	runErr := cmd.Wait()
	t.Logf("the tutorial ran in %s", time.Since(start).Round(time.Second))
	if runErr != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			runErr = fmt.Errorf("still running after %s: %w", tutorialTimeout, runErr)
		}
		t.Fatalf("the tutorial failed: %v\n--- stdout\n%s\n--- stderr (each block starts with === and its line)\n%s%s",
			runErr, stdout.String(), stderr.String(), serverLogs(work))
	}
	checkTutorialResults(t, work, stdout.String())
	if t.Failed() {
		t.Logf("--- stdout\n%s\n--- stderr\n%s%s", stdout.String(), stderr.String(), serverLogs(work))
	}
}

// serverLogs returns the logs the tutorial's background processes wrote
// in its directory, for a failure message.
func serverLogs(work string) string {
	logs, _ := filepath.Glob(filepath.Join(work, "*.log"))
	var b strings.Builder
	for _, l := range logs {
		body, _ := os.ReadFile(l)
		if len(body) > 8<<10 {
			body = body[len(body)-8<<10:]
		}
		fmt.Fprintf(&b, "\n--- %s (its end)\n%s", filepath.Base(l), body)
	}
	return b.String()
}

// checkTutorialResults checks the outcomes the tutorial shows a reader.
func checkTutorialResults(t *testing.T, work, stdout string) {
	t.Helper()
	// The dataset: a non-empty sft file and its manifest agreeing with it.
	data, err := os.ReadFile(filepath.Join(work, "support.sft.jsonl"))
	if err != nil {
		t.Fatalf("the tutorial exported no dataset: %v", err)
	}
	var manifest struct {
		Format     string `json:"format"`
		Rows       int    `json:"rows"`
		FileSHA256 string `json:"file_sha256"`
	}
	mb, err := os.ReadFile(filepath.Join(work, "support.sft.jsonl.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mb, &manifest); err != nil {
		t.Fatalf("manifest: %v\n%s", err, mb)
	}
	if lines := bytes.Count(data, []byte("\n")); manifest.Format != "sft" || manifest.Rows == 0 || manifest.Rows != lines {
		t.Errorf("dataset: format %q, manifest rows %d, file lines %d; want an sft dataset with rows, as many as the file has", manifest.Format, manifest.Rows, lines)
	}
	for _, rule := range []struct {
		what string
		re   *regexp.Regexp
	}{
		{"gyre turns list shows the captured turns", regexp.MustCompile(`(?m)^support-bot\s+\S+\s+conv-7\s+\d{4}-`)},
		{"demo-base's production answers show its mistake", regexp.MustCompile(`(?m)^\[scripted demo model\] I could not refund order A1: `)},
		{"gyre batches show: demo-base passes some tasks and fails others; D4's rollouts are excluded, not failed", regexp.MustCompile(`(?m)^outcomes\s+passed=[1-9]\d* failed=[1-9]\d* unscored=0 excluded=[1-9]\d*$`)},
		{"gyre batches show: the excluded rollouts are the only ones not training grade", regexp.MustCompile(`(?m)^not training grade\s+excluded:substrate_unavailable=[1-9]\d*$`)},
		{"gyre rollouts show: the rollout reconciled on_policy", regexp.MustCompile(`(?m)^reconciliation\s+on_policy$`)},
		{"gyre policy promote --wait: the candidate is promoted", regexp.MustCompile(`(?m)^state\s+promoted$`)},
		{"gyre agents show: the candidate is the agent's policy", regexp.MustCompile(`(?m)^promoted policy\s+support-candidate$`)},
		{"the next production conversation runs on the candidate", regexp.MustCompile(`(?m)^\[scripted demo model\] I cannot refund order A1: it is shipped`)},
	} {
		if !rule.re.MatchString(stdout) {
			t.Errorf("%s: no line of the output matches %s", rule.what, rule.re)
		}
	}
}

// TestTutorialScript_RunsShellBlocksInOrderAndSkipsMarkedOnes: the script
// holds every sh block in document order, each announced with its line,
// and leaves out other languages and the blocks marked for the test to
// skip (the build, which the test does itself).
func TestTutorialScript_RunsShellBlocksInOrderAndSkipsMarkedOnes(t *testing.T) {
	t.Parallel()
	doc := "## Build\n<!-- tutorial-test: skip (built by the test) -->\n```sh\ngo build ./...\n```\n" +
		"## Run\n```sh\necho one\n```\n```yaml\na: 1\n```\n<!-- another note -->\n```sh\necho two\n```\n"
	script, n := tutorialScript(t, doc)
	if n != 2 {
		t.Errorf("%d blocks in the script, want 2", n)
	}
	want := "set -euo pipefail\n" +
		"printf '\\n=== docs/tutorial.md:7 (Run)\\n' >&2\necho one\n" +
		"printf '\\n=== docs/tutorial.md:14 (Run)\\n' >&2\necho two\n"
	if script != want {
		t.Errorf("script:\n%s\nwant:\n%s", script, want)
	}
}
