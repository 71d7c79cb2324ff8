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
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// promotionAgent is the test agent the workers run: it asks its rollout's
// gateway the turn input once and prints the answer, which the suite's
// grader reads; a failed call makes it exit non-zero (the rollout is then
// excluded, agent_exit_nonzero).
const promotionAgent = `q="$GYRE_TURN_INPUT"
curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' \
  -d "{\"model\":\"agent-asks\",\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}]}" \
  "$OPENAI_BASE_URL/chat/completions" --fail -o "$GYRE_ARTIFACTS_DIR/answer.json" || exit 3
sed -n 's/.*"content":"\([^"]*\)".*/\1/p' "$GYRE_ARTIFACTS_DIR/answer.json"`

// promotionModels are the policies of the promotion tests and the models
// they swap in; the stub upstream answers by model (see promotionUpstream).
var promotionModels = map[string]string{"base": "m-base", "cand": "m-cand", "worse": "m-worse",
	"regress": "m-regress", "flaky": "m-flaky"}

// promotionUpstream is a stub model whose answer to "q<n>" depends on the
// model: m-base solves q0–q5; m-worse q0–q2 always and q3–q5 every other
// call; m-regress all but q0; m-flaky answers 500 on q0–q7 and solves
// q8, q9; m-cand solves all. A solved question is answered "yes".
func promotionUpstream(t *testing.T) *httptest.Server {
	t.Helper()
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
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
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
		case "m-worse":
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
	t.Cleanup(up.Close)
	return up
}

// promotionRig is a tenant ready for promotions of agent bot: policies
// (promotionModels) on the stub upstream, a suite "gate" of ten cases
// graded by contains "yes", the agent seen and running under base.
type promotionRig struct {
	cfg   string // gyre.yaml naming the stub upstream
	admin string
	keys  map[string]string // by role: agent, inference
}

func newPromotionRig(t *testing.T) *promotionRig {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the test agent needs curl")
	}
	up := promotionUpstream(t)
	cfg := filepath.Join(t.TempDir(), "gyre.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams:\n  - name: stub\n    base_url: "+up.URL+"/v1\n    allow_private: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &promotionRig{cfg: cfg, keys: map[string]string{}}
}

