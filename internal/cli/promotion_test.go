package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/promotion"
)

// apiCall is one request the stand-in API received.
type apiCall struct {
	Method, Path, Query, Auth string
	Body                      map[string]any
}

// promoAPI is a stand-in for the promotions API of the shared agreement
// (SPEC §10): it serves the agreed JSON and records every request. Each
// handler answers with a status and a body.
type promoAPI struct {
	t     *testing.T
	mu    sync.Mutex
	calls []apiCall
	// routes maps "METHOD /path" to a handler; the n-th call of that
	// route (from 0) is passed.
	routes map[string]func(n int, c apiCall) (int, any)
	counts map[string]int
	url    string
}

func newPromoAPI(t *testing.T, routes map[string]func(n int, c apiCall) (int, any)) *promoAPI {
	t.Helper()
	api := &promoAPI{t: t, routes: routes, counts: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(api.serve))
	t.Cleanup(srv.Close)
	api.url = srv.URL
	return api
}

func (api *promoAPI) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	c := apiCall{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization")}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &c.Body); err != nil {
			api.t.Errorf("%s %s: body is not a JSON object: %s", r.Method, r.URL.Path, raw)
		}
	}
	key := r.Method + " " + r.URL.Path
	api.mu.Lock()
	api.calls = append(api.calls, c)
	n := api.counts[key]
	api.counts[key]++
	h := api.routes[key]
	api.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if h == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"not_found","message":"no such route"}}`)
		return
	}
	status, body := h(n, c)
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		api.t.Error(err)
	}
}

// recorded returns the calls received so far.
func (api *promoAPI) recorded() []apiCall {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]apiCall(nil), api.calls...)
}

// apiErr is gyre's error body.
func apiErr(code, msg, pointer string) map[string]any {
	e := map[string]any{"code": code, "message": msg}
	if pointer != "" {
		e["pointer"] = pointer
	}
	return map[string]any{"error": e}
}

// exampleTasks is the ten-task table of docs/promotion.md's worked example.
func exampleTasks() []promotion.TaskOutcome {
	s := func(p, f int) promotion.SideCounts { return promotion.SideCounts{Total: p + f, Passed: p, Failed: f} }
	return []promotion.TaskOutcome{
		{TaskID: "tsk_01", CaseID: "refund-basic", Baseline: s(1, 4), Candidate: s(5, 0)},
		{TaskID: "tsk_02", CaseID: "refund-partial", Baseline: s(2, 3), Candidate: s(4, 1)},
		{TaskID: "tsk_03", CaseID: "refund-expired", Baseline: s(0, 5), Candidate: s(3, 2)},
		{TaskID: "tsk_04", CaseID: "address-change", Baseline: s(3, 2), Candidate: s(5, 0)},
		{TaskID: "tsk_05", CaseID: "order-status", Baseline: s(5, 0), Candidate: s(5, 0)},
		{TaskID: "tsk_06", CaseID: "cancel-order", Baseline: s(4, 1), Candidate: s(4, 1)},
		{TaskID: "tsk_07", CaseID: "escalate-legal", Baseline: s(2, 3), Candidate: s(2, 3)},
		{TaskID: "tsk_08", CaseID: "invoice-copy", Baseline: s(1, 4), Candidate: s(3, 2)},
		{TaskID: "tsk_09", CaseID: "gift-card", Baseline: s(4, 1), Candidate: s(3, 2)},
		{TaskID: "tsk_10", CaseID: "warranty", Baseline: promotion.SideCounts{Total: 5, Passed: 3, Failed: 2},
			Candidate: promotion.SideCounts{Total: 5, Passed: 1, Failed: 1, Unscored: 2, Excluded: 1}},
	}
}

// promo is a promotion object as the API shows it.
func promo(state string, reasons []string, ev *promotion.Evidence) map[string]any {
	p := map[string]any{
		"id": "0192f0c4-0000-7000-8000-0000000000aa", "agent_id": "bot-1", "candidate": "cand-v1", "baseline": "base-v1",
		"suite": "support", "suite_version": "3", "task_ids": []string{"tsk_01", "tsk_02"}, "repetitions": 5,
		"min_delta": 0.02, "max_excluded_rate": 0.05, "deadline_s": 86400, "seed": 2026,
		"state": state, "reasons": reasons,
		"batches":    map[string]any{"baseline": "bat-b", "candidate": "bat-c"},
		"evidence":   ev,
		"created_by": "key k1", "created_at": "2026-12-01T10:00:00Z", "deadline_at": "2026-12-02T10:00:00Z",
		"decided_at": nil,
	}
	if state != "running" {
		p["decided_at"] = "2026-12-01T11:00:00Z"
	}
	return p
}

const promoID = "0192f0c4-0000-7000-8000-0000000000aa"

func TestPolicyPromote_SendsTheAgreedBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want map[string]any
	}{
		{
			name: "every flag goes into the body",
			args: []string{"--baseline", "base-v1", "--suite", "support", "--suite-version", "3", "--repetitions", "8",
				"--min-delta", "0.05", "--max-excluded-rate", "0.1", "--deadline", "2h"},
			want: map[string]any{"agent_id": "bot-1", "candidate": "cand-v1", "baseline": "base-v1", "suite": "support",
				"suite_version": "3", "repetitions": 8.0, "min_delta": 0.05, "max_excluded_rate": 0.1, "deadline_s": 7200.0},
		},
		{
			name: "flags left out leave the server's defaults",
			args: []string{"--task", "tsk_01", "--task", "tsk_02"},
			want: map[string]any{"agent_id": "bot-1", "candidate": "cand-v1", "task_ids": []any{"tsk_01", "tsk_02"}},
		},
		{
			name: "a negative min delta is allowed",
			args: []string{"--suite", "support", "--min-delta", "-1"},
			want: map[string]any{"agent_id": "bot-1", "candidate": "cand-v1", "suite": "support", "min_delta": -1.0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
				"POST /api/v1/promotions": func(int, apiCall) (int, any) { return http.StatusCreated, promo("running", []string{}, nil) },
			})
			args := append([]string{"policy", "promote", "--server", api.url, "--agent", "bot-1", "--candidate", "cand-v1"}, tc.args...)
			code, stdout, stderr := runGyre(t, map[string]string{"GYRE_KEY": "admin-key"}, args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			calls := api.recorded()
			if len(calls) != 1 {
				t.Fatalf("calls %+v, want one POST", calls)
			}
			if calls[0].Auth != "Bearer admin-key" {
				t.Errorf("authorization %q", calls[0].Auth)
			}
			if d := cmp.Diff(tc.want, calls[0].Body); d != "" {
				t.Errorf("body (-want +got):\n%s", d)
			}
			if stdout != promoID+"\trunning\n" {
				t.Errorf("stdout %q, want the id and state", stdout)
			}
			if !strings.Contains(stderr, "promotion "+promoID+" started: cand-v1 against baseline base-v1, 2 task(s) × 5 repetition(s) per side") {
				t.Errorf("stderr %q", stderr)
			}
		})
	}
}

func TestPolicyPromote_JSONPrintsThePromotionAsTheServerSentIt(t *testing.T) {
	t.Parallel()
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"POST /api/v1/promotions": func(int, apiCall) (int, any) {
			p := promo("running", []string{}, nil)
			p["field_from_a_newer_server"] = true
			return http.StatusCreated, p
		},
	})
	code, stdout, stderr := runGyre(t, map[string]string{"GYRE_KEY": "k"}, "policy", "promote", "--server", api.url,
		"--agent", "bot-1", "--candidate", "cand-v1", "--suite", "support", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if got["id"] != promoID || got["state"] != "running" || got["evidence"] != nil || got["field_from_a_newer_server"] != true {
		t.Errorf("JSON %v", got)
	}
	if r, ok := got["reasons"].([]any); !ok || len(r) != 0 {
		t.Errorf("reasons %v, want []", got["reasons"])
	}
}

// gyre policy promote --wait polls until the promotion leaves running and
// exits by its decision: 0 promoted, 100 rejected, 1 failed or cancelled.
func TestPolicyPromote_WaitExitsByTheDecision(t *testing.T) {
	t.Parallel()
	decided := promotion.Decide(exampleTasks(), promotion.DefaultRules(2026))
	rejected := promotion.Decide(exampleTasks(), promotion.Rules{MinDelta: 0.5, MaxExcludedRate: 0.01, Seed: 2026})
	for _, tc := range []struct {
		name       string
		states     []map[string]any // answers of the POST, then of each GET
		code       int
		stdout     []string
		stderr     string
		stderrNone string
	}{
		{
			name: "promoted exits 0 and prints the evidence",
			states: []map[string]any{promo("running", []string{}, nil), promo("running", []string{}, nil),
				promo("running", []string{}, nil), promo("promoted", []string{}, &decided.Evidence)},
			code:   0,
			stdout: []string{`(?m)^state\s+promoted$`, `(?m)^tsk_01\s+refund-basic\s+0\.200 \(1/5\)\s+1\.000 \(5/5\)\s+\+0\.800$`},
			stderr: "waiting for promotion " + promoID + " to be decided (it fails at its deadline, 2026-12-02T10:00:00Z)\npromotion " + promoID + " promoted\n", stderrNone: "gyre:",
		},
		{
			name:   "rejected exits 100 with every reason",
			states: []map[string]any{promo("running", []string{}, nil), promo("rejected", rejected.Reasons, &rejected.Evidence)},
			code:   100,
			stdout: []string{`(?m)^reasons\s+delta_below_min, excluded_rate_high:candidate$`},
			stderr: "gyre: promotion " + promoID + " rejected: delta_below_min, excluded_rate_high:candidate",
		},
		{
			name:   "failed at the deadline exits 1",
			states: []map[string]any{promo("running", []string{}, nil), promo("running", []string{}, nil), promo("failed", []string{"deadline"}, nil)},
			code:   1,
			stdout: []string{`(?m)^state\s+failed$`, `(?m)^evidence: none yet \(seed 2026\)$`},
			stderr: "gyre: promotion " + promoID + " failed: deadline",
		},
		{
			name:   "cancelled exits 1",
			states: []map[string]any{promo("running", []string{}, nil), promo("failed", []string{"cancelled"}, nil)},
			code:   1,
			stderr: "gyre: promotion " + promoID + " failed: cancelled",
		},
		{
			name:   "a decision already made when created is not polled",
			states: []map[string]any{promo("rejected", []string{"no_graded_tasks"}, nil)},
			code:   100,
			stderr: "rejected: no_graded_tasks",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
				"POST /api/v1/promotions":           func(int, apiCall) (int, any) { return http.StatusCreated, tc.states[0] },
				"GET /api/v1/promotions/" + promoID: func(n int, _ apiCall) (int, any) { return http.StatusOK, tc.states[min(n+1, len(tc.states)-1)] },
			})
			code, stdout, stderr := runGyre(t, map[string]string{"GYRE_KEY": "k"}, "policy", "promote", "--server", api.url,
				"--agent", "bot-1", "--candidate", "cand-v1", "--suite", "support", "--wait")
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tc.code, stdout, stderr)
			}
			if gets := len(api.recorded()) - 1; gets != len(tc.states)-1 {
				t.Errorf("%d GETs, want %d: poll until decided, then stop", gets, len(tc.states)-1)
			}
			for _, re := range tc.stdout {
				if !regexp.MustCompile(re).MatchString(stdout) {
					t.Errorf("stdout lacks %s:\n%s", re, stdout)
				}
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
			if tc.stderrNone != "" && strings.Contains(stderr, tc.stderrNone) {
				t.Errorf("stderr has %q:\n%s", tc.stderrNone, stderr)
			}
		})
	}
}

func TestPolicyPromote_WaitJSONPrintsTheDecidedPromotion(t *testing.T) {
	t.Parallel()
	rejected := promotion.Decide(exampleTasks(), promotion.Rules{MinDelta: 0.5, MaxExcludedRate: 0.05, Seed: 2026})
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"POST /api/v1/promotions": func(int, apiCall) (int, any) { return http.StatusCreated, promo("running", []string{}, nil) },
		"GET /api/v1/promotions/" + promoID: func(int, apiCall) (int, any) {
			return http.StatusOK, promo("rejected", rejected.Reasons, &rejected.Evidence)
		},
	})
	code, stdout, stderr := runGyre(t, map[string]string{"GYRE_KEY": "k"}, "policy", "promote", "--server", api.url,
		"--agent", "bot-1", "--candidate", "cand-v1", "--suite", "support", "--wait", "--json")
	if code != 100 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		State    string             `json:"state"`
		Reasons  []string           `json:"reasons"`
		Evidence promotion.Evidence `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if got.State != "rejected" || !cmp.Equal(got.Reasons, []string{"delta_below_min"}) || got.Evidence.Seed != 2026 || len(got.Evidence.Tasks) != 10 {
		t.Errorf("JSON %+v", got)
	}
}

