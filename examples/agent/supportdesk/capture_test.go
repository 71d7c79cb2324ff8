package supportdesk

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/demo/scripted"
	"github.com/gyrehq/gyre/internal/worker/workertest"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// In production mode (GYRE_CAPTURE_URL, _KEY and _AGENT set, outside
// gyre worker) the agent answers as usual and sends its turn — input,
// answer, conversation id, turn id and every tool call with its outcome
// and tool_call_id — to a real gyre server's POST /turns. A turn id names
// one turn: a second run under the same id is another turn (its calls
// have other times), which the server refuses, and the agent exits 1.
func TestRun_ProductionModeCapturesTheTurn(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	env := envMap(map[string]string{
		"OPENAI_BASE_URL": newModel(t), "OPENAI_API_KEY": "k", "AGENT_MODEL": scripted.Candidate,
		EnvCaptureURL: srv.URL, EnvCaptureKey: srv.Agent, EnvCaptureAgent: "desk-prod",
		EnvConversationID: "conv-7", EnvTurnID: "turn-7",
	})
	for i, want := range []struct {
		code   int
		stderr string
	}{
		{0, "captured turn turn-7 (conversation conv-7) for agent desk-prod"},
		{1, "turn turn-7 not captured: 1 rejected"},
	} {
		var stdout, stderr strings.Builder
		if code := Run(t.Context(), []string{"Please refund order C3, it arrived broken."}, nil, &stdout, &stderr, env); code != want.code {
			t.Fatalf("run %d: exit %d, want %d: %s", i, code, want.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "rf_C3_0001") {
			t.Errorf("answer = %q", stdout.String())
		}
		if !strings.Contains(stderr.String(), want.stderr) {
			t.Errorf("run %d: stderr = %q, want %q", i, stderr.String(), want.stderr)
		}
	}
	st, body := srv.Do(http.MethodGet, "/api/v1/turns?agent_id=desk-prod", srv.Admin, nil)
	if st != http.StatusOK {
		t.Fatalf("list turns: %d %s", st, body)
	}
	var page struct {
		Items []struct {
			TurnID         string `json:"turn_id"`
			ConversationID string `json:"conversation_id"`
			InputText      string `json:"input_text"`
			FinalText      string `json:"final_text"`
			ToolCalls      []struct {
				Name       string  `json:"name"`
				Outcome    string  `json:"outcome"`
				ToolCallID *string `json:"tool_call_id"`
			} `json:"tool_calls"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 {
		t.Fatalf("%d turns, want 1: %s", len(page.Items), body)
	}
	got := page.Items[0]
	if got.TurnID != "turn-7" || got.ConversationID != "conv-7" || !strings.Contains(got.InputText, "C3") || !strings.Contains(got.FinalText, "rf_C3_0001") {
		t.Errorf("turn = %+v", got)
	}
	if len(got.ToolCalls) != 2 || got.ToolCalls[0].Name != "lookup_order" || got.ToolCalls[1].Name != "issue_refund" {
		t.Fatalf("tool calls = %+v", got.ToolCalls)
	}
	for _, c := range got.ToolCalls {
		if c.Outcome != "ok" || c.ToolCallID == nil || *c.ToolCallID == "" {
			t.Errorf("call %+v", c)
		}
	}
}

// Production mode needs all three settings: a URL without a key or an
// agent id is a usage error, and nothing runs.
func TestRun_ProductionModeNeedsKeyAndAgent(t *testing.T) {
	t.Parallel()
	for _, missing := range []string{EnvCaptureKey, EnvCaptureAgent} {
		m := map[string]string{EnvCaptureURL: "http://127.0.0.1:1", EnvCaptureKey: "k", EnvCaptureAgent: "a",
			"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
		delete(m, missing)
		var stdout, stderr strings.Builder
		if code := Run(t.Context(), []string{"Where is A1?"}, nil, &stdout, &stderr, envMap(m)); code != 2 {
			t.Errorf("without %s: exit %d, want 2", missing, code)
		}
		if !strings.Contains(stderr.String(), missing) || stdout.Len() != 0 {
			t.Errorf("without %s: stdout %q stderr %q", missing, stdout.String(), stderr.String())
		}
	}
}

// Capture that cannot reach the server fails the run (exit 1) after the
// answer was printed: the turn is lost, and the agent says so.
func TestRun_ProductionModeReportsALostTurn(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	env := envMap(map[string]string{
		"OPENAI_BASE_URL": newModel(t), "OPENAI_API_KEY": "k", "AGENT_MODEL": scripted.Candidate,
		EnvCaptureURL: srv.URL, EnvCaptureKey: "not-a-key", EnvCaptureAgent: "desk-prod",
	})
	var stdout, stderr strings.Builder
	if code := Run(t.Context(), []string{"Where is my order A1?"}, nil, &stdout, &stderr, env); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "shipped") || !strings.Contains(stderr.String(), "not captured") {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}
