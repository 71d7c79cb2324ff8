//go:build unix && !linux

package worker

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the child in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExited blocks until the child has exited. Without waitid(WNOWAIT)
// the child is reaped here; the group kill that follows is then best
// effort.
func waitExited(cmd *exec.Cmd) { _ = cmd.Wait() }
