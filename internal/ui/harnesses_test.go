package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// harnessCallTimeout bounds the test server's calls to a harness, so the
// hanging stand-in fails fast.
const harnessCallTimeout = 2 * time.Second

// standIn is a Harness API v1 sessions listing: two runs, one with a
// trajectory, and paths that misbehave.
type standIn struct {
	mu     sync.Mutex
	last   url.Values
	apiKey string
}

func (h *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if r.URL.Path == "/runs" {
		h.last = r.URL.Query()
	}
	h.apiKey = r.Header.Get("x-api-key")
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/runs":
		switch r.URL.Query().Get("query") {
		case "hang":
			<-r.Context().Done()
			return
		case "garbage":
			fmt.Fprint(w, `{"runs":[`)
			return
		}
		if r.URL.Query().Get("offset") == "1" {
			fmt.Fprint(w, `{"runs":[{"run_id":"r1"}],"total":2}`)
			return
		}
		fmt.Fprint(w, `{"runs":[{"run_id":"r2","title":"<script>alert(1)</script> refund","user_id":"u7","session_id":"s9"}],"total":2}`)
	case "/runs/r2":
		fmt.Fprint(w, `{"status":"completed","model":"m1","answer":"refund approved"}`)
	case "/runs/r2/trajectory":
		fmt.Fprint(w, `{"schema_version":"ATIF-v1.4","session_id":"s9","agent":{"name":"desk","version":"1"},"steps":[`+
			`{"step_id":1,"source":"user","message":"where is order 1042?"},`+
			`{"step_id":2,"source":"agent","message":"","tool_calls":[{"tool_call_id":"t1","function_name":"lookup_order","arguments":{"id":"1042"}}],`+
			`"observation":{"results":[{"source_call_id":"t1","content":"shipped"}]}},`+
			`{"step_id":3,"source":"agent","message":"It shipped."}]}`)
	case "/runs/r1":
		fmt.Fprint(w, `{"status":"failed","model":"m1","error":"boom"}`)
	case "/runs/r1/trajectory":
		fmt.Fprint(w, `not json`)
	default:
		http.NotFound(w, r)
	}
}

