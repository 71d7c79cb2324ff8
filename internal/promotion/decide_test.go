package promotion

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// side is a side whose rollouts all ended graded: passed of passed+failed.
func side(passed, failed int) SideCounts {
	return SideCounts{Total: passed + failed, Passed: passed, Failed: failed}
}

// task is a task with the given sides; its id is "tsk_NN".
func task(n int, base, cand SideCounts) TaskOutcome {
	return TaskOutcome{TaskID: fmt.Sprintf("tsk_%02d", n), CaseID: fmt.Sprintf("case-%02d", n), Baseline: base, Candidate: cand}
}

// tasks builds n tasks numbered from first, each with the same sides.
func tasks(first, n int, base, cand SideCounts) []TaskOutcome {
	out := make([]TaskOutcome, n)
	for i := range out {
		out[i] = task(first+i, base, cand)
	}
	return out
}

func concat(parts ...[]TaskOutcome) []TaskOutcome { return slices.Concat(parts...) }

const eps = 1e-12

func near(a, b float64) bool { return math.Abs(a-b) <= eps }

// wantStats checks the mean difference and the interval.
func wantStats(t *testing.T, ev Evidence, mean, low, high float64) {
	t.Helper()
	if ev.MeanDifference == nil || ev.Interval == nil {
		t.Fatalf("mean %v interval %v, want %v [%v, %v]", ev.MeanDifference, ev.Interval, mean, low, high)
	}
	if !near(*ev.MeanDifference, mean) || !near(ev.Interval[0], low) || !near(ev.Interval[1], high) {
		t.Errorf("mean %v interval %v, want %v [%v, %v]", *ev.MeanDifference, *ev.Interval, mean, low, high)
	}
}

// The paired bootstrap against hand-computed cases. Every case uses the
// default rules (min_delta 0.02, max excluded rate 0.05, 10,000
// resamples). A resample draws 10 per-task differences with replacement,
// so with differences that take two values the resampled mean is
// a + (b−a)·K/10 for a binomial K, whose quantiles are computed by hand
// in the comments.
func TestDecide_PairedBootstrap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		tasks           []TaskOutcome
		mean, low, high float64
		state           string
		reasons         []string
	}{
		{
			// Every difference is 0, so every resampled mean is 0.
			name:  "identical sides give difference 0 and interval [0,0]",
			tasks: concat(tasks(1, 4, side(5, 0), side(5, 0)), tasks(5, 3, side(2, 3), side(2, 3)), tasks(8, 3, side(0, 5), side(0, 5))),
			mean:  0, low: 0, high: 0,
			state: "rejected", reasons: []string{ReasonDeltaBelowMin},
		},
		{
			// One task: every resample is that task, 0.8 − 0.2.
			name:  "a single task gives its own difference as the interval",
			tasks: []TaskOutcome{task(1, side(1, 4), side(4, 1))},
			mean:  0.6, low: 0.6, high: 0.6,
			state: "promoted", reasons: []string{},
		},
		{
			// Ten tasks tied at the same difference 0.4 − 0.2.
			name:  "tied differences give a zero-width interval",
			tasks: tasks(1, 10, side(1, 4), side(2, 3)),
			mean:  0.2, low: 0.2, high: 0.2,
			state: "promoted", reasons: []string{},
		},
		{
			// Six tasks go 1/5 → 5/5 (+0.8), four are ties (0). The
			// resampled mean is 0.08·K, K ~ Binomial(10, 0.6):
			// P(K≤2) = 0.012, P(K≤3) = 0.055 → 2.5% quantile 0.24;
			// P(K≥10) = 0.006, P(K≥9) = 0.046 → 97.5% quantile 0.72.
			name:  "a clear improvement with ties is promoted",
			tasks: concat(tasks(1, 6, side(1, 4), side(5, 0)), tasks(7, 4, side(3, 2), side(3, 2))),
			mean:  0.48, low: 0.24, high: 0.72,
			state: "promoted", reasons: []string{},
		},
		{
			// Three tasks 1/5 → 2/5 (+0.2), one 3/5 → 2/5 (−0.2), six
			// ties: mean 0.04 ≥ 0.02, but the resampled mean 0.02·(A−B),
			// (A, B, rest) ~ Multinomial(10; 0.3, 0.1, 0.6), has
			// P(≤ −0.06) = 0.009 and P(≤ −0.04) = 0.032 → low −0.04;
			// P(≤ 0.10) = 0.970 and P(≤ 0.12) = 0.993 → high 0.12.
			name:  "a small improvement is delta_below_min",
			tasks: concat(tasks(1, 3, side(1, 4), side(2, 3)), []TaskOutcome{task(4, side(3, 2), side(2, 3))}, tasks(5, 6, side(2, 3), side(2, 3))),
			mean:  0.04, low: -0.04, high: 0.12,
			state: "rejected", reasons: []string{ReasonDeltaBelowMin},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := Decide(tc.tasks, DefaultRules(42))
			wantStats(t, d.Evidence, tc.mean, tc.low, tc.high)
			if d.State != tc.state || !reflect.DeepEqual(d.Reasons, tc.reasons) {
				t.Errorf("decision %s %q, want %s %q", d.State, d.Reasons, tc.state, tc.reasons)
			}
		})
	}
}

