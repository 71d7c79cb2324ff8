// Package benchproc holds what gyre's one-size-per-process benchmark
// commands (evalbench, datasetbench) share: the process's peak memory and
// the median of repeated measurements.
package benchproc

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
)

// PeakRSSMiB is the process's peak resident set size (VmHWM) in MiB, 0
// where /proc is not available. Peak memory is per process, which is why
// each benchmark size runs in its own.
func PeakRSSMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}

// Median is the median of v (the mean of the middle two for an even
// count); v is not changed.
func Median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
