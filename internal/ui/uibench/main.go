// Command uibench measures the web UI's server time per page: it seeds a
// fresh SQLite store and file blob store with -rollouts training-grade
// rollouts (the dataset benchmark's store-level seeder: batches of 200,
// two counted completions with bodies each), two experiments of -runs/2
// run records each (small ATIF trajectories, and one of 5 MB), 1,000
// production turns, a built sft dataset of every rollout, and three
// gateway policies promoted in turn 50 times, and a decided promotion of
// two 200-rollout batches; signs in
// with a reader key; then asks each page -requests times in-process (the
// handler, no network) and prints the median, p95, maximum and CPU time
// per request. Seeding is not timed in the table (its time goes to
// stderr). With -data the seeded store is kept and measured again without
// seeding; -pages measures only the pages whose path matches a regular
// expression; -seedprofile and -pageprofile write CPU profiles. Run it
// with make bench-ui, or:
//
//	go run ./internal/ui/uibench -rollouts 100000 -runs 10000 -requests 200 -data /tmp/uibench
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/ui"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "uibench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		rollouts = flag.Int("rollouts", 100000, "rollouts to seed")
		runs     = flag.Int("runs", 10000, "experiment runs to seed (two experiments)")
		requests = flag.Int("requests", 200, "requests per page")
		data     = flag.String("data", "", "keep the seeded store in this directory and, when it holds one, measure it again without seeding")
		seedProf = flag.String("seedprofile", "", "write a CPU profile of the seeding here")
		pageProf = flag.String("pageprofile", "", "write a CPU profile of the page measurements here")
		only     = flag.String("pages", "", "measure only the pages whose path matches this regular expression")
	)
	flag.Parse()
	return measure(context.Background(), os.Stdout, options{dir: *data, rollouts: *rollouts, runs: *runs, requests: *requests,
		seedProfile: *seedProf, pageProfile: *pageProf, only: *only})
}

// options is what one measurement does.
type options struct {
	// dir keeps the seeded store; "" seeds a temporary one.
	dir            string
	rollouts, runs int
	requests       int
	seedProfile    string
	pageProfile    string
	only           string
}

// profile starts a CPU profile written to path ("" profiles nothing) and
// returns the function that stops it.
func profile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}

