package ui

import (
	"bytes"
	"cmp"
	"encoding/json"
	"hash/maphash"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// Page sizes of the experiment pages.
const (
	experimentsPage = 25
	// compareChoices is how many recent experiments the compare form
	// offers (any other is reachable by its id in the URL).
	compareChoices = 10
	// gridRuns is how many run records one page of an experiment's grid
	// shows; the report above it covers every run.
	gridRuns = 200
)

// experimentRow is one experiment with what the list shows of it.
type experimentRow struct {
	store.Experiment
	Running  bool
	Revision string
	// Report is the stored summary of a finished experiment; nil while
	// it runs (its page computes one live).
	Report *listSummary
}

// listSummary is what the list reads of a stored summary: its counts,
// not its per-case results.
type listSummary struct {
	Runs             int                          `json:"runs"`
	Passed           int                          `json:"passed"`
	Failed           int                          `json:"failed"`
	Unscored         int                          `json:"unscored"`
	Errors           int                          `json:"errors"`
	PassRate         *float64                     `json:"pass_rate"`
	PassRateInterval *struct{ Low, High float64 } `json:"pass_rate_interval"`
}

// capabilities is what the pages read of a harness's capabilities
// snapshot.
type capabilities struct {
	Agent    string `json:"agent"`
	Revision string `json:"revision"`
	Branch   string `json:"branch"`
}

func capabilitiesOf(e store.Experiment) capabilities {
	var c capabilities
	if len(e.Capabilities) > 0 {
		_ = json.Unmarshal(e.Capabilities, &c)
	}
	return c
}

func experimentRowOf(e store.Experiment) experimentRow {
	row := experimentRow{Experiment: e, Running: e.FinishedAt == nil, Revision: capabilitiesOf(e).Revision}
	if len(e.Summary) > 0 {
		row.Report = listSummaryOf(e.Summary)
	}
	return row
}

// listSummaryOf reads the counts of a stored summary, nil when it is not
// a JSON object. It stops once it has them: a summary holds a result per
// case after its counts, which the list never reads.
func listSummaryOf(summary json.RawMessage) *listSummary {
	dec := json.NewDecoder(bytes.NewReader(summary))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var rep listSummary
	want := map[string]any{"runs": &rep.Runs, "passed": &rep.Passed, "failed": &rep.Failed, "unscored": &rep.Unscored,
		"errors": &rep.Errors, "pass_rate": &rep.PassRate, "pass_rate_interval": &rep.PassRateInterval}
	for len(want) > 0 && dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		dst, ok := want[name]
		if !ok {
			dst = new(json.RawMessage)
		}
		if err := dec.Decode(dst); err != nil {
			return nil
		}
		delete(want, name)
	}
	return &rep
}

type experimentsData struct {
	Suite, State, Since, Until, Cursor, Next string
	States                                   []string
	// FilterError says why the filter was refused (the page is then a
	// 400 with the form to correct it).
	FilterError string
	Rows        []experimentRow
}

// Filtered reports whether any filter is set.
func (d experimentsData) Filtered() bool {
	return d.Suite != "" || d.State != "" || d.Since != "" || d.Until != ""
}

// filter checks the list's suite and reads its state and creation window
// as every list does; a bad value is a 400 that says what is wrong.
func (d *experimentsData) filter() (store.ExperimentFilter, error) {
	if d.Suite != "" && !suite.ValidName(d.Suite) {
		return store.ExperimentFilter{}, badRequest("A suite name is 1 to 255 characters from A-Z a-z 0-9 . _ -, not %q.", d.Suite)
	}
	lf, win, err := parseListFilter(url.Values{"state": {d.State}, "since": {d.Since}, "until": {d.Until}}, d.States)
	d.Since, d.Until = lf.Since, lf.Until
	return store.ExperimentFilter{Suite: d.Suite, State: store.ExperimentState(lf.State), Since: win.Since, Until: win.Until}, err
}

// parseDay reads a filter's date: YYYY-MM-DD (midnight UTC, as the
// form's date input sends it) or an RFC 3339 time.
func parseDay(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, badRequest("The %s date %q is not a date: write it as YYYY-MM-DD.", field, v)
}

