package api

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/secret"
	"github.com/gyrehq/gyre/internal/store"
)

// testSecretKey is a GYRE_SECRET_KEY for tests.
var testSecretKey = hex.EncodeToString(bytes.Repeat([]byte{0x42}, 32))

func sealKey(t *testing.T, v string) *secret.Key {
	t.Helper()
	k, err := secret.ParseKey(v)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// harnessEnv is a server whose registry seals with key (nil: no
// GYRE_SECRET_KEY) and allows loopback harnesses, as the stand-in
// harnesses of these tests are.
func harnessEnv(t *testing.T, eng engine, key *secret.Key, cfg harness.Config) *env {
	t.Helper()
	cfg.AllowPrivate = true
	return newEnv(t, eng, Config{}, withHarnesses(func(st store.Store) *harness.Registry {
		return harness.New(st, key, cfg)
	}))
}

type harnessJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	BaseURL   string    `json:"base_url"`
	HasAPIKey bool      `json:"has_api_key"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
}

func (e *env) registerHarness(body string, want int) harnessJSON {
	e.t.Helper()
	r := e.json(http.MethodPost, "/api/v1/harnesses", e.admin, body)
	if r.status != want {
		e.t.Fatalf("POST /api/v1/harnesses %s: %d %s, want %d", body, r.status, r.body, want)
	}
	var h harnessJSON
	if err := json.Unmarshal(r.body, &h); err != nil {
		e.t.Fatal(err)
	}
	return h
}

// The harness's key is sealed at rest and never returned — not by the
// registration, the list or the read, not even masked; the same
// registration again is the same harness, a different one is 409.
func TestHarnessKeyIsEncryptedAtRestAndNeverReturned(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := harnessEnv(t, eng, sealKey(t, testSecretKey), harness.Config{})
		const apiKey = "hk-0123456789abcdef-secret"
		body := `{"name":"support","base_url":"https://support.example.com/api/","api_key":"` + apiKey + `"}`
		h := e.registerHarness(body, http.StatusCreated)
		if h.Name != "support" || h.BaseURL != "https://support.example.com/api" || !h.HasAPIKey || !strings.HasPrefix(h.CreatedBy, "key ") {
			t.Fatalf("registered %+v", h)
		}
		reader := e.key(gyre.RoleReader)
		for _, path := range []string{"/api/v1/harnesses", "/api/v1/harnesses/" + h.ID} {
			r := e.do(http.MethodGet, path, reader, nil)
			if r.status != http.StatusOK || !strings.Contains(string(r.body), `"has_api_key":true`) {
				t.Fatalf("GET %s: %d %s", path, r.status, r.body)
			}
			if strings.Contains(string(r.body), apiKey) || strings.Contains(string(r.body), `"api_key"`) {
				t.Fatalf("GET %s shows the key: %s", path, r.body)
			}
		}
		stored, err := e.st.HarnessByID(t.Context(), e.tenant.ID, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.APIKeySealed == nil || bytes.Contains(stored.APIKeySealed, []byte(apiKey)) || stored.APIKeyKID != sealKey(t, testSecretKey).ID() {
			t.Fatalf("stored key %q kid %q: want sealed under the server's key", stored.APIKeySealed, stored.APIKeyKID)
		}
		if strings.Contains(e.logs.String(), apiKey) {
			t.Fatal("a log line holds the harness key")
		}
		// The same registration is the same harness.
		if again := e.registerHarness(body, http.StatusOK); again.ID != h.ID {
			t.Fatalf("re-registration made %s, want %s", again.ID, h.ID)
		}
		for _, other := range []string{
			`{"name":"support","base_url":"https://support.example.com/api","api_key":"another"}`,
			`{"name":"support","base_url":"https://other.example.com/api","api_key":"` + apiKey + `"}`,
			`{"name":"support","base_url":"https://support.example.com/api"}`,
		} {
			e.json(http.MethodPost, "/api/v1/harnesses", e.admin, other).wantError(t, http.StatusConflict, gyre.CodeHarnessExists, "/name")
		}
		// Another tenant sees none of it.
		_, otherAdmin := e.newTenant("other")
		e.do(http.MethodGet, "/api/v1/harnesses/"+h.ID, otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		e.do(http.MethodGet, "/api/v1/harnesses/"+h.ID+"/runs", otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		e.do(http.MethodDelete, "/api/v1/harnesses/"+h.ID, otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		// Readers read; only admins register and delete.
		e.json(http.MethodPost, "/api/v1/harnesses", reader, `{"name":"x","base_url":"https://x.example.com"}`).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		e.do(http.MethodDelete, "/api/v1/harnesses/"+h.ID, reader, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		if r := e.do(http.MethodDelete, "/api/v1/harnesses/"+h.ID, e.admin, nil); r.status != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", r.status, r.body)
		}
		e.do(http.MethodGet, "/api/v1/harnesses/"+h.ID, reader, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	})
}

// Without GYRE_SECRET_KEY a harness with a key is refused, and nothing is
// stored; one without a key registers.
func TestHarnessWithKeyNeedsSecretKey(t *testing.T) {
	t.Parallel()
	e := harnessEnv(t, sqliteEngine, nil, harness.Config{})
	e.json(http.MethodPost, "/api/v1/harnesses", e.admin, `{"name":"a","base_url":"https://a.example.com","api_key":"k"}`).
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeSecretKeyUnset, "/api_key")
	if hs, _, err := e.st.ListHarnesses(t.Context(), e.tenant.ID, store.Page{}); err != nil || len(hs) != 0 {
		t.Fatalf("after the refusal the store holds %v, %v", hs, err)
	}
	if h := e.registerHarness(`{"name":"a","base_url":"https://a.example.com"}`, http.StatusCreated); h.HasAPIKey {
		t.Fatalf("registered %+v", h)
	}
}

// Registration rules: each bad body is refused with its code and pointer
// and changes nothing.
func TestHarnessRegistrationRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withHarnesses(func(st store.Store) *harness.Registry {
		return harness.New(st, sealKey(t, testSecretKey), harness.Config{})
	}))
	for _, tc := range []struct {
		name, body, code, pointer string
	}{
		{"no name", `{"base_url":"https://a.example.com"}`, gyre.CodeInvalidBody, "/name"},
		{"name outside the grammar", `{"name":"a b","base_url":"https://a.example.com"}`, gyre.CodeInvalidBody, "/name"},
		{"dot-dot name", `{"name":"..","base_url":"https://a.example.com"}`, gyre.CodeInvalidBody, "/name"},
		{"no base_url", `{"name":"a"}`, gyre.CodeInvalidBody, "/base_url"},
		{"not http", `{"name":"a","base_url":"ftp://a.example.com"}`, gyre.CodeInvalidBody, "/base_url"},
		{"credentials in the URL", `{"name":"a","base_url":"https://u:p@a.example.com"}`, gyre.CodeInvalidBody, "/base_url"},
		{"query", `{"name":"a","base_url":"https://a.example.com/?x=1"}`, gyre.CodeInvalidBody, "/base_url"},
		{"fragment", `{"name":"a","base_url":"https://a.example.com/#x"}`, gyre.CodeInvalidBody, "/base_url"},
		{"no host", `{"name":"a","base_url":"http:///x"}`, gyre.CodeInvalidBody, "/base_url"},
		{"loopback", `{"name":"a","base_url":"http://127.0.0.1:8080"}`, gyre.CodeHarnessNotAllowed, "/base_url"},
		{"localhost", `{"name":"a","base_url":"http://localhost:8080"}`, gyre.CodeHarnessNotAllowed, "/base_url"},
		{"private", `{"name":"a","base_url":"http://10.1.2.3"}`, gyre.CodeHarnessNotAllowed, "/base_url"},
		{"link-local metadata", `{"name":"a","base_url":"http://169.254.169.254"}`, gyre.CodeHarnessNotAllowed, "/base_url"},
		{"IPv6 loopback", `{"name":"a","base_url":"http://[::1]:80"}`, gyre.CodeHarnessNotAllowed, "/base_url"},
		{"empty key", `{"name":"a","base_url":"https://a.example.com","api_key":""}`, gyre.CodeInvalidBody, "/api_key"},
		{"key with a newline", `{"name":"a","base_url":"https://a.example.com","api_key":"k\nx: y"}`, gyre.CodeInvalidBody, "/api_key"},
		{"key not a string", `{"name":"a","base_url":"https://a.example.com","api_key":7}`, gyre.CodeInvalidBody, "/api_key"},
		{"unknown member", `{"name":"a","base_url":"https://a.example.com","url":"x"}`, gyre.CodeInvalidBody, "/url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.json(http.MethodPost, "/api/v1/harnesses", e.admin, tc.body).wantError(t, http.StatusUnprocessableEntity, tc.code, tc.pointer)
		})
	}
	if hs, _, err := e.st.ListHarnesses(t.Context(), e.tenant.ID, store.Page{}); err != nil || len(hs) != 0 {
		t.Fatalf("refused registrations stored %v, %v", hs, err)
	}
}

// standIn is a stand-in harness: each request is recorded and answered by
// handle.
type standIn struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func newStandIn(t *testing.T, handle http.HandlerFunc) *standIn {
	s := &standIn{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Clone(r.Context()))
		s.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *standIn) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[len(s.reqs)-1]
}

type runsPageJSON struct {
	Items []map[string]any `json:"items"`
	Total int              `json:"total"`
	Next  *string          `json:"next_cursor"`
}

// The sessions browser's listing passes the contract's filters to the
// harness with its key, pages by cursor over the harness's offset, and
// shows every item key (null when the harness said nothing).
func TestHarnessRunsPassTheContractFilters(t *testing.T) {
	t.Parallel()
	h := newStandIn(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/runs":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"runs":[{"run_id":"r3","title":"refund","session_id":"s1","extra":1},{"run_id":"r2"},{"run_id":"r1"}],"total":5}`)
		case "/runs/r2":
			fmt.Fprint(w, `{"status":"completed","model":"m1","answer":"done","artifacts":[{"name":"a.txt"}]}`)
		case "/runs/r1/trajectory":
			fmt.Fprint(w, `{"schema_version":"ATIF-v1.7","steps":[]}`)
		case "/capabilities":
			fmt.Fprint(w, `{"agent":"bot","provides":{"run_listing":true}}`)
		default:
			http.NotFound(w, r)
		}
	})
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := harnessEnv(t, eng, sealKey(t, testSecretKey), harness.Config{})
		reg := e.registerHarness(`{"name":"h","base_url":"`+h.URL+`","api_key":"hk-1"}`, http.StatusCreated)
		reader := e.key(gyre.RoleReader)
		base := "/api/v1/harnesses/" + reg.ID
		r := e.do(http.MethodGet, base+"/runs?query=refund&user_id=u1&client_id=c1&since=2026-01-01T00:00:00Z&until=2026-02-01T00:00:00%2B01:00&limit=2", reader, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET runs: %d %s", r.status, r.body)
		}
		got := h.last()
		if got.Header.Get("x-api-key") != "hk-1" {
			t.Fatalf("harness got x-api-key %q", got.Header.Get("x-api-key"))
		}
		want := url.Values{"query": {"refund"}, "user_id": {"u1"}, "client_id": {"c1"}, "since": {"2026-01-01T00:00:00Z"},
			"until": {"2026-01-31T23:00:00Z"}, "limit": {"2"}, "offset": {"0"}}
		if got.URL.Query().Encode() != want.Encode() {
			t.Fatalf("harness got query %s, want %s", got.URL.Query().Encode(), want.Encode())
		}
		var page runsPageJSON
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		// Three items for a limit of 2 are cut to 2; extra members dropped.
		if len(page.Items) != 2 || page.Total != 5 || page.Next == nil || page.Items[0]["run_id"] != "r3" {
			t.Fatalf("page = %s", r.body)
		}
		if _, ok := page.Items[0]["extra"]; ok {
			t.Fatalf("an unknown member of the harness was passed on: %s", r.body)
		}
		if v, ok := page.Items[1]["title"]; !ok || v != nil {
			t.Fatalf("an absent title is not null: %s", r.body)
		}
		r = e.do(http.MethodGet, base+"/runs?limit=2&cursor="+url.QueryEscape(*page.Next), reader, nil)
		if r.status != http.StatusOK || h.last().URL.Query().Get("offset") != "2" {
			t.Fatalf("next page: %d %s, harness offset %q", r.status, r.body, h.last().URL.Query().Get("offset"))
		}
		r = e.do(http.MethodGet, base+"/runs/r2", reader, nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"answer":"done"`) || !strings.Contains(string(r.body), `"output":null`) {
			t.Fatalf("GET run: %d %s", r.status, r.body)
		}
		r = e.do(http.MethodGet, base+"/runs/r1/trajectory", reader, nil)
		if r.status != http.StatusOK || string(r.body) != `{"schema_version":"ATIF-v1.7","steps":[]}` || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET trajectory: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		r = e.do(http.MethodGet, base+"/capabilities", reader, nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"agent":"bot"`) {
			t.Fatalf("GET capabilities: %d %s", r.status, r.body)
		}
		e.do(http.MethodGet, base+"/runs/nope", reader, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	})
}