func TestSessionsBrowser(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	h := &standIn{}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	admin := s.client()
	admin.signIn(s.admin)
	list := admin.get("/ui/harnesses")
	if list.status != http.StatusOK || !strings.Contains(list.body, "No harness is registered") || !strings.Contains(list.body, `action="/ui/harnesses"`) {
		t.Fatalf("empty list: %d\n%s", list.status, list.body)
	}
	csrf := hidden(t, list.body, "csrf")

	t.Run("a registration without the CSRF token is refused and registers nothing", func(t *testing.T) {
		p := admin.post("/ui/harnesses", url.Values{"name": {"desk"}, "base_url": {hs.URL}})
		if p.status != http.StatusForbidden {
			t.Fatalf("got %d", p.status)
		}
		if p := admin.get("/ui/harnesses"); !strings.Contains(p.body, "No harness is registered") {
			t.Fatalf("a harness was registered:\n%s", p.body)
		}
	})
	t.Run("a bad base URL says which field and registers nothing", func(t *testing.T) {
		p := admin.post("/ui/harnesses", url.Values{"csrf": {csrf}, "name": {"desk"}, "base_url": {"ftp://x"}, "api_key": {"k-secret-1"}})
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, "Base URL: base_url") || strings.Contains(p.body, "k-secret-1") {
			t.Fatalf("got %d\n%s", p.status, p.body)
		}
	})

	reg := admin.post("/ui/harnesses", url.Values{"csrf": {csrf}, "name": {"desk"}, "base_url": {hs.URL}, "api_key": {"k-secret-1"}})
	if reg.status != http.StatusSeeOther || !strings.HasPrefix(reg.header.Get("Location"), "/ui/harnesses/") {
		t.Fatalf("register: %d %v\n%s", reg.status, reg.header, reg.body)
	}
	hpath := reg.header.Get("Location")

	t.Run("the list shows the harness, never its key", func(t *testing.T) {
		p := admin.get("/ui/harnesses")
		if !strings.Contains(p.body, `href="`+hpath+`"`) || !strings.Contains(p.body, "encrypted") || strings.Contains(p.body, "k-secret-1") {
			t.Fatalf("list:\n%s", p.body)
		}
	})
	t.Run("a reader sees harnesses but no register form, and cannot register", func(t *testing.T) {
		rd := s.client()
		rd.signIn(s.reader)
		p := rd.get("/ui/harnesses")
		if p.status != http.StatusOK || strings.Contains(p.body, `action="/ui/harnesses"`) || !strings.Contains(p.body, "desk") {
			t.Fatalf("reader list: %d\n%s", p.status, p.body)
		}
		if p := rd.post("/ui/harnesses", url.Values{"csrf": {hidden(t, p.body, "csrf")}, "name": {"x"}, "base_url": {hs.URL}}); p.status != http.StatusForbidden {
			t.Fatalf("reader register: %d", p.status)
		}
	})
	t.Run("sessions are listed with the filters passed to the harness, escaped, cursor paged", func(t *testing.T) {
		p := admin.get(hpath + "?user_id=u7&since=2026-01-01T00:00:00Z&query=")
		if p.status != http.StatusOK {
			t.Fatalf("sessions: %d\n%s", p.status, p.body)
		}
		h.mu.Lock()
		last, key := h.last, h.apiKey
		h.mu.Unlock()
		if last.Get("user_id") != "u7" || last.Get("since") != "2026-01-01T00:00:00Z" || last.Has("query") || key != "k-secret-1" {
			t.Fatalf("harness got %v, key %q", last, key)
		}
		if strings.Contains(p.body, "<script>alert(1)") || !strings.Contains(p.body, "&lt;script&gt;") {
			t.Fatalf("title not escaped:\n%s", p.body)
		}
		if !strings.Contains(p.body, hpath+"/runs/r2") || !strings.Contains(p.body, "Next page") || !strings.Contains(p.body, `value="u7"`) {
			t.Fatalf("sessions page:\n%s", p.body)
		}
		i := strings.Index(p.body, "Next page")
		j := strings.LastIndex(p.body[:i], `href="`)
		next := strings.ReplaceAll(p.body[j+len(`href="`):strings.Index(p.body[j+len(`href="`):], `"`)+j+len(`href="`)], "&amp;", "&")
		if p := admin.get(next); p.status != http.StatusOK || !strings.Contains(p.body, "/runs/r1") || !strings.Contains(p.body, "user_id=u7") {
			t.Fatalf("next page %s: %d\n%s", next, p.status, p.body)
		}
	})
	t.Run("a bad filter is a 400 with the reason", func(t *testing.T) {
		p := admin.get(hpath + "?since=yesterday")
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, "since must be an RFC 3339 time") {
			t.Fatalf("got %d\n%s", p.status, p.body)
		}
	})
	t.Run("a misbehaving harness shows its failure, not a 500", func(t *testing.T) {
		for _, tc := range []struct{ query, want string }{
			{"garbage", "harness_invalid_response"},
			{"hang", "harness_timeout"},
		} {
			p := admin.get(hpath + "?query=" + tc.query)
			if p.status != http.StatusBadGateway || !strings.Contains(p.body, tc.want) || !strings.Contains(p.body, `role="alert"`) {
				t.Fatalf("%s: %d\n%s", tc.query, p.status, p.body)
			}
		}
	})
	t.Run("a run shows its status and its trajectory in the ATIF viewer", func(t *testing.T) {
		p := admin.get(hpath + "/runs/r2")
		for _, want := range []string{"refund approved", "completed", `id="step-1"`, "lookup_order", "shipped", "It shipped.", "(2 by the agent, 1 tool call)"} {
			if !strings.Contains(p.body, want) {
				t.Fatalf("run page lacks %q: %d\n%s", want, p.status, p.body)
			}
		}
	})
	t.Run("a run whose trajectory is not JSON shows the run and says why", func(t *testing.T) {
		p := admin.get(hpath + "/runs/r1")
		if p.status != http.StatusOK || !strings.Contains(p.body, "boom") || !strings.Contains(p.body, "No trajectory:") {
			t.Fatalf("got %d\n%s", p.status, p.body)
		}
	})
	t.Run("a run the harness does not have is a 404 page", func(t *testing.T) {
		if p := admin.get(hpath + "/runs/nope"); p.status != http.StatusNotFound {
			t.Fatalf("got %d\n%s", p.status, p.body)
		}
	})
	t.Run("another tenant's harness id is not found", func(t *testing.T) {
		if p := admin.get("/ui/harnesses/0190c3b2-0000-7000-8000-000000000000"); p.status != http.StatusNotFound {
			t.Fatalf("got %d", p.status)
		}
	})
}
