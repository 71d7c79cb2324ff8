package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/ui"
)

// The overview covers the batches created in its window, the last 7 days
// unless the page asks for 24 hours or 30 days, and says which. A batch of
// 10 days ago is in the 30-day window only; the batches list finds it by
// its creation day.
func TestTheOverviewAndBatchesListCoverTheChosenWindow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Clock: clk, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	tn, err := st.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Rollouts(ctx, st, blobs, tn.ID, 4); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * 24 * time.Hour)
	_, key, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	web, err := ui.New(ui.Config{}, ui.Deps{Store: st, Blobs: blobs, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	get := signedIn(t, web, key)

	for _, tc := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/ui/", 200, []string{`<option value="7d" selected>7 days</option>`, "in 0 batches of the last 7 days",
			"This agent created no batch in the last 7 days.", "It created none then: choose a longer window"}},
		{"/ui/?window=24h", 200, []string{`<option value="24h" selected>24 hours</option>`, "in 0 batches of the last 24 hours"}},
		{"/ui/?window=30d", 200, []string{`<div class="v">4</div><div class="k">in 1 batch of the last 30 days</div>`,
			"batches created in the last 30 days."}},
		{"/ui/?window=1y", 400, []string{"Unknown window"}},
		{"/ui/batches", 200, []string{`/ui/batches/`}},
		{"/ui/batches?since=2026-03-04", 200, []string{"No batch matches these filters."}},
		{"/ui/batches?since=2026-03-01&until=2026-03-01", 200, []string{`/ui/batches/`, `value="2026-03-01"`}},
		{"/ui/batches?since=2026-03-02&until=2026-03-01", 400, []string{"is empty"}},
	} {
		status, body := get(tc.path)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, status, tc.status)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q", tc.path, w)
			}
		}
	}

	// A window of more batches than the overview reads says so.
	old, _, err := st.ListBatches(ctx, tn.ID, store.BatchFilter{}, store.Page{Limit: 1})
	if err != nil || len(old) != 1 {
		t.Fatalf("the seeded batch: %v, %v", old, err)
	}
	for range 21 {
		clk.Advance(time.Minute)
		if _, _, _, err := st.CreateBatch(ctx, store.NewBatch{TenantID: tn.ID, AgentID: seed.Agent, TaskIDs: old[0].TaskIDs[:1],
			GroupSize: 1, DeadlineS: 60, MaxAttempts: 1, RetryOn: gyre.DefaultRetryOn}); err != nil {
			t.Fatal(err)
		}
	}
	if _, body := get("/ui/"); !strings.Contains(body, "in 20 batches of the last 7 days") ||
		!strings.Contains(body, "batches created in the last 7 days: the newest 20 of them, as the window holds more.") {
		t.Error("the overview of a window holding 21 batches does not say it read the newest 20")
	}
}

// signedIn signs in to web with key and returns a GET through the
// session.
func signedIn(t *testing.T, web http.Handler, key string) func(path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	web.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/signin", nil))
	form := rec.Result().Cookies()
	body, _ := io.ReadAll(rec.Result().Body)
	csrf := hidden(t, string(body), "csrf")
	req := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"csrf": {csrf}, "key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range form {
		req.AddCookie(c)
	}
	rec = httptest.NewRecorder()
	web.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", rec.Code)
	}
	session := rec.Result().Cookies()
	return func(path string) (int, string) {
		req := httptest.NewRequest("GET", path, nil)
		for _, c := range session {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		web.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
}
