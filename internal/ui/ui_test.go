package ui_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/ui"
)

// The server and its seeded batch are shared by the rule tests below,
// which only read, each with its own sessions.
func seededServer(t *testing.T) (*server, seeded) {
	t.Helper()
	s := newServer(t)
	return s, s.seed()
}

func sessionCookie(t *testing.T, p page) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "gyre_ui_session" {
			return c
		}
	}
	t.Fatalf("no session cookie set; status %d headers %v", p.status, p.header)
	return nil
}

func TestUI(t *testing.T) {
	s, seed := seededServer(t)

	t.Run("SignInExchangesAReaderKeyForAStrictSessionCookie", func(t *testing.T) {
		c := s.client()
		p := c.signIn(s.reader)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/" {
			t.Fatalf("sign-in: %d to %q, want 303 to /ui/", p.status, p.header.Get("Location"))
		}
		ck := sessionCookie(t, p)
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.MaxAge != 12*3600 || ck.Secure {
			t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui/, Max-Age=43200, not Secure over http", ck)
		}
		if strings.Contains(ck.Value, s.reader) {
			t.Error("the session cookie carries the key")
		}
		if p := c.get("/ui/"); p.status != http.StatusOK || !strings.Contains(p.body, "support-bot") {
			t.Errorf("overview after sign-in: %d", p.status)
		}
	})

	t.Run("OnlyReaderAndAdminKeysSignIn", func(t *testing.T) {
		for _, tc := range []struct {
			name, key string
			want      int
		}{
			{"admin", s.admin, http.StatusSeeOther},
			{"agent", s.agent, http.StatusForbidden},
			{"unknown", "gyre_" + strings.Repeat("A", 43), http.StatusUnauthorized},
			{"malformed", "hunter2", http.StatusUnauthorized},
		} {
			p := s.client().signIn(tc.key)
			if p.status != tc.want {
				t.Errorf("%s key: status %d, want %d", tc.name, p.status, tc.want)
			}
			if tc.want != http.StatusSeeOther && strings.Contains(p.header.Get("Set-Cookie"), "gyre_ui_session=") {
				t.Errorf("%s key: a session cookie was set", tc.name)
			}
		}
	})

	t.Run("APostWithoutItsCSRFTokenIsRefused", func(t *testing.T) {
		c := s.client()
		home := c.signIn(s.reader)
		sessionCookie(t, home)
		page := c.get("/ui/")
		for name, form := range map[string]url.Values{
			"no token":    {},
			"wrong token": {"csrf": {"x" + hidden(t, page.body, "csrf")}},
		} {
			if p := c.post("/ui/signout", form); p.status != http.StatusForbidden {
				t.Errorf("sign-out with %s: %d, want 403", name, p.status)
			}
		}
		if p := c.get("/ui/"); p.status != http.StatusOK {
			t.Errorf("the refused sign-out ended the session: %d", p.status)
		}
		// The sign-in form has its own token (a cookie it must match).
		if p := s.client().post("/ui/signin", url.Values{"key": {s.reader}}); p.status != http.StatusForbidden {
			t.Errorf("sign-in without the form's token: %d, want 403", p.status)
		}
	})

	t.Run("SignOutEndsTheSessionOnTheServer", func(t *testing.T) {
		c := s.client()
		ck := sessionCookie(t, c.signIn(s.reader))
		page := c.get("/ui/")
		if p := c.post("/ui/signout", url.Values{"csrf": {hidden(t, page.body, "csrf")}}); p.status != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", p.status)
		}
		// Replaying the old cookie does not bring the session back.
		req, _ := http.NewRequest("GET", s.ts.URL+"/ui/", nil)
		req.AddCookie(ck)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/signin" {
			t.Errorf("old cookie after sign-out: %d to %q, want 303 to /ui/signin", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("TheSessionCookieIsNeverAcceptedOutsideTheUI", func(t *testing.T) {
		ck := sessionCookie(t, s.client().signIn(s.admin))
		for _, r := range []struct{ method, path string }{
			{"GET", "/api/v1/batches"},
			{"GET", "/api/v1/rollouts/" + seed.Passed},
			{"POST", "/api/v1/keys"},
			{"GET", "/metrics"},
			{"POST", "/agents/support-bot/claim"},
			{"POST", "/turns"},
			{"POST", "/agents/support-bot/v1/chat/completions"},
			{"POST", liveGateway(t, s) + "/chat/completions"},
		} {
			req, _ := http.NewRequest(r.method, s.ts.URL+r.path, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			req.AddCookie(ck)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with only the session cookie: %d, want 401", r.method, r.path, resp.StatusCode)
			}
		}
	})

	t.Run("ARevokedKeysSessionIsDeadOnTheNextRequest", func(t *testing.T) {
		secret, id := s.key("reader")
		c := s.client()
		sessionCookie(t, c.signIn(secret))
		if p := c.get("/ui/batches"); p.status != http.StatusOK {
			t.Fatalf("before revocation: %d", p.status)
		}
		s.call("DELETE", "/api/v1/keys/"+id, s.admin, nil, http.StatusNoContent, nil)
		if p := c.get("/ui/batches"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/signin" {
			t.Errorf("after revocation: %d to %q, want 303 to /ui/signin", p.status, p.header.Get("Location"))
		}
		// htmx's live refresh is told to navigate, not handed a page.
		req, _ := http.NewRequest("GET", s.ts.URL+"/ui/batches/"+seed.Running+"/live", nil)
		req.Header.Set("HX-Request", "true")
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("HX-Redirect") != "/ui/signin" {
			t.Errorf("htmx refresh after revocation: %d HX-Redirect %q", resp.StatusCode, resp.Header.Get("HX-Redirect"))
		}
	})

	t.Run("EveryUIResponseCarriesTheSecurityHeaders", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		for _, path := range []string{"/ui/signin", "/ui/", "/ui/batches", "/ui/batches/" + seed.Batch, "/ui/rollouts/" + seed.XSS,
			"/ui/nope", "/ui/static/ui.css", "/ui/static/htmx-2.0.11.min.js", "/ui/batches/not-a-uuid"} {
			p := c.get(path)
			if got := p.header.Get("Content-Security-Policy"); got != ui.ContentSecurityPolicy {
				t.Errorf("%s: CSP %q", path, got)
			}
			for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
				if got := p.header.Get(h); got != want {
					t.Errorf("%s: %s = %q, want %q", path, h, got, want)
				}
			}
		}
		if !strings.Contains(ui.ContentSecurityPolicy, "frame-ancestors 'none'") || strings.Contains(ui.ContentSecurityPolicy, "unsafe") {
			t.Errorf("CSP %q", ui.ContentSecurityPolicy)
		}
	})

	t.Run("RootRedirectsToTheUIAndUnknownRoutesKeepTheirJSON404", func(t *testing.T) {
		c := s.client()
		if p := c.get("/"); p.status != http.StatusFound || p.header.Get("Location") != "/ui/" {
			t.Errorf("GET /: %d to %q", p.status, p.header.Get("Location"))
		}
		if p := c.get("/ui"); p.status != http.StatusTemporaryRedirect || p.header.Get("Location") != "/ui/" {
			t.Errorf("GET /ui: %d to %q, want 307 to /ui/", p.status, p.header.Get("Location"))
		}
		for _, path := range []string{"/nope", "/uix", "/api/v1/nope"} {
			p := c.get(path)
			if p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "application/json") || !strings.Contains(p.body, `"code"`) {
				t.Errorf("GET %s: %d %s %s, want the JSON 404", path, p.status, p.header.Get("Content-Type"), p.body)
			}
		}
	})

	t.Run("AgentOutputIsEscaped", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		p := c.get("/ui/rollouts/" + seed.XSS)
		if p.status != http.StatusOK {
			t.Fatalf("rollout page: %d", p.status)
		}
		if strings.Contains(p.body, "<script>window.gyreXSS") || strings.Contains(p.body, "<img src=x") {
			t.Error("agent output was written as markup")
		}
		if !strings.Contains(p.body, "&lt;script&gt;window.gyreXSS=1&lt;/script&gt;") {
			t.Error("agent output is not shown as escaped text")
		}
	})

	t.Run("UnknownOutcomesAndAbstentionsAreShownAsSuch", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		p := c.get("/ui/rollouts/" + seed.XSS)
		if !strings.Contains(p.body, `class="badge b-unknown"`) || !strings.Contains(p.body, "unknown — not ok") {
			t.Error("an unknown tool outcome is not shown with its own badge")
		}
		if !strings.Contains(p.body, `<span class="badge b-abstain">abstained</span>`) {
			t.Error("all_tools_ok's abstention on an unknown outcome is not shown as an abstention")
		}
		p = c.get("/ui/rollouts/" + seed.Unreported)
		if !strings.Contains(p.body, "Not reported: the agent sent tool_calls null") {
			t.Error("tool_calls null is not shown as not reported")
		}
		if !strings.Contains(p.body, "off_policy") || !strings.Contains(p.body, "5 completions") || !strings.Contains(p.body, "2 completions (0 other recorded calls)") {
			t.Error("reconciliation does not show both counts")
		}
	})

	t.Run("AnotherTenantsObjectsAreNotFound", func(t *testing.T) {
		other, err := s.st.CreateTenant(t.Context(), "other")
		if err != nil {
			t.Fatal(err)
		}
		c := s.client()
		key, _ := otherKey(t, s, other.ID)
		c.signIn(key)
		for _, path := range []string{"/ui/rollouts/" + seed.Passed, "/ui/batches/" + seed.Batch, "/ui/batches/" + seed.Batch + "/live"} {
			if p := c.get(path); p.status != http.StatusNotFound {
				t.Errorf("GET %s from another tenant: %d, want 404", path, p.status)
			}
		}
		if p := c.get("/ui/"); strings.Contains(p.body, "support-bot") {
			t.Error("the overview of another tenant shows this tenant's agent")
		}
	})

	t.Run("ARunningBatchRefreshesLiveAndAFinishedOneStops", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		for _, tc := range []struct {
			id   string
			live bool
		}{{seed.Running, true}, {seed.Batch, false}} {
			for _, path := range []string{"/ui/batches/" + tc.id, "/ui/batches/" + tc.id + "/live"} {
				p := c.get(path)
				polls := strings.Contains(p.body, `hx-get="/ui/batches/`+tc.id+`/live"`) && strings.Contains(p.body, `hx-trigger="every 5s"`)
				if p.status != http.StatusOK || polls != tc.live {
					t.Errorf("%s: status %d, polls %v, want %v", path, p.status, polls, tc.live)
				}
			}
		}
		if p := c.get("/ui/batches/" + seed.Running + "/live"); strings.Contains(p.body, "<html") {
			t.Error("the live fragment is a whole page")
		}
	})

	t.Run("TheOverviewCountsTheAgentsGatewayCallsWithLatencies", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		p := c.get("/ui/?agent=support-bot")
		// Four rollouts, two completions each, all counted.
		for _, want := range []string{`<div class="k">Calls</div><div class="v">8</div><div class="k">0 not counted</div>`, "Latency p50", "Latency p99", "over 8 finished calls"} {
			if !strings.Contains(p.body, want) {
				t.Errorf("overview lacks %q", want)
			}
		}
		if p := c.get("/ui/?agent=queued-bot"); !strings.Contains(p.body, "The gateway recorded no call of this agent in the last 7 days.") {
			t.Error("an agent without calls does not say so")
		}
	})

	t.Run("TheOverviewShowsThePromotedPolicy", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		if p := c.get("/ui/?agent=queued-bot"); !strings.Contains(p.body, `<div class="v mono">none</div>`) {
			t.Error("an agent without a promoted policy does not say none")
		}
		if _, err := s.st.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: s.tenant.ID, AgentID: "queued-bot", Policy: "p1", SetBy: "test"}); err != nil {
			t.Fatal(err)
		}
		if p := c.get("/ui/?agent=queued-bot"); !strings.Contains(p.body, `<div class="v mono">p1</div>`) {
			t.Error("the promoted policy is not shown")
		}
	})

	t.Run("BadFiltersAreRefusedWithAWord", func(t *testing.T) {
		c := s.client()
		c.signIn(s.reader)
		for _, q := range []string{"state=bogus", "outcome=maybe", "exclusion=whatever", "training=perhaps", "cursor=abc"} {
			p := c.get("/ui/batches/" + seed.Batch + "?" + q)
			if p.status != http.StatusBadRequest || !strings.Contains(p.body, `role="alert"`) {
				t.Errorf("?%s: %d", q, p.status)
			}
		}
	})
}

