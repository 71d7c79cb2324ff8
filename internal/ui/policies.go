package ui

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// policiesPage is how many policies the list shows a page.
const policiesPage = 50

// policyPromotionsScan bounds the newest promotions a policy's page reads
// to find those that involved it: the page costs the same however many
// promotions the tenant ran.
const policyPromotionsScan = 500

// policyRow is a stored policy with its definition read.
type policyRow struct {
	gateway.Policy
	SHA256    string
	Body      []byte
	CreatedAt time.Time
}

type policiesData struct {
	Rows         []policyRow
	Cursor, Next string
}

func policyRowOf(sp store.Policy) (policyRow, error) {
	p, err := gateway.ParsePolicy(sp.Body)
	if err != nil {
		return policyRow{}, fmt.Errorf("policy %s: %w", sp.Name, err)
	}
	return policyRow{Policy: p, SHA256: sp.SHA256, Body: sp.Body, CreatedAt: sp.CreatedAt}, nil
}

// policies is GET /ui/policies?cursor: the tenant's gateway policies by
// name.
func (u *UI) policies(w http.ResponseWriter, r *http.Request, s session) error {
	d := policiesData{Cursor: r.URL.Query().Get("cursor")}
	list, next, err := u.store.ListPolicies(r.Context(), s.TenantID, store.Page{Limit: policiesPage, Cursor: d.Cursor})
	if err != nil {
		return err
	}
	d.Next = next
	for _, sp := range list {
		row, err := policyRowOf(sp)
		if err != nil {
			return err
		}
		d.Rows = append(d.Rows, row)
	}
	u.render(w, r, http.StatusOK, "policies", view{Title: "Policies", Nav: "policies", Session: s, Data: d})
	return nil
}

type policyData struct {
	P          policyRow
	Promotions []store.Promotion
	// Scanned is how many of the newest promotions were read; Capped
	// when there may be older ones not read.
	Scanned int
	Capped  bool
}

// policy is GET /ui/policies/{name}: the policy's definition and the
// promotions (among the newest policyPromotionsScan) that had it as
// baseline or candidate.
func (u *UI) policy(w http.ResponseWriter, r *http.Request, s session) error {
	name := r.PathValue("name")
	sp, err := u.store.GetPolicy(r.Context(), s.TenantID, name)
	if errors.Is(err, store.ErrNotFound) {
		return errPageNotFound
	}
	if err != nil {
		return err
	}
	d := policyData{}
	if d.P, err = policyRowOf(sp); err != nil {
		return err
	}
	list, next, err := u.store.ListPromotions(r.Context(), s.TenantID, store.PromotionFilter{}, store.Page{Limit: policyPromotionsScan})
	if err != nil {
		return err
	}
	d.Scanned, d.Capped = len(list), next != ""
	for _, p := range list {
		if p.Candidate == name || p.Baseline == name {
			d.Promotions = append(d.Promotions, p)
		}
	}
	u.render(w, r, http.StatusOK, "policy", view{Title: "Policy " + name, Nav: "policies", Session: s, Data: d})
	return nil
}
