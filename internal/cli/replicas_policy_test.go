package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// TestReplicas_PolicyEndpointFollowsThePromotedPolicyOnEveryReplica: two
// gyre serve replicas on one PostgreSQL. A promotion set in the store and a
// rollback through one replica's API are served by the other replica's
// policy endpoint on the very next request (SPEC §6.1: within 1 s on every
// replica; no replica caches the promoted policy).
func TestReplicas_PolicyEndpointFollowsThePromotedPolicyOnEveryReplica(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	db := storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"finish_reason":"stop",
			"message":{"role":"assistant","content":"served by %s"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, req.Model, req.Model)
	}))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "gyre.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams:\n  - name: stub\n    base_url: "+up.URL+"/v1\n    allow_private: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildGyre(t)
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	a := startServe(t, bin, "--config", cfg, "--db", db, "--data", t.TempDir(), "--bootstrap-admin-key-file", keyFile)
	b := startServe(t, bin, "--config", cfg, "--db", db, "--data", t.TempDir())
	defer a.stop(t)
	defer b.stop(t)
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(raw))
	var inference struct {
		Key string `json:"key"`
	}
	if st := call(t, "POST", a.base+"/api/v1/keys", admin, `{"role":"inference"}`, &inference); st != http.StatusCreated {
		t.Fatalf("create inference key: %d", st)
	}
	for _, p := range []string{"base-v1", "cand-v1"} {
		if st := call(t, "POST", a.base+"/api/v1/policies", admin, `{"name":"`+p+`","upstream":"stub","model":"m-`+p+`"}`, nil); st != http.StatusCreated {
			t.Fatalf("create policy %s: %d", p, st)
		}
	}
	// The agent is seen through a batch.
	if st := call(t, "POST", a.base+"/api/v1/suites", admin, `{"name":"s","cases":[{"id":"c0","input":{"question":"q"},"graders":[{"contains":"ok"}]}]}`, nil); st != http.StatusCreated {
		t.Fatalf("upload suite: %d", st)
	}
	if st := call(t, "POST", a.base+"/api/v1/batches", admin, `{"agent_id":"bot-1","suite":"s","policy":"base-v1"}`, nil); st != http.StatusCreated {
		t.Fatalf("create batch: %d", st)
	}

	st, err := storeopen.Open(t.Context(), storeopen.Options{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tn, err := st.TenantByName(t.Context(), gyre.DefaultTenant)
	if err != nil {
		t.Fatal(err)
	}
	base := "base-v1"
	for _, c := range []promotion.Change{
		{TenantID: tn.ID, AgentID: "bot-1", Policy: "base-v1", SetBy: "key test"},
		{TenantID: tn.ID, AgentID: "bot-1", Expected: &base, Policy: "cand-v1", SetBy: "key test"},
	} {
		if _, err := st.SetPromotedPolicy(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	served := func(s *server) string {
		t.Helper()
		var out struct {
			Model string `json:"model"`
		}
		if code := call(t, "POST", s.base+"/agents/bot-1/v1/chat/completions", inference.Key,
			`{"model":"whatever","messages":[{"role":"user","content":"hi"}]}`, &out); code != http.StatusOK {
			t.Fatalf("policy endpoint on %s: %d", s.base, code)
		}
		return out.Model
	}
	for _, s := range []*server{a, b} {
		if m := served(s); m != "m-cand-v1" {
			t.Errorf("policy endpoint on %s after the promotion served %q, want m-cand-v1", s.base, m)
		}
	}
	if code := call(t, "POST", a.base+"/api/v1/agents/bot-1/rollback", admin, "", nil); code != http.StatusOK {
		t.Fatalf("rollback on replica a: %d", code)
	}
	if m := served(b); m != "m-base-v1" {
		t.Errorf("replica b's policy endpoint right after a rollback on replica a served %q, want m-base-v1", m)
	}
}
