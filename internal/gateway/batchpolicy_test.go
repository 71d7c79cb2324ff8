package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/promotion"
)

// TestBatchPolicyIsResolvedOnceAtCreation: a batch without a policy runs
// under the policy resolved when it was created (SPEC §6.1). Promoting
// another policy while a rollout is mid-conversation does not switch it;
// a batch created afterwards gets the new one; the production policy
// endpoint follows the promotion at once, and a rollback at once again.
func TestBatchPolicyIsResolvedOnceAtCreation(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{gw: gateway.Config{DefaultPolicy: "p1"}})
		h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"p2","upstream":"stub","model":"promoted-model"}`, http.StatusCreated)
		body := `{"model":"agent-model","messages":[{"role":"user","content":"hi"}]}`
		complete := func(rr flywheel.RolloutRequest) string {
			t.Helper()
			h.mustJSON(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey, body, http.StatusOK)
			return h.up.last(t)["model"].(string)
		}
		production := func() string {
			t.Helper()
			h.mustJSON(http.MethodPost, "/agents/agent-1/v1/chat/completions", h.agent, body, http.StatusOK)
			return h.up.last(t)["model"].(string)
		}
		batchPolicy := func(rr flywheel.RolloutRequest) string {
			t.Helper()
			r := h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID, h.admin, "", http.StatusOK)
			var ro struct {
				BatchID string `json:"batch_id"`
			}
			_ = json.Unmarshal(r.body, &ro)
			r = h.mustJSON(http.MethodGet, "/api/v1/batches/"+ro.BatchID, h.admin, "", http.StatusOK)
			var b struct {
				Policy *string `json:"policy"`
			}
			_ = json.Unmarshal(r.body, &b)
			if b.Policy == nil {
				return "<nil>"
			}
			return *b.Policy
		}

		before := h.rollout("") // no promoted policy yet: the server default p1
		if m := complete(before); m != "served-model" {
			t.Fatalf("first completion reached model %q, want p1's served-model", m)
		}
		if p := batchPolicy(before); p != "p1" {
			t.Errorf("batch created before the promotion stores policy %q, want p1", p)
		}
		if m := production(); m != "served-model" {
			t.Fatalf("policy endpoint reached %q before any promotion, want the default's served-model", m)
		}
		if _, err := h.st.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: h.tenant.ID, AgentID: "agent-1",
			Policy: "p1", SetBy: "key test"}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.st.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: h.tenant.ID, AgentID: "agent-1",
			Expected: new("p1"), Policy: "p2", SetBy: "key test"}); err != nil {
			t.Fatal(err)
		}
		if m := complete(before); m != "served-model" {
			t.Errorf("mid-conversation completion after a promotion reached %q, want the batch's served-model", m)
		}
		if m := production(); m != "promoted-model" {
			t.Errorf("policy endpoint after the promotion reached %q, want p2's promoted-model", m)
		}
		after := h.rollout("") // created after the promotion, no policy named
		if p := batchPolicy(after); p != "p2" {
			t.Errorf("batch created after the promotion stores policy %q, want p2", p)
		}
		if m := complete(after); m != "promoted-model" {
			t.Errorf("a batch created after the promotion reached %q, want p2's promoted-model", m)
		}
		if _, err := h.st.RollbackPolicy(t.Context(), h.tenant.ID, "agent-1", "key test"); err != nil {
			t.Fatal(err)
		}
		if m := production(); m != "served-model" {
			t.Errorf("policy endpoint after the rollback reached %q, want p1's served-model", m)
		}
		if m := complete(after); m != "promoted-model" {
			t.Errorf("a running rollout after the rollback reached %q, want its batch's promoted-model", m)
		}
	})
}
