package eval

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// Exit codes of `gyre eval run` (SPEC §7.2, promptfoo's convention).
const (
	ExitOK     = 0
	ExitError  = 1
	ExitFailed = 100
)

// MixedModel is the experiment model when its runs report several.
const MixedModel = "mixed"

// Summary is an experiment's result: exactly the --json form of SPEC
// §7.2. Runs = Passed + Failed + Unscored + Errors; TimedOut is a part of
// Failed.
type Summary struct {
	ExperimentID string   `json:"experiment_id"`
	Suite        string   `json:"suite"`
	SuiteVersion string   `json:"suite_version"`
	Harness      string   `json:"harness"`
	Model        *string  `json:"model"`
	Cases        int      `json:"cases"`
	Runs         int      `json:"runs"`
	Passed       int      `json:"passed"`
	Failed       int      `json:"failed"`
	Errors       int      `json:"errors"`
	TimedOut     int      `json:"timed_out"`
	Unscored     int      `json:"unscored"`
	PassRate     *float64 `json:"pass_rate"`
	ExitCode     int      `json:"exit_code"`
}

// CaseResult reduces the runs of one case (SPEC §8 reducers).
type CaseResult struct {
	CaseID string `json:"case_id"`
	// Result is passed when the case's run pass rate reaches the case
	// threshold, failed when it does not, unscored when no run was scored.
	Result string `json:"result"`
	grade.Reduction
	// TimedOut counts timed-out runs (a part of Failed).
	TimedOut int `json:"timed_out"`
	// LatencyMS, Tokens and CostUSD are means over the runs that report
	// them; nil when none does.
	LatencyMS *float64 `json:"latency_ms"`
	Tokens    *float64 `json:"tokens"`
	CostUSD   *float64 `json:"cost_usd"`
}

// Report is what an experiment stores as its summary: the Summary's
// members, then per-case reductions and the experiment-wide pass rate
// interval.
type Report struct {
	Summary
	PassRateInterval *grade.Interval `json:"pass_rate_interval"`
	CaseThreshold    float64         `json:"case_threshold"`
	CasesPassed      int             `json:"cases_passed"`
	CasesFailed      int             `json:"cases_failed"`
	CaseResults      []CaseResult    `json:"case_results"`
	Seed             uint64          `json:"seed"`
	Warnings         []string        `json:"warnings"`
	// ExitReason says why the exit code is what it is.
	ExitReason string `json:"exit_reason"`
}

// Criteria decide the exit code (SPEC §7.2).
type Criteria struct {
	// FailUnder, when set, fails (100) an experiment whose pass rate is
	// below it; otherwise any failed case fails it.
	FailUnder *float64
	// CaseThreshold is the run pass rate a case needs to pass.
	CaseThreshold float64
	// MaxErrorRate and MaxUnscoredRate bound errors/runs and
	// unscored/runs; over either is exit 1.
	MaxErrorRate    float64
	MaxUnscoredRate float64
}

// DefaultCriteria are the defaults of SPEC §7.2.
func DefaultCriteria() Criteria {
	return Criteria{CaseThreshold: 1, MaxErrorRate: 0, MaxUnscoredRate: 0.2}
}

// RunUsage is a run record's usage JSON.
type RunUsage struct {
	PromptTokens     *int64   `json:"prompt_tokens"`
	CompletionTokens *int64   `json:"completion_tokens"`
	CostUSD          *float64 `json:"cost_usd"`
}

// Tokens is prompt plus completion tokens, nil when neither is known.
func (u RunUsage) Tokens() *float64 {
	if u.PromptTokens == nil && u.CompletionTokens == nil {
		return nil
	}
	var t int64
	if u.PromptTokens != nil {
		t += *u.PromptTokens
	}
	if u.CompletionTokens != nil {
		t += *u.CompletionTokens
	}
	f := float64(t)
	return &f
}