// Bad flags are usage errors (exit 2) with a clear message, and nothing
// reaches the server.
func TestPolicyPromote_BadFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"suite and task together", []string{"--suite", "s", "--task", "t1"}, "--suite and --task are exclusive"},
		{"neither suite nor task", nil, "one of --suite or --task is required"},
		{"min delta above 1", []string{"--suite", "s", "--min-delta", "1.5"}, "--min-delta must be between -1 and 1, got 1.5"},
		{"min delta below -1", []string{"--suite", "s", "--min-delta", "-1.01"}, "--min-delta must be between -1 and 1, got -1.01"},
		{"min delta not a number", []string{"--suite", "s", "--min-delta", "NaN"}, "--min-delta must be between -1 and 1"},
		{"max excluded rate above 1", []string{"--suite", "s", "--max-excluded-rate", "2"}, "--max-excluded-rate must be between 0 and 1"},
		{"max excluded rate negative", []string{"--suite", "s", "--max-excluded-rate", "-0.1"}, "--max-excluded-rate must be between 0 and 1"},
		{"repetitions zero", []string{"--suite", "s", "--repetitions", "0"}, "--repetitions must be between 1 and 100, got 0"},
		{"repetitions above 100", []string{"--suite", "s", "--repetitions", "101"}, "--repetitions must be between 1 and 100, got 101"},
		{"suite version without suite", []string{"--task", "t1", "--suite-version", "2"}, "--suite-version needs --suite"},
		{"empty suite version", []string{"--suite", "s", "--suite-version", ""}, "--suite-version must not be empty"},
		{"deadline under a second", []string{"--suite", "s", "--deadline", "500ms"}, "--deadline must be a whole number of seconds, at least 1s"},
		{"deadline with a fraction of a second", []string{"--suite", "s", "--deadline", "1.5s"}, "--deadline must be a whole number of seconds"},
		{"empty task id", []string{"--task", ""}, "--task must not be empty"},
		{"empty suite", []string{"--suite", ""}, "--suite must not be empty"},
		{"missing candidate", nil, "missing required flag --candidate"},
		{"positional argument", []string{"--suite", "s", "extra"}, `unknown command "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPromoAPI(t, nil)
			args := append([]string{"policy", "promote", "--server", api.url, "--agent", "bot-1", "--candidate", "cand-v1"}, tc.args...)
			if tc.name == "missing candidate" {
				args = []string{"policy", "promote", "--server", api.url, "--agent", "bot-1", "--suite", "s"}
			}
			code, _, stderr := runGyre(t, map[string]string{"GYRE_KEY": "k"}, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, stderr)
			}
			if !strings.Contains(stderr, tc.msg) {
				t.Errorf("stderr %q lacks %q", stderr, tc.msg)
			}
			if calls := api.recorded(); len(calls) != 0 {
				t.Errorf("a usage error reached the server: %+v", calls)
			}
		})
	}
}

// The server's refusals exit 1 with its status and code.
func TestPolicyPromote_ServerRefusalsExit1(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   any
		msg    string
	}{
		{"one running promotion per agent", http.StatusConflict, apiErr("promotion_running", "promotion 0192… is running", ""),
			`agent "bot-1" already has a running promotion (gyre promotions list --agent bot-1 --state running)`},
		{"the candidate is the baseline", http.StatusUnprocessableEntity, apiErr("invalid_request", "candidate equals the baseline", "/candidate"),
			"422 invalid_request at /candidate: candidate equals the baseline"},
		{"a reader key is forbidden", http.StatusForbidden, apiErr("forbidden", "admin role required", ""), "403 forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
				"POST /api/v1/promotions": func(int, apiCall) (int, any) { return tc.status, tc.body },
			})
			code, stdout, stderr := runGyre(t, map[string]string{"GYRE_KEY": "k"}, "policy", "promote", "--server", api.url,
				"--agent", "bot-1", "--candidate", "cand-v1", "--suite", "support", "--wait")
			if code != 1 || stdout != "" {
				t.Fatalf("exit %d stdout %q, want 1 and nothing", code, stdout)
			}
			if !strings.Contains(stderr, tc.msg) {
				t.Errorf("stderr %q lacks %q", stderr, tc.msg)
			}
			if n := len(api.recorded()); n != 1 {
				t.Errorf("%d calls, want the POST only", n)
			}
		})
	}
}

func TestPromotionsList_FiltersPagesAndPrintsATable(t *testing.T) {
	t.Parallel()
	decided := promotion.Decide(exampleTasks(), promotion.DefaultRules(2026))
	first := promo("promoted", []string{}, &decided.Evidence)
	second := promo("failed", []string{"deadline"}, nil)
	second["id"] = "0192f0c4-0000-7000-8000-0000000000bb"
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"GET /api/v1/promotions": func(_ int, c apiCall) (int, any) {
			if strings.Contains(c.Query, "cursor=") {
				return http.StatusOK, map[string]any{"items": []any{second}, "next_cursor": nil}
			}
			return http.StatusOK, map[string]any{"items": []any{first}, "next_cursor": "c 2"}
		},
	})
	env := map[string]string{"GYRE_KEY": "reader-key"}
	code, stdout, stderr := runGyre(t, env, "promotions", "list", "--server", api.url, "--agent", "bot-1", "--state", "promoted")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	calls := api.recorded()
	if len(calls) != 2 || calls[0].Query != "agent_id=bot-1&state=promoted" || calls[1].Query != "agent_id=bot-1&state=promoted&cursor=c+2" {
		t.Errorf("queries %+v, want the filters on every page and the cursor after them", calls)
	}
	for _, re := range []string{
		`(?m)^ID\s+AGENT\s+CANDIDATE\s+BASELINE\s+STATE\s+MEAN DIFF\s+INTERVAL\s+REASONS\s+CREATED$`,
		`(?m)^0192f0c4-0000-7000-8000-0000000000aa\s+bot-1\s+cand-v1\s+base-v1\s+promoted\s+\+0\.\d{3}\s+\[\+0\.\d{3}, \+0\.\d{3}\]\s+-\s+2026-12-01T10:00:00Z$`,
		`(?m)^0192f0c4-0000-7000-8000-0000000000bb\s+bot-1\s+cand-v1\s+base-v1\s+failed\s+-\s+-\s+deadline\s`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("stdout lacks %s:\n%s", re, stdout)
		}
	}

	code, stdout, _ = runGyre(t, env, "promotions", "list", "--server", api.url, "--json")
	var got struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || len(got.Items) != 2 || got.Items[1]["id"] != second["id"] {
		t.Errorf("exit %d, JSON %s (%v)", code, stdout, err)
	}

	code, _, stderr = runGyre(t, env, "promotions", "list", "--server", api.url, "--state", "done")
	if code != 2 || !strings.Contains(stderr, "--state must be running, promoted, rejected or failed") {
		t.Errorf("bad --state: exit %d, stderr %s", code, stderr)
	}
}

func TestPromotionsShow_PrintsTheEvidenceTable(t *testing.T) {
	t.Parallel()
	rejected := promotion.Decide(exampleTasks(), promotion.Rules{MinDelta: 0.5, MaxExcludedRate: 0.01, Seed: 2026})
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"GET /api/v1/promotions/" + promoID: func(int, apiCall) (int, any) {
			return http.StatusOK, promo("rejected", rejected.Reasons, &rejected.Evidence)
		},
	})
	env := map[string]string{"GYRE_KEY": "k"}
	code, stdout, stderr := runGyre(t, env, "promotions", "show", "--server", api.url, promoID)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	ev := rejected.Evidence
	for _, re := range []string{
		`(?m)^agent\s+bot-1$`,
		`(?m)^tasks\s+2 from suite support version 3$`,
		`(?m)^rules\s+min_delta 0\.02, max_excluded_rate 0\.05$`,
		`(?m)^batches\s+baseline bat-b, candidate bat-c$`,
		`(?m)^state\s+rejected$`,
		`(?m)^reasons\s+delta_below_min, excluded_rate_high:candidate$`,
		`(?m)^TASK\s+CASE\s+BASELINE\s+CANDIDATE\s+DIFFERENCE$`,
		`(?m)^tsk_03\s+refund-expired\s+0\.000 \(0/5\)\s+0\.600 \(3/5\)\s+\+0\.600$`,
		`(?m)^tsk_05\s+order-status\s+1\.000 \(5/5\)\s+1\.000 \(5/5\)\s+0\.000$`,
		`(?m)^tsk_09\s+gift-card\s+0\.800 \(4/5\)\s+0\.600 \(3/5\)\s+-0\.200$`,
		`(?m)^tsk_10\s+warranty\s+0\.600 \(3/5\)\s+0\.500 \(1/2\) \+2 unscored, 1 excluded\s+-0\.100$`,
		`(?m)^paired tasks\s+10 of 10$`,
		fmt.Sprintf(`(?m)^mean difference\s+\%s$`, diffText(*ev.MeanDifference)),
		regexp.QuoteMeta(fmt.Sprintf("95%% interval     [%s, %s]", diffText(ev.Interval[0]), diffText(ev.Interval[1]))),
		`(?m)^bootstrap\s+10000 resamples, seed 2026$`,
		`(?m)^excluded rate\s+baseline 0\.000, candidate 0\.020 `,
		`(?m)^dropped tasks\s+-$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("stdout lacks %s:\n%s", re, stdout)
		}
	}

	code, stdout, _ = runGyre(t, env, "promotions", "show", "--server", api.url, promoID, "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	evj := got["evidence"].(map[string]any)
	if evj["seed"].(float64) != 2026 || len(evj["tasks"].([]any)) != 10 {
		t.Errorf("evidence JSON %v", evj)
	}

	code, _, stderr = runGyre(t, env, "promotions", "show", "--server", api.url, "0192f0c4-0000-7000-8000-000000000000")
	if code != 1 || !strings.Contains(stderr, `no promotion "0192f0c4-0000-7000-8000-000000000000"`) {
		t.Errorf("unknown promotion: exit %d, stderr %s", code, stderr)
	}
}

