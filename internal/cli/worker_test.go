//go:build unix

package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/worker/workertest"
)

// workerProc is a real gyre worker process: the test binary run as "gyre"
// (see TestMain), against a server in this process.
type workerProc struct {
	cmd    *exec.Cmd
	stderr *workerStderr
	done   chan struct{}
}

type workerStderr struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *workerStderr) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *workerStderr) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startWorkerProc(t *testing.T, srv *workertest.Server, env []string, args ...string) *workerProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"worker", "--server", srv.URL, "--agent", "agent-1",
		"--root", t.TempDir(), "--poll-wait", "1s"}, args...)...)
	cmd.Args[0] = "gyre" // TestMain runs the CLI for this name
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	p := &workerProc{cmd: cmd, stderr: &workerStderr{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("worker stderr:\n%s", p.stderr)
		}
	})
	return p
}

// wait waits for the worker to exit and returns its exit code.
func (p *workerProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not exit")
		return -1
	}
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	end := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(end) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func hasOutput(r workertest.Rollout) bool { return len(r.Output) > 0 && string(r.Output) != "null" }

func TestWorkerProcess_SIGTERMDrainsThenCancels(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	script := `echo $$ > "$1"; trap 'echo got-term > "$2"; echo stopped early; exit 143' TERM; while :; do sleep 0.1; done`
	p := startWorkerProc(t, srv, nil, "--key", srv.Agent, "--drain", "500ms", "--", "/bin/sh", "-c", script, "agent", pidFile, marker)
	waitFile(t, pidFile)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM, want 0", code)
	}
	r := srv.Rollout(ids[0])
	if r.ExclusionReason() != "cancelled" {
		t.Fatalf("exclusion = %s, want cancelled; %s", r.Exclusion, r.Raw)
	}
	if got := r.OutputMap()["final_text"]; got != "stopped early" {
		t.Errorf("final_text = %q", got)
	}
	if waitFile(t, marker) != "got-term" {
		t.Error("the agent did not get SIGTERM")
	}
	stderr := p.stderr.String()
	for _, want := range []string{"ps shows it", "draining"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if strings.Contains(stderr, srv.Agent) {
		t.Error("the agent key appears in the worker's logs")
	}
}

func TestWorkerProcess_SIGTERMLetsARunningRolloutFinish(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"}, workertest.Case{Question: "never started"})
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := `echo $$ > "$1"; sleep 1; echo "finished: $GYRE_TURN_INPUT"`
	p := startWorkerProc(t, srv, []string{"GYRE_KEY=" + srv.Agent}, "--drain", "1m", "--", "/bin/sh", "-c", script, "agent", pidFile)
	waitFile(t, pidFile)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	r := srv.Rollout(ids[0])
	if got := r.OutputMap()["final_text"]; got != "finished: q" || r.ExclusionReason() != "" {
		t.Errorf("output = %s, want the rollout finished normally during the drain", r.Output)
	}
	if r2 := srv.Rollout(ids[1]); r2.State != "queued" {
		t.Errorf("the second rollout is %s: a stopping worker must not claim", r2.State)
	}
}

func TestWorkerProcess_SIGKILLLeavesItToTheWatchdog(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	batch, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := startWorkerProc(t, srv, []string{"GYRE_KEY=" + srv.Agent}, "--lease", "5s", "--",
		"/bin/sh", "-c", `echo $$ > "$1"; while :; do sleep 0.1; done`, "agent", pidFile)
	pid, err := strconv.Atoi(waitFile(t, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)

	// The agent does not outlive its worker.
	end := time.Now().Add(60 * time.Second)
	for alive(pid) {
		if time.Now().After(end) {
			t.Fatalf("agent %d outlived its SIGKILLed worker", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Nothing was reported; once the lease lapses, the watchdog abandons
	// the rollout and mints a retry in the same group.
	r := srv.Rollout(ids[0])
	if r.State != "leased" || hasOutput(r) {
		t.Fatalf("rollout after the kill: %s", r.Raw)
	}
	srv.Clock.Advance(time.Minute)
	if _, err := srv.Svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := srv.Rollout(ids[0]); r.State != "abandoned" {
		t.Fatalf("state = %s, want abandoned", r.State)
	}
	all := srv.BatchRollouts(batch)
	if len(all) != 2 {
		t.Fatalf("%d rollouts in the batch, want the abandoned one and its retry", len(all))
	}
	for _, x := range all {
		if x.RolloutID != ids[0] && (x.Attempt != 2 || x.State != "queued" || x.GroupID != r.GroupID) {
			t.Errorf("retry = %+v, want attempt 2, queued, same group", x)
		}
	}
}