// The hand-computed quantiles hold whatever the seed: each is several
// standard deviations of the Monte Carlo count away from the next value.
func TestDecide_IntervalMatchesTheExactBootstrapQuantilesForAnySeed(t *testing.T) {
	t.Parallel()
	improvement := concat(tasks(1, 6, side(1, 4), side(5, 0)), tasks(7, 4, side(3, 2), side(3, 2)))
	small := concat(tasks(1, 3, side(1, 4), side(2, 3)), []TaskOutcome{task(4, side(3, 2), side(2, 3))}, tasks(5, 6, side(2, 3), side(2, 3)))
	for seed := uint64(1); seed <= 5; seed++ {
		wantStats(t, Decide(improvement, DefaultRules(seed)).Evidence, 0.48, 0.24, 0.72)
		wantStats(t, Decide(small, DefaultRules(seed)).Evidence, 0.04, -0.04, 0.12)
	}
}

// The rules of the gate, each case named after the rule it checks. The
// base is a clear improvement over ten tasks (six fixed, four unchanged)
// that passes every rule.
func TestDecide_Rules(t *testing.T) {
	t.Parallel()
	improved := func() []TaskOutcome {
		return concat(tasks(1, 6, side(1, 4), side(5, 0)), tasks(7, 4, side(3, 2), side(3, 2)))
	}
	with := func(ts []TaskOutcome, f func([]TaskOutcome)) []TaskOutcome { f(ts); return ts }
	for _, tc := range []struct {
		name    string
		tasks   []TaskOutcome
		rules   func(*Rules)
		state   string
		reasons []string
		check   func(t *testing.T, ev Evidence)
	}{
		{
			name:  "a clear improvement on ten tasks passes every rule",
			tasks: improved(), state: "promoted", reasons: []string{},
		},
		{
			// Seven tasks 0/5 → 5/5 and one 5/5 → 0/5: the mean is
			// (7 − 1)/10 = 0.6 and its interval far above 0.02.
			name:  "a task going all-pass to all-fail is rejected even when the mean improves",
			tasks: concat(tasks(1, 7, side(0, 5), side(5, 0)), []TaskOutcome{task(8, side(5, 0), side(0, 5))}, tasks(9, 2, side(3, 2), side(3, 2))),
			state: "rejected", reasons: []string{"task_regressed:tsk_08"},
			check: func(t *testing.T, ev Evidence) {
				if !near(*ev.MeanDifference, 0.6) || ev.Interval[0] < 0.02 {
					t.Errorf("mean %v interval %v: want 0.6 with a low bound ≥ 0.02", *ev.MeanDifference, *ev.Interval)
				}
			},
		},
		{
			name: "a task going all-pass to mostly-fail is not a regression",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[6] = task(7, side(5, 0), side(1, 4))
			}),
			state: "promoted", reasons: []string{},
		},
		{
			name: "abstentions do not make a task all-fail",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[6] = task(7, side(5, 0), SideCounts{Total: 5, Passed: 1, Unscored: 4})
			}),
			state: "promoted", reasons: []string{},
		},
		{
			// 50 candidate rollouts, 2 excluded + 1 abandoned: 0.06 > 0.05.
			name: "excluded plus abandoned over the bound on the candidate is excluded_rate_high:candidate",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[0].Candidate = SideCounts{Total: 5, Passed: 2, Excluded: 2, Abandoned: 1}
			}),
			state: "rejected", reasons: []string{"excluded_rate_high:candidate"},
			check: func(t *testing.T, ev Evidence) {
				if !near(ev.ExcludedRate.Candidate, 0.06) || ev.ExcludedRate.Baseline != 0 {
					t.Errorf("excluded rates %+v, want candidate 0.06, baseline 0", ev.ExcludedRate)
				}
			},
		},
		{
			name: "excluded plus abandoned over the bound on the baseline is excluded_rate_high:baseline",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[7].Baseline = SideCounts{Total: 5, Passed: 2, Failed: 0, Abandoned: 3}
			}),
			state: "rejected", reasons: []string{"excluded_rate_high:baseline"},
		},
		{
			// 100 rollouts per side, 5 excluded: exactly 0.05 is allowed.
			name: "an excluded rate equal to the bound passes",
			tasks: with(concat(tasks(1, 6, side(2, 8), side(10, 0)), tasks(7, 4, side(6, 4), side(6, 4))), func(ts []TaskOutcome) {
				ts[9].Candidate = SideCounts{Total: 10, Passed: 3, Failed: 2, Excluded: 3, Abandoned: 2}
			}),
			state: "promoted", reasons: []string{},
			check: func(t *testing.T, ev Evidence) {
				if ev.ExcludedRate.Candidate != 0.05 {
					t.Errorf("candidate excluded rate %v, want 0.05", ev.ExcludedRate.Candidate)
				}
			},
		},
		{
			// A task of 5 whose candidate rollouts were all excluded is
			// dropped, yet its 5 excluded count: 5/50 = 0.1.
			name: "a dropped task's rollouts count in the excluded rate",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[9].Candidate = SideCounts{Total: 5, Excluded: 5}
			}),
			state: "rejected", reasons: []string{"excluded_rate_high:candidate"},
			check: func(t *testing.T, ev Evidence) {
				if !slices.Equal(ev.DroppedTaskIDs, []string{"tsk_10"}) || !near(ev.ExcludedRate.Candidate, 0.1) {
					t.Errorf("dropped %q, candidate rate %v: want [tsk_10], 0.1", ev.DroppedTaskIDs, ev.ExcludedRate.Candidate)
				}
			},
		},
		{
			name: "abstentions are left out of pass rates",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[0].Baseline = SideCounts{Total: 5, Passed: 1, Failed: 1, Unscored: 3}
			}),
			state: "promoted", reasons: []string{},
			check: func(t *testing.T, ev Evidence) {
				b := ev.Tasks[0].Baseline
				if b.PassRate == nil || *b.PassRate != 0.5 || b.Unscored != 3 || *ev.Tasks[0].Difference != 0.5 {
					t.Errorf("task 1 baseline %+v difference %v: want pass rate 1/2 (abstentions out), difference 0.5", b, ev.Tasks[0].Difference)
				}
			},
		},
		{
			name: "a task with no scored rollout on one side is dropped and listed",
			tasks: with(improved(), func(ts []TaskOutcome) {
				ts[2].Candidate = SideCounts{Total: 5, Unscored: 5}
				ts[8].Baseline = SideCounts{Total: 0}
			}),
			state: "promoted", reasons: []string{},
			check: func(t *testing.T, ev Evidence) {
				if !slices.Equal(ev.DroppedTaskIDs, []string{"tsk_03", "tsk_09"}) {
					t.Errorf("dropped %q, want [tsk_03 tsk_09]", ev.DroppedTaskIDs)
				}
				if len(ev.Tasks) != 10 || ev.Tasks[2].Candidate.PassRate != nil || ev.Tasks[2].Difference != nil || ev.Tasks[8].Baseline.PassRate != nil {
					t.Errorf("dropped tasks must stay in the evidence with null pass rate and difference: %+v", ev.Tasks)
				}
				// Eight tasks left: five at +0.8, three at 0.
				if !near(*ev.MeanDifference, 0.5) {
					t.Errorf("mean %v, want 4/8 = 0.5 over the eight paired tasks", *ev.MeanDifference)
				}
			},
		},
		{
			name:  "no task left is no_graded_tasks",
			tasks: tasks(1, 10, SideCounts{Total: 5, Unscored: 5}, side(5, 0)),
			state: "rejected", reasons: []string{"no_graded_tasks"},
			check: func(t *testing.T, ev Evidence) {
				if ev.MeanDifference != nil || ev.Interval != nil || len(ev.DroppedTaskIDs) != 10 {
					t.Errorf("mean %v interval %v dropped %d: want null, null, 10", ev.MeanDifference, ev.Interval, len(ev.DroppedTaskIDs))
				}
			},
		},
		{
			name:  "no task at all is no_graded_tasks",
			tasks: nil,
			state: "rejected", reasons: []string{"no_graded_tasks"},
		},
		{
			name:  "no task left with most rollouts excluded lists both rules",
			tasks: tasks(1, 10, side(5, 0), SideCounts{Total: 5, Excluded: 5}),
			state: "rejected", reasons: []string{"excluded_rate_high:candidate", "no_graded_tasks"},
		},
		{
			// Two regressions, two of ten tasks improved a little, and a
			// candidate with 4 of 50 rollouts excluded.
			name: "every failed rule is listed, sorted",
			tasks: concat(
				[]TaskOutcome{task(9, side(5, 0), side(0, 5)), task(3, side(4, 0), side(0, 4))},
				tasks(4, 2, side(1, 4), side(2, 3)),
				tasks(11, 6, side(2, 3), side(2, 3)),
				[]TaskOutcome{{TaskID: "tsk_20", CaseID: "case-20", Baseline: side(1, 1), Candidate: SideCounts{Total: 6, Passed: 1, Failed: 1, Excluded: 4}}},
			),
			state: "rejected", reasons: []string{"delta_below_min", "excluded_rate_high:candidate", "task_regressed:tsk_03", "task_regressed:tsk_09"},
		},
		{
			name:  "min_delta -1 accepts any difference the other rules allow",
			tasks: concat(tasks(1, 6, side(5, 0), side(1, 4)), tasks(7, 4, side(3, 2), side(3, 2))),
			rules: func(r *Rules) { r.MinDelta = -1 },
			state: "promoted", reasons: []string{},
		},
		{
			// The low bound of the clear improvement is 0.24 exactly.
			name:  "a low bound equal to min_delta promotes",
			tasks: improved(),
			rules: func(r *Rules) { r.MinDelta = 0.24 },
			state: "promoted", reasons: []string{},
		},
		{
			// 0.7 − 0.4 is 0.29999999999999993 in floating point.
			name:  "a low bound equal to min_delta up to rounding promotes",
			tasks: tasks(1, 10, side(4, 6), side(7, 3)),
			rules: func(r *Rules) { r.MinDelta = 0.3 },
			state: "promoted", reasons: []string{},
		},
		{
			name:  "a low bound just under min_delta is delta_below_min",
			tasks: improved(),
			rules: func(r *Rules) { r.MinDelta = 0.2401 },
			state: "rejected", reasons: []string{"delta_below_min"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := DefaultRules(7)
			if tc.rules != nil {
				tc.rules(&r)
			}
			d := Decide(tc.tasks, r)
			if d.State != tc.state || !reflect.DeepEqual(d.Reasons, tc.reasons) {
				t.Errorf("decision %s %q, want %s %q", d.State, d.Reasons, tc.state, tc.reasons)
			}
			if tc.check != nil {
				tc.check(t, d.Evidence)
			}
		})
	}
}

