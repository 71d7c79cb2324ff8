package promotion

// SideCounts are one task's rollouts on one side of a promotion.
type SideCounts struct {
	// Total is the rollouts of the task on this side that ended; replaced
	// (released and retried) attempts are not counted.
	Total int
	// Passed, Failed and Unscored are graded, not excluded rollouts by
	// outcome; Unscored is one where every deciding grader abstained.
	Passed   int
	Failed   int
	Unscored int
	// Excluded rollouts ended excluded, for any reason (an infrastructure
	// error, reconciliation…).
	Excluded int
	// Abandoned rollouts ended without a result: abandoned, lease lost or
	// cancelled.
	Abandoned int
}

// Scored is the rollouts that decide the pass rate: Passed + Failed.
// Abstentions and excluded rollouts are in no denominator (SPEC §8).
func (c SideCounts) Scored() int { return c.Passed + c.Failed }

// PassRate is Passed / Scored, nil when nothing was scored: a side with no
// scored rollout has an unknown pass rate, not a zero one.
func (c SideCounts) PassRate() *float64 {
	n := c.Scored()
	if n <= 0 {
		return nil
	}
	r := float64(c.Passed) / float64(n)
	return &r
}

// allPass and allFail are the ends of the no-all-pass-to-all-fail rule;
// both need at least one scored rollout.
func (c SideCounts) allPass() bool { return c.Scored() > 0 && c.Failed == 0 }
func (c SideCounts) allFail() bool { return c.Scored() > 0 && c.Passed == 0 }

// TaskOutcome is one task's rollouts on both sides of a promotion. Both
// sides ran the same task id (SPEC §10), so the two pass rates pair.
type TaskOutcome struct {
	TaskID    string
	CaseID    string
	Baseline  SideCounts
	Candidate SideCounts
}

// Evidence is what a decision rests on, stored with it and shown by
// GET /api/v1/promotions/{id} and gyre promotions show. Its JSON is part of
// the API.
type Evidence struct {
	// Seed and Resamples reproduce the bootstrap interval.
	Seed      uint64 `json:"seed"`
	Resamples int    `json:"resamples"`
	// MeanDifference is the mean over paired tasks of the per-task
	// difference (candidate − baseline) of pass rates; nil when no task
	// was left to pair.
	MeanDifference *float64 `json:"mean_difference"`
	// Interval is the paired-bootstrap 95% interval [low, high] of
	// MeanDifference; nil when no task was left.
	Interval *[2]float64 `json:"interval"`
	// ExcludedRate is each side's (excluded + abandoned) / total over every
	// task, dropped ones included.
	ExcludedRate SideRates `json:"excluded_rate"`
	// DroppedTaskIDs are the tasks left out of the pairing because one
	// side has no scored rollout, sorted; never nil.
	DroppedTaskIDs []string `json:"dropped_task_ids"`
	// Tasks are every task, dropped ones included, sorted by task id;
	// never nil.
	Tasks []TaskEvidence `json:"tasks"`
}

// SideRates is one rate per side.
type SideRates struct {
	Baseline  float64 `json:"baseline"`
	Candidate float64 `json:"candidate"`
}

// TaskEvidence is one task's counts and pass rates on both sides.
type TaskEvidence struct {
	TaskID    string       `json:"task_id"`
	CaseID    string       `json:"case_id"`
	Baseline  SideEvidence `json:"baseline"`
	Candidate SideEvidence `json:"candidate"`
	// Difference is the candidate's pass rate minus the baseline's; nil
	// for a dropped task.
	Difference *float64 `json:"difference"`
}

// SideEvidence is one side of one task: its counts and its pass rate.
type SideEvidence struct {
	// PassRate is passed / (passed + failed), nil (not 0) when nothing
	// was scored.
	PassRate  *float64 `json:"pass_rate"`
	Passed    int      `json:"passed"`
	Failed    int      `json:"failed"`
	Unscored  int      `json:"unscored"`
	Excluded  int      `json:"excluded"`
	Abandoned int      `json:"abandoned"`
	Total     int      `json:"total"`
}

// sideEvidence is the evidence of one side's counts.
func sideEvidence(c SideCounts) SideEvidence {
	return SideEvidence{
		PassRate: c.PassRate(),
		Passed:   c.Passed, Failed: c.Failed, Unscored: c.Unscored,
		Excluded: c.Excluded, Abandoned: c.Abandoned, Total: c.Total,
	}
}
