package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// TestDatasetsPoliciesAndPromotionsPages checks the rules of the dataset,
// policy and promotion pages over a store the real API filled: what each
// page shows, that the create and rollback forms are admin-only and need
// the CSRF token, that bad input changes nothing, and that the download
// is the API's file, served with the session.
func TestDatasetsPoliciesAndPromotionsPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	seed := s.seedWave2()
	ctx := context.Background()
	datasets := func() int {
		t.Helper()
		list, _, err := s.st.ListDatasets(ctx, s.tenant.ID, store.Page{Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	reader := s.client()
	reader.signIn(s.reader)
	admin := s.client()
	admin.signIn(s.admin)

	t.Run("pages show their subject", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			want []string
		}{
			{"/ui/datasets", []string{seed.Dataset, "support-bot", "sft", "ready"}},
			{"/ui/datasets/" + seed.Dataset, []string{"Manifest", "Download the file", "/ui/datasets/" + seed.Dataset + "/file", "File SHA-256", "Rollouts not exported, by reason"}},
			{"/ui/datasets/" + seed.Empty, []string{"The file is empty:", "applies to sft only"}},
			{"/ui/policies", []string{`href="/ui/policies/p1"`, "served-model-2"}},
			{"/ui/policies/p2", []string{"Definition", "served-model-2", seed.Promotion[len(seed.Promotion)-8:]}},
			{"/ui/promotions", []string{seed.Promotion[len(seed.Promotion)-8:], "p2 vs p1"}},
			{"/ui/promotions/" + seed.Promotion, []string{"chart-evidence", "Paired bootstrap 95% interval", "Seed · resamples", "Baseline batch", "/ui/batches/"}},
			{"/ui/agents/support-bot", []string{"History", "rolled back", "live"}},
		} {
			p := reader.get(tc.path)
			if p.status != http.StatusOK {
				t.Errorf("%s: status %d", tc.path, p.status)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(p.body, w) {
					t.Errorf("%s lacks %q", tc.path, w)
				}
			}
		}
	})

	t.Run("the promotions list filters by agent, state and start date", func(t *testing.T) {
		p, err := s.st.GetPromotion(ctx, s.tenant.ID, seed.Promotion)
		if err != nil {
			t.Fatal(err)
		}
		other := "running"
		if p.State == other {
			other = "failed"
		}
		today := time.Now().UTC().Format(time.DateOnly)
		tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
		for _, tc := range []struct {
			query string
			shown bool
		}{
			{"", true},
			{"?agent=support-bot", true},
			{"?agent=queued-bot", false},
			{"?state=" + p.State, true},
			{"?state=" + other, false},
			{"?since=" + today + "&until=" + today, true},
			{"?since=" + tomorrow, false},
		} {
			page := reader.get("/ui/promotions" + tc.query)
			shown := strings.Contains(page.body, `href="/ui/promotions/`+seed.Promotion+`"`)
			if page.status != http.StatusOK || shown != tc.shown || strings.Contains(page.body, "No promotion matches these filters.") == tc.shown {
				t.Errorf("%s: %d, shown %v, want %v", tc.query, page.status, shown, tc.shown)
			}
		}
		if page := reader.get("/ui/promotions?since=someday"); page.status != http.StatusBadRequest || !strings.Contains(page.body, "is not a date") {
			t.Errorf("a bad since: %d", page.status)
		}
	})

	t.Run("a reader sees no admin form", func(t *testing.T) {
		if b := reader.get("/ui/datasets").body; strings.Contains(b, `method="post" action="/ui/datasets"`) || strings.Contains(b, "Create a dataset") {
			t.Error("a reader sees the create form")
		}
		if b := reader.get("/ui/agents/support-bot").body; strings.Contains(b, "/rollback") {
			t.Error("a reader sees the rollback button")
		}
		if b := admin.get("/ui/datasets").body; !strings.Contains(b, `method="post" action="/ui/datasets"`) {
			t.Error("an admin does not see the create form")
		}
		if b := admin.get("/ui/agents/support-bot").body; !strings.Contains(b, `action="/ui/agents/support-bot/rollback"`) {
			t.Error("an admin does not see the rollback button")
		}
	})

	t.Run("state-changing forms need the CSRF token and an admin", func(t *testing.T) {
		before := datasets()
		form := url.Values{"agent": {"support-bot"}, "format": {"sft"}}
		if p := admin.post("/ui/datasets", form); p.status != http.StatusForbidden {
			t.Errorf("create without CSRF: %d, want 403", p.status)
		}
		form.Set("csrf", hidden(t, reader.get("/ui/datasets").body, "csrf"))
		if p := reader.post("/ui/datasets", form); p.status != http.StatusForbidden {
			t.Errorf("create by a reader: %d, want 403", p.status)
		}
		if p := admin.post("/ui/agents/support-bot/rollback", url.Values{}); p.status != http.StatusForbidden {
			t.Errorf("rollback without CSRF: %d, want 403", p.status)
		}
		if p := reader.post("/ui/agents/support-bot/rollback", url.Values{"csrf": {form.Get("csrf")}}); p.status != http.StatusForbidden {
			t.Errorf("rollback by a reader: %d, want 403", p.status)
		}
		if n := datasets(); n != before {
			t.Errorf("refused POSTs made %d datasets", n-before)
		}
		if pol, _ := s.st.AgentPolicy(ctx, s.tenant.ID, "support-bot"); pol == nil || *pol != "p2" {
			t.Errorf("refused rollbacks changed the promoted policy to %v", pol)
		}
	})

	t.Run("bad input shows the form with the field at fault and stores nothing", func(t *testing.T) {
		csrf := hidden(t, admin.get("/ui/datasets").body, "csrf")
		before := datasets()
		for _, tc := range []struct {
			name   string
			form   url.Values
			status int
			want   string
		}{
			{"unknown format", url.Values{"agent": {"support-bot"}, "format": {"csv"}}, 422, "/format"},
			{"bad since", url.Values{"agent": {"support-bot"}, "format": {"sft"}, "since": {"yesterday"}}, 422, "/since"},
			{"bad min reward", url.Values{"agent": {"support-bot"}, "format": {"sft"}, "min_reward": {"high"}}, 422, "/min_reward"},
			{"negative margin", url.Values{"agent": {"support-bot"}, "format": {"dpo"}, "min_margin": {"-1"}}, 422, "/min_margin"},
			{"bad batch id", url.Values{"agent": {"support-bot"}, "format": {"sft"}, "batch_ids": {"nope"}}, 422, "/batch_ids/0"},
			{"unknown agent", url.Values{"agent": {"ghost-bot"}, "format": {"sft"}}, 404, "ghost-bot"},
		} {
			tc.form.Set("csrf", csrf)
			p := admin.post("/ui/datasets", tc.form)
			if p.status != tc.status || !strings.Contains(p.body, tc.want) || !strings.Contains(p.body, `role="alert"`) {
				t.Errorf("%s: status %d, want %d with %q in an alert", tc.name, p.status, tc.status, tc.want)
			}
		}
		if n := datasets(); n != before {
			t.Errorf("bad input made %d datasets", n-before)
		}
	})

	t.Run("an admin creates a dataset through the form", func(t *testing.T) {
		csrf := hidden(t, admin.get("/ui/datasets").body, "csrf")
		p := admin.post("/ui/datasets", url.Values{"csrf": {csrf}, "agent": {"support-bot"}, "format": {"rl"},
			"batch_ids": {seed.Batch}, "since": {"2000-01-01"}, "include_holdout": {"true"}})
		loc := p.header.Get("Location")
		if p.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/datasets/") {
			t.Fatalf("create: %d to %q: %s", p.status, loc, p.body)
		}
		id := strings.TrimPrefix(loc, "/ui/datasets/")
		d, err := s.st.GetDataset(ctx, s.tenant.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Format != "rl" || d.AgentID != "support-bot" || d.Members != 4 ||
			!strings.Contains(string(d.Filters), `"include_holdout":true`) || !strings.Contains(string(d.Filters), seed.Batch) ||
			!strings.Contains(string(d.Filters), `"since":"2000-01-01T00:00:00Z"`) {
			t.Errorf("created %+v with filters %s", d, d.Filters)
		}
		s.waitDataset(id)
	})

	t.Run("the download is the API's file, with the session only", func(t *testing.T) {
		resp, err := reader.client.Get(s.ts.URL + "/ui/datasets/" + seed.Dataset + "/file")
		if err != nil {
			t.Fatal(err)
		}
		ui, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		req, _ := http.NewRequest("GET", s.ts.URL+"/api/v1/datasets/"+seed.Dataset+"/file", nil)
		req.Header.Set("Authorization", "Bearer "+s.reader)
		aresp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		api, _ := io.ReadAll(aresp.Body)
		aresp.Body.Close()
		if resp.StatusCode != 200 || len(ui) == 0 || string(ui) != string(api) || resp.Header.Get("ETag") != aresp.Header.Get("ETag") {
			t.Errorf("UI download: %d, %d bytes, etag %s; API: %d bytes, etag %s", resp.StatusCode, len(ui), resp.Header.Get("ETag"), len(api), aresp.Header.Get("ETag"))
		}
		if p := s.client().get("/ui/datasets/" + seed.Dataset + "/file"); p.status != http.StatusSeeOther {
			t.Errorf("download without a session: %d, want a redirect to sign in", p.status)
		}
		if p := reader.get("/ui/datasets/" + seed.Dataset + "/manifest"); p.status != 200 || !strings.Contains(p.body, `"rollout_ids"`) {
			t.Errorf("manifest download: %d", p.status)
		}
	})

	t.Run("rollback restores the previous policy; none left is a message", func(t *testing.T) {
		csrf := hidden(t, admin.get("/ui/agents/support-bot").body, "csrf")
		p := admin.post("/ui/agents/support-bot/rollback", url.Values{"csrf": {csrf}})
		if p.status != http.StatusSeeOther {
			t.Fatalf("rollback: %d %s", p.status, p.body)
		}
		if pol, _ := s.st.AgentPolicy(ctx, s.tenant.ID, "support-bot"); pol == nil || *pol != "p1" {
			t.Errorf("after rollback the promoted policy is %v, want p1", pol)
		}
		if b := admin.get(p.header.Get("Location")).body; !strings.Contains(b, "Rolled back") {
			t.Error("the page after a rollback does not say so")
		}
		p = admin.post("/ui/agents/queued-bot/rollback", url.Values{"csrf": {csrf}})
		if p.status != http.StatusConflict || !strings.Contains(p.body, "no_previous_policy") || !strings.Contains(p.body, "History") {
			t.Errorf("rollback with no previous policy: %d, want 409 on the agent's page with the message", p.status)
		}
		if pol, _ := s.st.AgentPolicy(ctx, s.tenant.ID, "queued-bot"); pol == nil || *pol != "p1" {
			t.Errorf("a refused rollback changed the policy to %v", pol)
		}
	})

	t.Run("unknown ids are 404 pages", func(t *testing.T) {
		for _, path := range []string{"/ui/datasets/0190b7a1-0000-7000-8000-000000000000", "/ui/promotions/0190b7a1-0000-7000-8000-000000000000",
			"/ui/policies/nope", "/ui/agents/ghost-bot", "/ui/datasets/not-a-uuid"} {
			if p := reader.get(path); p.status != http.StatusNotFound {
				t.Errorf("%s: %d, want 404", path, p.status)
			}
		}
		if p := reader.get("/ui/promotions?state=bogus"); p.status != http.StatusBadRequest {
			t.Errorf("bad state filter: %d, want 400", p.status)
		}
	})
}
