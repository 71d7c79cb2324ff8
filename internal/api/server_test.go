package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	r := e.do(http.MethodGet, "/healthz", "", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"ok"`) {
		t.Fatalf("GET /healthz = %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodHead, "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("HEAD /healthz = %d", r.status)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			if r := e.do(http.MethodGet, "/readyz", "", nil); r.status != http.StatusOK {
				t.Fatalf("GET /readyz = %d %s", r.status, r.body)
			}
			if err := e.st.Close(); err != nil {
				t.Fatal(err)
			}
			r := e.do(http.MethodGet, "/readyz", "", nil)
			r.wantError(t, http.StatusServiceUnavailable, gyre.CodeUnavailable, "")
			if r := e.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK {
				t.Fatalf("GET /healthz with the store closed = %d, want 200 (live)", r.status)
			}
		})
	}
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			unknown, _, err := auth.NewKey()
			if err != nil {
				t.Fatal(err)
			}
			revoked := e.createKey(e.admin, `{"role":"admin"}`)
			if r := e.do(http.MethodDelete, "/api/v1/keys/"+revoked.ID, e.admin, nil); r.status != http.StatusNoContent {
				t.Fatalf("revoke: %d %s", r.status, r.body)
			}
			tests := []struct {
				name   string
				header string
			}{
				{"missing", ""},
				{"malformed scheme", "Basic " + e.admin},
				{"no scheme", e.admin},
				{"not a gyre key", "Bearer sk-abc"},
				{"truncated key", "Bearer " + e.admin[:20]},
				{"unknown key", "Bearer " + unknown},
				{"revoked key", "Bearer " + revoked.Key},
			}
			for _, tt := range tests {
				for _, path := range []string{"/api/v1/keys", "/metrics"} {
					r := e.do(http.MethodGet, path, "", nil, "Authorization", tt.header)
					r.wantError(t, http.StatusUnauthorized, gyre.CodeUnauthorized, "")
					if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
						t.Errorf("%s %s: WWW-Authenticate = %q", tt.name, path, r.header.Get("WWW-Authenticate"))
					}
					if strings.Contains(string(r.body), e.admin) || strings.Contains(string(r.body), revoked.Key) {
						t.Errorf("%s: answer shows the key: %s", tt.name, r.body)
					}
				}
			}
		})
	}
}

func TestForbidden(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			reader := e.createKey(e.admin, `{"role":"reader"}`)
			agent := e.createKey(e.admin, `{"role":"agent","agent_ids":["bot-1"]}`)
			evaluator := e.createKey(e.admin, `{"role":"evaluator"}`)
			some := e.createKey(e.admin, `{"role":"reader"}`)
			for _, k := range []createdKey{reader, agent, evaluator} {
				e.json(http.MethodPost, "/api/v1/keys", k.Key, `{"role":"admin"}`).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
				e.do(http.MethodGet, "/api/v1/keys", k.Key, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
				e.do(http.MethodDelete, "/api/v1/keys/"+some.ID, k.Key, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
				// A key of any role may scrape metrics.
				if r := e.do(http.MethodGet, "/metrics", k.Key, nil); r.status != http.StatusOK {
					t.Errorf("%s key on /metrics: %d", k.Role, r.status)
				}
			}
			// The forbidden DELETE changed nothing.
			if r := e.do(http.MethodGet, "/metrics", some.Key, nil); r.status != http.StatusOK {
				t.Fatalf("key survived forbidden revocations: %d", r.status)
			}
		})
	}
}

func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			k := e.createKey(e.admin, `{"role":"admin","name":"ops"}`)
			if !auth.WellFormed(k.Key) || k.Role != gyre.RoleAdmin || k.Name != "ops" || k.AgentIDs != nil {
				t.Fatalf("created %+v", k)
			}
			if _, err := uuid.Parse(k.ID); err != nil {
				t.Fatalf("id %q is not a UUID", k.ID)
			}
			agent := e.createKey(k.Key, `{"role":"agent","agent_ids":["bot-1","bot-2"]}`)
			if strings.Join(agent.AgentIDs, ",") != "bot-1,bot-2" {
				t.Fatalf("agent_ids = %v", agent.AgentIDs)
			}

			r := e.do(http.MethodGet, "/api/v1/keys", k.Key, nil)
			if r.status != http.StatusOK {
				t.Fatalf("list: %d %s", r.status, r.body)
			}
			for _, secret := range []string{e.admin, k.Key, agent.Key} {
				if strings.Contains(string(r.body), secret) {
					t.Fatalf("list shows a secret: %s", r.body)
				}
			}
			var l struct {
				Items []map[string]any `json:"items"`
				Next  *string          `json:"next_cursor"`
			}
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != 3 || l.Next != nil {
				t.Fatalf("list = %s, want 3 keys and next_cursor null", r.body)
			}
			for _, it := range l.Items {
				for _, f := range []string{"id", "name", "role", "agent_ids", "created_at", "revoked_at"} {
					if _, ok := it[f]; !ok {
						t.Fatalf("item %v lacks %q", it, f)
					}
				}
			}

			// Revoke the new admin key with itself: it stops at once.
			if r := e.do(http.MethodDelete, "/api/v1/keys/"+k.ID, k.Key, nil); r.status != http.StatusNoContent || len(r.body) != 0 {
				t.Fatalf("revoke: %d %s", r.status, r.body)
			}
			e.do(http.MethodGet, "/api/v1/keys", k.Key, nil).wantError(t, http.StatusUnauthorized, gyre.CodeUnauthorized, "")
			// Revoking again is fine; the revoked key shows in the list.
			if r := e.do(http.MethodDelete, "/api/v1/keys/"+k.ID, e.admin, nil); r.status != http.StatusNoContent {
				t.Fatalf("second revoke: %d %s", r.status, r.body)
			}
			r = e.do(http.MethodGet, "/api/v1/keys", e.admin, nil)
			if !bytes.Contains(r.body, []byte(`"revoked_at":"`)) {
				t.Fatalf("revoked key shows no revoked_at: %s", r.body)
			}
			// Keys it created live on.
			if r := e.do(http.MethodGet, "/metrics", agent.Key, nil); r.status != http.StatusOK {
				t.Fatalf("agent key after its creator was revoked: %d", r.status)
			}
		})
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			_, otherAdmin := e.newTenant("other")
			mine := e.createKey(e.admin, `{"role":"reader"}`)

			// The other tenant's admin cannot see or revoke acme's key.
			e.do(http.MethodDelete, "/api/v1/keys/"+mine.ID, otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			r := e.do(http.MethodGet, "/api/v1/keys", otherAdmin, nil)
			if r.status != http.StatusOK || strings.Contains(string(r.body), mine.ID) {
				t.Fatalf("other tenant's list: %d %s", r.status, r.body)
			}
			if r := e.do(http.MethodGet, "/metrics", mine.Key, nil); r.status != http.StatusOK {
				t.Fatalf("key revoked across tenants: %d", r.status)
			}
			// An id that exists nowhere is 404 too.
			e.do(http.MethodDelete, "/api/v1/keys/"+uuid.NewString(), e.admin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		})
	}
}

func TestCreateKeyBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	tests := []struct {
		name    string
		body    string
		status  int
		code    string
		pointer string
	}{
		{"unknown member", `{"role":"reader","rol":"x"}`, 422, gyre.CodeInvalidBody, "/rol"},
		{"unknown member needing escape", `{"role":"reader","a/b~c":1}`, 422, gyre.CodeInvalidBody, "/a~1b~0c"},
		{"missing role", `{}`, 422, gyre.CodeInvalidBody, "/role"},
		{"null role", `{"role":null}`, 422, gyre.CodeInvalidBody, "/role"},
		{"bad role", `{"role":"root"}`, 422, gyre.CodeInvalidBody, "/role"},
		{"role of wrong type", `{"role":1}`, 422, gyre.CodeInvalidBody, "/role"},
		{"agent_ids not an array", `{"role":"agent","agent_ids":"bot"}`, 422, gyre.CodeInvalidBody, "/agent_ids"},
		{"agent_ids empty", `{"role":"agent","agent_ids":[]}`, 422, gyre.CodeInvalidBody, "/agent_ids"},
		{"agent_ids with a number", `{"role":"agent","agent_ids":["a",2]}`, 422, gyre.CodeInvalidBody, "/agent_ids"},
		{"agent_ids with an empty id", `{"role":"agent","agent_ids":["a",""]}`, 422, gyre.CodeInvalidBody, "/agent_ids/1"},
		{"agent_ids with a slash", `{"role":"agent","agent_ids":["a/b"]}`, 422, gyre.CodeInvalidBody, "/agent_ids/0"},
		{"agent_ids with dot-dot", `{"role":"agent","agent_ids":[".."]}`, 422, gyre.CodeInvalidBody, "/agent_ids/0"},
		{"agent_ids with trailing space", `{"role":"agent","agent_ids":["bot "]}`, 422, gyre.CodeInvalidBody, "/agent_ids/0"},
		{"agent_ids on an admin key", `{"role":"admin","agent_ids":["a"]}`, 422, gyre.CodeInvalidBody, "/agent_ids"},
		{"duplicate member", `{"role":"reader","role":"admin"}`, 422, gyre.CodeInvalidBody, "/role"},
		{"not an object", `["role"]`, 422, gyre.CodeInvalidBody, ""},
		{"null body", `null`, 422, gyre.CodeInvalidBody, ""},
		{"empty body", ``, 422, gyre.CodeInvalidBody, ""},
		{"invalid JSON", `{"role":`, 422, gyre.CodeInvalidBody, ""},
		{"trailing data", `{"role":"reader"} {}`, 422, gyre.CodeInvalidBody, ""},
		{"invalid UTF-8", "{\"role\":\"reader\",\"name\":\"\xff\"}", 422, gyre.CodeInvalidBody, ""},
		{"name too long", `{"role":"reader","name":"` + strings.Repeat("n", 256) + `"}`, 422, gyre.CodeInvalidBody, "/name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.json(http.MethodPost, "/api/v1/keys", e.admin, tt.body)
			r.wantError(t, tt.status, tt.code, tt.pointer)
		})
	}
	// Nothing was created by any of them.
	var l struct{ Items []any }
	if err := json.Unmarshal(e.do(http.MethodGet, "/api/v1/keys", e.admin, nil).body, &l); err != nil || len(l.Items) != 1 {
		t.Fatalf("keys after bad bodies: %d (%v), want only the admin key", len(l.Items), err)
	}

	// Null members count as absent.
	k := e.createKey(e.admin, `{"role":"agent","agent_ids":null,"name":null}`)
	if k.AgentIDs != nil || k.Name != "" {
		t.Fatalf("null members: %+v", k)
	}
}

func TestMediaTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	body := `{"role":"reader"}`
	e.json(http.MethodPost, "/api/v1/keys", e.admin, body, "Content-Type", "text/plain").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	e.json(http.MethodPost, "/api/v1/keys", e.admin, body, "Content-Type", "application/x-www-form-urlencoded").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	e.json(http.MethodPost, "/api/v1/keys", e.admin, body, "Content-Encoding", "br").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	for _, ct := range []string{"application/json; charset=utf-8", "application/merge-patch+json", ""} {
		if r := e.json(http.MethodPost, "/api/v1/keys", e.admin, body, "Content-Type", ct); r.status != http.StatusCreated {
			t.Errorf("Content-Type %q: %d %s", ct, r.status, r.body)
		}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(body))
	zw.Close()
	if r := e.do(http.MethodPost, "/api/v1/keys", e.admin, &gz, "Content-Encoding", "gzip"); r.status != http.StatusCreated {
		t.Errorf("gzip body: %d %s", r.status, r.body)
	}
	e.json(http.MethodPost, "/api/v1/keys", e.admin, body, "Content-Encoding", "gzip").
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, "")
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 1024
	e := newEnv(t, sqliteEngine, Config{MaxBodyBytes: limit})
	big := `{"role":"reader","name":"` + strings.Repeat("n", limit) + `"}`

	// Declared length over the limit.
	e.json(http.MethodPost, "/api/v1/keys", e.admin, big).wantError(t, http.StatusRequestEntityTooLarge, gyre.CodeBodyTooLarge, "")
	// Chunked, so the length is only found by reading.
	e.do(http.MethodPost, "/api/v1/keys", e.admin, io.MultiReader(strings.NewReader(big))).
		wantError(t, http.StatusRequestEntityTooLarge, gyre.CodeBodyTooLarge, "")
	// Small when compressed, over the limit when decompressed.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"role":"reader","name":"` + strings.Repeat(" ", 256<<10) + `"}`))
	zw.Close()
	if gz.Len() >= limit {
		t.Fatalf("compressed body is %d bytes; the test needs less than %d", gz.Len(), limit)
	}
	e.do(http.MethodPost, "/api/v1/keys", e.admin, &gz, "Content-Encoding", "gzip").
		wantError(t, http.StatusRequestEntityTooLarge, gyre.CodeBodyTooLarge, "")
	// Exactly at the limit is fine.
	exact := `{"role":"reader","name":"` + strings.Repeat("n", 200) + `"}`
	exact += strings.Repeat(" ", limit-len(exact))
	if r := e.json(http.MethodPost, "/api/v1/keys", e.admin, exact); r.status != http.StatusCreated {
		t.Fatalf("body of exactly %d bytes: %d %s", len(exact), r.status, r.body)
	}
}

