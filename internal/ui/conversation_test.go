package ui_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// TestRolloutConversationShowsResponsesAndMessagesCallsAsChat: a
// Responses or Messages call is rendered from its chat form; a call with
// an item that has no chat form says why and shows its native JSON; the
// calls table names every call's protocol.
func TestRolloutConversationShowsResponsesAndMessagesCallsAsChat(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id := s.nativeRollout()

	c := s.client()
	c.signIn(s.reader)
	// The gateway records calls in the background (flushed every 20 ms):
	// wait until all three are on the page, as waitFinished waits.
	var p page
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p = c.get("/ui/rollouts/" + id)
		if strings.Contains(p.body, `<td class="mono">messages</td>`) || time.Now().After(deadline) {
			break
		}
	}
	if p.status != http.StatusOK {
		t.Fatalf("rollout page: %d\n%s", p.status, p.body)
	}
	for _, want := range []string{
		`<td class="mono">responses</td>`, `<td class="mono">messages</td>`,
		"Responses question: refund for 1042?", "Responses answer: refund approved.",
		"Messages question: where is 1044?", "Messages answer: the parcel shipped.",
		"protocol_item_not_exportable:reasoning", "native responses JSON", "weighing the refund",
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the rollout page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", p.body)
	}
}

// nativeRollout claims a rollout and makes three calls through its
// gateway: a Responses call, a Responses call whose answer holds a
// reasoning item (no chat form) and a Messages call. It returns the
// rollout's id.
func (s *server) nativeRollout() string {
	s.t.Helper()
	s.call("POST", "/api/v1/policies", s.admin, map[string]any{"name": "p1", "upstream": "stub", "model": "served-model", "tokenizer": "tok-1"}, http.StatusCreated, nil)
	s.call("POST", "/api/v1/suites", s.admin, map[string]any{"name": "desk", "cases": []any{
		map[string]any{"id": "refund", "input": map[string]any{"question": "Can I get a refund?"}, "graders": []any{map[string]any{"contains": "refund"}}},
	}}, http.StatusCreated, nil)
	var tasks struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	s.call("POST", "/api/v1/tasks", s.admin, map[string]any{"suite": "desk"}, http.StatusCreated, &tasks)
	s.call("POST", "/api/v1/batches", s.admin, map[string]any{"agent_id": "native-bot", "task_ids": []string{tasks.Items[0].TaskID},
		"policy": "p1", "max_attempts": 1}, http.StatusCreated, nil)
	var claim flywheel.ClaimResponse
	s.call("POST", "/agents/native-bot/claim", s.agent, map[string]any{"max_rollouts": 1, "lease_seconds": 120, "worker_id": "w-1"}, http.StatusOK, &claim)
	if len(claim.Rollouts) != 1 {
		s.t.Fatalf("claimed %d rollouts", len(claim.Rollouts))
	}
	rr := claim.Rollouts[0]
	s.call("POST", rr.LLMURL+"/responses", rr.APIKey, map[string]any{"model": "any", "instructions": "Be brief.", "input": "Responses question: refund for 1042?"}, http.StatusOK, nil)
	s.call("POST", rr.LLMURL+"/responses", rr.APIKey, map[string]any{"model": "any", "input": "please think about it"}, http.StatusOK, nil)
	s.call("POST", rr.LLMURL+"/messages", rr.APIKey, map[string]any{"model": "any", "max_tokens": 64, "system": "Be brief.",
		"messages": []any{map[string]any{"role": "user", "content": "Messages question: where is 1044?"}}}, http.StatusOK, nil)

	return rr.RolloutID
}
