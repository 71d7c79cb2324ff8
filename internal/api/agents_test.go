package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// agentDetailView decodes GET /api/v1/agents/{agent_id}.
type agentDetailView struct {
	AgentID        string                    `json:"agent_id"`
	Rollouts       map[gyre.RolloutState]int `json:"rollouts"`
	Exclusions     map[string]int            `json:"exclusions"`
	PromotedPolicy *string                   `json:"promoted_policy"`
	History        []struct {
		Seq          int64   `json:"seq"`
		Policy       string  `json:"policy"`
		SetBy        string  `json:"set_by"`
		SetAt        *string `json:"set_at"`
		PromotionID  *string `json:"promotion_id"`
		RolledBackAt *string `json:"rolled_back_at"`
		RolledBackBy *string `json:"rolled_back_by"`
	} `json:"history"`
}

// TestAgents_ShowAndRollback: GET /api/v1/agents/{agent_id} shows the
// agent's counts, its promoted policy and the full history (who, when,
// which promotion); POST …/rollback pops one entry and answers the agent,
// 409 no_previous_policy when there is none; an agent gyre has never seen
// is 404 on both; a reader cannot roll back.
func TestAgents_ShowAndRollback(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		ctx := context.Background()
		e.batch(e.tasks(2), "") // agent-1: two queued rollouts
		for _, n := range []string{"p1", "p2"} {
			if _, _, err := e.st.CreatePolicy(ctx, store.Policy{TenantID: e.tenant.ID, Name: n,
				Body: json.RawMessage(`{"model":"m","name":"` + n + `","upstream":"stub"}`), SHA256: n}); err != nil {
				t.Fatal(err)
			}
		}
		reader := e.key(gyre.RoleReader)

		var v agentDetailView
		r := e.json(http.MethodGet, "/api/v1/agents/agent-1", reader, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET agent: %d %s", r.status, r.body)
		}
		var raw map[string]json.RawMessage
		decodeInto(t, r, &raw)
		if string(raw["promoted_policy"]) != "null" || string(raw["history"]) != "[]" {
			t.Errorf("never promoted: promoted_policy %s history %s, want null and []", raw["promoted_policy"], raw["history"])
		}
		decodeInto(t, r, &v)
		if v.AgentID != "agent-1" || v.Rollouts[gyre.StateQueued] != 2 || v.Exclusions == nil {
			t.Errorf("agent counts %+v, want 2 queued rollouts as in GET /api/v1/agents", v)
		}
		e.json(http.MethodPost, "/api/v1/agents/agent-1/rollback", e.admin, "").wantError(t, http.StatusConflict, gyre.CodeNoPreviousPolicy, "")

		promo := "0192f0c4-0000-7000-8000-0000000000aa"
		for _, c := range []promotion.Change{
			{TenantID: e.tenant.ID, AgentID: "agent-1", Policy: "p1", SetBy: "key k1"},
			{TenantID: e.tenant.ID, AgentID: "agent-1", Expected: new("p1"), Policy: "p2", SetBy: promotion.ByPromotion(promo), PromotionID: &promo},
		} {
			if _, err := e.st.SetPromotedPolicy(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		r = e.json(http.MethodPost, "/api/v1/agents/agent-1/rollback", e.admin, "")
		if r.status != http.StatusOK {
			t.Fatalf("rollback: %d %s", r.status, r.body)
		}
		v = agentDetailView{}
		decodeInto(t, r, &v)
		if v.PromotedPolicy == nil || *v.PromotedPolicy != "p1" || len(v.History) != 2 {
			t.Fatalf("after rollback: %s, want p1 with 2 history entries", r.body)
		}
		h1, h2 := v.History[0], v.History[1]
		if h1.Policy != "p1" || h1.SetBy != "key k1" || h1.SetAt == nil || h1.PromotionID != nil || h1.RolledBackAt != nil {
			t.Errorf("first entry %+v", h1)
		}
		if h2.Policy != "p2" || h2.PromotionID == nil || *h2.PromotionID != promo || h2.SetBy != "promotion "+promo ||
			h2.RolledBackAt == nil || h2.RolledBackBy == nil || *h2.RolledBackBy == "" {
			t.Errorf("second entry %+v, want p2 by the promotion, rolled back by the admin key", h2)
		}
		// GET shows the same agent.
		r = e.json(http.MethodGet, "/api/v1/agents/agent-1", reader, "")
		var again agentDetailView
		decodeInto(t, r, &again)
		if again.PromotedPolicy == nil || *again.PromotedPolicy != "p1" || len(again.History) != 2 {
			t.Errorf("GET after rollback: %s", r.body)
		}
		e.json(http.MethodPost, "/api/v1/agents/agent-1/rollback", e.admin, "").wantError(t, http.StatusConflict, gyre.CodeNoPreviousPolicy, "")
		e.json(http.MethodPost, "/api/v1/agents/agent-1/rollback", reader, "").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")

		for _, path := range []string{"/api/v1/agents/ghost", "/api/v1/agents/ghost/rollback"} {
			method := http.MethodGet
			if path != "/api/v1/agents/ghost" {
				method = http.MethodPost
			}
			e.json(method, path, e.admin, "").wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		}
		// Another tenant's agent of the same id is never seen.
		_, otherAdmin := e.newTenant("other")
		e.json(http.MethodGet, "/api/v1/agents/agent-1", otherAdmin, "").wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	})
}
