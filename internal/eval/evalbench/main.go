// Command evalbench measures the evaluator's memory and throughput: it
// runs an experiment of -runs runs (100 repetitions of runs/100 cases) at
// -concurrency against an in-process harness stub that answers every call
// at once, recording into a fresh SQLite store and file blob store (one
// trajectory fetched, validated and stored per run), then writes the JUnit
// report. It prints the runs per second and the process's peak resident
// set size (VmHWM), which covers the harness stub too.
//
// Peak RSS is per process, so each measurement needs a process of its
// own: with -sizes the command runs itself once per size and repetition
// and prints the medians. Run it with make bench-eval-memory, or:
//
//	go run ./internal/eval/evalbench -sizes 10000,100000 -count 3
//	go run ./internal/eval/evalbench -runs 10000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/gyrehq/gyre/internal/benchproc"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/suite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "evalbench:", err)
		os.Exit(1)
	}
}

// result is one measurement, printed by a child as one JSON line.
type result struct {
	Runs    int     `json:"runs"`
	Seconds float64 `json:"seconds"`
	// JUnitSeconds is the part of Seconds spent writing the JUnit report
	// from the store.
	JUnitSeconds float64 `json:"junit_seconds"`
	RunsPerS     float64 `json:"runs_per_s"`
	PeakRSSMi    float64 `json:"peak_rss_mib"`
}

func run() error {
	var (
		runs        = flag.Int("runs", 0, "measure one experiment of this many runs in this process (a multiple of 100)")
		sizes       = flag.String("sizes", "10000,100000", "sizes to measure, each in a process of its own")
		count       = flag.Int("count", 3, "measurements per size (medians are printed)")
		concurrency = flag.Int("concurrency", 64, "runs in flight")
	)
	flag.Parse()
	if *runs > 0 {
		r, err := measure(context.Background(), *runs, *concurrency)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("%-8s %-6s %12s %14s\n", "runs", "count", "runs/s", "peak RSS MiB")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 100 || n%100 != 0 {
			return fmt.Errorf("size %q: want a multiple of 100", s)
		}
		var rates, rss []float64
		for i := range *count {
			var r result
			if err := benchproc.MeasureInChild(&r, "-runs", strconv.Itoa(n), "-concurrency", strconv.Itoa(*concurrency)); err != nil {
				return fmt.Errorf("size %d: %w", n, err)
			}
			fmt.Fprintf(os.Stderr, "  %d runs, measurement %d: %.0f runs/s, peak RSS %.1f MiB\n", n, i+1, r.RunsPerS, r.PeakRSSMi)
			rates, rss = append(rates, r.RunsPerS), append(rss, r.PeakRSSMi)
		}
		fmt.Printf("%-8d %-6d %12.0f %14.1f\n", n, *count, benchproc.Median(rates), benchproc.Median(rss))
	}
	return nil
}

// trajectory is a small valid ATIF document with one tool call.
const trajectory = `{"schema_version":"ATIF-v1.7","session_id":"s1","agent":{"name":"bot","version":"1"},"steps":[` +
	`{"step_id":1,"source":"user","message":"hi"},` +
	`{"step_id":2,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c1","function_name":"issue_refund","arguments":{"order_id":"1042"}}],` +
	`"observation":{"results":[{"source_call_id":"c1","content":"ok"}]},"metrics":{"prompt_tokens":10,"completion_tokens":5,"cost_usd":0.01}},` +
	`{"step_id":3,"source":"agent","message":"Refund issued"}]}`

// instantHarness answers every call at once: runs are completed when
// created, and every run has the same small trajectory.
func instantHarness() http.Handler {
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /capabilities", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"agent":"instant","revision":"bench","provides":{"trajectory":true,"tool_calls":true},"limits":{"max_concurrent_runs":64}}`)
	})
	mux.HandleFunc("POST /runs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run_id":"run-%d"}`, n.Add(1))
	})
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"completed","answer":"Refund issued","model":"instant-1"}`)
	})
	mux.HandleFunc("GET /runs/{id}/trajectory", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, trajectory)
	})
	return mux
}

// measure runs one experiment of runs runs and reports its throughput
// and the process's peak RSS.
func measure(ctx context.Context, runs, concurrency int) (result, error) {
	if runs < 100 || runs%100 != 0 {
		return result{}, fmt.Errorf("-runs %d: want a multiple of 100", runs)
	}
	const reps = 100
	cases := runs / reps
	dir, err := os.MkdirTemp("", "evalbench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	var doc strings.Builder
	doc.WriteString("name: bench\nversion: \"1\"\ncases:\n")
	for i := range cases {
		fmt.Fprintf(&doc, "  - id: case-%05d\n    input: {question: \"Refund order %d\"}\n    graders: [{contains: Refund}, {tool_called: issue_refund}, {max_llm_calls: 5}]\n", i, i)
	}
	path := filepath.Join(dir, "suite.yaml")
	if err := os.WriteFile(path, []byte(doc.String()), 0o644); err != nil {
		return result{}, err
	}
	s, err := suite.Load(path, suite.Options{})
	if err != nil {
		return result{}, err
	}
	srv := httptest.NewServer(instantHarness())
	defer srv.Close()
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
	client, err := eval.NewClient(srv.URL, "", nil, eval.Limits{})
	if err != nil {
		return result{}, err
	}
	rec := &eval.StoreRecorder{Store: st, Blobs: blobs, Tenant: tn.ID}
	r, err := eval.NewRunner(eval.Config{Repetitions: reps, Concurrency: concurrency, Criteria: eval.DefaultCriteria(), Seed: 1},
		eval.Deps{Client: client, Recorder: rec, Progress: eval.NewLineProgress(io.Discard, clock.Real{})})
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	res, err := r.Run(ctx, s)
	if err != nil {
		return result{}, err
	}
	if res.Report.Passed != runs {
		return result{}, fmt.Errorf("%d of %d runs passed", res.Report.Passed, runs)
	}
	junit := time.Now()
	if err := eval.WriteJUnit(io.Discard, res.Report.Summary, rec.AllRuns(ctx, res.Experiment.ID)); err != nil {
		return result{}, err
	}
	secs := time.Since(start).Seconds()
	return result{Runs: runs, Seconds: secs, JUnitSeconds: time.Since(junit).Seconds(), RunsPerS: float64(runs) / secs, PeakRSSMi: benchproc.PeakRSSMiB()}, nil
}