func TestPromotionsShow_DroppedTasksAndNoGradedTasks(t *testing.T) {
	t.Parallel()
	tasks := exampleTasks()[:2]
	tasks[1].Candidate = promotion.SideCounts{Total: 5, Unscored: 5}
	ev := promotion.Decide(tasks, promotion.DefaultRules(1)).Evidence
	none := promotion.Decide([]promotion.TaskOutcome{tasks[1]}, promotion.DefaultRules(1))
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"GET /api/v1/promotions/p1": func(int, apiCall) (int, any) { return http.StatusOK, promo("promoted", []string{}, &ev) },
		"GET /api/v1/promotions/p2": func(int, apiCall) (int, any) {
			return http.StatusOK, promo("rejected", none.Reasons, &none.Evidence)
		},
	})
	env := map[string]string{"GYRE_KEY": "k"}
	_, stdout, _ := runGyre(t, env, "promotions", "show", "--server", api.url, "p1")
	for _, re := range []string{
		`(?m)^tsk_02\s+refund-partial\s+0\.400 \(2/5\)\s+- \(0/0\) \+5 unscored\s+dropped$`,
		`(?m)^paired tasks\s+1 of 2$`,
		`(?m)^dropped tasks\s+tsk_02$`,
		`(?m)^reasons\s+-$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("p1 stdout lacks %s:\n%s", re, stdout)
		}
	}
	_, stdout, _ = runGyre(t, env, "promotions", "show", "--server", api.url, "p2")
	for _, re := range []string{`(?m)^mean difference\s+-$`, `(?m)^95% interval\s+-$`, `(?m)^reasons\s+no_graded_tasks$`} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("p2 stdout lacks %s:\n%s", re, stdout)
		}
	}
}

func TestPromotionsCancel(t *testing.T) {
	t.Parallel()
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"POST /api/v1/promotions/" + promoID + "/cancel": func(int, apiCall) (int, any) {
			return http.StatusOK, promo("failed", []string{"cancelled"}, nil)
		},
		"POST /api/v1/promotions/decided/cancel": func(int, apiCall) (int, any) {
			return http.StatusConflict, apiErr("promotion_decided", "the promotion was promoted", "")
		},
	})
	env := map[string]string{"GYRE_KEY": "k"}
	code, stdout, stderr := runGyre(t, env, "promotions", "cancel", "--server", api.url, promoID)
	if code != 0 || stdout != promoID+"\tfailed: cancelled\n" || !strings.Contains(stderr, "its batches are cancelled and nothing was promoted") {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if c := api.recorded()[0]; c.Method != http.MethodPost || c.Body != nil {
		t.Errorf("cancel sent %+v, want a POST without a body", c)
	}
	code, _, stderr = runGyre(t, env, "promotions", "cancel", "--server", api.url, "decided")
	if code != 1 || !strings.Contains(stderr, "promotion decided is already decided and cannot be cancelled") {
		t.Errorf("decided: exit %d stderr %q", code, stderr)
	}
	code, _, stderr = runGyre(t, env, "promotions", "cancel", "--server", api.url, "ghost")
	if code != 1 || !strings.Contains(stderr, `no promotion "ghost"`) {
		t.Errorf("unknown: exit %d stderr %q", code, stderr)
	}
	code, _, _ = runGyre(t, env, "promotions", "cancel", "--server", api.url)
	if code != 2 {
		t.Errorf("no id: exit %d, want 2", code)
	}
}

// gyre policy show lists the promotions the policy took part in, as
// candidate or baseline, with the evidence of the decided ones.
func TestPolicyShow_ListsThePromotionsOfThePolicy(t *testing.T) {
	t.Parallel()
	decided := promotion.Decide(exampleTasks(), promotion.DefaultRules(2026))
	asCandidate := promo("promoted", []string{}, &decided.Evidence)
	asBaseline := promo("running", []string{}, nil)
	asBaseline["id"], asBaseline["candidate"], asBaseline["baseline"] = "p-next", "cand-v2", "cand-v1"
	other := promo("rejected", []string{"delta_below_min"}, &decided.Evidence)
	other["id"], other["candidate"], other["baseline"] = "p-other", "x-v1", "base-v1"
	policies := map[string]any{"items": []any{map[string]any{"name": "cand-v1", "upstream": "stub", "model": "m-cand",
		"tokenizer": nil, "sampling_overrides": nil, "prices": nil, "capture_tokens": false, "sha256": "abc", "created_at": "2026-11-30T00:00:00Z"}},
		"next_cursor": nil}
	routes := map[string]func(int, apiCall) (int, any){
		"GET /api/v1/policies": func(int, apiCall) (int, any) { return http.StatusOK, policies },
		"GET /api/v1/promotions": func(int, apiCall) (int, any) {
			return http.StatusOK, map[string]any{"items": []any{asBaseline, other, asCandidate}, "next_cursor": nil}
		},
	}
	api := newPromoAPI(t, routes)
	env := map[string]string{"GYRE_KEY": "k"}
	code, stdout, stderr := runGyre(t, env, "policy", "show", "--server", api.url, "cand-v1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^model\s+m-cand$`,
		`(?m)^ID\s+AGENT\s+ROLE\s+AGAINST\s+STATE\s+MEAN DIFF\s+INTERVAL\s+REASONS\s+DECIDED$`,
		`(?m)^p-next\s+bot-1\s+baseline\s+cand-v2\s+running\s+-\s+-\s+-\s+-$`,
		`(?m)^0192f0c4-0000-7000-8000-0000000000aa\s+bot-1\s+candidate\s+base-v1\s+promoted\s+\+0\.\d{3}\s+\[`,
		`(?m)^evidence of promotion 0192f0c4-0000-7000-8000-0000000000aa \(cand-v1 against base-v1: promoted\):$`,
		`(?m)^tsk_01\s+refund-basic\s+0\.200 \(1/5\)\s+1\.000 \(5/5\)\s+\+0\.800$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("stdout lacks %s:\n%s", re, stdout)
		}
	}
	if strings.Contains(stdout, "p-other") {
		t.Errorf("a promotion without the policy is listed:\n%s", stdout)
	}

	code, stdout, _ = runGyre(t, env, "policy", "show", "--server", api.url, "cand-v1", "--json")
	var got struct {
		Name       string           `json:"name"`
		Promotions []map[string]any `json:"promotions"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
		t.Fatalf("exit %d %v: %s", code, err, stdout)
	}
	if got.Name != "cand-v1" || len(got.Promotions) != 2 || got.Promotions[0]["id"] != "p-next" || got.Promotions[1]["evidence"] == nil {
		t.Errorf("JSON %s", stdout)
	}
}