func TestDecide_SameInputsAndSeedGiveTheSameDecision(t *testing.T) {
	t.Parallel()
	// Eleven distinct differences, so the interval depends on the draws.
	var ts []TaskOutcome
	for i := range 11 {
		ts = append(ts, task(i+1, side(i%5, 5-i%5), side((i*3)%6, 5-(i*3)%6+1)))
	}
	first := Decide(ts, DefaultRules(2026))
	again := Decide(ts, DefaultRules(2026))
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("re-run differs:\n%+v\n%+v", first, again)
	}
	reversed := slices.Clone(ts)
	slices.Reverse(reversed)
	if got := Decide(reversed, DefaultRules(2026)); !reflect.DeepEqual(first, got) {
		t.Errorf("the same tasks in another order decided differently:\n%+v\n%+v", first, got)
	}
	if first.Evidence.Interval[0] == first.Evidence.Interval[1] {
		t.Fatalf("interval %v is degenerate: the case does not exercise the draws", *first.Evidence.Interval)
	}
}

func TestDecide_RecordsTheSeedAndResamplesGiven(t *testing.T) {
	t.Parallel()
	var ts []TaskOutcome
	for i := range 11 {
		ts = append(ts, task(i+1, side(i%5, 5-i%5), side((i*3)%6, 5-(i*3)%6+1)))
	}
	a := Decide(ts, DefaultRules(1))
	b := Decide(ts, Rules{MinDelta: 0.02, MaxExcludedRate: 0.05, Seed: 987654321})
	if a.Evidence.Seed != 1 || b.Evidence.Seed != 987654321 {
		t.Errorf("seeds recorded %d and %d, want 1 and 987654321", a.Evidence.Seed, b.Evidence.Seed)
	}
	if a.Evidence.Resamples != 10_000 || b.Evidence.Resamples != 10_000 {
		t.Errorf("resamples %d and %d, want 10000 (the default when unset)", a.Evidence.Resamples, b.Evidence.Resamples)
	}
	if *a.Evidence.MeanDifference != *b.Evidence.MeanDifference {
		t.Errorf("the mean difference depends on the seed: %v vs %v", *a.Evidence.MeanDifference, *b.Evidence.MeanDifference)
	}
	if *a.Evidence.Interval == *b.Evidence.Interval {
		t.Errorf("seeds 1 and 987654321 gave the same interval %v: the seed is not used", *a.Evidence.Interval)
	}
}

