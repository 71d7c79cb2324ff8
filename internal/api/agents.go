package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
)

// agentRoutes registers one agent's view and its promoted policy's
// rollback (SPEC §10). GET /api/v1/agents lives with the rollouts.
func (s *Server) agentRoutes() {
	s.handle("GET /api/v1/agents/{agent_id}", reader, s.getAgent)
	s.handle("POST /api/v1/agents/{agent_id}/rollback", adminOnly, s.rollbackAgent)
}

// agentDetail is GET /api/v1/agents/{agent_id}: the agent's counts as in
// GET /api/v1/agents, its promoted policy (null when none) and the full
// history of it, oldest first.
type agentDetail struct {
	agentJSON
	PromotedPolicy *string        `json:"promoted_policy"`
	History        []historyEntry `json:"history"`
}

// historyEntry is one setting of an agent's promoted policy.
type historyEntry struct {
	Seq          int64      `json:"seq"`
	Policy       string     `json:"policy"`
	SetBy        string     `json:"set_by"`
	SetAt        time.Time  `json:"set_at"`
	PromotionID  *string    `json:"promotion_id"`
	RolledBackAt *time.Time `json:"rolled_back_at"`
	RolledBackBy *string    `json:"rolled_back_by"`
}

// getAgent is GET /api/v1/agents/{agent_id}.
func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	agentID, err := pathAgentID(r)
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	d, err := s.agentDetail(r.Context(), p.TenantID, agentID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// rollbackAgent is POST /api/v1/agents/{agent_id}/rollback: it pops one
// entry of the agent's history and answers the agent as GET does.
func (s *Server) rollbackAgent(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	agentID, err := pathAgentID(r)
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	_, err = s.store.RollbackPolicy(r.Context(), p.TenantID, agentID, promotion.ByKey(p.KeyID))
	switch {
	case errors.Is(err, promotion.ErrAgentNotFound):
		return errAgentNotFound(agentID)
	case errors.Is(err, promotion.ErrNoPreviousPolicy):
		return gyre.Errorf(gyre.CodeNoPreviousPolicy, "agent %q has no previous promoted policy to roll back to", agentID)
	case err != nil:
		return err
	}
	d, err := s.agentDetail(r.Context(), p.TenantID, agentID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// agentDetail reads one agent; 404 when gyre has never seen it in the
// tenant (no turns, batches or rollouts).
func (s *Server) agentDetail(ctx context.Context, tenantID, agentID string) (agentDetail, error) {
	as, err := s.store.ListAgents(ctx, tenantID)
	if err != nil {
		return agentDetail{}, err
	}
	d := agentDetail{History: []historyEntry{}}
	found := false
	for _, a := range as {
		if a.AgentID == agentID {
			d.agentJSON = agentJSON{AgentID: a.AgentID, FirstSeenAt: a.FirstSeenAt, Rollouts: a.Counts, Exclusions: a.Exclusions}
			found = true
			break
		}
	}
	if !found {
		return agentDetail{}, errAgentNotFound(agentID)
	}
	if d.PromotedPolicy, err = s.store.AgentPolicy(ctx, tenantID, agentID); err != nil {
		return agentDetail{}, err
	}
	h, err := s.store.PolicyHistory(ctx, tenantID, agentID)
	if err != nil {
		return agentDetail{}, err
	}
	for _, e := range h {
		d.History = append(d.History, historyEntry{Seq: e.Seq, Policy: e.Policy, SetBy: e.SetBy, SetAt: e.SetAt,
			PromotionID: e.PromotionID, RolledBackAt: e.RolledBackAt, RolledBackBy: e.RolledBackBy})
	}
	return d, nil
}

func errAgentNotFound(agentID string) error {
	return gyre.Errorf(gyre.CodeNotFound, "gyre has never seen agent %q in this tenant", agentID)
}
