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

// D4's warehouse system does not answer: the lookup fails, the agent
// excludes the turn as substrate_unavailable (the infrastructure's
// trouble, not the model's), tells the customer to try later, and changes
// nothing. Both models meet it; neither is blamed for it.
func TestAgent_AnUnavailableBackendExcludesTheTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, question, tool string
	}{
		{scripted.Candidate, "Where is my order D4?", "lookup_order"},
		{scripted.Candidate, "Cancel order D4 please.", "lookup_order"},
		{scripted.Base, "Cancel order D4 please.", "cancel_order"},
	} {
		t.Run(tc.model+"/"+tc.question, func(t *testing.T) {
			t.Parallel()
			rec := flywheel.NewRecorder()
			a := newAgent(tc.model, rec, option.WithBaseURL(newModel(t)), option.WithAPIKey("test-key"))
			answer, err := a.run(context.Background(), tc.question)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(answer, "try again later") {
				t.Errorf("answer = %q", answer)
			}
			rep := rec.Report(answer)
			calls, _ := rep.ToolCalls.Get()
			if len(calls) != 1 || calls[0].Name != tc.tool || calls[0].Outcome != flywheel.OutcomeFailed {
				t.Fatalf("tool calls = %+v", calls)
			}
			if e, _ := calls[0].Error.Get(); !strings.Contains(e, "order backend unavailable") {
				t.Errorf("error = %q", e)
			}
			ex, ok := rep.Exclusion.Get()
			if !ok || ex.Reason != flywheel.ExclusionSubstrateUnavailable {
				t.Fatalf("exclusion = %+v (set %v), want substrate_unavailable", ex, ok)
			}
			if d, _ := ex.Detail.Get(); !strings.Contains(d, "D4") {
				t.Errorf("exclusion detail = %q", d)
			}
			if _, err := rep.Marshal(); err != nil {
				t.Errorf("report breaks the contract: %v", err)
			}
			if ord := a.orders.Snapshot()[3]; ord.ID != "D4" || ord.Status != "processing" {
				t.Errorf("D4 = %+v", ord)
			}
		})
	}
}

// E5's refund reaches the payment provider, which does not confirm it in
// time: the call's outcome is unknown (the refund may have been issued),
// never ok or failed, with no refund id and no exclusion, so outcome
// graders abstain. The model is told, and tells the customer, that the
// refund is unconfirmed.
func TestAgent_AnUnconfirmedRefundIsUnknown(t *testing.T) {
	t.Parallel()
	rec := flywheel.NewRecorder()
	a := newAgent(scripted.Candidate, rec, option.WithBaseURL(newModel(t)), option.WithAPIKey("test-key"))
	answer, err := a.run(context.Background(), "Please refund order E5, it arrived broken.")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(answer, "cannot tell yet whether the refund went through") {
		t.Errorf("answer = %q", answer)
	}
	rep := rec.Report(answer)
	calls, _ := rep.ToolCalls.Get()
	if len(calls) != 2 || calls[0].Name != "lookup_order" || calls[0].Outcome != flywheel.OutcomeOK ||
		calls[1].Name != "issue_refund" || calls[1].Outcome != flywheel.OutcomeUnknown {
		t.Fatalf("tool calls = %+v", calls)
	}
	refund := calls[1]
	if refund.StatusCode != nil || len(refund.EntityIDs) != 0 {
		t.Errorf("refund call: status %v, entity_ids %v", refund.StatusCode, refund.EntityIDs)
	}
	if e, _ := refund.Error.Get(); !strings.Contains(e, "payment provider timed out") {
		t.Errorf("error = %q", e)
	}
	// An unknown call's output carries no machine-readable verdict.
	var out map[string]any
	_ = json.Unmarshal(refund.Output, &out)
	if _, has := out["error"]; has || out["refund"] != "unconfirmed" {
		t.Errorf("recorded output = %s", refund.Output)
	}
	if _, set := rep.Exclusion.Get(); set {
		t.Errorf("exclusion = %+v: an unconfirmed refund is not infrastructure down", rep.Exclusion)
	}
	if _, err := rep.Marshal(); err != nil {
		t.Errorf("report breaks the contract: %v", err)
	}
	if ord, _ := a.orders.Lookup("E5"); ord.RefundID != "" || ord.Status != "delivered" {
		t.Errorf("E5 = %+v", ord)
	}
}