// A server without the promotions API makes the promotions unknown, not
// none; the policy is still shown.
func TestPolicyShow_ServerWithoutPromotionsSaysUnknown(t *testing.T) {
	t.Parallel()
	api := newPromoAPI(t, map[string]func(int, apiCall) (int, any){
		"GET /api/v1/policies": func(int, apiCall) (int, any) {
			return http.StatusOK, map[string]any{"items": []any{map[string]any{"name": "p", "upstream": "u", "model": "m", "created_at": "2026-11-30T00:00:00Z"}}}
		},
	})
	env := map[string]string{"GYRE_KEY": "k"}
	code, stdout, _ := runGyre(t, env, "policy", "show", "--server", api.url, "p")
	if code != 0 || !strings.Contains(stdout, "promotions: unknown (the server does not list promotions)") {
		t.Errorf("exit %d stdout %s", code, stdout)
	}
	code, stdout, _ = runGyre(t, env, "policy", "show", "--server", api.url, "p", "--json")
	if code != 0 || !strings.Contains(stdout, `"promotions": null`) {
		t.Errorf("exit %d stdout %s", code, stdout)
	}
}

func TestVersionName_ReadsAStringOrANumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{`"3"`: "3", `3`: "3", `"9f2c…"`: "9f2c…"} {
		var v versionName
		if err := json.Unmarshal([]byte(in), &v); err != nil || string(v) != want {
			t.Errorf("%s: %q, %v; want %q", in, v, err, want)
		}
	}
	var v versionName
	if err := json.Unmarshal([]byte(`{}`), &v); err == nil {
		t.Error("an object is not a suite version")
	}
}
