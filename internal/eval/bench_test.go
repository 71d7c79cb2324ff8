package eval

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

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
		io.WriteString(w, validTrajectory)
	})
	return mux
}

// peakRSS returns the process's peak resident set size (VmHWM) in MiB, or
// 0 where /proc is not available.
func peakRSS() float64 {
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

// BenchmarkExperiment10k runs an experiment of 10,000 runs (100 cases ×
// 100 repetitions) at concurrency 64 against an in-process harness that
// answers instantly, recording into a SQLite store and a file blob store
// (one trajectory fetched, validated and stored per run). It reports
// runs/s and the process's peak RSS (VmHWM; the harness shares the
// process). Target: ≥ 1,000 runs/s and ≤ 150 MiB.
//
//	go test ./internal/eval -run '^$' -bench Experiment10k -benchtime 1x
func BenchmarkExperiment10k(b *testing.B) {
	const cases, reps = 100, 100
	srv := httptest.NewServer(instantHarness())
	defer srv.Close()
	var doc strings.Builder
	doc.WriteString("name: bench\nversion: \"1\"\ncases:\n")
	for i := range cases {
		fmt.Fprintf(&doc, "  - id: case-%03d\n    input: {question: \"Refund order %d\"}\n    graders: [{contains: Refund}, {tool_called: issue_refund}, {max_llm_calls: 5}]\n", i, i)
	}
	s := writeSuite(b, doc.String(), nil)
	var runs int
	start := time.Now()
	for b.Loop() {
		dir := b.TempDir()
		st, err := storeopen.Open(b.Context(), storeopen.Options{DataDir: dir, Migrate: true})
		if err != nil {
			b.Fatal(err)
		}
		blobs, err := blobstore.Open(b.Context(), "", dir)
		if err != nil {
			b.Fatal(err)
		}
		tn, err := st.CreateTenant(b.Context(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		client, err := NewClient(srv.URL, "", nil, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		r, err := NewRunner(Config{Repetitions: reps, Concurrency: 64, Criteria: DefaultCriteria(), Seed: 1},
			Deps{Client: client, Recorder: &StoreRecorder{Store: st, Blobs: blobs, Tenant: tn.ID}})
		if err != nil {
			b.Fatal(err)
		}
		res, err := r.Run(b.Context(), s)
		if err != nil {
			b.Fatal(err)
		}
		if res.Report.Passed != cases*reps {
			b.Fatalf("report %+v", res.Report.Summary)
		}
		runs += cases * reps
		blobs.Close()
		st.Close()
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(runs)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(peakRSS(), "peak-RSS-MiB")
}
