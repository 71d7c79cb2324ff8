//go:build unix

package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

// agentArg is the first argument that turns the test binary into a test
// agent: the worker spawns os.Executable() with it, so every agent in
// these tests is a real child process.
const agentArg = "gyre-test-agent"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == agentArg {
		os.Exit(testAgent(os.Args[2], os.Args[3:]))
	}
	os.Exit(m.Run())
}

// agentCmd is the argv that runs the test agent in mode.
func agentCmd(t testing.TB, mode string, args ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{exe, agentArg, mode}, args...)
}

// testAgent is a small agent per mode. Its configuration comes only from
// its environment and argv, as a real agent's would.
func testAgent(mode string, args []string) int {
	env, underWorker := flywheel.LoadAgentEnv()
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "test agent:", err)
		return 99
	}
	switch mode {
	case "report":
		if !underWorker {
			return fail(fmt.Errorf("not under gyre worker"))
		}
		input, err := env.TurnInput()
		if err != nil {
			return fail(err)
		}
		stdin, _ := io.ReadAll(os.Stdin)
		rec := flywheel.NewRecorder()
		_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "lookup_order", ToolCallID: "call_1", Arguments: `{"order_id":"A1"}`})
		c.ObserveStatus(200)
		c.EntityID(flywheel.EntityKeyID, "A1")
		c.EntityID("name", "not an entity key")
		c.OK(map[string]any{"status": "shipped", "order_id": "A1"})
		_, c2 := rec.Start(ctx, flywheel.ToolCallStart{Name: "cancel_order", ToolCallID: "call_2", Arguments: map[string]any{"order_id": "A1"}})
		c2.ObserveStatus(200)
		c2.Unknown(map[string]any{"ok": true, "status": "cancelled", "note": "request sent"})
		rec.CountLLMCall()
		rec.CountLLMCall()
		rec.SetSuccess(true)
		if err := os.WriteFile(filepath.Join(env.ArtifactsDir, "answer.txt"), []byte("answer for "+input), 0o644); err != nil {
			return fail(err)
		}
		fmt.Println("this is stdout, not the answer")
		fmt.Fprintln(os.Stderr, "a line on stderr")
		if err := rec.WriteReport(fmt.Sprintf("answer: %s (stdin matches: %t)", input, string(stdin) == input)); err != nil {
			return fail(err)
		}
		return 0
	case "stdout":
		fmt.Println("  plain answer from stdout  ")
		return 0
	case "exit":
		fmt.Println("partial answer")
		fmt.Fprintln(os.Stderr, strings.Repeat("x", 20000)+" boom: the agent failed")
		n, _ := strconv.Atoi(args[0])
		return n
	case "exit-report":
		rec := flywheel.NewRecorder()
		rec.Exclude(flywheel.ExclusionCredentialExpired, "the model key expired")
		if err := rec.WriteReport("gave up"); err != nil {
			return fail(err)
		}
		return 3
	case "bad-report":
		bad := `{"final_text":"from report","tool_calls":[{"name":"x","outcome":"unknown","status_code":200}]}`
		if err := os.WriteFile(env.ReportPath, []byte(bad), 0o644); err != nil {
			return fail(err)
		}
		fmt.Println("stdout answer")
		return 0
	case "hang":
		// A grandchild in the same process group, a report written early,
		// and SIGTERM ignored: only SIGKILL ends it.
		signal.Ignore(syscall.SIGTERM)
		gc := exec.Command("sleep", "1000")
		if err := gc.Start(); err != nil {
			return fail(err)
		}
		rec := flywheel.NewRecorder()
		rec.CountLLMCall()
		if err := rec.WriteReport("partial answer before the deadline"); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(args[0], fmt.Appendf(nil, "%d %d", os.Getpid(), gc.Process.Pid), 0o644); err != nil {
			return fail(err)
		}
		select {}
	case "wait-term":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		if err := os.WriteFile(args[0], []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fail(err)
		}
		<-sig
		_ = os.WriteFile(args[1], []byte("got SIGTERM"), 0o644)
		fmt.Println("stopped early")
		return 143
	case "env":
		stdin, _ := io.ReadAll(os.Stdin)
		dump := map[string]any{"env": os.Environ(), "stdin": string(stdin)}
		b, _ := json.Marshal(dump)
		if err := os.WriteFile(filepath.Join(args[0], os.Getenv(flywheel.EnvRolloutID)+".json"), b, 0o644); err != nil {
			return fail(err)
		}
		fmt.Println("answer")
		return 0
	case "echo-stdin":
		_, _ = io.Copy(os.Stdout, os.Stdin)
		return 0
	case "no-stdin":
		fmt.Println("answer without reading stdin")
		return 0
	case "big-stdout":
		fmt.Print(strings.Repeat("answer ", 200<<10/7))
		return 0
	case "artifacts":
		return writeArtifacts(env.ArtifactsDir, fail)
	}
	return fail(fmt.Errorf("unknown mode %q", mode))
}

// Artifact fixtures of the "artifacts" mode.
var (
	unicodeName    = "naïve résumé 📄.txt"
	unicodeContent = "héllo wörld — ✓"
	binaryContent  = []byte{0x00, 0xff, 0xfe, 0x01, 'g', 'y', 'r', 'e', 0x80}
	largeContent   = strings.Repeat("a", 70<<10)
	sparseSize     = int64(1<<30 + 1)
)

func writeArtifacts(dir string, fail func(error) int) int {
	steps := []func() error{
		func() error { return os.WriteFile(filepath.Join(dir, unicodeName), []byte(unicodeContent), 0o644) },
		func() error { return os.MkdirAll(filepath.Join(dir, "data", "deeper"), 0o755) },
		func() error { return os.WriteFile(filepath.Join(dir, "data", "blob.bin"), binaryContent, 0o644) },
		func() error {
			return os.WriteFile(filepath.Join(dir, "data", "deeper", "note.md"), []byte("# note\n"), 0o644)
		},
		func() error { return os.WriteFile(filepath.Join(dir, "large.txt"), []byte(largeContent), 0o644) },
		func() error { return os.WriteFile(filepath.Join(dir, "empty.txt"), nil, 0o644) },
		func() error {
			f, err := os.Create(filepath.Join(dir, "huge.sparse"))
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(sparseSize)
		},
		func() error { return os.Symlink("/etc/passwd", filepath.Join(dir, "escape")) },
		func() error { return os.Symlink("large.txt", filepath.Join(dir, "inside-link")) },
		func() error { return os.Symlink("/etc", filepath.Join(dir, "dirlink")) },
		func() error { return syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fail(err)
		}
	}
	fmt.Println("wrote artifacts")
	return 0
}
