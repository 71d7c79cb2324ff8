package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"

	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/ui/chart"
)

// promotionsPage is how many promotions the list shows a page.
const promotionsPage = 25

// promotionStates are the states the promotions list filters on.
var promotionStates = []string{promotion.StateRunning, promotion.StatePromoted, promotion.StateRejected, promotion.StateFailed}

type promotionsData struct {
	Agents []string
	// FilterError says why the filter was refused (the page is then a
	// 400 with the form to correct it).
	FilterError string
	// Filter is the list's agent, state and start-date filter.
	Filter       listFilter
	States       []string
	Rows         []store.Promotion
	Cursor, Next string
}

// promotions is GET /ui/promotions?agent&state&since&until&cursor: the
// tenant's promotions, newest first.
func (u *UI) promotions(w http.ResponseWriter, r *http.Request, s session) error {
	d := promotionsData{Cursor: r.URL.Query().Get("cursor"), States: promotionStates}
	f, win, err := parseListFilter(r.URL.Query(), promotionStates)
	d.Filter = f
	var status int
	if d.FilterError, status, err = filterProblem(err); err != nil {
		return err
	}
	agents, err := u.store.AgentsSeen(r.Context(), s.TenantID, maxAgents)
	if err != nil {
		return err
	}
	for _, a := range agents {
		d.Agents = append(d.Agents, a.AgentID)
	}
	d.Agents = withChosen(d.Agents, f.Agent)
	if d.FilterError == "" {
		d.Rows, d.Next, err = u.store.ListPromotions(r.Context(), s.TenantID,
			store.PromotionFilter{AgentID: f.Agent, State: f.State, Since: win.Since, Until: win.Until},
			store.Page{Limit: promotionsPage, Cursor: d.Cursor})
		if err != nil {
			return err
		}
	}
	u.render(w, r, status, "promotions", view{Title: "Promotions", Nav: "promotions", Session: s, Data: d})
	return nil
}

// coded is a reason code with what it means.
type coded struct {
	Code, Meaning string
}

type promotionData struct {
	P        store.Promotion
	Reasons  []coded
	Evidence *promotion.Evidence
	Chart    template.HTML
	// Passes says whether the interval's lower bound reached min_delta.
	Passes bool
	// Open counts the rollouts not ended yet, while running.
	Open int
	// Excluded rates over the limit, per side.
	BaselineHigh, CandidateHigh bool
}

// taskLabel names a task in the chart: its case id, else its id.
func taskLabel(t promotion.TaskEvidence) string {
	if t.CaseID != "" {
		return t.CaseID
	}
	return short(t.TaskID)
}

// promotionPage is GET /ui/promotions/{id}: the decision with its
// reasons, both batches, and the per-task evidence as a chart and a
// table with the mean difference, its interval and its seed.
func (u *UI) promotionPage(w http.ResponseWriter, r *http.Request, s session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	p, err := u.store.GetPromotion(r.Context(), s.TenantID, id)
	if err != nil {
		return err
	}
	d := promotionData{P: p}
	for _, c := range p.Reasons {
		d.Reasons = append(d.Reasons, coded{c, promotionReasonMeaning(c)})
	}
	if p.State == promotion.StateRunning {
		t, err := u.store.TallyPromotion(r.Context(), p.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		d.Open = t.Open
	}
	if len(p.Evidence) > 0 && string(p.Evidence) != "null" {
		var e promotion.Evidence
		if err := json.Unmarshal(p.Evidence, &e); err != nil {
			return fmt.Errorf("promotion %s evidence: %w", p.ID, err)
		}
		d.Evidence = &e
		d.Passes = e.Interval != nil && e.Interval[0] >= p.MinDelta
		d.BaselineHigh = e.ExcludedRate.Baseline > p.MaxExcludedRate
		d.CandidateHigh = e.ExcludedRate.Candidate > p.MaxExcludedRate
		rows := make([]chart.PairedRow, len(e.Tasks))
		for i, t := range e.Tasks {
			rows[i] = chart.PairedRow{Label: taskLabel(t), A: t.Baseline.PassRate, B: t.Candidate.PassRate}
		}
		d.Chart = chart.Paired{Meta: chart.Meta{ID: "chart-evidence", Title: "Pass rate per task: baseline and candidate",
			Desc:  "For each task of the promotion, the pass rate (passed ÷ scored rollouts) of the baseline policy " + p.Baseline + " and of the candidate " + p.Candidate + "; a side with no scored rollout is marked as such, not as zero.",
			Empty: "The promotion has no task."}, Rows: rows, ALabel: "baseline " + p.Baseline, BLabel: "candidate " + p.Candidate}.SVG()
	}
	u.render(w, r, http.StatusOK, "promotion", view{Title: "Promotion " + short(p.ID), Nav: "promotions", Session: s, Data: d})
	return nil
}