func usageOf(raw json.RawMessage) RunUsage {
	var u RunUsage
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &u)
	}
	return u
}

// Summarize computes an experiment's report from its run records. cases
// is the number of cases in the suite (0: count the cases seen in runs).
// Runs without a classification (in flight, interrupted) count nowhere.
func Summarize(e store.Experiment, runs []store.RunRecord, cases int, c Criteria, seed uint64) Report {
	sm := newSummarizer(e, cases, c, seed)
	for _, r := range runs {
		sm.add(r)
	}
	return sm.report()
}

// ReportFrom summarises a stored experiment as ReportOf does, reading its
// run records from rec one page at a time: memory holds per-case
// aggregates, never every record.
func ReportFrom(ctx context.Context, rec Recorder, e store.Experiment) (Report, error) {
	c := ConfigOf(e)
	return summarizeFrom(ctx, rec, e, c.Cases, CriteriaOf(e), c.Seed)
}

func summarizeFrom(ctx context.Context, rec Recorder, e store.Experiment, cases int, c Criteria, seed uint64) (Report, error) {
	sm := newSummarizer(e, cases, c, seed)
	for r, err := range rec.AllRuns(ctx, e.ID) {
		if err != nil {
			return Report{}, fmt.Errorf("read runs of %s: %w", e.ID, err)
		}
		sm.add(r)
	}
	return sm.report(), nil
}

// ReportFromOutcomes summarises a stored experiment as ReportFrom does,
// from its runs' outcomes (store.ListRunOutcomes), which hold everything
// the report reads of a record and none of its documents.
func ReportFromOutcomes(e store.Experiment, outcomes iter.Seq2[store.RunOutcome, error]) (Report, error) {
	c := ConfigOf(e)
	sm := newSummarizer(e, c.Cases, CriteriaOf(e), c.Seed)
	for o, err := range outcomes {
		if err != nil {
			return Report{}, fmt.Errorf("read runs of %s: %w", e.ID, err)
		}
		sm.addOutcome(o)
	}
	return sm.report(), nil
}

