package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/harness"
)

// Against gyre's own Harness API v1 kit, the sessions browser lists runs
// with the contract's semantics — a title filter, the harness's session
// grouping, newest first, its total — and reads a run, with the key the
// kit requires.
func TestSessionsBrowserAgainstHarnessKit(t *testing.T) {
	t.Parallel()
	kit, err := harnesskit.New(harnesskit.AgentFunc(func(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		var in struct {
			Question string `json:"question"`
			Session  string `json:"session"`
		}
		_ = json.Unmarshal(run.Input(), &in)
		run.SetTitle(in.Question)
		if in.Session != "" {
			run.SetSessionID(in.Session)
		}
		return harnesskit.Result{Answer: "re: " + in.Question}, nil
	}), harnesskit.Options{Agent: "kit", Model: "m-kit", APIKey: "kit-key"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(kit)
	t.Cleanup(ts.Close)
	var ids []string
	for _, in := range []string{
		`{"question":"Refund order 1","session":"s1"}`,
		`{"question":"Refund order 1, again","session":"s1"}`,
		`{"question":"Where is my parcel"}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/runs", strings.NewReader(`{"input":`+in+`}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-api-key", "kit-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var created struct {
			RunID string `json:"run_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if _, err := kit.Wait(ctx, created.RunID); err != nil {
			t.Fatalf("run %q: %v", created.RunID, err)
		}
		cancel()
		ids = append(ids, created.RunID)
	}
	e := harnessEnv(t, sqliteEngine, sealKey(t, testSecretKey), harness.Config{})
	reg := e.registerHarness(`{"name":"kit","base_url":"`+ts.URL+`","api_key":"kit-key"}`, http.StatusCreated)
	base := "/api/v1/harnesses/" + reg.ID
	list := func(q string) runsPageJSON {
		t.Helper()
		r := e.do(http.MethodGet, base+"/runs"+q, e.admin, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET runs%s: %d %s", q, r.status, r.body)
		}
		var p runsPageJSON
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Two sessions: s1 listed once, as its newest run; newest first.
	all := list("")
	if all.Total != 2 || len(all.Items) != 2 || all.Items[0]["run_id"] != ids[2] || all.Items[1]["run_id"] != ids[1] || all.Items[1]["session_id"] != "s1" {
		t.Fatalf("listing = %+v, runs %v", all, ids)
	}
	if p := list("?query=PARCEL"); p.Total != 1 || p.Items[0]["title"] != "Where is my parcel" {
		t.Fatalf("title filter = %+v", p)
	}
	p := list("?limit=1")
	if p.Next == nil || len(p.Items) != 1 {
		t.Fatalf("first page = %+v", p)
	}
	if p2 := list("?limit=1&cursor=" + *p.Next); len(p2.Items) != 1 || p2.Items[0]["run_id"] != ids[1] || p2.Next != nil {
		t.Fatalf("second page = %+v", p2)
	}
	r := e.do(http.MethodGet, base+"/runs/"+ids[0], e.admin, nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"answer":"re: Refund order 1"`) || !strings.Contains(string(r.body), `"model":"m-kit"`) {
		t.Fatalf("GET run: %d %s", r.status, r.body)
	}
	// With the wrong key the kit answers 401: a harness error, not ours.
	bad := e.registerHarness(`{"name":"kit-bad-key","base_url":"`+ts.URL+`","api_key":"wrong"}`, http.StatusCreated)
	e.do(http.MethodGet, "/api/v1/harnesses/"+bad.ID+"/runs", e.admin, nil).wantError(t, http.StatusBadGateway, gyre.CodeHarnessError, "")
}
