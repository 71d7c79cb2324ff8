package ui

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
)

// The list reads a stored summary's counts and stops before its per-case
// results: it must read what decoding the whole summary reads, whatever
// the members' order.
func TestListSummaryReadsTheCountsOfTheWholeSummary(t *testing.T) {
	t.Parallel()
	e := store.Experiment{ID: "e", Suite: "s", Config: json.RawMessage(`{"repetitions":2,"seed":3}`)}
	var runs []store.RunRecord
	for i, class := range []string{"passed", "failed", "unscored", "error", "passed", "", "failed", "passed"} {
		runs = append(runs, store.RunRecord{ExperimentID: "e", CaseID: string(rune('a' + i/2)), Repetition: i%2 + 1, Classification: class})
	}
	report, err := json.Marshal(eval.ReportOf(e, runs))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		summary string
		want    *listSummary
	}{
		"a report":                    {string(report), nil},
		"case results first":          {`{"case_results":[{"case_id":"x"}],"runs":4,"passed":1,"failed":1,"unscored":1,"errors":1,"pass_rate":0.5,"pass_rate_interval":{"low":0.1,"high":0.9}}`, nil},
		"nothing scored":              {`{"runs":2,"passed":0,"failed":0,"unscored":1,"errors":1,"pass_rate":null,"pass_rate_interval":null,"case_results":[]}`, nil},
		"members missing":             {`{"runs":3}`, nil},
		"not an object":               {`[1,2]`, nil},
		"a member of the wrong type":  {`{"runs":"three"}`, nil},
		"truncated before the counts": {`{"runs":3,`, nil},
	} {
		var whole listSummary
		wholeErr := json.Unmarshal([]byte(tc.summary), &whole)
		got := listSummaryOf(json.RawMessage(tc.summary))
		switch {
		case wholeErr != nil && got != nil:
			t.Errorf("%s: read %+v from a summary json.Unmarshal refuses (%v)", name, *got, wholeErr)
		case wholeErr == nil && got == nil:
			t.Errorf("%s: read nothing, json.Unmarshal reads %+v", name, whole)
		case wholeErr == nil:
			if diff := cmp.Diff(whole, *got); diff != "" {
				t.Errorf("%s: counts differ from json.Unmarshal's (-whole +got):\n%s", name, diff)
			}
		}
	}
	if got := listSummaryOf(report); got == nil || got.Runs != 7 || got.Unscored != 1 || got.Errors != 1 || got.PassRate == nil {
		t.Errorf("report counts = %+v, want 7 runs, 1 abstained, 1 error and a pass rate", got)
	}
}

// A decoded summary and a comparison are kept by a digest of the
// summaries they come from: a regrade, which replaces a summary and keeps
// the finish time, names another entry; a running experiment none.
func TestKeptEntriesAreNamedBySummary(t *testing.T) {
	t.Parallel()
	done := time.Now()
	a := store.Experiment{ID: "a", Summary: json.RawMessage(`{"runs":1}`), FinishedAt: &done}
	regraded := a
	regraded.Summary = json.RawMessage(`{"runs":2}`)
	running := store.Experiment{ID: "b"}
	if summaryKey("t", a) == summaryKey("t", regraded) {
		t.Error("a regraded summary has the key of the one it replaced")
	}
	if summaryKey("t", a) == summaryKey("u", a) {
		t.Error("two tenants share a key")
	}
	if summaryKey("t", running) != "" || comparisonKey("t", a, running) != "" {
		t.Error("a running experiment's report or comparison is kept")
	}
	var c kept[int]
	c.put("", 1)
	if _, ok := c.get(""); ok {
		t.Error("the empty key was kept")
	}
	for i := range maxKept + 1 {
		c.put(string(rune('a'+i)), i)
	}
	if len(c.m) > maxKept {
		t.Errorf("kept %d entries, at most %d", len(c.m), maxKept)
	}
}

// A delta shows with its sign at its unit's precision: tokens are whole
// counts; unknown is a dash, never 0; a delta that rounds to nothing is
// 0 without a sign.
func TestSignedDeltaShowsTheSignAtTheUnitsPrecision(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name     string
		v        *float64
		decimals int
		unit     string
		want     string
	}{
		{"unknown", nil, 0, "", "—"},
		{"no change in tokens", f(0), 0, "", "0"},
		{"more tokens", f(120), 0, "", "+120"},
		{"fewer tokens", f(-35), 0, "", "-35"},
		{"a mean of tokens rounds to a whole count", f(12.5), 0, "", "+13"},
		{"a tiny negative mean is no change", f(-0.4), 0, "", "0"},
		{"latency", f(-12.345), 1, " ms", "-12.3 ms"},
		{"cost", f(0.00012), 4, " USD", "+0.0001 USD"},
		{"cost that rounds to nothing", f(-0.00001), 4, " USD", "0.0000 USD"},
	} {
		if got := signedDelta(tc.v, tc.decimals, tc.unit); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