// Bad listing queries are refused before the harness is called.
func TestHarnessRunsQueryRules(t *testing.T) {
	t.Parallel()
	h := newStandIn(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("harness called: %s", r.URL) })
	e := harnessEnv(t, sqliteEngine, nil, harness.Config{})
	reg := e.registerHarness(`{"name":"h","base_url":"`+h.URL+`"}`, http.StatusCreated)
	for _, q := range []string{
		"limit=0", "limit=101", "limit=x", "offset=3", "since=yesterday", "until=2026-01-01",
		"since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", "cursor=abc", "query=a&query=b",
		"query=" + strings.Repeat("q", 1025),
	} {
		e.do(http.MethodGet, "/api/v1/harnesses/"+reg.ID+"/runs?"+q, e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
	}
	e.do(http.MethodGet, "/api/v1/harnesses/"+reg.ID+"/runs/%2E%2E", e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
	e.do(http.MethodGet, "/api/v1/harnesses/"+reg.ID+"/runs/"+strings.Repeat("r", 1025), e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
	e.do(http.MethodGet, "/api/v1/harnesses/not-a-uuid/runs", e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
}

// A harness that misbehaves — too slow, too much, not JSON, breaking the
// contract, redirecting, failing — is a clear 502 with a code, never a
// hang or a 500.
func TestMisbehavingHarnessIsA502(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	big := `{"runs":[],"total":0,"pad":"` + strings.Repeat("x", 70<<10) + `"}`
	cases := []struct {
		name, path string
		answer     func(w http.ResponseWriter, r *http.Request)
		status     int
		code       string
	}{
		{"slow", "/runs", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}, http.StatusBadGateway, gyre.CodeHarnessTimeout},
		{"slow body", "/runs", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"runs":[`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}, http.StatusBadGateway, gyre.CodeHarnessTimeout},
		{"huge body", "/runs", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, big) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"bad JSON", "/runs", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"runs":[`) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"not a RunList", "/runs", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"runs":"no"}`) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"redirect", "/runs", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
		}, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"server error", "/runs", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, http.StatusBadGateway, gyre.CodeHarnessError},
		{"no listing", "/runs", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, http.StatusBadGateway, gyre.CodeHarnessError},
		{"run without model", "/runs/r1", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"status":"running"}`) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"huge trajectory", "/runs/r1/trajectory", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, big) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"trajectory not JSON", "/runs/r1/trajectory", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `<html>`) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"trajectory with trailing data", "/runs/r1/trajectory", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{} {}`) }, http.StatusBadGateway, gyre.CodeHarnessInvalidResponse},
		{"slow trajectory", "/runs/r1/trajectory", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"steps":[`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}, http.StatusBadGateway, gyre.CodeHarnessTimeout},
	}
	e := harnessEnv(t, sqliteEngine, nil, harness.Config{CallTimeout: 300 * time.Millisecond, MaxAnswerBytes: 64 << 10, MaxTrajectoryBytes: 64 << 10})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newStandIn(t, tc.answer)
			reg := e.registerHarness(`{"name":"`+strings.ReplaceAll(tc.name, " ", "-")+`","base_url":"`+h.URL+`"}`, http.StatusCreated)
			r := e.do(http.MethodGet, "/api/v1/harnesses/"+reg.ID+tc.path, e.admin, nil)
			r.wantError(t, tc.status, tc.code, "")
			if strings.Contains(string(r.body), "internal") {
				t.Fatalf("answer looks internal: %s", r.body)
			}
		})
	}
}