// setUp makes the tenant's objects through base and sets agent bot's
// promoted policy to base in the store opened with o (there is no API for
// a direct change), so promotions have a baseline to measure and a
// rollback an entry to go back to.
func (rig *promotionRig) setUp(t *testing.T, base, keyFile string, o storeopen.Options) {
	t.Helper()
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	rig.admin = strings.TrimSpace(string(raw))
	for _, role := range []string{"agent", "inference"} {
		var k struct {
			Key string `json:"key"`
		}
		if st := call(t, "POST", base+"/api/v1/keys", rig.admin, `{"role":"`+role+`"}`, &k); st != http.StatusCreated {
			t.Fatalf("create %s key: %d", role, st)
		}
		rig.keys[role] = k.Key
	}
	for p, model := range promotionModels {
		if st := call(t, "POST", base+"/api/v1/policies", rig.admin, `{"name":"`+p+`","upstream":"stub","model":"`+model+`"}`, nil); st != http.StatusCreated {
			t.Fatalf("create policy %s: %d", p, st)
		}
	}
	var cases []string
	for i := range 10 {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"question":"q%d"},"graders":[{"contains":"yes"}]}`, i, i))
	}
	if st := call(t, "POST", base+"/api/v1/suites", rig.admin, `{"name":"gate","cases":[`+strings.Join(cases, ",")+`]}`, nil); st != http.StatusCreated {
		t.Fatalf("upload suite: %d", st)
	}
	// The agent is seen through a batch, cancelled at once.
	var b struct {
		BatchID string `json:"batch_id"`
	}
	if st := call(t, "POST", base+"/api/v1/batches", rig.admin, `{"agent_id":"bot","suite":"gate","policy":"base"}`, &b); st != http.StatusCreated {
		t.Fatalf("create batch: %d", st)
	}
	if st := call(t, "POST", base+"/api/v1/batches/"+b.BatchID+"/cancel", rig.admin, "", nil); st != http.StatusOK {
		t.Fatalf("cancel batch: %d", st)
	}
	st, err := storeopen.Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tn, err := st.TenantByName(t.Context(), gyre.DefaultTenant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: tn.ID, AgentID: "bot", Policy: "base", SetBy: "key test"}); err != nil {
		t.Fatal(err)
	}
}

// promotionView is the part of a promotion object these tests read.
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

// start starts a promotion of candidate over the suite, two rollouts per
// task and side.
func (rig *promotionRig) start(t *testing.T, base, candidate string) promotionView {
	t.Helper()
	var p promotionView
	if code := call(t, "POST", base+"/api/v1/promotions", rig.admin,
		`{"agent_id":"bot","candidate":"`+candidate+`","suite":"gate","repetitions":2,"deadline_s":600}`, &p); code != http.StatusCreated {
		t.Fatalf("start promotion of %s: %d", candidate, code)
	}
	if p.Baseline != "base" || len(p.TaskIDs) != 10 {
		t.Fatalf("promotion baseline %q over %d tasks, want base over 10", p.Baseline, len(p.TaskIDs))
	}
	return p
}

// await polls the promotion through base until it is no longer running.
func (rig *promotionRig) await(t *testing.T, base string, p promotionView, logs fmt.Stringer) promotionView {
	t.Helper()
	for end := time.Now().Add(3 * time.Minute); p.State == promotion.StateRunning; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("promotion %s was still running after 3 minutes:\n%s", p.ID, logs)
		}
		if code := call(t, "GET", base+"/api/v1/promotions/"+p.ID, rig.admin, "", &p); code != http.StatusOK {
			t.Fatalf("read promotion: %d", code)
		}
	}
	return p
}

// promotionEntries counts the entries of bot's history a promotion set.
func (rig *promotionRig) promotionEntries(t *testing.T, base string) int {
	t.Helper()
	var agent struct {
		History []struct {
			PromotionID *string `json:"promotion_id"`
		} `json:"history"`
	}
	if code := call(t, "GET", base+"/api/v1/agents/bot", rig.admin, "", &agent); code != http.StatusOK {
		t.Fatalf("read agent: %d", code)
	}
	n := 0
	for _, e := range agent.History {
		if e.PromotionID != nil {
			n++
		}
	}
	return n
}

// promotionBatches counts bot's batches tagged with promotion id.
func (rig *promotionRig) promotionBatches(t *testing.T, base, id string) int {
	t.Helper()
	var l struct {
		Items []struct {
			PromotionID *string `json:"promotion_id"`
		} `json:"items"`
	}
	if code := call(t, "GET", base+"/api/v1/batches?agent_id=bot&limit=500", rig.admin, "", &l); code != http.StatusOK {
		t.Fatalf("list batches: %d", code)
	}
	n := 0
	for _, b := range l.Items {
		if b.PromotionID != nil && *b.PromotionID == id {
			n++
		}
	}
	return n
}

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
//   - one that solves all ten is promoted (through gyre policy promote
//     --wait, which exits 0); the production policy endpoint then reaches
//     its model, and after a rollback the baseline's again.
func TestPromotionEndToEnd(t *testing.T) {
	t.Parallel()
	rig := newPromotionRig(t)
	bin := buildGyre(t)
	data := t.TempDir()
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	srv := startServe(t, bin, "--config", rig.cfg, "--data", data, "--bootstrap-admin-key-file", keyFile)
	defer srv.stop(t)
	rig.setUp(t, srv.base, keyFile, storeopen.Options{DataDir: data})
	for range 2 {
		startPromotionWorker(t, srv.base, rig.keys["agent"])
	}

	for _, tc := range []struct {
		candidate string
		reason    func(p promotionView) string
	}{
		{"worse", func(promotionView) string { return promotion.ReasonDeltaBelowMin }},
		{"regress", func(p promotionView) string { return promotion.ReasonTaskRegressed(p.TaskIDs[0]) }},
		{"flaky", func(promotionView) string { return promotion.ReasonExcludedRateHigh(promotion.SideCandidate) }},
	} {
		p := rig.await(t, srv.base, rig.start(t, srv.base, tc.candidate), srv.logs)
		t.Logf("candidate %s: %s %v", tc.candidate, p.State, p.Reasons)
		if want := tc.reason(p); p.State != promotion.StateRejected || !slices.Contains(p.Reasons, want) {
			t.Errorf("candidate %s ended %s %v, want rejected with %s\nevidence %s", tc.candidate, p.State, p.Reasons, want, p.Evidence)
		}
	}
	// The better candidate goes through the CLI: gyre policy promote
	// --wait exits 0 once it is promoted.
	promote := exec.Command(bin, "policy", "promote", "--server", srv.base, "--agent", "bot", "--candidate", "cand",
		"--suite", "gate", "--repetitions", "2", "--deadline", "10m", "--wait", "--json")
	promote.Env = append(cleanEnv(), "GYRE_KEY="+rig.admin)
	var stderr strings.Builder
	promote.Stderr = &stderr
	out, err := promote.Output()
	if err != nil {
		t.Fatalf("gyre policy promote --wait: %v\nstdout %s\nstderr %s", err, out, stderr.String())
	}
	var p promotionView
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("gyre policy promote --json printed %q: %v", out, err)
	}
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
		call(t, "GET", srv.base+"/api/v1/batches/"+id, rig.admin, "", &bv)
		if bv.PromotionID != p.ID || bv.PromotionSide != side || bv.Counts["graded"] != 20 {
			t.Errorf("%s batch: %+v, want tagged with 20 graded rollouts", side, bv)
		}
	}

	served := func() string {
		t.Helper()
		var out struct {
			Model string `json:"model"`
		}
		if code := call(t, "POST", srv.base+"/agents/bot/v1/chat/completions", rig.keys["inference"],
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
	if code := call(t, "POST", srv.base+"/api/v1/agents/bot/rollback", rig.admin, "", &agent); code != http.StatusOK {
		t.Fatalf("rollback: %d", code)
	}
	if n := len(agent.History); n != 2 || agent.History[1].PromotionID == nil || *agent.History[1].PromotionID != p.ID {
		t.Errorf("history %+v, want the promotion's entry second", agent.History)
	}
	if m := served(); m != "m-base" {
		t.Errorf("after the rollback the policy endpoint reached %q, want the baseline's m-base", m)
	}
}

// TestPromotionSurvivesAKilledServer: the server driving a promotion is
// killed (SIGKILL) while its rollouts run — on SQLite it is restarted on
// the same data, on PostgreSQL the other replica goes on alone — and the
// promotion is still decided exactly once, over exactly two batches.
func TestPromotionSurvivesAKilledServer(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			rig := newPromotionRig(t)
			var db string
			if engine == "postgres" {
				url := storetest.PostgresURL(t)
				db = storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))
			}
			bin := buildGyre(t)
			data := t.TempDir()
			keyFile := filepath.Join(t.TempDir(), "admin.key")
			args := []string{"--config", rig.cfg, "--data", data}
			o := storeopen.Options{DataDir: data}
			if db != "" {
				args = append(args, "--db", db)
				o = storeopen.Options{DB: db}
			}
			a := startServe(t, bin, append(args, "--bootstrap-admin-key-file", keyFile)...)
			rig.setUp(t, a.base, keyFile, o)
			// The survivor: on PostgreSQL a second replica from the start.
			var b *server
			if db != "" {
				b = startServe(t, bin, "--config", rig.cfg, "--data", t.TempDir(), "--db", db)
			}
			stopWorker := startPromotionWorker(t, a.base, rig.keys["agent"], "--lease", "5s", "--concurrency", "2")
			p := rig.start(t, a.base, "cand")
			// Let some rollouts end, then kill the server mid-promotion.
			for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				var bv struct {
					Counts map[string]int `json:"counts"`
				}
				call(t, "GET", a.base+"/api/v1/batches/"+p.Batches.Candidate, rig.admin, "", &bv)
				if bv.Counts["graded"] >= 2 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("no rollout was graded within a minute:\n%s", a.logs)
				}
			}
			if err := a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-a.done
			_ = a.cmd.Wait()
			stopWorker()
			if b == nil {
				b = startServe(t, bin, args...) // SQLite: the same data, restarted
			}
			defer b.stop(t)
			startPromotionWorker(t, b.base, rig.keys["agent"], "--lease", "5s")
			got := rig.await(t, b.base, p, b.logs)
			if got.State != promotion.StatePromoted {
				t.Fatalf("after the kill the promotion ended %s %v\nevidence %s", got.State, got.Reasons, got.Evidence)
			}
			if n := rig.promotionEntries(t, b.base); n != 1 {
				t.Errorf("%d history entries set by a promotion, want exactly one decision", n)
			}
			if n := rig.promotionBatches(t, b.base, p.ID); n != 2 {
				t.Errorf("%d batches of the promotion, want exactly two", n)
			}
		})
	}
}

// startPromotionWorker runs a real gyre worker (the test binary as
// "gyre") for agent bot with the test agent; the returned function kills
// it (SIGKILL).
func startPromotionWorker(t *testing.T, server, key string, flags ...string) (kill func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"worker", "--server", server, "--agent", "bot", "--root", t.TempDir(),
		"--poll-wait", "1s", "--concurrency", "4"}, flags...)
	cmd := exec.Command(exe, append(args, "--", "/bin/sh", "-c", promotionAgent)...)
	cmd.Args[0] = "gyre"
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GYRE_KEY=" + key}
	stderr := &workerStderr{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	kill = func() {
		_ = cmd.Process.Kill()
		<-done
	}
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			t.Logf("worker stderr:\n%s", stderr)
		}
	})
	return kill
}