// experiments is GET /ui/experiments?suite&state&since&until&cursor: the
// tenant's experiments, newest first, a page at a time.
func (u *UI) experiments(w http.ResponseWriter, r *http.Request, s session) error {
	q := r.URL.Query()
	d := experimentsData{Suite: q.Get("suite"), State: q.Get("state"), Since: q.Get("since"), Until: q.Get("until"),
		Cursor: q.Get("cursor"), States: []string{string(store.ExperimentRunning), string(store.ExperimentFinished)}}
	f, err := d.filter()
	var status int
	if d.FilterError, status, err = filterProblem(err); err != nil {
		return err
	}
	if d.FilterError == "" {
		list, next, err := u.store.FilterExperiments(r.Context(), s.TenantID, f, store.Page{Limit: experimentsPage, Cursor: d.Cursor})
		if err != nil {
			return err
		}
		d.Next = next
		for _, e := range list {
			d.Rows = append(d.Rows, experimentRowOf(e))
		}
	}
	u.render(w, r, status, "experiments", view{Title: "Experiments", Nav: "experiments", Session: s, Data: d})
	return nil
}

// gridCell is one run of the cases × repetitions grid.
type gridCell struct {
	Repetition int
	// Class is passed, failed, unscored, error, or "" while in flight.
	Class         string
	TimedOut      bool
	HasTrajectory bool
}

// gridRow is one case of the grid: its runs by repetition (a nil cell
// has no record yet) and its reduction from the report.
type gridRow struct {
	CaseID string
	Cells  []*gridCell
	Result *eval.CaseResult
}

type experimentLive struct {
	E       experimentRow
	Report  eval.Report
	Grid    []gridRow
	Reps    []int
	Ks      []int
	Cursor  string
	Next    string
	Running bool
	Every   string
}

type experimentData struct {
	Live   experimentLive
	Caps   capabilities
	Config eval.ExperimentConfig
}

// experimentLiveOf reads the experiment's report (every run, a page at a
// time, as `gyre eval show` does) and one page of its grid.
func (u *UI) experimentLiveOf(r *http.Request, s session, id, cursor string) (experimentLive, error) {
	ctx := r.Context()
	e, err := u.store.Experiment(ctx, s.TenantID, id)
	if err != nil {
		return experimentLive{}, err
	}
	rep, err := u.reportOf(r, s, e)
	if err != nil {
		return experimentLive{}, err
	}
	runs, next, err := u.store.ListRunOutcomes(ctx, s.TenantID, id, store.Page{Limit: gridRuns, Cursor: cursor})
	if err != nil {
		return experimentLive{}, err
	}
	l := experimentLive{E: experimentRowOf(e), Report: rep, Cursor: cursor, Next: next, Running: e.FinishedAt == nil, Every: liveEvery}
	results := map[string]*eval.CaseResult{}
	for i := range rep.CaseResults {
		results[rep.CaseResults[i].CaseID] = &rep.CaseResults[i]
		for _, k := range rep.CaseResults[i].AtK {
			if !slices.Contains(l.Ks, k.K) {
				l.Ks = append(l.Ks, k.K)
			}
		}
	}
	slices.Sort(l.Ks)
	maxRep := configRepetitions(e)
	for _, run := range runs {
		maxRep = max(maxRep, run.Repetition)
	}
	for i := 1; i <= maxRep; i++ {
		l.Reps = append(l.Reps, i)
	}
	for _, run := range runs {
		if len(l.Grid) == 0 || l.Grid[len(l.Grid)-1].CaseID != run.CaseID {
			l.Grid = append(l.Grid, gridRow{CaseID: run.CaseID, Cells: make([]*gridCell, maxRep), Result: results[run.CaseID]})
		}
		row := &l.Grid[len(l.Grid)-1]
		row.Cells[run.Repetition-1] = &gridCell{Repetition: run.Repetition, Class: run.Classification,
			TimedOut: run.TimedOut, HasTrajectory: run.HasTrajectory}
	}
	return l, nil
}

// reportOf is an experiment's report: for a finished experiment, the
// summary stored when it finished (or was regraded), which eval computed
// from every run with the same code; for a running one, computed now
// from its runs' outcomes (not their documents), as ReportFrom does.
func (u *UI) reportOf(r *http.Request, s session, e store.Experiment) (eval.Report, error) {
	if e.FinishedAt != nil && len(e.Summary) > 0 {
		key := summaryKey(s.TenantID, e)
		if rep, ok := u.reports.get(key); ok {
			return rep, nil
		}
		var rep eval.Report
		if err := json.Unmarshal(e.Summary, &rep); err == nil && rep.ExperimentID == e.ID {
			u.reports.put(key, rep)
			return rep, nil
		}
	}
	return eval.ReportFromOutcomes(e, eval.StoreOutcomes(r.Context(), u.store, s.TenantID, e.ID))
}

