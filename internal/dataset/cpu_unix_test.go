//go:build unix

package dataset_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used, for
// benchmarks that report CPU per row: unlike wall time, it hardly moves
// when other processes share the machine.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
