//go:build unix

package api

import (
	"syscall"
	"time"
)

// turnsProcessCPU is the CPU time (user and system) the process has used, for
// benchmarks that report CPU per unit of work: unlike wall time, it hardly
// moves when other processes share the machine.
func turnsProcessCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
