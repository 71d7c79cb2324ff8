//go:build !unix

package api

import "time"

// turnsProcessCPU is not measured on this platform.
func turnsProcessCPU() (time.Duration, bool) { return 0, false }