// The evidence's JSON is part of the API (the shared agreement): exact
// keys, null for unknown pass rates, differences and intervals, and []
// (never null) for empty lists.
func TestEvidence_JSONShape(t *testing.T) {
	t.Parallel()
	d := Decide([]TaskOutcome{
		task(1, side(1, 4), side(4, 1)),
		task(2, side(5, 0), SideCounts{Total: 5, Unscored: 5}),
	}, DefaultRules(123))
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	ev := got["evidence"].(map[string]any)
	keys := func(m map[string]any) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return strings.Join(ks, ",")
	}
	if k := keys(got); k != "evidence,reasons,state" {
		t.Errorf("decision keys %s", k)
	}
	if k := keys(ev); k != "dropped_task_ids,excluded_rate,interval,mean_difference,resamples,seed,tasks" {
		t.Errorf("evidence keys %s", k)
	}
	tsk := ev["tasks"].([]any)
	t1, t2 := tsk[0].(map[string]any), tsk[1].(map[string]any)
	if k := keys(t1); k != "baseline,candidate,case_id,difference,task_id" {
		t.Errorf("task keys %s", k)
	}
	if k := keys(t1["baseline"].(map[string]any)); k != "abandoned,excluded,failed,pass_rate,passed,total,unscored" {
		t.Errorf("side keys %s", k)
	}
	if t2["difference"] != nil || t2["candidate"].(map[string]any)["pass_rate"] != nil {
		t.Errorf("a dropped task's difference and unscored pass rate must be null: %s", b)
	}
	if ev["seed"].(float64) != 123 || ev["resamples"].(float64) != 10000 {
		t.Errorf("seed/resamples %v/%v", ev["seed"], ev["resamples"])
	}
	if r, ok := got["reasons"].([]any); !ok || len(r) != 0 || got["state"] != "promoted" {
		t.Errorf("a promotion's reasons must be [], got %s", b)
	}

	none, _ := json.Marshal(Decide(nil, DefaultRules(1)).Evidence)
	for _, want := range []string{`"mean_difference":null`, `"interval":null`, `"dropped_task_ids":[]`, `"tasks":[]`} {
		if !strings.Contains(string(none), want) {
			t.Errorf("evidence with no task %s lacks %s", none, want)
		}
	}
}
