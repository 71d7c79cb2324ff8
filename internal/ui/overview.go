package ui

import (
	"cmp"
	"html/template"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/gyrehq/gyre"

	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/ui/chart"
)

// overviewBatches bounds the batches the overview reads: its charts and
// yield cover the agent's newest batches of the window, not its whole
// history, so the page's cost does not grow with the store.
const overviewBatches = 20

// recentBatches is how many batches the overview lists.
const recentBatches = 10

// The overview's gateway summary reads at most latencyCalls of the
// agent's newest calls of the window.
const latencyCalls = 2000

// lookback is a span of time a page looks back over.
type lookback struct {
	// Param is its value of the page's window parameter; Label says it
	// in words.
	Param, Label string
	Span         time.Duration
}

// overviewWindows are the overview's windows, the default first.
var overviewWindows = []lookback{
	{"7d", "7 days", 7 * 24 * time.Hour},
	{"24h", "24 hours", 24 * time.Hour},
	{"30d", "30 days", 30 * 24 * time.Hour},
}

// windowOf finds the window a page's parameter names; "" is the default.
func windowOf(param string) (lookback, error) {
	if param == "" {
		return overviewWindows[0], nil
	}
	for _, w := range overviewWindows {
		if w.Param == param {
			return w, nil
		}
	}
	return lookback{}, badRequest("Unknown window %q: choose 24h, 7d or 30d.", param)
}

// gatewayStats is the overview's gateway summary.
type gatewayStats struct {
	store.AgentCalls
	P50, P99 *time.Duration
	Window   string
	Limit    int
}