// StoreOutcomes yields the outcomes of an experiment's runs from st, a
// page of store.MaxRunOutcomes at a time.
func StoreOutcomes(ctx context.Context, st store.ExperimentStore, tenantID, experimentID string) iter.Seq2[store.RunOutcome, error] {
	return func(yield func(store.RunOutcome, error) bool) {
		cursor := ""
		for {
			page, next, err := st.ListRunOutcomes(ctx, tenantID, experimentID, store.Page{Limit: store.MaxRunOutcomes, Cursor: cursor})
			if err != nil {
				yield(store.RunOutcome{}, err)
				return
			}
			for _, o := range page {
				if !yield(o, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			cursor = next
		}
	}
}

// summarizer reduces run records one at a time. It keeps what the report
// needs of each case — one small sample per run — and nothing else of a
// record. It is not safe for concurrent use.
type summarizer struct {
	rep    Report
	cases  int
	crit   Criteria
	seed   uint64
	byCase map[string]*caseAgg
	models map[string]bool
}

// caseAgg is what the summary keeps of one case's runs.
type caseAgg struct {
	samples  []repSample
	timedOut int
}

// repSample is what the summary keeps of one classified run, with its
// repetition, which orders the samples (and so the seeded bootstrap and
// the sums of the means) whatever order the records arrive in. Absent
// numbers are NaN, which grade.Reduce treats as no score: a sample holds
// no pointer and costs no allocation of its own.
type repSample struct {
	rep                   int
	class                 grade.Classification
	score, lat, tok, cost float64
}

// orNaN is *v, NaN when v is nil.
func orNaN(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

func newSummarizer(e store.Experiment, cases int, c Criteria, seed uint64) *summarizer {
	return &summarizer{
		rep: Report{Summary: Summary{ExperimentID: e.ID, Suite: e.Suite, SuiteVersion: e.SuiteVersion, Harness: e.Harness},
			CaseThreshold: c.CaseThreshold, Seed: seed, Warnings: []string{}, CaseResults: []CaseResult{}},
		cases: cases, crit: c, seed: seed, byCase: map[string]*caseAgg{}, models: map[string]bool{},
	}
}

// add counts one run record.
func (sm *summarizer) add(r store.RunRecord) { sm.addOutcome(store.OutcomeOf(r)) }

// addOutcome counts one run record by its outcome.
func (sm *summarizer) addOutcome(r store.RunOutcome) {
	agg := sm.byCase[r.CaseID]
	if agg == nil {
		agg = &caseAgg{}
		sm.byCase[r.CaseID] = agg
	}
	if r.Classification == "" {
		return
	}
	rep := &sm.rep
	if r.Model != "" && !sm.models[r.Model] {
		sm.models[r.Model] = true
	}
	rep.Runs++
	switch grade.Classification(r.Classification) {
	case grade.Passed:
		rep.Passed++
	case grade.Failed:
		rep.Failed++
		if r.TimedOut {
			rep.TimedOut++
		}
	case grade.Unscored:
		rep.Unscored++
	default:
		rep.Errors++
	}
	u := usageOf(r.Usage)
	agg.samples = append(agg.samples, repSample{rep: r.Repetition, class: grade.Classification(r.Classification),
		score: orNaN(r.Score), lat: orNaN(r.LatencyMS), tok: orNaN(u.Tokens()), cost: orNaN(u.CostUSD)})
	if r.TimedOut {
		agg.timedOut++
	}
}

// report reduces what was added into the report.
func (sm *summarizer) report() Report {
	rep := sm.rep
	rep.Warnings = slices.Clone(rep.Warnings)
	rep.CaseResults = []CaseResult{}
	order := make([]string, 0, len(sm.byCase))
	for id := range sm.byCase {
		order = append(order, id)
	}
	slices.Sort(order)
	rep.Cases = sm.cases
	if rep.Cases == 0 {
		rep.Cases = len(order)
	}
	switch len(sm.models) {
	case 0:
	case 1:
		for m := range sm.models {
			rep.Model = &m
		}
	default:
		m := MixedModel
		rep.Model = &m
		names := make([]string, 0, len(sm.models))
		for n := range sm.models {
			names = append(names, n)
		}
		slices.Sort(names)
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("runs reported several models (%s): the experiment's model is %q", strings.Join(names, ", "), MixedModel))
	}
	if n := rep.Passed + rep.Failed; n > 0 {
		pr := float64(rep.Passed) / float64(n)
		rep.PassRate = &pr
		lo, hi := grade.Wilson(rep.Passed, n)
		rep.PassRateInterval = &grade.Interval{Low: lo, High: hi}
	}
	// The cases share few score sequences: each is bootstrapped once.
	var memo grade.BootstrapMemo
	for _, id := range order {
		cr := reduceCase(id, sm.byCase[id], sm.crit.CaseThreshold, sm.seed, &memo)
		switch cr.Result {
		case "passed":
			rep.CasesPassed++
		case "failed":
			rep.CasesFailed++
		}
		rep.CaseResults = append(rep.CaseResults, cr)
	}
	rep.ExitCode, rep.ExitReason = ExitCode(rep.Summary, rep.CasesFailed, sm.crit)
	return rep
}

// reduceCase reduces the classified runs of one case, in repetition
// order.
func reduceCase(id string, agg *caseAgg, threshold float64, seed uint64, memo *grade.BootstrapMemo) CaseResult {
	cr := CaseResult{CaseID: id, TimedOut: agg.timedOut}
	slices.SortStableFunc(agg.samples, func(a, b repSample) int { return a.rep - b.rep })
	samples := make([]grade.Sample, len(agg.samples))
	scored := 0
	var lat, tok, cost []float64
	for i, s := range agg.samples {
		samples[i] = grade.Sample{Class: s.class}
		if !math.IsNaN(s.score) {
			samples[i].Score = &s.score
		}
		if s.class == grade.Passed || s.class == grade.Failed {
			scored++
		}
		for _, m := range []struct {
			v   float64
			dst *[]float64
		}{{s.lat, &lat}, {s.tok, &tok}, {s.cost, &cost}} {
			if !math.IsNaN(m.v) {
				*m.dst = append(*m.dst, m.v)
			}
		}
	}
	ks := []int{1}
	if scored > 1 {
		ks = append(ks, scored)
	}
	cr.Reduction = grade.Reduce(samples, grade.ReduceOptions{Ks: ks, Seed: seed, Memo: memo})
	switch {
	case cr.PassRate == nil:
		cr.Result = "unscored"
	case cr.PassRate.Value >= threshold:
		cr.Result = "passed"
	default:
		cr.Result = "failed"
	}
	cr.LatencyMS, cr.Tokens, cr.CostUSD = meanPtr(lat), meanPtr(tok), meanPtr(cost)
	return cr
}

func meanPtr(v []float64) *float64 {
	if len(v) == 0 {
		return nil
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	m := s / float64(len(v))
	return &m
}

// ExitCode decides the exit code of SPEC §7.2, in its order: 1 when
// nothing was scored, when errors/runs exceeds the maximum error rate or
// unscored/runs the maximum unscored rate; else 100 when the pass rate is
// below FailUnder, or, without FailUnder, when any case failed; else 0.
func ExitCode(s Summary, casesFailed int, c Criteria) (int, string) {
	if s.Passed+s.Failed == 0 {
		return ExitError, "nothing was scored"
	}
	if r := float64(s.Errors) / float64(s.Runs); r > c.MaxErrorRate {
		return ExitError, fmt.Sprintf("error rate %s is above --max-error-rate %s", fmtRate(r), fmtRate(c.MaxErrorRate))
	}
	if r := float64(s.Unscored) / float64(s.Runs); r > c.MaxUnscoredRate {
		return ExitError, fmt.Sprintf("unscored rate %s is above --max-unscored-rate %s", fmtRate(r), fmtRate(c.MaxUnscoredRate))
	}
	if c.FailUnder != nil {
		if *s.PassRate < *c.FailUnder {
			return ExitFailed, fmt.Sprintf("pass rate %s is below --fail-under %s", fmtRate(*s.PassRate), fmtRate(*c.FailUnder))
		}
		return ExitOK, fmt.Sprintf("pass rate %s reaches --fail-under %s", fmtRate(*s.PassRate), fmtRate(*c.FailUnder))
	}
	if casesFailed > 0 {
		return ExitFailed, fmt.Sprintf("%d case(s) failed", casesFailed)
	}
	return ExitOK, "every scored case passed"
}

func fmtRate(r float64) string {
	if math.IsNaN(r) {
		return "n/a"
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// junitSuite is the JUnit XML form: one testsuite, one testcase per (case,
// repetition).
type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Props    []junitProp `xml:"properties>property,omitempty"`
	Cases    []junitCase `xml:"testcase"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

// WriteJUnit writes the runs as JUnit XML, one testcase per (case,
// repetition): a failure for failed runs (with the failing verdicts), an
// error for errored runs, skipped for unscored runs. It reads runs twice
// (the suite's totals come first in the document) and holds one testcase
// at a time, so a report of any size is written in constant memory.
func WriteJUnit(w io.Writer, s Summary, runs iter.Seq2[store.RunRecord, error]) error {
	js := junitSuite{Name: s.Suite, Props: []junitProp{
		{"experiment_id", s.ExperimentID}, {"suite_version", s.SuiteVersion}, {"harness", s.Harness},
	}}
	if s.Model != nil {
		js.Props = append(js.Props, junitProp{"model", *s.Model})
	}
	total := 0.0
	for r, err := range runs {
		if err != nil {
			return err
		}
		if r.Classification == "" {
			continue
		}
		tc := junitCaseOf(s, r)
		js.Tests++
		switch {
		case tc.Failure != nil:
			js.Failures++
		case tc.Skipped != nil:
			js.Skipped++
		case tc.Error != nil:
			js.Errors++
		}
		total += runSeconds(r)
	}
	js.Time = strconv.FormatFloat(total, 'f', 3, 64)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	root := xml.StartElement{Name: xml.Name{Local: "testsuites"}}
	suite := xml.StartElement{Name: xml.Name{Local: "testsuite"}, Attr: []xml.Attr{
		{Name: xml.Name{Local: "name"}, Value: js.Name},
		{Name: xml.Name{Local: "tests"}, Value: strconv.Itoa(js.Tests)},
		{Name: xml.Name{Local: "failures"}, Value: strconv.Itoa(js.Failures)},
		{Name: xml.Name{Local: "errors"}, Value: strconv.Itoa(js.Errors)},
		{Name: xml.Name{Local: "skipped"}, Value: strconv.Itoa(js.Skipped)},
		{Name: xml.Name{Local: "time"}, Value: js.Time},
	}}
	if err := enc.EncodeToken(root); err != nil {
		return err
	}
	if err := enc.EncodeToken(suite); err != nil {
		return err
	}
	if err := enc.EncodeElement(struct {
		Props []junitProp `xml:"property"`
	}{js.Props}, xml.StartElement{Name: xml.Name{Local: "properties"}}); err != nil {
		return err
	}
	for r, err := range runs {
		if err != nil {
			return err
		}
		if r.Classification == "" {
			continue
		}
		if err := enc.EncodeElement(junitCaseOf(s, r), xml.StartElement{Name: xml.Name{Local: "testcase"}}); err != nil {
			return err
		}
	}
	if err := enc.EncodeToken(suite.End()); err != nil {
		return err
	}
	if err := enc.EncodeToken(root.End()); err != nil {
		return err
	}
	if err := enc.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// RunsOf yields the records of a slice, for WriteJUnit.
func RunsOf(runs []store.RunRecord) iter.Seq2[store.RunRecord, error] {
	return func(yield func(store.RunRecord, error) bool) {
		for _, r := range runs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func runSeconds(r store.RunRecord) float64 {
	if r.LatencyMS != nil {
		return *r.LatencyMS / 1000
	}
	return 0
}

// junitCaseOf is the testcase of one classified run.
func junitCaseOf(s Summary, r store.RunRecord) junitCase {
	tc := junitCase{Name: fmt.Sprintf("%s#%d", r.CaseID, r.Repetition), ClassName: s.Suite + "." + r.CaseID,
		Time: strconv.FormatFloat(runSeconds(r), 'f', 3, 64)}
	if r.RunID != "" {
		tc.SystemOut = "run_id: " + r.RunID
	}
	switch grade.Classification(r.Classification) {
	case grade.Failed:
		msg := "failed"
		if r.TimedOut {
			msg = "timed out"
		}
		tc.Failure = &junitMessage{Message: msg, Type: "failed", Body: failingVerdicts(r)}
	case grade.Unscored:
		tc.Skipped = &junitMessage{Message: "unscored: every grader abstained"}
	case grade.Passed:
	default:
		tc.Error = &junitMessage{Message: r.Error, Type: "error"}
	}
	return tc
}

// failingVerdicts lists a run's failing verdicts, one per line.
func failingVerdicts(r store.RunRecord) string {
	var vs []grade.Verdict
	if len(r.Verdicts) > 0 {
		_ = json.Unmarshal(r.Verdicts, &vs)
	}
	var b strings.Builder
	for _, v := range vs {
		if v.Pass != nil && !*v.Pass {
			fmt.Fprintf(&b, "%s: %s\n", v.Grader, v.Reason)
		}
	}
	return b.String()
}
