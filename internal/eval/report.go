package eval

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// ShowJSON is the JSON form of `gyre eval show ID --json` (SPEC §7.2):
// the experiment's summary with its capabilities snapshot, and its runs.
type ShowJSON struct {
	Experiment ShowExperiment `json:"experiment"`
	Runs       []ShowRun      `json:"runs"`
}

// ShowExperiment is the report of an experiment — the summary of SPEC
// §7.2, then case_results, pass_rate_interval and the rest of what GET
// /api/v1/experiments/{id} keeps as its summary — plus its capabilities.
type ShowExperiment struct {
	Report
	Capabilities json.RawMessage `json:"capabilities"`
}

// ShowRun is one run in `gyre eval show --json`.
type ShowRun struct {
	RunID          *string         `json:"run_id"`
	CaseID         string          `json:"case_id"`
	Repetition     int             `json:"repetition"`
	Status         *string         `json:"status"`
	Classification *string         `json:"classification"`
	TimedOut       bool            `json:"timed_out"`
	Error          *string         `json:"error"`
	Model          *string         `json:"model"`
	Answer         *string         `json:"answer"`
	Output         json.RawMessage `json:"output"`
	Verdicts       []grade.Verdict `json:"verdicts"`
	Trajectory     json.RawMessage `json:"trajectory"`
	Files          json.RawMessage `json:"files"`
	// TrajectorySHA256 names the stored trajectory blob, as GET
	// /api/v1/experiments/{id}/runs shows it; null when none.
	TrajectorySHA256 *string `json:"trajectory_sha256"`
}

// ConfigOf reads an experiment's config snapshot (zero when unreadable).
func ConfigOf(e store.Experiment) ExperimentConfig {
	var c ExperimentConfig
	if len(e.Config) > 0 {
		_ = json.Unmarshal(e.Config, &c)
	}
	return c
}

// CriteriaOf are the exit criteria an experiment was run with.
func CriteriaOf(e store.Experiment) Criteria {
	c := ConfigOf(e)
	crit := Criteria{FailUnder: c.FailUnder, CaseThreshold: c.CaseThreshold, MaxErrorRate: c.MaxErrorRate, MaxUnscoredRate: c.MaxUnscoredRate}
	if len(e.Config) == 0 {
		crit = DefaultCriteria()
	}
	return crit
}

// ReportOf summarises a stored experiment from its runs, with the
// criteria and seed it was run with.
func ReportOf(e store.Experiment, runs []store.RunRecord) Report {
	c := ConfigOf(e)
	return Summarize(e, runs, c.Cases, CriteriaOf(e), c.Seed)
}

// Show builds the JSON form of `gyre eval show`.
func Show(e store.Experiment, runs []store.RunRecord) ShowJSON {
	rep := ReportOf(e, runs)
	out := ShowJSON{Experiment: ShowExperiment{Report: rep, Capabilities: orNull(e.Capabilities)}, Runs: []ShowRun{}}
	for _, r := range runs {
		vs := []grade.Verdict{}
		if len(r.Verdicts) > 0 {
			_ = json.Unmarshal(r.Verdicts, &vs)
		}
		out.Runs = append(out.Runs, ShowRun{
			RunID: strPtr(r.RunID), CaseID: r.CaseID, Repetition: r.Repetition, Status: strPtr(r.Status),
			Classification: strPtr(r.Classification), TimedOut: r.TimedOut, Error: strPtr(r.Error), Model: strPtr(r.Model),
			Answer: r.Answer, Output: orNull(r.Output), Verdicts: vs, Trajectory: orNull(r.Trajectory), Files: orEmpty(r.Files),
			TrajectorySHA256: strPtr(r.TrajectorySHA256),
		})
	}
	return out
}

// CaseSide is one experiment's view of a case in a comparison.
type CaseSide struct {
	Result    string   `json:"result"`
	Runs      int      `json:"runs"`
	PassRate  *float64 `json:"pass_rate"`
	LatencyMS *float64 `json:"latency_ms"`
	Tokens    *float64 `json:"tokens"`
	CostUSD   *float64 `json:"cost_usd"`
}

// CaseDiff compares one case across two experiments.
type CaseDiff struct {
	CaseID string    `json:"case_id"`
	A      *CaseSide `json:"a"`
	B      *CaseSide `json:"b"`
	// Change is new_failure (passed in A, failed in B), fixed (failed in
	// A, passed in B), unchanged, added (only in B), removed (only in A)
	// or unscored (no pass rate on a side).
	Change         string   `json:"change"`
	PassRateDelta  *float64 `json:"pass_rate_delta"`
	LatencyDeltaMS *float64 `json:"latency_delta_ms"`
	TokensDelta    *float64 `json:"tokens_delta"`
	CostDeltaUSD   *float64 `json:"cost_delta_usd"`
}

