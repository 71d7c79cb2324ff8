//go:build unix

package worker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Output limits of SPEC §5.
const (
	// StdoutLimit is how much of a child's stdout is kept.
	StdoutLimit = 1 << 20
	// StderrTail is how much of the end of a child's stderr goes into
	// events.
	StderrTail = 16 << 10
	// DefaultKillGrace is the time between SIGTERM and SIGKILL.
	DefaultKillGrace = 10 * time.Second
	// pipeDrain bounds the wait for a child's pipes to close after its
	// process group is gone (a process that escaped the group may hold
	// them).
	pipeDrain = 2 * time.Second
)

// procResult is what running a child produced.
type procResult struct {
	startErr       error
	stdout         []byte
	stdoutBytes    int64
	stderrTail     []byte
	stderrBytes    int64
	exitCode       int    // -1 when killed by a signal
	signal         string // the signal that ended it, if any
	stopCause      error  // why the worker stopped it, if it did
	killed         bool   // SIGKILL was needed
	started, ended time.Time
	pid            int
}

// runProcess runs argv with env in its own process group, writing stdin
// to it asynchronously. When ctx ends the group gets SIGTERM, then SIGKILL
// after killGrace; whatever is left of the group when the child exits is
// killed, so no process outlives the rollout.
func runProcess(ctx context.Context, argv []string, env []string, stdin string, killGrace time.Duration) procResult {
	var res procResult
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()

	inR, inW, err := os.Pipe()
	if err != nil {
		res.startErr = err
		return res
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		res.startErr = err
		return res
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		res.startErr = err
		return res
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	res.started = time.Now()
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		res.startErr = err
		res.ended = time.Now()
		return res
	}
	res.pid = cmd.Process.Pid
	closeAll(inR, outW, errW) // the child holds its ends now

	go func() {
		// A child that never reads stdin must not block the worker: the
		// write ends with EPIPE when the child exits, or when inW is
		// closed below.
		_, _ = io.WriteString(inW, stdin)
		_ = inW.Close()
	}()
	stdoutDone := make(chan struct{})
	go func() {
		defer close(stdoutDone)
		res.stdout, res.stdoutBytes = readHead(outR, StdoutLimit)
	}()
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		res.stderrTail, res.stderrBytes = readTail(errR, StderrTail)
	}()

	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		waitExited(cmd)
		close(exited)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		res.stopCause = context.Cause(ctx)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(killGrace)
		select {
		case <-exited:
		case <-t.C:
			res.killed = true
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
		t.Stop()
	}
	// The leader has exited but is not reaped yet, so its pid (the group
	// id) cannot be reused: kill what is left of the group, then reap.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = cmd.Wait()
	res.ended = time.Now()
	res.exitCode = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.signal = ws.Signal().String()
	}

	t := time.NewTimer(pipeDrain)
	defer t.Stop()
	for _, done := range []chan struct{}{stdoutDone, stderrDone} {
		select {
		case <-done:
		case <-t.C:
			closeAll(outR, errR) // unblocks the readers
			<-done
		}
	}
	closeAll(inW, outR, errR)
	return res
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// readHead keeps the first limit bytes of r, reads (and counts) the rest.
func readHead(r io.Reader, limit int) ([]byte, int64) {
	buf := make([]byte, 0, 4096)
	var total int64
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		total += int64(n)
		if room := limit - len(buf); room > 0 {
			buf = append(buf, chunk[:min(n, room)]...)
		}
		if err != nil {
			return buf, total
		}
	}
}

// readTail keeps the last limit bytes of r.
func readTail(r io.Reader, limit int) ([]byte, int64) {
	ring := make([]byte, 0, limit)
	var total int64
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		total += int64(n)
		ring = append(ring, chunk[:n]...)
		if len(ring) > limit {
			ring = append(ring[:0], ring[len(ring)-limit:]...)
		}
		if err != nil {
			return ring, total
		}
	}
}