func TestListKeysPaging(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			for range 4 {
				e.createKey(e.admin, `{"role":"reader"}`)
			}
			var ids []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 5 {
					t.Fatal("paging does not end")
				}
				path := "/api/v1/keys?limit=2"
				if cursor != "" {
					path += "&cursor=" + cursor
				}
				r := e.do(http.MethodGet, path, e.admin, nil)
				var l struct {
					Items []struct{ ID string }
					Next  *string `json:"next_cursor"`
				}
				if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil {
					t.Fatalf("GET %s: %d %s", path, r.status, r.body)
				}
				if len(l.Items) > 2 {
					t.Fatalf("page of %d items with limit=2", len(l.Items))
				}
				for _, it := range l.Items {
					ids = append(ids, it.ID)
				}
				if l.Next == nil {
					break
				}
				cursor = *l.Next
			}
			if len(ids) != 5 {
				t.Fatalf("paged through %d keys, want 5: %v", len(ids), ids)
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("key %s on two pages", id)
				}
				seen[id] = true
			}

			for _, q := range []string{"limit=0", "limit=501", "limit=-1", "limit=abc", "limit=1&limit=2", "cursor=", "cursor=bm90LWEtY3Vyc29y", "page=2", "%zz"} {
				e.do(http.MethodGet, "/api/v1/keys?"+q, e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			}
			if r := e.do(http.MethodGet, "/api/v1/keys?limit=500", e.admin, nil); r.status != http.StatusOK {
				t.Fatalf("limit=500: %d %s", r.status, r.body)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	e.do(http.MethodGet, "/nope", "", nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	e.do(http.MethodGet, "/api/v1/keys/", e.admin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	r := e.do(http.MethodPut, "/api/v1/keys", e.admin, nil)
	r.wantError(t, http.StatusMethodNotAllowed, gyre.CodeMethodNotAllowed, "")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow = %q", allow)
	}
	e.do(http.MethodPost, "/healthz", "", nil).wantError(t, http.StatusMethodNotAllowed, gyre.CodeMethodNotAllowed, "")
	for _, p := range []string{"/api/v1/keys/not-a-uuid", "/api/v1/keys/" + strings.ToUpper(uuid.NewString()) + "x", "/api/v1/keys/%7B" + uuid.NewString() + "%7D"} {
		e.do(http.MethodDelete, p, e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
	}
	// Dot segments, even percent-encoded, are refused, never redirected.
	for _, p := range []string{"/api/v1/keys/%2e%2e", "/api/v1/keys/.", "/api//v1/keys", "/api/v1/../v1/keys"} {
		req, err := http.NewRequest(http.MethodDelete, e.ts.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = p // sent as is, not cleaned by the client
		req.Header.Set("Authorization", "Bearer "+e.admin)
		resp, err := e.ts.Client().Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("DELETE %s = %d, want 400", p, resp.StatusCode)
		}
	}
	// A percent-encoded UUID is decoded before it is checked.
	id := uuid.NewString()
	enc := strings.ReplaceAll(id, "-", "%2D")
	e.do(http.MethodDelete, "/api/v1/keys/"+enc, e.admin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
}

// An incoming X-Request-Id is echoed and logged only when it is short and
// safe — 1–64 characters of A-Z a-z 0-9 . _ - — and cannot be a secret gyre
// issued; any other is replaced by a minted UUIDv7 (issue 11, defect 6).
func TestRequestIDKeptOnlyWhenShortAndSafe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	apiKey, _, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id string
		kept     bool
	}{
		{"letters digits and dashes", "abc-123", true},
		{"dots and underscores", "trace.01_A", true},
		{"a UUID", "0192f0c4-0000-7000-8000-000000000001", true},
		{"64 characters", strings.Repeat("x", 64), true},
		{"65 characters", strings.Repeat("x", 65), false},
		{"a space", "has space", false},
		{"a quote", `quote"d`, false},
		{"a colon", "a:b", false},
		{"a slash", "a/b", false},
		{"an equals sign", "a=b", false},
		{"a plus sign", "a+b", false},
		{"not ASCII", "ünï", false},
		{"a gyre API key", apiKey, false},
		{"the key prefix", "gyre_x", false},
		{"the key prefix in capitals", "req-GYRE_x", false},
		{"shaped like a lease token", strings.Repeat("A", 43), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(http.MethodGet, "/healthz", "", nil, "X-Request-Id", tc.id)
			got := r.header.Get("X-Request-Id")
			if tc.kept {
				if got != tc.id {
					t.Fatalf("X-Request-Id %q: answered %q, want it kept", tc.id, got)
				}
				return
			}
			if got == tc.id || strings.Contains(e.logs.String(), tc.id) {
				t.Fatalf("X-Request-Id %q was echoed or logged (answered %q)", tc.id, got)
			}
			if u, err := uuid.Parse(got); err != nil || u.Version() != 7 {
				t.Fatalf("X-Request-Id %q: answered %q, want a minted UUIDv7", tc.id, got)
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	r := e.do(http.MethodGet, "/nope", "", nil)
	id := r.header.Get("X-Request-Id")
	if _, err := uuid.Parse(id); err != nil {
		t.Fatalf("minted id %q is not a UUID", id)
	}
	// The access log carries the same id.
	found := false
	for _, l := range e.logs.lines(t) {
		if l["msg"] == "http request" && l["request_id"] == id {
			found = l["route"] == routeUnmatched && l["status"] == float64(404)
		}
	}
	if !found {
		t.Fatalf("no access log line for request %s:\n%s", id, e.logs)
	}
}

func TestAccessLogUsesRouteTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	id := uuid.NewString()
	e.do(http.MethodDelete, "/api/v1/keys/"+id, e.admin, nil)
	var line map[string]any
	for _, l := range e.logs.lines(t) {
		if l["msg"] == "http request" && l["method"] == "DELETE" {
			line = l
		}
	}
	if line == nil {
		t.Fatalf("no access log line:\n%s", e.logs)
	}
	if line["route"] != "/api/v1/keys/{id}" || line["status"] != float64(404) {
		t.Fatalf("access log line %v", line)
	}
	for _, f := range []string{"duration_ms", "request_id", "key_id"} {
		if _, ok := line[f]; !ok {
			t.Fatalf("access log line lacks %s: %v", f, line)
		}
	}
	if strings.Contains(e.logs.String(), id) {
		t.Fatalf("the raw path was logged:\n%s", e.logs)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	id := uuid.NewString()
	e.do(http.MethodGet, "/healthz", "", nil)
	e.do(http.MethodDelete, "/api/v1/keys/"+id, e.admin, nil)
	e.do(http.MethodGet, "/no/such/"+id, "", nil)
	r := e.do(http.MethodGet, "/metrics", e.admin, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", r.status, r.body)
	}
	body := string(r.body)
	for _, want := range []string{
		`gyre_http_requests_total{method="GET",route="/healthz",status="200"} 1`,
		`gyre_http_requests_total{method="DELETE",route="/api/v1/keys/{id}",status="404"} 1`,
		`gyre_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`gyre_http_request_duration_seconds_bucket{method="GET",route="/healthz",le="+Inf"} 1`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, id) || strings.Contains(body, e.admin) {
		t.Fatalf("/metrics carries a raw path or a key")
	}

	// The separate listener's handler needs no key.
	rec := httptest.NewRecorder()
	e.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "gyre_http_requests_total") {
		t.Fatalf("MetricsHandler: %d", rec.Code)
	}
}

func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			secrets := []string{e.admin}
			k := e.createKey(e.admin, `{"role":"admin"}`)
			agent := e.createKey(k.Key, `{"role":"agent","agent_ids":["bot"]}`)
			secrets = append(secrets, k.Key, agent.Key)
			e.do(http.MethodGet, "/api/v1/keys", k.Key, nil)
			e.do(http.MethodGet, "/api/v1/keys", agent.Key, nil)                  // 403
			e.do(http.MethodGet, "/metrics", agent.Key, nil)                      // 200
			e.do(http.MethodGet, "/metrics", "", nil, "Authorization", agent.Key) // malformed
			e.do(http.MethodDelete, "/api/v1/keys/"+k.ID, k.Key, nil)
			e.do(http.MethodGet, "/api/v1/keys", k.Key, nil) // 401 revoked
			e.json(http.MethodPost, "/api/v1/keys", e.admin, `{"role":"reader","x":"`+agent.Key+`"}`)

			logs := e.logs.String()
			if !strings.Contains(logs, `"http request"`) {
				t.Fatalf("nothing was logged:\n%s", logs)
			}
			for _, s := range secrets {
				if strings.Contains(logs, s) {
					t.Fatalf("a key appears in the logs:\n%s", logs)
				}
				// Nor a recognisable part of it.
				if strings.Contains(logs, s[len(auth.KeyPrefix):len(auth.KeyPrefix)+16]) {
					t.Fatalf("part of a key appears in the logs:\n%s", logs)
				}
			}
		})
	}
}

func TestInternalErrorsAndPanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	e.srv.handle("GET /test/fail", public, func(http.ResponseWriter, *http.Request) error {
		return fmt.Errorf("query users table: %w", errors.New("password=hunter2"))
	})
	e.srv.handle("GET /test/panic", public, func(http.ResponseWriter, *http.Request) error {
		panic("boom at /etc/secret")
	})
	e.srv.handle("GET /test/gyre500", public, func(http.ResponseWriter, *http.Request) error {
		return &gyre.Error{Code: gyre.CodeInternal, Message: "db at 10.0.0.1 down"}
	})
	for _, p := range []string{"/test/fail", "/test/panic", "/test/gyre500"} {
		r := e.do(http.MethodGet, p, "", nil)
		r.wantError(t, http.StatusInternalServerError, gyre.CodeInternal, "")
		for _, leak := range []string{"hunter2", "boom", "10.0.0.1", "users"} {
			if strings.Contains(string(r.body), leak) {
				t.Fatalf("%s: the answer shows internals: %s", p, r.body)
			}
		}
		id := r.header.Get("X-Request-Id")
		if !strings.Contains(string(r.body), id) {
			t.Fatalf("%s: the answer does not name the request id %s: %s", p, id, r.body)
		}
		logged := false
		for _, l := range e.logs.lines(t) {
			if l["request_id"] == id && l["level"] == "ERROR" {
				logged = true
			}
		}
		if !logged {
			t.Fatalf("%s: no error log line with request id %s:\n%s", p, id, e.logs)
		}
	}
	// The server still answers after a panic.
	if r := e.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("after a panic: %d", r.status)
	}
}

func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	started, release := make(chan struct{}), make(chan struct{})
	e.srv.handle("GET /test/slow", public, func(w http.ResponseWriter, r *http.Request) error {
		close(started)
		<-release
		writeJSON(w, http.StatusOK, status{Status: "done"})
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()

	base := "http://" + ln.Addr().String()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/test/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}()
	<-started
	cancel() // shut down with a request in flight
	// New connections are refused once the listener is closed; wait for
	// that by polling the listener itself, not the clock.
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
	}
	close(release)
	if g := <-got; g != `200 {"status":"done"}` {
		t.Fatalf("in-flight request during shutdown: %s", g)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after graceful shutdown = %v, want nil", err)
	}
}
