package ui

import (
	"html/template"
	"net/http"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/ui/chart"
)

// Page sizes of the UI's tables.
const (
	batchesPage  = 25
	rolloutsPage = 50
	rewardBins   = 10
)

// liveEvery is how often a running batch's page refreshes its counts.
const liveEvery = "every 5s"

// batchRow is one batch with what its rows show.
type batchRow struct {
	store.BatchSummary
	Total    int
	PassRate *estimate
}

// estimate is a rate with its 95% Wilson interval over N.
type estimate struct {
	Value, Low, High float64
	N                int
}

func passRate(b store.BatchSummary) *estimate {
	n := b.Passed + b.Failed
	if n == 0 {
		return nil
	}
	lo, hi := grade.Wilson(b.Passed, n)
	return &estimate{Value: float64(b.Passed) / float64(n), Low: lo, High: hi, N: n}
}

func rowOf(b store.BatchSummary) batchRow {
	row := batchRow{BatchSummary: b, PassRate: passRate(b)}
	for _, n := range b.Counts {
		row.Total += n
	}
	return row
}

type batchesData struct {
	Agents       []string
	Agent, State string
	States       []string
	// Window is the created-in window's parameter ("" for any time);
	// Windows the choices.
	Window       string
	Windows      []window
	Rows         []batchRow
	Cursor, Next string
}

// batches is GET /ui/batches?agent&state&window&cursor: the tenant's
// batches, newest first, a page at a time; window keeps those created in
// the last 24 hours, 7 or 30 days.
func (u *UI) batches(w http.ResponseWriter, r *http.Request, s session) error {
	q := r.URL.Query()
	d := batchesData{Agent: q.Get("agent"), State: q.Get("state"), Cursor: q.Get("cursor"), Window: q.Get("window"),
		States: []string{string(gyre.BatchRunning), string(gyre.BatchFinished), string(gyre.BatchCancelled)}, Windows: overviewWindows}
	if d.State != "" && !validBatchState(d.State) {
		return badRequest("Unknown batch state %q: choose running, finished or cancelled.", d.State)
	}
	f := store.BatchFilter{AgentID: d.Agent, State: gyre.BatchState(d.State)}
	if d.Window != "" {
		win, err := windowOf(d.Window)
		if err != nil {
			return err
		}
		f.Since = u.clock.Now().Add(-win.Span)
	}
	agents, err := u.store.AgentsSeen(r.Context(), s.TenantID, maxAgents)
	if err != nil {
		return err
	}
	for _, a := range agents {
		d.Agents = append(d.Agents, a.AgentID)
	}
	list, next, err := u.store.ListBatches(r.Context(), s.TenantID, f, store.Page{Limit: batchesPage, Cursor: d.Cursor})
	if err != nil {
		return err
	}
	d.Next = next
	for _, b := range list {
		d.Rows = append(d.Rows, rowOf(b))
	}
	u.render(w, r, http.StatusOK, "batches", view{Title: "Batches", Nav: "batches", Session: s, Data: d})
	return nil
}

func validBatchState(s string) bool {
	switch gyre.BatchState(s) {
	case gyre.BatchRunning, gyre.BatchFinished, gyre.BatchCancelled:
		return true
	}
	return false
}

// rolloutFilterForm is the batch page's rollout filters as the form has them.
type rolloutFilterForm struct {
	State, Outcome, Exclusion, Training, Cursor string
}

type batchData struct {
	Batch   batchRow
	Live    liveData
	Reward  template.HTML
	Reasons template.HTML
	Filter  rolloutFilterForm
	States  []gyre.RolloutState
	// ExclusionReasons are the filter's reasons: the contract's, then
	// the states the server ends rollouts in.
	ExclusionReasons []string
	Rollouts         []store.Rollout
	Next             string
}

// liveData is the part of the batch page that refreshes while it runs.
type liveData struct {
	Batch   batchRow
	States  []stateCount
	Running bool
	Every   string
}

func liveOf(b batchRow) liveData {
	return liveData{Batch: b, States: orderedStates(b.Counts), Running: b.State == gyre.BatchRunning, Every: liveEvery}
}