// percentile is the nearest-rank percentile p (0 < p ≤ 100) of sorted
// durations; nil when there are none.
func percentile(sorted []time.Duration, p float64) *time.Duration {
	if len(sorted) == 0 {
		return nil
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	d := sorted[min(max(i, 0), len(sorted)-1)]
	return &d
}

// maxAgents bounds the agents the pages list in their agent choosers.
const maxAgents = 500

type overviewData struct {
	Agents []string
	Agent  string
	// Window is the span the page covers; Windows the choices.
	Window  lookback
	Windows []lookback
	// Found is false when the tenant has seen no agent yet.
	Found     bool
	FirstSeen time.Time
	States    []stateCount
	Total     int
	// Charts.
	StateChart, PassChart, ReasonChart, ExclusionChart template.HTML
	// Over the newest BatchesRead batches of the window, at most
	// MaxBatches; More when the window holds more than were read.
	BatchesRead      int
	MaxBatches       int
	More             bool
	Finished         int
	TrainingGrade    int
	Recent           []batchRow
	Policy           *string
	ExclusionReasons []reasonCount
	Gateway          gatewayStats
}

type reasonCount struct {
	Reason string
	N      int
}

// sortedReasons lists counts by reason, largest first, then by name.
func sortedReasons(m map[string]int) []reasonCount {
	out := make([]reasonCount, 0, len(m))
	for r, n := range m {
		out = append(out, reasonCount{r, n})
	}
	slices.SortFunc(out, func(a, b reasonCount) int {
		return cmp.Or(cmp.Compare(b.N, a.N), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

func reasonBars(rs []reasonCount) []chart.Bar {
	bars := make([]chart.Bar, len(rs))
	for i, r := range rs {
		bars[i] = chart.Bar{Label: r.Reason, Value: float64(r.N)}
	}
	return bars
}

// overview is GET /ui/?agent=&window=: one agent's rollouts and results
// over its newest batches created in the window (the last 7 days unless
// chosen), its gateway calls of the window, and its promoted policy.
// Without a choice, the agent of the tenant's newest batch.
func (u *UI) overview(w http.ResponseWriter, r *http.Request, s session) error {
	ctx := r.Context()
	win, err := windowOf(r.URL.Query().Get("window"))
	if err != nil {
		return err
	}
	agents, err := u.store.AgentsSeen(ctx, s.TenantID, maxAgents)
	if err != nil {
		return err
	}
	d := overviewData{Window: win, Windows: overviewWindows}
	for _, a := range agents {
		d.Agents = append(d.Agents, a.AgentID)
	}
	want := r.URL.Query().Get("agent")
	if want == "" && len(agents) > 0 {
		newest, _, err := u.store.ListBatches(ctx, s.TenantID, store.BatchFilter{}, store.Page{Limit: 1})
		if err != nil {
			return err
		}
		want = agents[0].AgentID
		if len(newest) > 0 {
			want = newest[0].AgentID
		}
	}
	for _, a := range agents {
		if a.AgentID == want {
			d.Agent, d.FirstSeen, d.Found = a.AgentID, a.FirstSeenAt, true
		}
	}
	if want != "" && !d.Found {
		return errPageNotFound
	}
	if d.Found {
		if err := u.fillOverview(r, s, &d); err != nil {
			return err
		}
	}
	u.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Session: s, Data: d})
	return nil
}

func (u *UI) fillOverview(r *http.Request, s session, d *overviewData) error {
	ctx := r.Context()
	since := u.clock.Now().Add(-d.Window.Span)
	batches, more, err := u.store.ListBatches(ctx, s.TenantID, store.BatchFilter{AgentID: d.Agent, Since: since},
		store.Page{Limit: overviewBatches})
	if err != nil {
		return err
	}
	d.BatchesRead, d.MaxBatches, d.More = len(batches), overviewBatches, more != ""
	for _, b := range batches[:min(len(batches), recentBatches)] {
		d.Recent = append(d.Recent, rowOf(b))
	}
	counts := map[gyre.RolloutState]int{}
	reasons := map[string]int{}
	ids := make([]string, len(batches))
	var points []chart.TimePoint
	for i := len(batches) - 1; i >= 0; i-- { // oldest first
		b := batches[i]
		ids[i] = b.ID
		for st, n := range b.Counts {
			counts[st] += n
		}
		d.Finished += b.Finished
		d.TrainingGrade += b.TrainingGrade
		for k, n := range b.NotTrainingGrade {
			reasons[k] += n
		}
		if n := b.Passed + b.Failed; n > 0 {
			points = append(points, chart.TimePoint{At: b.CreatedAt, Value: float64(b.Passed) / float64(n), Label: "batch " + short(b.ID)})
		}
	}
	d.States = orderedStates(counts)
	bars := make([]chart.Bar, len(d.States))
	for i, sc := range d.States {
		bars[i] = chart.Bar{Label: sc.State, Value: float64(sc.N)}
		d.Total += sc.N
	}
	d.StateChart = chart.Bars{Meta: chart.Meta{ID: "chart-states", Title: "Rollouts by state",
		Desc: "How many rollouts of the agent's newest batches are in each state.", Empty: "This agent has no rollouts yet."},
		Bars: bars, ValueLabel: "rollouts"}.SVG()
	exclusions, err := u.store.BatchExclusions(ctx, s.TenantID, ids)
	if err != nil {
		return err
	}
	d.ExclusionReasons = sortedReasons(exclusions)
	d.ExclusionChart = chart.Bars{Meta: chart.Meta{ID: "chart-exclusions", Title: "Exclusions by reason",
		Desc:  "Rollouts of the newest batches left out of training and pass rates, by the exclusion the agent reported or the state the server ended them in.",
		Empty: "No rollout of these batches was excluded."}, Bars: reasonBars(d.ExclusionReasons), ValueLabel: "rollouts"}.SVG()
	d.PassChart = chart.Line{Meta: chart.Meta{ID: "chart-pass-rate", Title: "Pass rate per batch",
		Desc:  "Passed ÷ (passed + failed) of each of the agent's newest batches, over the batch's creation time; excluded and abstained rollouts are left out.",
		Empty: "No batch of this agent has a graded, non-excluded rollout yet."},
		Points: points, YLabel: "pass rate", Max: 1, Percent: true}.SVG()
	d.ReasonChart = chart.Bars{Meta: chart.Meta{ID: "chart-reasons", Title: "Why finished rollouts are not training grade",
		Desc:  "Each reason counted over the finished rollouts of the newest batches that are not training grade.",
		Empty: "No finished rollout is missing training grade."}, Bars: reasonBars(sortedReasons(reasons)), ValueLabel: "rollouts"}.SVG()
	if d.Policy, err = u.store.AgentPolicy(ctx, s.TenantID, d.Agent); err != nil {
		return err
	}
	calls, err := u.store.AgentCalls(ctx, s.TenantID, d.Agent, since, latencyCalls)
	if err != nil {
		return err
	}
	d.Gateway = gatewayStats{AgentCalls: calls, P50: percentile(calls.Latencies, 50), P99: percentile(calls.Latencies, 99),
		Window: d.Window.Label, Limit: latencyCalls}
	return nil
}