// measure seeds n rollouts and runs experiment runs into a fresh store (in dir, or a temporary
// directory when dir is "") and writes each page's server times over
// requests requests to w. A dir that already holds a seeded store is
// measured as it is.
func measure(ctx context.Context, w io.Writer, o options) error {
	dir, rollouts, runs, requests := o.dir, o.rollouts, o.runs, o.requests
	if dir == "" {
		tmp, err := os.MkdirTemp("", "uibench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Migrate: true})
	if err != nil {
		return err
	}
	defer st.Close()
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		return err
	}
	defer blobs.Close()
	tn, err := st.TenantByName(ctx, "bench")
	n := rollouts
	var (
		exps        seededExperiments
		datasetID   string
		promotionID string
	)
	switch {
	case err == nil:
		fmt.Fprintln(os.Stderr, "measuring the store seeded before in", dir)
		n = -1 // the header says "kept store"
		if exps, err = keptExperiments(ctx, st, tn.ID); err != nil {
			return err
		}
		if datasetID, err = keptDataset(ctx, st, blobs, tn.ID); err != nil {
			return err
		}
		if ps, _, err := st.ListPolicies(ctx, tn.ID, store.Page{Limit: 1}); err != nil {
			return err
		} else if len(ps) == 0 {
			if err := seedPolicies(ctx, st, tn.ID); err != nil {
				return fmt.Errorf("seed policies: %w", err)
			}
		}
		if promotionID, err = keptPromotion(ctx, st, blobs, tn.ID); err != nil {
			return fmt.Errorf("seed promotion: %w", err)
		}
	case errors.Is(err, store.ErrNotFound):
		if tn, err = st.CreateTenant(ctx, "bench"); err != nil {
			return err
		}
		stop, err := profile(o.seedProfile)
		if err != nil {
			return err
		}
		start := time.Now()
		if n, err = seed.Rollouts(ctx, st, blobs, tn.ID, rollouts); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		fmt.Fprintf(os.Stderr, "seeded %d rollouts in %.0f s\n", n, time.Since(start).Seconds())
		start = time.Now()
		if exps, err = seedExperiments(ctx, st, blobs, tn.ID, runs); err != nil {
			return fmt.Errorf("seed experiments: %w", err)
		}
		if err := seedTurns(ctx, st, tn.ID, 1000); err != nil {
			return fmt.Errorf("seed turns: %w", err)
		}
		fmt.Fprintf(os.Stderr, "seeded %d experiment runs and 1000 turns in %.0f s\n", runs, time.Since(start).Seconds())
		start = time.Now()
		if datasetID, err = seedDatasets(ctx, st, blobs, tn.ID); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "seeded and built a dataset of every rollout in %.0f s\n", time.Since(start).Seconds())
		if err := seedPolicies(ctx, st, tn.ID); err != nil {
			return fmt.Errorf("seed policies: %w", err)
		}
		if promotionID, err = seedPromotion(ctx, st, blobs, tn.ID); err != nil {
			return fmt.Errorf("seed promotion: %w", err)
		}
		if err := stop(); err != nil {
			return err
		}
	default:
		return err
	}
	_, key, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleReader})
	if err != nil {
		return err
	}

	web, err := ui.New(ui.Config{}, ui.Deps{Store: st, Blobs: blobs})
	if err != nil {
		return err
	}
	cookies, err := signIn(web, key)
	if err != nil {
		return err
	}
	batches, _, err := st.ListBatches(ctx, tn.ID, store.BatchFilter{}, store.Page{Limit: 1})
	if err != nil || len(batches) == 0 {
		return fmt.Errorf("newest batch: %v", err)
	}
	rs, _, err := st.ListRollouts(ctx, tn.ID, store.RolloutFilter{BatchID: batches[0].ID}, store.Page{Limit: 1})
	if err != nil || len(rs) == 0 {
		return fmt.Errorf("a rollout: %v", err)
	}
	pages := []string{
		"/ui/",
		"/ui/batches",
		"/ui/batches?agent=" + seed.Agent + "&state=finished",
		"/ui/batches/" + batches[0].ID,
		"/ui/batches/" + batches[0].ID + "?training=true&outcome=passed",
		"/ui/batches/" + batches[0].ID + "/live",
		"/ui/rollouts/" + rs[0].ID,
		"/ui/turns",
		"/ui/turns?conversation=conv-7",
		"/ui/datasets",
		"/ui/datasets/" + datasetID,
		"/ui/datasets/" + datasetID + "/live",
		"/ui/datasets/" + datasetID + "/manifest",
		"/ui/policies",
		"/ui/policies/bench-p1",
		"/ui/promotions",
		"/ui/promotions/" + promotionID,
		"/ui/agents/" + seed.Agent,
	}
	pages = append(pages, experimentPages(exps)...) // experiments.go
	fmt.Fprintf(w, "%-60s %10s %10s %10s %10s\n", pageHeader(n, runs), "p50 ms", "p95 ms", "max ms", "CPU ms")
	only, err := regexp.Compile(o.only)
	if err != nil {
		return fmt.Errorf("-pages: %w", err)
	}
	stop, err := profile(o.pageProfile)
	if err != nil {
		return err
	}
	defer stop()
	for _, p := range pages {
		if !only.MatchString(p) {
			continue
		}
		var ds []time.Duration
		cpu0 := cpuTime()
		for range requests {
			req := httptest.NewRequest("GET", p, nil)
			for _, c := range cookies {
				req.AddCookie(c)
			}
			rec := httptest.NewRecorder()
			t0 := time.Now()
			web.ServeHTTP(rec, req)
			ds = append(ds, time.Since(t0))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("%s: status %d: %s", p, rec.Code, rec.Body.String())
			}
		}
		slices.Sort(ds)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		name := p
		if len(name) > 60 {
			name = name[:57] + "..."
		}
		cpu := (cpuTime() - cpu0) / time.Duration(requests)
		fmt.Fprintf(w, "%-60s %10.1f %10.1f %10.1f %10.1f\n", name, ms(ds[len(ds)/2]), ms(ds[len(ds)*95/100]), ms(ds[len(ds)-1]), ms(cpu))
	}
	return measureFirstViews(w, st, blobs, cookies, exps, max(requests/5, 5))
}

// cpuTime is the process's user and system CPU time so far: on a shared
// machine, wall times include waiting for a core, CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// signIn signs in through the handler and returns the session cookie.
func signIn(web http.Handler, key string) ([]*http.Cookie, error) {
	rec := httptest.NewRecorder()
	web.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/signin", nil))
	form := rec.Result().Cookies()
	if len(form) == 0 {
		return nil, fmt.Errorf("sign-in form set no cookie")
	}
	body := url.Values{"csrf": {form[0].Value}, "key": {key}}.Encode()
	req := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(form[0])
	rec = httptest.NewRecorder()
	web.ServeHTTP(rec, req)
	var out []*http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == "gyre_ui_session" && c.Value != "" {
			out = append(out, c)
		}
	}
	if rec.Code != http.StatusSeeOther || len(out) == 0 {
		return nil, fmt.Errorf("sign-in: status %d", rec.Code)
	}
	return out, nil
}

func pageHeader(n, runs int) string {
	if n < 0 {
		return "page (kept store)"
	}
	return fmt.Sprintf("page (%d rollouts, %d runs)", n, runs)
}