func exclusionReasons() []string {
	var out []string
	for _, r := range flywheel.ExclusionReasons {
		out = append(out, string(r))
	}
	for _, s := range gyre.RolloutStates {
		if s.ServerEnded() {
			out = append(out, "state:"+string(s))
		}
	}
	return out
}

// exclusionOf is a rollout's exclusion: the output's reason, or
// "state:<name>" for a rollout the server ended.
func exclusionOf(r store.Rollout) string {
	if r.State.ServerEnded() {
		return "state:" + string(r.State)
	}
	if r.ExclusionReason != nil {
		return *r.ExclusionReason
	}
	return ""
}

func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return "", errPageNotFound
	}
	return id, nil
}

// batch is GET /ui/batches/{id}: counts, pass rate with its interval,
// the reward histogram, reasons, and the rollouts table with filters.
func (u *UI) batch(w http.ResponseWriter, r *http.Request, s session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	sum, err := u.store.BatchSummary(ctx, s.TenantID, id)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	d := batchData{Batch: rowOf(sum), States: gyre.RolloutStates,
		Filter: rolloutFilterForm{State: q.Get("state"), Outcome: q.Get("outcome"), Exclusion: q.Get("exclusion"),
			Training: q.Get("training"), Cursor: q.Get("cursor")}}
	d.Live = liveOf(d.Batch)
	d.ExclusionReasons = exclusionReasons()
	f := store.RolloutFilter{BatchID: id, State: gyre.RolloutState(d.Filter.State), Outcome: d.Filter.Outcome, Exclusion: d.Filter.Exclusion}
	if f.State != "" && !f.State.Valid() {
		return badRequest("Unknown rollout state %q.", d.Filter.State)
	}
	switch f.Outcome {
	case "", "passed", "failed", "unscored":
	default:
		return badRequest("Unknown verdict %q: choose passed, failed or unscored.", f.Outcome)
	}
	if f.Exclusion != "" && f.Exclusion != store.ExclusionNone && f.Exclusion != store.ExclusionAny &&
		!slices.Contains(d.ExclusionReasons, f.Exclusion) {
		return badRequest("Unknown exclusion %q.", f.Exclusion)
	}
	switch d.Filter.Training {
	case "":
	case "true", "false":
		v, _ := strconv.ParseBool(d.Filter.Training)
		f.TrainingGrade = &v
	default:
		return badRequest("Unknown training grade filter %q: choose true or false.", d.Filter.Training)
	}
	bins, err := u.store.BatchRewardHistogram(ctx, s.TenantID, id, rewardBins)
	if err != nil {
		return err
	}
	d.Reward = chart.Histogram{Meta: chart.Meta{ID: "chart-reward", Title: "Reward histogram",
		Desc:  "Rewards of the batch's graded rollouts without an exclusion, in ten bins from 0 to 1.",
		Empty: "No graded, non-excluded rollout of this batch has a reward yet."}, Counts: bins, Lo: 0, Hi: 1, XLabel: "reward"}.SVG()
	d.Reasons = chart.Bars{Meta: chart.Meta{ID: "chart-batch-reasons", Title: "Why finished rollouts are not training grade",
		Desc:  "Each reason counted over the batch's finished rollouts that are not training grade.",
		Empty: "No finished rollout of this batch is missing training grade."},
		Bars: reasonBars(sortedReasons(sum.NotTrainingGrade)), ValueLabel: "rollouts"}.SVG()
	d.Rollouts, d.Next, err = u.store.ListRollouts(ctx, s.TenantID, f, store.Page{Limit: rolloutsPage, Cursor: d.Filter.Cursor})
	if err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "batch", view{Title: "Batch " + short(id), Nav: "batches", Session: s, Data: d})
	return nil
}

// batchLive is GET /ui/batches/{id}/live: the counts fragment that a
// running batch's page swaps in every few seconds.
func (u *UI) batchLive(w http.ResponseWriter, r *http.Request, s session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	sum, err := u.store.BatchSummary(r.Context(), s.TenantID, id)
	if err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "batch-live-fragment", view{Session: s, Data: liveOf(rowOf(sum))})
	return nil
}
