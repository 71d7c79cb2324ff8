package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// claimBenchClaimers is how many workers claim at once.
const claimBenchClaimers = 16

// BenchmarkClaim measures single-rollout claims end to end: 16 concurrent
// claimers over loopback HTTP, each claim minting three secrets, leasing one
// rollout under the store's claim discipline (SKIP LOCKED on PostgreSQL,
// the single writer on SQLite), committing, and answering a
// schema-validated ClaimResponse. It reports claims/s; ns/op is per claim.
// PostgreSQL runs when GYRE_TEST_POSTGRES_URL is set.
func BenchmarkClaim(b *testing.B) {
	// PostgreSQL as gyre serve runs it: leases on the database's clock
	// (no injectedLeaseClock).
	for _, eng := range engines() {
		b.Run(eng.name, func(b *testing.B) { benchClaim(b, eng) })
	}
}

func benchClaim(b *testing.B, eng engine) {
	st := eng.open(b, clock.Real{})
	svc, err := rollout.New(rollout.Config{PublicURL: "http://127.0.0.1"}, rollout.Deps{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{}, Deps{Store: st, Logger: telemetry.Discard(), Clock: clock.Real{}, Metrics: telemetry.NewMetrics(), Rollouts: svc})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	ctx := b.Context()
	tn, err := st.CreateTenant(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	_, admin, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleAdmin})
	if err != nil {
		b.Fatal(err)
	}
	_, agent, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleAgent})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: claimBenchClaimers, MaxConnsPerHost: claimBenchClaimers}}
	b.Cleanup(client.CloseIdleConnections)
	// do returns its error rather than failing the benchmark: it runs on
	// the claimers' goroutines, where b.Fatal must not be called.
	do := func(method, path, key, body string, out any) error {
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
		}
		if out != nil {
			return json.NewDecoder(resp.Body).Decode(out)
		}
		return nil
	}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	// Queue b.N rollouts: 100 tasks in groups.
	const tasks = 100
	var cases []string
	for i := range tasks {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"question":"q%d"},"graders":[{"contains":"x"}]}`, i, i))
	}
	must(do(http.MethodPost, "/api/v1/suites", admin, `{"name":"bench","cases":[`+strings.Join(cases, ",")+`]}`, nil))
	group := (b.N + tasks - 1) / tasks
	for group > 0 {
		g := min(group, 1024)
		must(do(http.MethodPost, "/api/v1/batches", admin, fmt.Sprintf(`{"agent_id":"bench","suite":"bench","group_size":%d}`, g), nil))
		group -= g
	}

	var (
		claimed atomic.Int64
		wg      sync.WaitGroup
		errMu   sync.Mutex
		errs    []error
	)
	b.ResetTimer()
	start := time.Now()
	for range claimBenchClaimers {
		wg.Go(func() {
			for claimed.Load() < int64(b.N) {
				var c flywheel.ClaimResponse
				if err := do(http.MethodPost, "/agents/bench/claim", agent, `{"max_rollouts":1}`, &c); err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					return
				}
				if len(c.Rollouts) == 0 {
					return
				}
				claimed.Add(int64(len(c.Rollouts)))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("%d of %d claimers failed: %v", len(errs), claimBenchClaimers, err)
	}
	b.ReportMetric(float64(claimed.Load())/elapsed.Seconds(), "claims/s")
}
