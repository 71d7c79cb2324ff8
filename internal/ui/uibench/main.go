// Command uibench measures the web UI's server time per page: it seeds a
// fresh SQLite store and file blob store with -rollouts training-grade
// rollouts (the dataset benchmark's store-level seeder: batches of 200,
// two counted completions with bodies each), signs in with a reader key,
// then asks each page -requests times in-process (the handler, no
// network) and prints the median and p95. Seeding is not timed. Run it
// with make bench-ui, or:
//
// It also seeds two experiments of -runs/2 run records each (with small
// ATIF trajectories, and one of 5 MB) and production turns, and measures
// the evaluation pages.
//
//	go run ./internal/ui/uibench -rollouts 10000 -runs 10000 -requests 100
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
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
	)
	flag.Parse()
	return measure(context.Background(), os.Stdout, *rollouts, *runs, *requests)
}

// measure seeds n rollouts into a fresh store and writes each page's
// server times over requests requests to w.
func measure(ctx context.Context, w io.Writer, rollouts, runs, requests int) error {
	dir, err := os.MkdirTemp("", "uibench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
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
	tn, err := st.CreateTenant(ctx, "bench")
	if err != nil {
		return err
	}
	_, key, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleReader})
	if err != nil {
		return err
	}
	start := time.Now()
	n, err := seed.Rollouts(ctx, st, blobs, tn.ID, rollouts)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	fmt.Fprintf(os.Stderr, "seeded %d rollouts in %.0f s\n", n, time.Since(start).Seconds())
	start = time.Now()
	exps, err := seedExperiments(ctx, st, blobs, tn.ID, runs)
	if err != nil {
		return fmt.Errorf("seed experiments: %w", err)
	}
	if err := seedTurns(ctx, st, tn.ID, 1000); err != nil {
		return fmt.Errorf("seed turns: %w", err)
	}
	fmt.Fprintf(os.Stderr, "seeded %d experiment runs and 1000 turns in %.0f s\n", runs, time.Since(start).Seconds())

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
		"/ui/experiments",
		"/ui/experiments?suite=bench&state=finished",
		"/ui/experiments/" + exps.B,
		"/ui/experiments/" + exps.B + "/live",
		"/ui/compare?a=" + exps.A + "&b=" + exps.B,
		"/ui/experiments/" + exps.B + "/runs/" + exps.BigRun + "/1",
		"/ui/experiments/" + exps.B + "/runs/" + exps.BigRun + "/1/steps?from=1000",
		"/ui/experiments/" + exps.B + "/runs/" + exps.BigRun + "/2",
		"/ui/turns",
		"/ui/turns?conversation=conv-7",
	}
	fmt.Fprintf(w, "%-60s %10s %10s %10s\n", fmt.Sprintf("page (%d rollouts, %d runs)", n, runs), "p50 ms", "p95 ms", "max ms")
	for _, p := range pages {
		var ds []time.Duration
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
		fmt.Fprintf(w, "%-60s %10.1f %10.1f %10.1f\n", name, ms(ds[len(ds)/2]), ms(ds[len(ds)*95/100]), ms(ds[len(ds)-1]))
	}
	return nil
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