// liveGateway claims the queued batch's rollout and returns its live
// gateway URL (path only).
func liveGateway(t *testing.T, s *server) string {
	t.Helper()
	var claim flywheel.ClaimResponse
	s.call("POST", "/agents/queued-bot/claim", s.agent, map[string]any{"lease_seconds": 300}, http.StatusOK, &claim)
	if len(claim.Rollouts) != 1 {
		t.Fatalf("claimed %d rollouts, want 1", len(claim.Rollouts))
	}
	u, err := url.Parse(claim.Rollouts[0].LLMURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

func otherKey(t *testing.T, s *server, tenantID string) (string, string) {
	t.Helper()
	saved := s.tenant
	s.tenant.ID = tenantID
	defer func() { s.tenant = saved }()
	return s.key("reader")
}

// An https public URL makes the session cookie Secure.
func TestSessionCookieIsSecureBehindHTTPS(t *testing.T) {
	t.Parallel()
	st, err := storeopen.Open(t.Context(), storeopen.Options{DataDir: t.TempDir(), Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	web, err := ui.New(ui.Config{PublicURL: "https://gyre.example.com"}, ui.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	web.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/signin", nil))
	cookies := rec.Result().Cookies()
	if len(cookies) == 0 || !cookies[0].Secure {
		t.Errorf("sign-in form cookie behind https: %+v, want Secure", cookies)
	}
}