// Comparison is `gyre eval compare A B` (SPEC §7.3).
type Comparison struct {
	A           string     `json:"a"`
	B           string     `json:"b"`
	Cases       []CaseDiff `json:"cases"`
	NewFailures []string   `json:"new_failures"`
	Fixed       []string   `json:"fixed"`
	// PassRateA and PassRateB are the experiments' overall pass rates.
	PassRateA *float64 `json:"pass_rate_a"`
	PassRateB *float64 `json:"pass_rate_b"`
	// MeanDelta is the mean per-case pass-rate difference (B − A) over the
	// Paired cases scored in both, with a paired bootstrap interval.
	MeanDelta *float64        `json:"mean_delta"`
	Interval  *grade.Interval `json:"interval"`
	Paired    int             `json:"paired"`
	Seed      uint64          `json:"seed"`
	// Regression is set when a case that passed in A fails in B, or when
	// the interval of the mean difference lies below zero.
	Regression       bool   `json:"regression"`
	RegressionReason string `json:"regression_reason"`
}

// Compare diffs experiment b against a, per case. Each side's case
// results use its own case threshold.
func Compare(a store.Experiment, runsA []store.RunRecord, b store.Experiment, runsB []store.RunRecord, seed uint64) Comparison {
	return CompareReports(ReportOf(a, runsA), ReportOf(b, runsB), seed)
}

// CompareReports diffs report rb against ra, per case (ReportFrom builds
// them from the store without holding the runs).
func CompareReports(ra, rb Report, seed uint64) Comparison {
	a, b := ra.ExperimentID, rb.ExperimentID
	cmp := Comparison{A: a, B: b, PassRateA: ra.PassRate, PassRateB: rb.PassRate, Seed: seed,
		Cases: []CaseDiff{}, NewFailures: []string{}, Fixed: []string{}}
	sides := func(rep Report) map[string]*CaseSide {
		m := map[string]*CaseSide{}
		for _, cr := range rep.CaseResults {
			s := &CaseSide{Result: cr.Result, Runs: cr.N, LatencyMS: cr.LatencyMS, Tokens: cr.Tokens, CostUSD: cr.CostUSD}
			if cr.PassRate != nil {
				v := cr.PassRate.Value
				s.PassRate = &v
			}
			m[cr.CaseID] = s
		}
		return m
	}
	sa, sb := sides(ra), sides(rb)
	var ids []string
	for id := range sa {
		ids = append(ids, id)
	}
	for id := range sb {
		if _, ok := sa[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var pa, pb []float64
	for _, id := range ids {
		d := CaseDiff{CaseID: id, A: sa[id], B: sb[id]}
		switch {
		case d.A == nil:
			d.Change = "added"
		case d.B == nil:
			d.Change = "removed"
		case d.A.Result == "passed" && d.B.Result == "failed":
			d.Change = "new_failure"
			cmp.NewFailures = append(cmp.NewFailures, id)
		case d.A.Result == "failed" && d.B.Result == "passed":
			d.Change = "fixed"
			cmp.Fixed = append(cmp.Fixed, id)
		case d.A.PassRate == nil || d.B.PassRate == nil:
			d.Change = "unscored"
		default:
			d.Change = "unchanged"
		}
		if d.A != nil && d.B != nil {
			d.PassRateDelta = delta(d.A.PassRate, d.B.PassRate)
			d.LatencyDeltaMS = delta(d.A.LatencyMS, d.B.LatencyMS)
			d.TokensDelta = delta(d.A.Tokens, d.B.Tokens)
			d.CostDeltaUSD = delta(d.A.CostUSD, d.B.CostUSD)
			if d.A.PassRate != nil && d.B.PassRate != nil {
				pa = append(pa, *d.A.PassRate)
				pb = append(pb, *d.B.PassRate)
			}
		}
		cmp.Cases = append(cmp.Cases, d)
	}
	cmp.Paired = len(pa)
	if len(pa) > 0 {
		m, lo, hi := grade.PairedBootstrapMeanDiff(pa, pb, grade.DefaultResamples, seed)
		cmp.MeanDelta = &m
		if !math.IsNaN(lo) {
			cmp.Interval = &grade.Interval{Low: lo, High: hi}
		}
	}
	switch {
	case len(cmp.NewFailures) > 0:
		cmp.Regression = true
		cmp.RegressionReason = fmt.Sprintf("%d case(s) passed in %s and fail in %s", len(cmp.NewFailures), a, b)
	case cmp.Interval != nil && cmp.Interval.High < 0:
		cmp.Regression = true
		cmp.RegressionReason = fmt.Sprintf("the mean per-case pass rate fell by %.3f (95%% interval %.3f to %.3f)", -*cmp.MeanDelta, cmp.Interval.Low, cmp.Interval.High)
	}
	return cmp
}

func delta(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	d := *b - *a
	return &d
}