// configRepetitions is the repetitions an experiment was run with, 0
// when its config does not say.
func configRepetitions(e store.Experiment) int { return eval.ConfigOf(e).Repetitions }

// experiment is GET /ui/experiments/{id}: the report with pass@k, model
// and harness revision, and the cases × repetitions grid.
func (u *UI) experiment(w http.ResponseWriter, r *http.Request, s session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	live, err := u.experimentLiveOf(r, s, id, r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	d := experimentData{Live: live, Caps: capabilitiesOf(live.E.Experiment), Config: eval.ConfigOf(live.E.Experiment)}
	u.render(w, r, http.StatusOK, "experiment", view{Title: "Experiment " + short(id), Nav: "experiments", Session: s, Data: d})
	return nil
}

// experimentLivePart is GET /ui/experiments/{id}/live: the report and
// grid fragment a running experiment's page swaps in every few seconds.
func (u *UI) experimentLivePart(w http.ResponseWriter, r *http.Request, s session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	live, err := u.experimentLiveOf(r, s, id, r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "experiment-live-fragment", view{Session: s, Data: live})
	return nil
}

type compareData struct {
	A, B       string
	EA, EB     *store.Experiment
	Recent     []store.Experiment
	Comparison *eval.Comparison
	// Cases are the comparison's cases, regressions first.
	Cases []eval.CaseDiff
}

// compareRank orders a comparison's cases for the page: new failures,
// then the largest pass-rate drops, then the rest.
func compareRank(d eval.CaseDiff) int {
	switch {
	case d.Change == "new_failure":
		return 0
	case d.PassRateDelta != nil && *d.PassRateDelta < 0:
		return 1
	case d.Change == "removed" || d.Change == "unscored":
		return 2
	case d.Change == "fixed":
		return 4
	}
	return 3
}

// regressionsFirst sorts a comparison's cases: regressions first (the
// largest drop first), fixed cases last, by case id within a rank.
func regressionsFirst(cases []eval.CaseDiff) []eval.CaseDiff {
	out := slices.Clone(cases)
	slices.SortStableFunc(out, func(a, b eval.CaseDiff) int {
		if c := cmp.Compare(compareRank(a), compareRank(b)); c != 0 {
			return c
		}
		if a.PassRateDelta != nil && b.PassRateDelta != nil {
			if c := cmp.Compare(*a.PassRateDelta, *b.PassRateDelta); c != 0 {
				return c
			}
		}
		return strings.Compare(a.CaseID, b.CaseID)
	})
	return out
}

// compare is GET /ui/compare?a&b: experiment b diffed against a, case
// by case, as `gyre eval compare A B` computes it.
func (u *UI) compare(w http.ResponseWriter, r *http.Request, s session) error {
	q := r.URL.Query()
	d := compareData{A: q.Get("a"), B: q.Get("b")}
	ctx := r.Context()
	// The choice lists the newest few: a stored summary grows with the
	// suite's cases, and the list reads each one.
	recent, _, err := u.store.ListExperiments(ctx, s.TenantID, store.Page{Limit: compareChoices})
	if err != nil {
		return err
	}
	d.Recent = recent
	if d.A == "" || d.B == "" {
		u.render(w, r, http.StatusOK, "compare", view{Title: "Compare experiments", Nav: "experiments", Session: s, Data: d})
		return nil
	}
	var exps [2]store.Experiment
	for i, id := range []string{d.A, d.B} {
		if !validUUID(id) {
			return badRequest("%q is not an experiment id.", id)
		}
		if exps[i], err = u.store.Experiment(ctx, s.TenantID, id); err != nil {
			return err
		}
	}
	d.EA, d.EB = &exps[0], &exps[1]
	c, err := u.comparisonOf(r, s, exps[0], exps[1])
	if err != nil {
		return err
	}
	d.Comparison = &c
	d.Cases = regressionsFirst(c.Cases)
	u.render(w, r, http.StatusOK, "compare", view{Title: "Compare " + short(d.A) + " → " + short(d.B), Nav: "experiments", Session: s, Data: d})
	return nil
}

// comparisonOf is b compared with a as `gyre eval compare A B` computes
// it, kept when both have finished.
func (u *UI) comparisonOf(r *http.Request, s session, a, b store.Experiment) (eval.Comparison, error) {
	key := comparisonKey(s.TenantID, a, b)
	if c, ok := u.comparisons.get(key); ok {
		return c, nil
	}
	var reports [2]eval.Report
	for i, e := range []store.Experiment{a, b} {
		var err error
		if reports[i], err = u.reportOf(r, s, e); err != nil {
			return eval.Comparison{}, err
		}
	}
	// The same seed as `gyre eval compare`: B's, else 1.
	seed := eval.ConfigOf(b).Seed
	if seed == 0 {
		seed = 1
	}
	c := eval.CompareReports(reports[0], reports[1], seed)
	u.comparisons.put(key, c)
	return c, nil
}

// validUUID reports whether id is a UUID in its canonical form.
func validUUID(id string) bool {
	v, err := uuid.Parse(id)
	return err == nil && v.String() == id
}

// cellText is how a grid cell names a run's classification: an error is
// the harness's or the network's, not the model's.
func cellText(c gridCell) string {
	switch c.Class {
	case "passed":
		return "pass"
	case "failed":
		if c.TimedOut {
			return "fail (timeout)"
		}
		return "fail"
	case "unscored":
		return "abstained"
	case "error":
		return "error"
	}
	return "in flight"
}

// cellClass is a grid cell's badge class: every classification looks
// different, and an infrastructure error is not styled as a failure.
func cellClass(class string) string {
	switch class {
	case "passed":
		return "b-ok"
	case "failed":
		return "b-failed"
	case "unscored":
		return "b-abstain"
	case "error":
		return "b-error"
	}
	return "b-neutral"
}

// runPath is the UI path of a run record.
func runPath(experimentID, caseID string, repetition int) string {
	return Prefix + "experiments/" + experimentID + "/runs/" + caseID + "/" + strconv.Itoa(repetition)
}

// signedPct formats a difference of rates in percentage points with its
// sign; nil is a dash.
func signedPct(v *float64) string {
	if v == nil {
		return "—"
	}
	s := strconv.FormatFloat(*v*100, 'f', 1, 64) + " pp"
	if *v > 0 {
		s = "+" + s
	}
	return s
}

// signedDelta formats a difference B − A with its sign, rounded to
// decimals places and followed by unit: a token count is whole, so it
// shows as one ("+120", "-35"). An unknown difference (nil: a side did
// not report it) is a dash, never 0; a difference that rounds to nothing
// is "0", without a sign.
func signedDelta(v *float64, decimals int, unit string) string {
	if v == nil || math.IsNaN(*v) {
		return "—"
	}
	p := math.Pow(10, float64(decimals))
	r := math.Round(*v*p) / p
	if r == 0 {
		return strconv.FormatFloat(0, 'f', decimals, 64) + unit
	}
	s := strconv.FormatFloat(r, 'f', decimals, 64) + unit
	if r > 0 {
		return "+" + s
	}
	return s
}

// summaryKey names a finished experiment's stored summary by a digest of
// it (a regrade replaces a summary but keeps the finish time); "" while
// the experiment runs.
func summaryKey(tenantID string, e store.Experiment) string {
	if e.FinishedAt == nil {
		return ""
	}
	return tenantID + "/" + e.ID + "/" + strconv.FormatUint(maphash.Bytes(summarySeed, e.Summary), 16)
}

// summarySeed seeds the summaries' digests: they name cache entries of
// this process only.
var summarySeed = maphash.MakeSeed()

// comparisonKey names the comparison of two finished experiments by
// their summaries; "" when one is running, whose comparison is never
// kept.
func comparisonKey(tenantID string, a, b store.Experiment) string {
	ka, kb := summaryKey(tenantID, a), summaryKey(tenantID, b)
	if ka == "" || kb == "" {
		return ""
	}
	return ka + "|" + kb
}

// kept keeps the last few values computed from finished experiments,
// which do not change: the paired bootstrap of a comparison, a decoded
// summary. The empty key is never kept. The zero value is ready.
type kept[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// comparisonCache keeps comparisons, reportCache decoded summaries.
type (
	comparisonCache = kept[eval.Comparison]
	reportCache     = kept[eval.Report]
)

// maxKept bounds a kept's entries; it starts afresh when full.
const maxKept = 32

func (c *kept[V]) get(key string) (V, bool) {
	var zero V
	if key == "" {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *kept[V]) put(key string, v V) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxKept {
		c.m = map[string]V{}
	}
	c.m[key] = v
}
