package ui

import (
	"errors"
	"net/http"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// agentPromotions is how many of the agent's newest promotions its
// policy page lists.
const agentPromotions = 10

type agentPolicyData struct {
	Agent   string
	Policy  *string
	History []promotion.Entry
	// Live counts the history's live entries: a rollback needs two.
	Live       int
	Promotions []store.Promotion
	// Notice and Problem are the outcome of a rollback.
	Notice, Problem string
}

// agentOf reads the path's agent id and checks that gyre has seen it.
func (u *UI) agentOf(r *http.Request, s session) (string, error) {
	id := r.PathValue("agent")
	if flywheel.ValidateAgentID(id) != nil {
		return "", errPageNotFound
	}
	seen, err := u.store.AgentSeen(r.Context(), s.TenantID, id)
	if err != nil {
		return "", err
	}
	if !seen {
		return "", errPageNotFound
	}
	return id, nil
}

// agentPolicy is GET /ui/agents/{agent}: the agent's promoted policy, its
// history (rolled-back entries included) and its newest promotions; a
// rollback button for admins.
func (u *UI) agentPolicy(w http.ResponseWriter, r *http.Request, s session) error {
	agent, err := u.agentOf(r, s)
	if err != nil {
		return err
	}
	notice := ""
	if r.URL.Query().Get("rolled_back") == "1" {
		notice = "Rolled back: the previous promoted policy is current again."
	}
	return u.showAgentPolicy(w, r, s, http.StatusOK, agent, notice, "")
}

func (u *UI) showAgentPolicy(w http.ResponseWriter, r *http.Request, s session, status int, agent, notice, problem string) error {
	ctx := r.Context()
	d := agentPolicyData{Agent: agent, Notice: notice, Problem: problem}
	var err error
	if d.Policy, err = u.store.AgentPolicy(ctx, s.TenantID, agent); err != nil {
		return err
	}
	if d.History, err = u.store.PolicyHistory(ctx, s.TenantID, agent); err != nil {
		return err
	}
	for _, e := range d.History {
		if e.Live() {
			d.Live++
		}
	}
	if d.Promotions, _, err = u.store.ListPromotions(ctx, s.TenantID, store.PromotionFilter{AgentID: agent}, store.Page{Limit: agentPromotions}); err != nil {
		return err
	}
	u.render(w, r, status, "agent", view{Title: "Promoted policy of " + agent, Nav: "promotions", Session: s, Data: d})
	return nil
}

// rollback is POST /ui/agents/{agent}/rollback (admins, with the CSRF
// token): it restores the agent's previous promoted policy, as POST
// /api/v1/agents/{id}/rollback does. With no previous policy the page
// says so (409) and nothing changes.
func (u *UI) rollback(w http.ResponseWriter, r *http.Request, s session) error {
	if !s.Admin() {
		return errAdminOnly
	}
	agent, err := u.agentOf(r, s)
	if err != nil {
		return err
	}
	_, err = u.store.RollbackPolicy(r.Context(), s.TenantID, agent, promotion.ByKey(s.KeyID))
	switch {
	case errors.Is(err, promotion.ErrNoPreviousPolicy):
		return u.showAgentPolicy(w, r, s, http.StatusConflict, agent, "",
			"Nothing to roll back to (no_previous_policy): the agent's history has no earlier live promoted policy. Nothing changed.")
	case errors.Is(err, promotion.ErrAgentNotFound):
		return errPageNotFound
	case err != nil:
		return err
	}
	http.Redirect(w, r, Prefix+"agents/"+agent+"?rolled_back=1", http.StatusSeeOther)
	return nil
}
