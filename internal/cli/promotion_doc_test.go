package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/mdfence"
	"github.com/gyrehq/gyre/internal/promotion"
)

// workedExample is the evidence block of docs/promotion.md's worked
// example and the section around it.
func workedExample(t *testing.T) (section, block string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/promotion.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## Worked example\n")
	if i < 0 {
		t.Fatal("docs/promotion.md has no worked example")
	}
	section = doc[i:]
	if j := strings.Index(section[1:], "\n## "); j >= 0 {
		section = section[:j+1]
	}
	ex, ok := mdfence.After(doc, "## Worked example", "text")
	if !ok {
		t.Fatal("the worked example has no ```text block")
	}
	block = ex.Text
	return section, block
}

var (
	exampleSide  = regexp.MustCompile(`^(?:-|\d\.\d{3}) \((\d+)/(\d+)\)(?: \+(.*))?$`)
	exampleExtra = regexp.MustCompile(`^(\d+) (unscored|excluded|abandoned)$`)
	exampleSeed  = regexp.MustCompile(`seed (\d+)`)
)

// parseExampleSide reads a side's counts back from its cell.
func parseExampleSide(t *testing.T, cell string) promotion.SideCounts {
	t.Helper()
	m := exampleSide.FindStringSubmatch(cell)
	if m == nil {
		t.Fatalf("side %q is not in the form of the evidence table", cell)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	c := promotion.SideCounts{Passed: atoi(m[1]), Failed: atoi(m[2]) - atoi(m[1])}
	if m[3] != "" {
		for _, e := range strings.Split(m[3], ", ") {
			x := exampleExtra.FindStringSubmatch(e)
			if x == nil {
				t.Fatalf("side %q: %q", cell, e)
			}
			switch x[2] {
			case "unscored":
				c.Unscored = atoi(x[1])
			case "excluded":
				c.Excluded = atoi(x[1])
			case "abandoned":
				c.Abandoned = atoi(x[1])
			}
		}
	}
	c.Total = c.Passed + c.Failed + c.Unscored + c.Excluded + c.Abandoned
	return c
}

// The worked example of docs/promotion.md is what promotion.Decide and
// gyre promotions show give for its counts, figure for figure, and so are
// the variants it lists.
func TestPromotionDoc_WorkedExampleIsWhatDecideGives(t *testing.T) {
	t.Parallel()
	section, block := workedExample(t)
	var tasks []promotion.TaskOutcome
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "tsk_") {
			continue
		}
		f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		if len(f) != 5 {
			t.Fatalf("row %q has %d columns", line, len(f))
		}
		tasks = append(tasks, promotion.TaskOutcome{TaskID: f[0], CaseID: f[1],
			Baseline: parseExampleSide(t, f[2]), Candidate: parseExampleSide(t, f[3])})
	}
	if len(tasks) < 10 {
		t.Fatalf("the worked example has %d tasks, want at least 10", len(tasks))
	}
	m := exampleSeed.FindStringSubmatch(block)
	if m == nil {
		t.Fatal("the worked example shows no seed")
	}
	seed, _ := strconv.ParseUint(m[1], 10, 64)

	d := promotion.Decide(tasks, promotion.DefaultRules(seed))
	var got bytes.Buffer
	if err := printEvidence(&got, d.Evidence); err != nil {
		t.Fatal(err)
	}
	if got.String() != block {
		t.Errorf("the doc's evidence differs from Decide's:\n--- doc\n%s--- Decide\n%s", block, got.String())
	}
	if d.State != "promoted" || !strings.Contains(section, "The candidate is **promoted**") {
		t.Errorf("Decide says %s %q; the doc says promoted", d.State, d.Reasons)
	}

	// The evidence JSON the doc shows is this decision's.
	doc, err := os.ReadFile("../../docs/promotion.md")
	if err != nil {
		t.Fatal(err)
	}
	mean, _ := json.Marshal(d.Evidence.MeanDifference)
	interval, _ := json.Marshal(d.Evidence.Interval)
	for _, want := range []string{
		fmt.Sprintf(`{"seed": %d, "resamples": %d,`, seed, d.Evidence.Resamples),
		fmt.Sprintf(`"mean_difference": %s,`, mean),
		fmt.Sprintf(`"interval": %s,`, strings.ReplaceAll(string(interval), ",", ", ")),
		fmt.Sprintf(`"excluded_rate": {"baseline": %v, "candidate": %v},`, d.Evidence.ExcludedRate.Baseline, d.Evidence.ExcludedRate.Candidate),
		fmt.Sprintf("(%s is %.2f)", mean, *d.Evidence.MeanDifference),
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the doc's evidence JSON lacks %s", want)
		}
	}

	// The variants: each line of the doc names the decision, the reasons
	// and the figures Decide gives.
	variant := func(name string, ts []promotion.TaskOutcome, r promotion.Rules) {
		t.Helper()
		d := promotion.Decide(ts, r)
		want := fmt.Sprintf("**%s** `%s` — mean %s, interval %s", d.State, strings.Join(d.Reasons, ", "), meanOf(&d.Evidence), intervalOf(&d.Evidence))
		if !strings.Contains(section, want) {
			t.Errorf("%s: the doc lacks %q", name, want)
		}
	}
	clone := func() []promotion.TaskOutcome { return append([]promotion.TaskOutcome(nil), tasks...) }
	r := promotion.DefaultRules(seed)
	r.MinDelta = 0.05
	variant("min delta 0.05", clone(), r)
	regressed := clone()
	regressed[4].Candidate = promotion.SideCounts{Total: 5, Failed: 5}
	if regressed[4].TaskID != "tsk_05" || regressed[4].Baseline.Passed != 5 {
		t.Fatalf("task 5 is %+v, the doc's variant needs tsk_05 at 5/5", regressed[4])
	}
	variant("order-status regressed", regressed, promotion.DefaultRules(seed))
	lost := clone()
	lost[9].Candidate.Abandoned += 2
	lost[9].Candidate.Total += 2
	variant("two more abandoned", lost, promotion.DefaultRules(seed))
	s := func(p, f int) promotion.SideCounts { return promotion.SideCounts{Total: p + f, Passed: p, Failed: f} }
	variant("five tasks", []promotion.TaskOutcome{
		{TaskID: "tsk_01", Baseline: s(0, 5), Candidate: s(5, 0)},
		{TaskID: "tsk_02", Baseline: s(0, 5), Candidate: s(5, 0)},
		{TaskID: "tsk_03", Baseline: s(3, 2), Candidate: s(3, 2)},
		{TaskID: "tsk_04", Baseline: s(4, 1), Candidate: s(4, 1)},
		{TaskID: "tsk_05", Baseline: s(2, 3), Candidate: s(2, 3)},
	}, promotion.DefaultRules(seed))
}
