package chart

import (
	"strings"
	"testing"
)

func rate(v float64) *float64 { return &v }

func TestPairedChartMatchesItsGoldenFile(t *testing.T) {
	t.Parallel()
	h := Paired{Meta: Meta{ID: "evidence", Title: "Pass rate per task", Desc: "Baseline and candidate pass rates per task."},
		ALabel: "baseline p1", BLabel: "candidate p2",
		Rows: []PairedRow{{"refund", rate(0.4), rate(0.8)}, {"status", rate(1), rate(0)}, {"a task whose name is far longer than the label column", nil, rate(0.5)}}}.SVG()
	wellFormed(t, h)
	golden(t, "paired.golden.html", h)
}

// An unknown pass rate (nothing scored) is said in words, in the chart
// and its table, and is never drawn as a zero-width bar.
func TestPairedChartShowsAnUnknownRateAsUnknownNotZero(t *testing.T) {
	t.Parallel()
	h := string(Paired{Meta: Meta{ID: "p", Title: "T", Desc: "D"}, ALabel: "A", BLabel: "B",
		Rows: []PairedRow{{"task", nil, rate(0)}}}.SVG())
	if got := strings.Count(h, `<rect class="bar-a"`); got != 1 { // the legend's only
		t.Errorf("an unknown A rate drew %d bars, want only the legend's", got-1)
	}
	if !strings.Contains(h, "A: no scored rollout") || !strings.Contains(h, "<td>no scored rollout</td><td>0.0%</td>") {
		t.Errorf("unknown rate not said in words:\n%s", h)
	}
	if !strings.Contains(h, `<rect class="bar-b" x="250" y="52" width="0"`) {
		t.Errorf("a zero B rate is a zero-width bar:\n%s", h)
	}
}

func TestPairedChartCarriesATextAlternativeAndEscapes(t *testing.T) {
	t.Parallel()
	evil := `<script>alert(1)</script>"&'`
	h := Paired{Meta: Meta{ID: "x", Title: evil, Desc: evil}, ALabel: evil, BLabel: evil, Rows: []PairedRow{{evil, rate(1), nil}}}.SVG()
	wellFormed(t, h)
	s := string(h)
	for _, want := range []string{`role="img"`, `<title id=`, `<desc id=`, `<summary>Data table</summary>`} {
		if !strings.Contains(s, want) {
			t.Errorf("lacks %s", want)
		}
	}
	if strings.Contains(s, "<script") || strings.Contains(s, "style=") {
		t.Errorf("not escaped or styled inline: %s", s)
	}
	empty := string(Paired{Meta: Meta{ID: "e", Title: "T", Empty: "No task was decided."}}.SVG())
	if !strings.Contains(empty, "No task was decided.") || strings.Contains(empty, "<svg") {
		t.Errorf("empty: %s", empty)
	}
}
