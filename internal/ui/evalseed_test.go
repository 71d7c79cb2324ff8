package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gyrehq/gyre"
	gyreeval "github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/suite"
)

// atifDir holds the real ATIF documents the viewer is tested on, as they
// are (the repository's copy of the shared test data).
const atifDir = "../../atif/testdata"

// atifFile reads one of them.
func atifFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(atifDir, rel))
	if err != nil {
		t.Fatalf("ATIF test data: %v", err)
	}
	return b
}

// bigTrajectory is a valid ATIF document of more than minBytes: user
// turns and agent steps with a tool call and its observation each, the
// first message carrying markup that must stay text.
func bigTrajectory(minBytes int) []byte {
	var b strings.Builder
	b.WriteString(`{"schema_version":"ATIF-v1.6","session_id":"big-1","agent":{"name":"load-bot","version":"1.0","model_name":"served-model"},"steps":[`)
	filler := strings.Repeat("The quick brown fox inspects the refund ledger. ", 60)
	for i := 1; b.Len() < minBytes; i++ {
		if i > 1 {
			b.WriteString(",")
		}
		ts := fmt.Sprintf("2026-01-01T00:%02d:%02d.%03dZ", (i/60)%60, i%60, i%1000)
		if i%2 == 1 {
			msg := fmt.Sprintf("Step %d asks again. %s", i, filler)
			if i == 1 {
				msg = xssText + " " + msg
			}
			fmt.Fprintf(&b, `{"step_id":%d,"timestamp":%q,"source":"user","message":%q}`, i, ts, msg)
			continue
		}
		fmt.Fprintf(&b, `{"step_id":%d,"timestamp":%q,"source":"agent","model_name":"served-model","message":%q,`+
			`"tool_calls":[{"tool_call_id":"call-%d","function_name":"lookup_order","arguments":{"order_id":"%d"}}],`+
			`"observation":{"results":[{"source_call_id":"call-%d","content":%q}]},`+
			`"metrics":{"prompt_tokens":%d,"completion_tokens":12,"cost_usd":0.0001}}`,
			i, ts, fmt.Sprintf("Looking up order %d.", i), i, i, i, "order status: delivered. "+filler, 100+i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// evalCase is one case of the seeded suite: the trajectory its harness
// run returns and how the run ends.
type evalCase struct {
	ID         string
	Trajectory []byte
	// Answer is the completed run's answer; Fail makes the harness
	// report the run failed (an error, not a model failure).
	Answer string
	Fail   bool
}

// fakeHarness is a Harness API v1 server whose runs complete at once
// with their case's answer and trajectory.
type fakeHarness struct {
	mu    sync.Mutex
	cases map[string]evalCase
	runs  map[string]string // run id → case id
	n     int
}

func (h *fakeHarness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && path == "/capabilities":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"agent":"desk-harness","contract_version":"v1","revision":"4f2c9e1b7a","branch":"main","provides":{"trajectory":true}}`)
	case r.Method == http.MethodPost && path == "/runs":
		var body struct {
			Metadata struct {
				CaseID string `json:"case_id"`
			} `json:"metadata"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		h.n++
		id := fmt.Sprintf("run-%d", h.n)
		h.runs[id] = body.Metadata.CaseID
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run_id":%q}`, id)
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/trajectory"):
		c := h.cases[h.runs[strings.TrimSuffix(strings.TrimPrefix(path, "/runs/"), "/trajectory")]]
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(c.Trajectory)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/runs/"):
		c := h.cases[h.runs[strings.TrimPrefix(path, "/runs/")]]
		w.Header().Set("Content-Type", "application/json")
		if c.Fail {
			io.WriteString(w, `{"status":"failed","error":"the sandbox died","model":"served-model"}`)
			return
		}
		b, _ := json.Marshal(map[string]any{"status": "completed", "answer": c.Answer, "model": "served-model"})
		_, _ = w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// seededEval is what seedEval made.
type seededEval struct {
	// A is the baseline experiment, B the candidate that regressed.
	A, B string
	// Big is the case whose trajectory is larger than 5 MB.
	Big string
}

// seedEval runs two experiments the way `gyre eval run --server` does:
// the evaluator runs a suite against a harness whose runs return the
// real ATIF documents of the test data (and one of 5 MB+), and records
// into the server through its API with an evaluator key.
func (s *server) seedEval() seededEval {
	s.t.Helper()
	evaluator, _ := s.key(gyre.RoleEvaluator)
	cases := []evalCase{
		{ID: "hello-openhands", Trajectory: atifFile(s.t, "valid/harbor-golden-v15-openhands__hello-world.trajectory.json"), Answer: "Hello, world! The refund is done."},
		{ID: "summarize", Trajectory: atifFile(s.t, "valid/harbor-golden-v17-via-golang-exp__hello-world-context-summarization.trajectory.json"), Answer: "Refund issued after summarising."},
		{ID: "daydream", Trajectory: atifFile(s.t, "valid/daydream-rundir-golden__trajectory.json"), Answer: "refund approved"},
		{ID: "invalid-atif", Trajectory: atifFile(s.t, "invalid/openagents-mechacoder__session-2025-12-05T08-00-23-404Z-ew8gut.atif.json"), Answer: "No luck."},
		{ID: "sandbox-died", Fail: true},
		{ID: "big", Trajectory: bigTrajectory(5 << 20), Answer: "refund " + xssText},
	}
	doc := "name: desk\ndefaults: {repetitions: 2, graders: [{contains: refund}]}\ncases:\n"
	for _, c := range cases {
		doc += fmt.Sprintf("  - id: %s\n    input: {question: \"Please handle case %s\"}\n", c.ID, c.ID)
	}
	dir := s.t.TempDir()
	p := filepath.Join(dir, "suite.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		s.t.Fatal(err)
	}
	st, err := suite.Load(p, suite.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	run := func(change func(map[string]evalCase)) string {
		s.t.Helper()
		h := &fakeHarness{cases: map[string]evalCase{}, runs: map[string]string{}}
		for _, c := range cases {
			h.cases[c.ID] = c
		}
		if change != nil {
			change(h.cases)
		}
		hs := httptest.NewServer(h)
		defer hs.Close()
		client, err := gyreeval.NewClient(hs.URL, "harness-key", nil, gyreeval.Limits{})
		if err != nil {
			s.t.Fatal(err)
		}
		rec, err := gyreeval.NewRemoteRecorder(s.ts.URL, evaluator, nil)
		if err != nil {
			s.t.Fatal(err)
		}
		r, err := gyreeval.NewRunner(gyreeval.Config{Criteria: gyreeval.DefaultCriteria(), Seed: 7, Retries: -1}, gyreeval.Deps{Client: client, Recorder: rec})
		if err != nil {
			s.t.Fatal(err)
		}
		res, err := r.Run(context.Background(), st)
		if err != nil {
			s.t.Fatalf("eval run: %v", err)
		}
		return res.Experiment.ID
	}
	a := run(nil)
	b := run(func(m map[string]evalCase) {
		c := m["daydream"]
		c.Answer = "I cannot help with that."
		m["daydream"] = c
	})
	return seededEval{A: a, B: b, Big: "big"}
}

// seedTurns posts production turns of two conversations through POST
// /turns, one with markup in its text and a tool call of unknown outcome.
func (s *server) seedTurns() {
	s.t.Helper()
	turns := []any{
		map[string]any{"turn_id": "t-1", "conversation_id": "conv-42", "turn_index": 0, "input_text": "Where is my order 1042?",
			"final_text": "It was delivered yesterday.", "tool_calls_omitted_count": 0, "occurred_at": "2026-01-01T10:00:00Z",
			"tool_calls": []any{map[string]any{"name": "lookup_order", "outcome": "ok", "status_code": 200, "arguments": map[string]any{"order_id": "1042"}}}},
		map[string]any{"turn_id": "t-2", "conversation_id": "conv-42", "turn_index": 1, "input_text": "Refund it please.",
			"final_text": xssText, "tool_calls_omitted_count": 0,
			"tool_calls": []any{map[string]any{"name": "issue_refund", "outcome": "unknown", "status_code": nil}}},
		map[string]any{"turn_id": "t-3", "conversation_id": "conv-7", "input_text": nil, "final_text": "Hello again.",
			"tool_calls": nil, "tool_calls_omitted_count": 0},
	}
	s.call("POST", "/turns", s.agent, map[string]any{"agent_id": "support-bot", "turns": turns}, http.StatusOK, nil)
}
