package harnesscheck_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/harnesscheck"
)

// startExampleHarness builds examples/harness and runs it on an ephemeral
// port with an api key; it returns the harness's base URL.
func startExampleHarness(t *testing.T, key string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs examples/harness")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build examples/harness")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(t.TempDir(), "harness")
	build := exec.Command(goTool, "build", "-o", bin, "./examples/harness")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/harness: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--addr", "127.0.0.1:0", "--api-key", key, "--workspace-dir", t.TempDir())
	// The rule-based policy: no model, no network.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addrRE := regexp.MustCompile(`harness listening.* addr=([0-9.:]+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatal("examples/harness exited without listening")
		}
		return "http://" + addr
	case <-time.After(2 * time.Minute):
		t.Fatal("examples/harness did not start listening")
	}
	return ""
}

// TestExampleHarnessPasses runs gyre harness check against the example
// harness, which is built with harnesskit: no check may fail.
func TestExampleHarnessPasses(t *testing.T) {
	t.Parallel()
	url := startExampleHarness(t, "example-key")
	rep := check(t, url, func(c *harnesscheck.Config) { c.APIKey = "example-key" })
	dump(t, rep)
	if rep.Failed() {
		t.Fatal("the example harness fails gyre harness check")
	}
	// Everything the example declares is exercised; only session grouping
	// (it lists no session_id without a conversation_id) and, when the
	// rule-based agent finishes first, stop may be left unobserved.
	for _, c := range rep {
		switch c.Name {
		case harnesscheck.CheckListingSessionID, harnesscheck.CheckStop:
			continue
		}
		if c.Result != harnesscheck.Pass {
			t.Fatalf("%s = %s, want PASS", c.Name, c.Result)
		}
	}
}
