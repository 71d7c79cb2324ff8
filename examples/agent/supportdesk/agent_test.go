package supportdesk

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/option"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/demo/scripted"
)

// newModel serves gyre's scripted demo model: demo-candidate looks orders
// up before acting, demo-base acts without looking.
func newModel(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(scripted.NewHandler())
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func TestAgent_RefundsADeliveredOrder(t *testing.T) {
	t.Parallel()
	rec := flywheel.NewRecorder()
	a := newAgent(scripted.Candidate, rec, option.WithBaseURL(newModel(t)), option.WithAPIKey("test-key"))
	answer, err := a.run(context.Background(), "Please refund order C3, it arrived broken.")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(answer, "rf_C3_0001") {
		t.Errorf("answer = %q", answer)
	}
	rep := rec.Report(answer)
	calls, _ := rep.ToolCalls.Get()
	if len(calls) != 2 || calls[0].Name != "lookup_order" || calls[1].Name != "issue_refund" {
		t.Fatalf("tool calls = %+v", calls)
	}
	for _, c := range calls {
		if c.Outcome != flywheel.OutcomeOK || c.StatusCode != nil || !c.ToolCallID.IsSet() {
			t.Errorf("call %s: outcome %s status %v id %v", c.Name, c.Outcome, c.StatusCode, c.ToolCallID)
		}
	}
	if calls[1].EntityIDs[flywheel.EntityKeyID] != "rf_C3_0001" {
		t.Errorf("entity_ids = %v", calls[1].EntityIDs)
	}
	if n, _ := rep.LLMCallCount.Get(); n != 3 {
		t.Errorf("llm_call_count = %d, want 3", n)
	}
	if _, err := rep.Marshal(); err != nil {
		t.Errorf("report breaks the contract: %v", err)
	}
}

func TestAgent_AToolFailureIsObservedAsFailed(t *testing.T) {
	t.Parallel()
	rec := flywheel.NewRecorder()
	// demo-base cancels without looking A1 up; A1 has shipped, so the
	// cancel fails, and the agent says so.
	a := newAgent(scripted.Base, rec, option.WithBaseURL(newModel(t)), option.WithAPIKey("test-key"))
	answer, err := a.run(context.Background(), "Cancel order A1 please")
	if err != nil {
		t.Fatal(err)
	}
	calls := rec.ToolCalls()
	if len(calls) != 1 || calls[0].Name != "cancel_order" || calls[0].Outcome != flywheel.OutcomeFailed {
		t.Fatalf("calls = %+v", calls)
	}
	if e, _ := calls[0].Error.Get(); !strings.Contains(e, "shipped") {
		t.Errorf("error = %q", e)
	}
	var out map[string]any
	_ = json.Unmarshal(calls[0].Output, &out)
	if out["error"] == nil {
		t.Errorf("output = %s", calls[0].Output)
	}
	if !strings.Contains(answer, "could not cancel order A1") {
		t.Errorf("answer = %q", answer)
	}
	ord, _ := a.orders.Lookup("A1")
	if ord.Status != "shipped" {
		t.Errorf("A1 is %s", ord.Status)
	}
}