// Without --harness-allow-private, a harness that resolves to a private
// address is refused when dialled, whatever its registration said.
func TestPrivateHarnessIsRefusedAtDial(t *testing.T) {
	t.Parallel()
	h := newStandIn(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("private harness reached: %s", r.URL) })
	e := newEnv(t, sqliteEngine, Config{}, withHarnesses(func(st store.Store) *harness.Registry {
		return harness.New(st, nil, harness.Config{})
	}))
	// Registered directly: the API refuses the loopback URL up front.
	id := "0192f0c4-0000-7000-8000-0000000000aa"
	if _, _, err := e.st.CreateHarness(t.Context(), store.Harness{ID: id, TenantID: e.tenant.ID, Name: "p", BaseURL: h.URL, CreatedBy: "key k"}); err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodGet, "/api/v1/harnesses/"+id+"/runs", e.admin, nil)
	r.wantError(t, http.StatusBadGateway, gyre.CodeHarnessUnreachable, "")
	if !strings.Contains(r.errorBody(t).Message, "private") {
		t.Fatalf("message %q does not say why", r.errorBody(t).Message)
	}
}

// A harness whose key was sealed under another GYRE_SECRET_KEY is not
// called: 503 harness_key_unavailable, naming the key it needs.
func TestHarnessKeyUnderAnotherSecretKey(t *testing.T) {
	t.Parallel()
	h := newStandIn(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("harness called without its key: %s", r.URL) })
	st := sqliteEngine.open(t, nil)
	old := sealKey(t, testSecretKey)
	reg := harness.New(st, old, harness.Config{AllowPrivate: true})
	tn, err := st.CreateTenant(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	name, base, key := "h", h.URL, "k"
	hr, _, err := reg.Register(t.Context(), tn.ID, "key k", harness.Input{Name: &name, BaseURL: &base, APIKey: &key})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []*secret.Key{nil, sealKey(t, hex.EncodeToString(bytes.Repeat([]byte{7}, 32)))} {
		_, err := harness.New(st, k, harness.Config{AllowPrivate: true}).ListRuns(t.Context(), hr, harness.RunsQuery{Limit: 1})
		if code := gyre.ErrorCode(err); code != gyre.CodeHarnessKeyUnavailable {
			t.Fatalf("ListRuns with key %v: %v, want harness_key_unavailable", k, err)
		}
	}
}
