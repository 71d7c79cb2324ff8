package ui_test

import (
	"context"
	"net/http"
	"time"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/promotion"
)

// seededWave2 is what seedWave2 made on top of seed.
type seededWave2 struct {
	seeded
	// Dataset is a ready sft dataset of support-bot; Empty a ready one
	// that selected nothing.
	Dataset, Empty string
	// Promotion is a decided promotion of support-bot (p2 against p1).
	Promotion string
}

// seedWave2 adds, through the real API, a second policy, two datasets
// built by the server's builder, and a promotion whose two batches a
// worker runs and the server's runner decides; then it gives support-bot
// a promoted-policy history of two live entries (rollback possible) and
// queued-bot one of one (no previous policy).
func (s *server) seedWave2() seededWave2 {
	s.t.Helper()
	out := seededWave2{seeded: s.seed()}
	s.call("POST", "/api/v1/policies", s.admin, map[string]any{"name": "p2", "upstream": "stub", "model": "served-model-2", "tokenizer": "tok-1"}, http.StatusCreated, nil)

	var ds struct {
		ID string `json:"id"`
	}
	s.call("POST", "/api/v1/datasets", s.admin, map[string]any{"agent_id": "support-bot", "format": "sft", "min_reward": 0}, http.StatusCreated, &ds)
	out.Dataset = ds.ID
	s.call("POST", "/api/v1/datasets", s.admin, map[string]any{"agent_id": "support-bot", "format": "dpo", "batch_ids": []string{out.Running}}, http.StatusCreated, &ds)
	out.Empty = ds.ID
	s.waitDataset(out.Dataset)
	s.waitDataset(out.Empty)

	var pr struct {
		ID      string `json:"id"`
		Batches struct {
			Baseline string `json:"baseline"`
		} `json:"batches"`
	}
	s.call("POST", "/api/v1/promotions", s.admin, map[string]any{"agent_id": "support-bot", "candidate": "p2", "baseline": "p1",
		"suite": "desk", "repetitions": 1}, http.StatusCreated, &pr)
	out.Promotion = pr.ID
	var claim flywheel.ClaimResponse
	s.call("POST", "/agents/support-bot/claim", s.agent, map[string]any{"max_rollouts": 4, "lease_seconds": 120, "worker_id": "w-2"}, http.StatusOK, &claim)
	if len(claim.Rollouts) != 4 {
		s.t.Fatalf("claimed %d promotion rollouts, want 4", len(claim.Rollouts))
	}
	failed := false
	for _, rr := range claim.Rollouts {
		toolID := s.chat(rr)
		var ro struct {
			BatchID string `json:"batch_id"`
		}
		s.call("GET", "/api/v1/rollouts/"+rr.RolloutID, s.reader, nil, http.StatusOK, &ro)
		text := "Your refund is approved."
		if ro.BatchID == pr.Batches.Baseline && !failed {
			text, failed = "I cannot help with that.", true
		}
		lt, _ := rr.LeaseToken.Get()
		s.output(rr.RolloutID, lt, map[string]any{"final_text": text, "llm_call_count": 2,
			"tool_calls": []any{map[string]any{"name": "lookup_order", "outcome": "ok", "status_code": 200, "tool_call_id": toolID}}})
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var p struct {
			State string `json:"state"`
		}
		s.call("GET", "/api/v1/promotions/"+pr.ID, s.reader, nil, http.StatusOK, &p)
		if p.State != promotion.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("promotion %s still running after 60 s", pr.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.promote("support-bot", "p1")
	s.promote("support-bot", "p2")
	s.promote("queued-bot", "p1")
	return out
}

// promote sets the agent's promoted policy on the store, as a promotion
// would, on top of whatever it is now.
func (s *server) promote(agent, policy string) {
	s.t.Helper()
	ctx := context.Background()
	cur, err := s.st.AgentPolicy(ctx, s.tenant.ID, agent)
	if err != nil {
		s.t.Fatal(err)
	}
	if cur != nil && *cur == policy {
		return
	}
	if _, err := s.st.SetPromotedPolicy(ctx, promotion.Change{TenantID: s.tenant.ID, AgentID: agent, Expected: cur,
		Policy: policy, SetBy: "key test"}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *server) waitDataset(id string) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var d struct {
			State string `json:"state"`
		}
		s.call("GET", "/api/v1/datasets/"+id, s.reader, nil, http.StatusOK, &d)
		if d.State == "ready" {
			return
		}
		if d.State == "failed" || time.Now().After(deadline) {
			s.t.Fatalf("dataset %s is %s", id, d.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
