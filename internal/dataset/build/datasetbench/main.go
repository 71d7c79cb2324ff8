// Command datasetbench measures the dataset export: it seeds a fresh
// SQLite store and file blob store with -rollouts training-grade
// rollouts of two counted completions each (through the store, bodies
// stored as the gateway records them), freezes an sft dataset of them and
// runs the build job, then prints the build's rows per second and the
// process's peak resident set size (VmHWM). Seeding is not timed, but it
// counts in the peak RSS, as it would in a server that records and
// exports.
//
// Peak RSS is per process, so each measurement needs a process of its
// own: with -sizes the command runs itself once per size and repetition
// and prints the medians. Run it with make bench-datasets, or:
//
//	go run ./internal/dataset/build/datasetbench -sizes 10000,100000 -count 3
//	go run ./internal/dataset/build/datasetbench -rollouts 10000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/gyrehq/gyre/internal/benchproc"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "datasetbench:", err)
		os.Exit(1)
	}
}

// result is one measurement, printed by a child as one JSON line.
type result struct {
	Rollouts  int   `json:"rollouts"`
	Exported  int   `json:"rollouts_exported"`
	Rows      int   `json:"rows"`
	FileBytes int64 `json:"file_bytes"`
	// NotExported counts the rollouts left out, by reason: none, when
	// the seeder is right.
	NotExported map[string]int `json:"not_exported_by_reason"`
	Pending     int            `json:"pending"`
	SeedSeconds float64        `json:"seed_seconds"`
	// SeedPeakRSSMi is the peak RSS when seeding ended, before the build:
	// PeakRSSMi above it is the build's.
	SeedPeakRSSMi float64 `json:"seed_peak_rss_mib"`
	Seconds       float64 `json:"build_seconds"`
	RowsPerS      float64 `json:"rows_per_s"`
	// CPUSeconds is the process's CPU time (user and system, all threads)
	// during the build: on a machine shared with other work, rows per
	// CPU-second says what the build costs when wall-clock rows/s cannot.
	CPUSeconds  float64 `json:"build_cpu_seconds"`
	RowsPerCPUS float64 `json:"rows_per_cpu_s"`
	PeakRSSMi   float64 `json:"peak_rss_mib"`
}

func run() error {
	var (
		rollouts = flag.Int("rollouts", 0, "measure one export of this many rollouts in this process")
		sizes    = flag.String("sizes", "10000,100000", "sizes to measure, each in a process of its own")
		count    = flag.Int("count", 3, "measurements per size (medians are printed)")
		profile  = flag.String("cpuprofile", "", "with -rollouts, write a CPU profile of the build here")
	)
	flag.Parse()
	if *rollouts > 0 {
		r, err := measure(context.Background(), *rollouts, *profile)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("%-9s %-6s %9s %12s %14s %14s\n", "rollouts", "count", "rows", "rows/s", "rows/CPU-s", "peak RSS MiB")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("size %q: want a positive number", s)
		}
		var rates, cpuRates, rss []float64
		rows := 0
		for i := range *count {
			var r result
			if err := benchproc.MeasureInChild(&r, "-rollouts", strconv.Itoa(n)); err != nil {
				return fmt.Errorf("size %d: %w", n, err)
			}
			fmt.Fprintf(os.Stderr, "  %d rollouts, measurement %d: seeded in %.0fs (peak RSS %.1f MiB), %d rows in %.2fs (%.2f CPU-s): %.0f rows/s (%.0f per CPU-s), peak RSS %.1f MiB\n",
				n, i+1, r.SeedSeconds, r.SeedPeakRSSMi, r.Rows, r.Seconds, r.CPUSeconds, r.RowsPerS, r.RowsPerCPUS, r.PeakRSSMi)
			rates, cpuRates, rss, rows = append(rates, r.RowsPerS), append(cpuRates, r.RowsPerCPUS), append(rss, r.PeakRSSMi), r.Rows
		}
		fmt.Printf("%-9d %-6d %9d %12.0f %14.0f %14.1f\n", n, *count, rows, benchproc.Median(rates), benchproc.Median(cpuRates),
			benchproc.Median(rss))
	}
	return nil
}

// measure seeds n rollouts into a fresh store, then builds an sft
// dataset of them and times the build.
func measure(ctx context.Context, n int, cpuprofile string) (result, error) {
	dir, err := os.MkdirTemp("", "datasetbench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Migrate: true})
	if err != nil {
		return result{}, err
	}
	defer st.Close()
	blobs, err := blobstore.Open(ctx, "", data)
	if err != nil {
		return result{}, err
	}
	defer blobs.Close()
	tn, err := st.CreateTenant(ctx, "bench")
	if err != nil {
		return result{}, err
	}
	seedStart := time.Now()
	if _, err := seed.Rollouts(ctx, st, blobs, tn.ID, n); err != nil {
		return result{}, fmt.Errorf("seed: %w", err)
	}
	seedSecs, seedRSS := time.Since(seedStart).Seconds(), benchproc.PeakRSSMiB()
	ds, err := st.CreateDataset(ctx, store.NewDataset{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tn.ID,
		AgentID: seed.Agent, Format: string(dataset.FormatSFT), Filters: json.RawMessage(`{}`)})
	if err != nil {
		return result{}, err
	}
	stop, err := startProfile(cpuprofile)
	if err != nil {
		return result{}, err
	}
	start, cpu0 := time.Now(), cpuSeconds()
	if err := build.New(st, blobs, nil).Build(ctx, ds.ID); err != nil {
		return result{}, err
	}
	secs, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
	stop()
	ds, err = st.DatasetByID(ctx, ds.ID)
	if err != nil {
		return result{}, err
	}
	if ds.State != store.DatasetReady {
		return result{}, fmt.Errorf("dataset is %s, want ready", ds.State)
	}
	var m dataset.Manifest
	if err := json.Unmarshal(ds.Manifest, &m); err != nil {
		return result{}, err
	}
	return result{Rollouts: m.RolloutsSelected, Exported: m.RolloutsExported, Rows: m.Rows, FileBytes: m.FileBytes,
		NotExported: m.NotExportedByReason, Pending: m.Pending,
		SeedSeconds: seedSecs, SeedPeakRSSMi: seedRSS, Seconds: secs, RowsPerS: float64(m.Rows) / secs,
		CPUSeconds: cpu, RowsPerCPUS: float64(m.Rows) / cpu, PeakRSSMi: benchproc.PeakRSSMiB()}, nil
}
