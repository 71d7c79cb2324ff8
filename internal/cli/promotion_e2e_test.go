package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// promotionAgent is the test agent the workers run: it asks its rollout's
// gateway the turn input once and prints the answer, which the suite's
// grader reads.
const promotionAgent = `q="$GYRE_TURN_INPUT"
curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' \
  -d "{\"model\":\"agent-asks\",\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}]}" \
  "$OPENAI_BASE_URL/chat/completions" --fail -o "$GYRE_ARTIFACTS_DIR/answer.json" || exit 3
sed -n 's/.*"content":"\([^"]*\)".*/\1/p' "$GYRE_ARTIFACTS_DIR/answer.json"`

// TestPromotionEndToEnd: gyre serve, two real gyre workers running an
// agent through the gateway, and a stub upstream whose answers depend on
// the model each policy swaps in. The baseline's model solves six of ten
// cases. Each candidate runs both sides over the same ten tasks:
//   - one that solves three cases and half of three more is rejected
//     delta_below_min;
//   - one that solves every case but c0, which the baseline always
//     solved, is rejected task_regressed:<c0's task>;
//   - one whose calls fail on eight cases (its rollouts excluded: the agent
//     exits non-zero) is rejected excluded_rate_high:candidate;
//   - one that solves all ten is promoted; the production policy endpoint
//     then reaches its model, and after a rollback the baseline's again.
func TestPromotionEndToEnd(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the test agent needs curl")
	}
	var (
		mu    sync.Mutex
		calls = map[string]int{} // by model and question
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		q := req.Messages[len(req.Messages)-1].Content
		n, _ := strconv.Atoi(strings.TrimPrefix(q, "q"))
		mu.Lock()
		calls[req.Model+q]++
		nth := calls[req.Model+q]
		mu.Unlock()
		solved := false
		switch req.Model {
		case "m-base":
			solved = n < 6
		case "m-worse": // three cases always, three every other call
			solved = n < 3 || (n < 6 && nth%2 == 1)
		case "m-regress":
			solved = n != 0
		case "m-flaky":
			if n < 8 {
				http.Error(w, `{"error":{"message":"overloaded","type":"server_error"}}`, http.StatusInternalServerError)
				return
			}
			solved = true
		case "m-cand":
			solved = true
		}
		answer := "no"
		if solved {
			answer = "yes"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"finish_reason":"stop",`+
			`"message":{"role":"assistant","content":"%s"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
			req.Model, answer)
	}))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "gyre.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams:\n  - name: stub\n    base_url: "+up.URL+"/v1\n    allow_private: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildGyre(t)
	data := t.TempDir()
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	srv := startServe(t, bin, "--config", cfg, "--data", data, "--bootstrap-admin-key-file", keyFile)
	defer srv.stop(t)
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(raw))
	keys := map[string]string{}
	for _, role := range []string{"agent", "inference"} {
		var k struct {
			Key string `json:"key"`
		}
		if st := call(t, "POST", srv.base+"/api/v1/keys", admin, `{"role":"`+role+`"}`, &k); st != http.StatusCreated {
			t.Fatalf("create %s key: %d", role, st)
		}
		keys[role] = k.Key
	}
	for p, model := range map[string]string{"base": "m-base", "cand": "m-cand", "worse": "m-worse", "regress": "m-regress",
		"flaky": "m-flaky"} {
		if st := call(t, "POST", srv.base+"/api/v1/policies", admin, `{"name":"`+p+`","upstream":"stub","model":"`+model+`"}`, nil); st != http.StatusCreated {
			t.Fatalf("create policy %s: %d", p, st)
		}
	}
	var cases []string
	for i := range 10 {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"question":"q%d"},"graders":[{"contains":"yes"}]}`, i, i))
	}
	if st := call(t, "POST", srv.base+"/api/v1/suites", admin, `{"name":"gate","cases":[`+strings.Join(cases, ",")+`]}`, nil); st != http.StatusCreated {
		t.Fatalf("upload suite: %d", st)
	}
	// The agent is seen through a batch, cancelled at once, and runs
	// under base: its promoted policy, set in the store (there is no API
	// for a direct change), so the promotion has a baseline to measure
	// and a rollback has an entry to go back to.
	var b struct {
		BatchID string `json:"batch_id"`
	}
	if st := call(t, "POST", srv.base+"/api/v1/batches", admin, `{"agent_id":"bot","suite":"gate","policy":"base"}`, &b); st != http.StatusCreated {
		t.Fatalf("create batch: %d", st)
	}
	if st := call(t, "POST", srv.base+"/api/v1/batches/"+b.BatchID+"/cancel", admin, "", nil); st != http.StatusOK {
		t.Fatalf("cancel batch: %d", st)
	}
	st, err := storeopen.Open(t.Context(), storeopen.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	tn, err := st.TenantByName(t.Context(), gyre.DefaultTenant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: tn.ID, AgentID: "bot", Policy: "base", SetBy: "key test"}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	for range 2 {
		startPromotionWorker(t, srv.base, keys["agent"])
	}
	type promotionView struct {
		ID       string          `json:"id"`
		Baseline string          `json:"baseline"`
		State    string          `json:"state"`
		Reasons  []string        `json:"reasons"`
		TaskIDs  []string        `json:"task_ids"`
		Evidence json.RawMessage `json:"evidence"`
		Batches  struct {
			Baseline, Candidate string
		} `json:"batches"`
	}
	promote := func(candidate string) promotionView {
		t.Helper()
		var p promotionView
		if code := call(t, "POST", srv.base+"/api/v1/promotions", admin,
			`{"agent_id":"bot","candidate":"`+candidate+`","suite":"gate","repetitions":2,"deadline_s":600}`, &p); code != http.StatusCreated {
			t.Fatalf("start promotion of %s: %d", candidate, code)
		}
		if p.Baseline != "base" || len(p.TaskIDs) != 10 {
			t.Fatalf("promotion baseline %q over %d tasks, want base over 10", p.Baseline, len(p.TaskIDs))
		}
		for end := time.Now().Add(3 * time.Minute); p.State == promotion.StateRunning; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the promotion of %s was still running after 3 minutes:\n%s", candidate, srv.logs)
			}
			if code := call(t, "GET", srv.base+"/api/v1/promotions/"+p.ID, admin, "", &p); code != http.StatusOK {
				t.Fatalf("read promotion: %d", code)
			}
		}
		return p
	}
	for _, tc := range []struct {
		candidate string
		reason    func(p promotionView) string
	}{
		{"worse", func(promotionView) string { return promotion.ReasonDeltaBelowMin }},
		{"regress", func(p promotionView) string { return promotion.ReasonTaskRegressed(p.TaskIDs[0]) }},
		{"flaky", func(promotionView) string { return promotion.ReasonExcludedRateHigh(promotion.SideCandidate) }},
	} {
		p := promote(tc.candidate)
		t.Logf("candidate %s: %s %v", tc.candidate, p.State, p.Reasons)
		if want := tc.reason(p); p.State != promotion.StateRejected || !slices.Contains(p.Reasons, want) {
			t.Errorf("candidate %s ended %s %v, want rejected with %s\nevidence %s", tc.candidate, p.State, p.Reasons, want, p.Evidence)
		}
	}
	p := promote("cand")
	if p.State != promotion.StatePromoted {
		t.Fatalf("a candidate that solves four more cases of ten ended %s %v\nevidence %s", p.State, p.Reasons, p.Evidence)
	}
	var ev promotion.Evidence
	if err := json.Unmarshal(p.Evidence, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.MeanDifference == nil || *ev.MeanDifference < 0.399 || *ev.MeanDifference > 0.401 || len(ev.Tasks) != 10 {
		t.Errorf("evidence %s, want a mean difference of 0.4 over 10 tasks", p.Evidence)
	}
	for side, id := range map[string]string{"baseline": p.Batches.Baseline, "candidate": p.Batches.Candidate} {
		var bv struct {
			Policy        string         `json:"policy"`
			PromotionID   string         `json:"promotion_id"`
			PromotionSide string         `json:"promotion_side"`
			Counts        map[string]int `json:"counts"`
		}
		call(t, "GET", srv.base+"/api/v1/batches/"+id, admin, "", &bv)
		if bv.PromotionID != p.ID || bv.PromotionSide != side || bv.Counts["graded"] != 20 {
			t.Errorf("%s batch: %+v, want tagged with 20 graded rollouts", side, bv)
		}
	}

	served := func() string {
		t.Helper()
		var out struct {
			Model string `json:"model"`
		}
		if code := call(t, "POST", srv.base+"/agents/bot/v1/chat/completions", keys["inference"],
			`{"model":"whatever","messages":[{"role":"user","content":"q9"}]}`, &out); code != http.StatusOK {
			t.Fatalf("policy endpoint: %d", code)
		}
		return out.Model
	}
	if m := served(); m != "m-cand" {
		t.Errorf("after the promotion the policy endpoint reached %q, want the candidate's m-cand", m)
	}
	var agent struct {
		History []struct {
			Policy      string  `json:"policy"`
			PromotionID *string `json:"promotion_id"`
		} `json:"history"`
	}
	if code := call(t, "POST", srv.base+"/api/v1/agents/bot/rollback", admin, "", &agent); code != http.StatusOK {
		t.Fatalf("rollback: %d", code)
	}
	if n := len(agent.History); n != 2 || agent.History[1].PromotionID == nil || *agent.History[1].PromotionID != p.ID {
		t.Errorf("history %+v, want the promotion's entry second", agent.History)
	}
	if m := served(); m != "m-base" {
		t.Errorf("after the rollback the policy endpoint reached %q, want the baseline's m-base", m)
	}
}

// startPromotionWorker runs a real gyre worker (the test binary as
// "gyre") for agent bot with the test agent.
func startPromotionWorker(t *testing.T, server, key string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "worker", "--server", server, "--agent", "bot", "--root", t.TempDir(),
		"--poll-wait", "1s", "--concurrency", "4", "--", "/bin/sh", "-c", promotionAgent)
	cmd.Args[0] = "gyre"
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GYRE_KEY=" + key}
	stderr := &workerStderr{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("worker stderr:\n%s", stderr)
		}
	})
}
