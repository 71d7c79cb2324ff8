package promotion

import (
	"cmp"
	"math"
	"slices"

	"github.com/gyrehq/gyre/internal/grade"
)

// Reason codes of a rejected promotion (SPEC §10). They are stable: API
// clients and scripts branch on them.
const (
	// ReasonDeltaBelowMin: the lower bound of the interval of the mean
	// per-task difference is below the rules' MinDelta.
	ReasonDeltaBelowMin = "delta_below_min"
	// ReasonNoGradedTasks: no task has a scored rollout on both sides, so
	// nothing could be paired.
	ReasonNoGradedTasks = "no_graded_tasks"
)

// ReasonTaskRegressed is the code of a task that went from all-pass on the
// baseline to all-fail on the candidate.
func ReasonTaskRegressed(taskID string) string { return "task_regressed:" + taskID }

// ReasonExcludedRateHigh is the code of a side ("baseline" or
// "candidate") whose excluded-plus-abandoned rate is above the bound.
func ReasonExcludedRateHigh(side string) string { return "excluded_rate_high:" + side }

// Decision states Decide returns. A promotion that cannot finish is
// "failed", which the job decides, never Decide.
const (
	decisionPromoted = "promoted"
	decisionRejected = "rejected"
)

// Rules are the thresholds of the promotion gate.
type Rules struct {
	// MinDelta is the least lower bound of the 95% interval of the mean
	// per-task difference that promotes, in [-1, 1]; default 0.02.
	MinDelta float64
	// MaxExcludedRate bounds each side's (excluded + abandoned) / total,
	// in [0, 1]; default 0.05.
	MaxExcludedRate float64
	// Resamples is the number of bootstrap resamples; ≤ 0 means
	// grade.DefaultResamples (10,000).
	Resamples int
	// Seed seeds the bootstrap; it is recorded in the evidence so the
	// interval can be reproduced.
	Seed uint64
}

// DefaultRules are the rules of SPEC §10 with the given seed.
func DefaultRules(seed uint64) Rules {
	return Rules{MinDelta: 0.02, MaxExcludedRate: 0.05, Resamples: grade.DefaultResamples, Seed: seed}
}

// Decision is the gate's verdict on a promotion.
type Decision struct {
	// State is "promoted" or "rejected".
	State string `json:"state"`
	// Reasons are the codes of every rule that failed, sorted; empty (not
	// nil) when promoted.
	Reasons  []string `json:"reasons"`
	Evidence Evidence `json:"evidence"`
}

// tolerance absorbs floating-point error in comparisons of rates and
// means, which are ratios of small integers: a lower bound that is
// min_delta in exact arithmetic must not fail the rule by 1e-17.
const tolerance = 1e-9

// Decide applies the promotion gate of SPEC §10 to the tasks both sides
// ran. It is pure: the same tasks (in any order) and rules always give the
// same decision and interval.
//
// A side's pass rate on a task is passed / (passed + failed): unscored
// (abstained) and excluded rollouts are left out. A task with no scored
// rollout on either side is dropped from the pairing and listed. On the
// remaining tasks, sorted by task id, a paired bootstrap
// (grade.PairedBootstrapMeanDiff, the one gyre eval compare uses) gives
// the mean of the per-task differences (candidate − baseline) and its 95%
// interval. The candidate is promoted only if
//   - the interval's lower bound is ≥ MinDelta (else delta_below_min),
//   - no task goes from all-pass on the baseline to all-fail on the
//     candidate (else task_regressed:<task_id>, one per such task),
//   - each side's (excluded + abandoned) / total over every task, dropped
//     ones included, is ≤ MaxExcludedRate (else
//     excluded_rate_high:baseline or :candidate; no rollout is rate 0),
//
// and when no task is left it is rejected no_graded_tasks (the interval
// rule cannot be judged then, so delta_below_min is not added). A
// rejection lists every rule that failed.
func Decide(tasks []TaskOutcome, r Rules) Decision {
	if r.Resamples <= 0 {
		r.Resamples = grade.DefaultResamples
	}
	sorted := slices.Clone(tasks)
	slices.SortStableFunc(sorted, func(a, b TaskOutcome) int {
		return cmp.Or(cmp.Compare(a.TaskID, b.TaskID), cmp.Compare(a.CaseID, b.CaseID))
	})

	ev := Evidence{
		Seed:           r.Seed,
		Resamples:      r.Resamples,
		DroppedTaskIDs: []string{},
		Tasks:          make([]TaskEvidence, 0, len(sorted)),
	}
	reasons := []string{}
	var (
		baseRates, candRates []float64
		baseOut, candOut     [2]int // excluded+abandoned, total
	)
	for _, t := range sorted {
		baseOut[0] += t.Baseline.Excluded + t.Baseline.Abandoned
		baseOut[1] += t.Baseline.Total
		candOut[0] += t.Candidate.Excluded + t.Candidate.Abandoned
		candOut[1] += t.Candidate.Total
		te := TaskEvidence{TaskID: t.TaskID, CaseID: t.CaseID, Baseline: sideEvidence(t.Baseline), Candidate: sideEvidence(t.Candidate)}
		if te.Baseline.PassRate == nil || te.Candidate.PassRate == nil {
			ev.DroppedTaskIDs = append(ev.DroppedTaskIDs, t.TaskID)
			ev.Tasks = append(ev.Tasks, te)
			continue
		}
		d := *te.Candidate.PassRate - *te.Baseline.PassRate
		te.Difference = &d
		ev.Tasks = append(ev.Tasks, te)
		baseRates = append(baseRates, *te.Baseline.PassRate)
		candRates = append(candRates, *te.Candidate.PassRate)
		if t.Baseline.allPass() && t.Candidate.allFail() {
			reasons = append(reasons, ReasonTaskRegressed(t.TaskID))
		}
	}

	if len(baseRates) == 0 {
		reasons = append(reasons, ReasonNoGradedTasks)
	} else {
		mean, low, high := grade.PairedBootstrapMeanDiff(baseRates, candRates, r.Resamples, r.Seed)
		ev.MeanDifference = &mean
		ev.Interval = &[2]float64{low, high}
		if math.IsNaN(low) || low < r.MinDelta-tolerance {
			reasons = append(reasons, ReasonDeltaBelowMin)
		}
	}

	ev.ExcludedRate = SideRates{Baseline: rate(baseOut), Candidate: rate(candOut)}
	if ev.ExcludedRate.Baseline > r.MaxExcludedRate+tolerance {
		reasons = append(reasons, ReasonExcludedRateHigh("baseline"))
	}
	if ev.ExcludedRate.Candidate > r.MaxExcludedRate+tolerance {
		reasons = append(reasons, ReasonExcludedRateHigh("candidate"))
	}

	slices.Sort(reasons)
	reasons = slices.Compact(reasons)
	state := decisionPromoted
	if len(reasons) > 0 {
		state = decisionRejected
	}
	return Decision{State: state, Reasons: reasons, Evidence: ev}
}

// rate is part/total, 0 when total is 0.
func rate(pt [2]int) float64 {
	if pt[1] <= 0 {
		return 0
	}
	return float64(pt[0]) / float64(pt[1])
}
