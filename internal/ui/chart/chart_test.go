package chart

import (
	"encoding/xml"
	"flag"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got template.HTML) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got)+"\n" != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update and review the diff):\n%s", name, got)
	}
}

// wellFormed parses the chart as XML, as a browser parses inline SVG.
func wellFormed(t *testing.T, h template.HTML) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(h)))
	d.Entity = xml.HTMLEntity
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("chart is not well-formed: %v\n%s", err, h)
		}
	}
}

func TestChartsMatchTheirGoldenFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		svg  template.HTML
	}{
		{"line.golden.html", Line{Meta: Meta{ID: "pass-rate", Title: "Pass rate per batch", Desc: "Pass rate of the last batches.", Empty: "No batch yet."},
			YLabel: "pass rate", Max: 1, Percent: true,
			Points: []TimePoint{{At: t0, Value: 0.5, Label: "batch a"}, {At: t0.Add(time.Hour), Value: 0.75, Label: "batch b"}, {At: t0.Add(3 * time.Hour), Value: 1, Label: "batch c"}}}.SVG()},
		{"line-one-point.golden.html", Line{Meta: Meta{ID: "one", Title: "One", Desc: "A count."}, YLabel: "count",
			Points: []TimePoint{{At: t0, Value: 7}}}.SVG()},
		{"bars.golden.html", Bars{Meta: Meta{ID: "states", Title: "Rollouts by state", Desc: "How many rollouts are in each state."}, ValueLabel: "rollouts",
			Bars: []Bar{{"graded", 40}, {"queued", 12}, {"a reason whose name is far longer than the label column", 1}}}.SVG()},
		{"histogram.golden.html", Histogram{Meta: Meta{ID: "reward", Title: "Reward", Desc: "Rewards of graded rollouts."}, XLabel: "reward", Lo: 0, Hi: 1,
			Counts: []int{0, 1, 3, 0, 0, 2, 0, 0, 4, 9}}.SVG()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wellFormed(t, tc.svg)
			golden(t, tc.name, tc.svg)
		})
	}
}

// Every chart has a title, a description and a data table, and the
// svg names itself by them.
func TestChartsCarryATitleDescriptionAndTextAlternative(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]template.HTML{
		"line":      Line{Meta: Meta{ID: "l", Title: "T", Desc: "D"}, Points: []TimePoint{{At: t0, Value: 1}}}.SVG(),
		"bars":      Bars{Meta: Meta{ID: "b", Title: "T", Desc: "D"}, Bars: []Bar{{"x", 1}}}.SVG(),
		"histogram": Histogram{Meta: Meta{ID: "h", Title: "T", Desc: "D"}, Counts: []int{1}, Hi: 1}.SVG(),
	} {
		s := string(h)
		for _, want := range []string{`role="img"`, `aria-labelledby=`, `<title id=`, `<desc id=`, `<table>`, `<summary>Data table</summary>`} {
			if !strings.Contains(s, want) {
				t.Errorf("%s chart lacks %s", name, want)
			}
		}
		if strings.Contains(s, "style=") {
			t.Errorf("%s chart uses a style attribute, which a strict CSP blocks", name)
		}
	}
}

// A chart without data says so in words instead of drawing empty axes.
func TestChartsWithoutDataShowTheirEmptySentence(t *testing.T) {
	t.Parallel()
	m := Meta{ID: "e", Title: "Empty", Desc: "D", Empty: "Nothing graded yet."}
	for name, h := range map[string]template.HTML{
		"line":                Line{Meta: m}.SVG(),
		"bars":                Bars{Meta: m}.SVG(),
		"histogram":           Histogram{Meta: m}.SVG(),
		"histogram all zeros": Histogram{Meta: m, Counts: []int{0, 0}, Hi: 1}.SVG(),
	} {
		s := string(h)
		if !strings.Contains(s, "Nothing graded yet.") || strings.Contains(s, "<svg") {
			t.Errorf("%s: %s", name, s)
		}
	}
}

// Labels come from agents and graders: they are escaped, never markup.
func TestChartsEscapeLabels(t *testing.T) {
	t.Parallel()
	evil := `<script>alert(1)</script>"&'`
	for name, h := range map[string]template.HTML{
		"line":  Line{Meta: Meta{ID: "x", Title: evil, Desc: evil}, YLabel: evil, Points: []TimePoint{{At: t0, Value: 1, Label: evil}}}.SVG(),
		"bars":  Bars{Meta: Meta{ID: "x", Title: evil, Desc: evil}, ValueLabel: evil, Bars: []Bar{{evil, 1}}}.SVG(),
		"empty": Bars{Meta: Meta{ID: evil, Title: evil, Empty: evil}}.SVG(),
	} {
		wellFormed(t, h)
		if strings.Contains(string(h), "<script") {
			t.Errorf("%s: label not escaped: %s", name, h)
		}
	}
}

func TestNiceMaxRoundsUpToOneTwoOrFive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {3, 5}, {7, 10}, {12, 20}, {0.3, 0.5}, {150, 200}} {
		if got := niceMax(tc.in); got != tc.want {
			t.Errorf("niceMax(%g) = %g, want %g", tc.in, got, tc.want)
		}
	}
}

// Counts get whole ticks: never 0.5 rollouts.
func TestCountTicksAreWholeAndCoverTheMaximum(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		most      int
		step, top float64
	}{{1, 1, 1}, {2, 1, 2}, {5, 1, 5}, {6, 2, 6}, {9, 2, 10}, {11, 5, 15}, {26, 10, 30}, {240, 50, 250}} {
		step, top := countTicks(tc.most)
		if step != tc.step || top != tc.top {
			t.Errorf("countTicks(%d) = %g, %g; want %g, %g", tc.most, step, top, tc.step, tc.top)
		}
	}
}

// A bar chart's label column fits its longest label: a reason code of up
// to 40 characters is shown whole, a longer one is cut with an ellipsis
// (its title keeps it whole), and short labels leave the bars the room.
func TestBarLabelsFitTheirColumn(t *testing.T) {
	t.Parallel()
	long := "unreconciled:gateway_records_lost"
	tooLong := strings.Repeat("x", 45)
	for _, tc := range []struct {
		name       string
		bars       []Bar
		shown      string
		minW, maxW int
	}{
		{"short labels", []Bar{{"graded", 3}, {"queued", 1}}, ">graded<title>", barLabelMin, barLabelMin},
		{"a reason code whole", []Bar{{"excluded:substrate_unavailable", 1}, {long, 2}}, ">" + long + "<title>", 250, 270},
		{"a label cut at 40 characters", []Bar{{tooLong, 1}}, ">" + strings.Repeat("x", 39) + "…<title>" + tooLong + "</title>", barLabelMax - 20, barLabelMax},
	} {
		w := barLabelWidth(tc.bars)
		if w < tc.minW || w > tc.maxW {
			t.Errorf("%s: label column %d, want %d to %d", tc.name, w, tc.minW, tc.maxW)
		}
		svg := Bars{Meta: Meta{ID: "b", Title: "T", Desc: "D"}, Bars: tc.bars, ValueLabel: "rollouts"}.SVG()
		wellFormed(t, svg)
		if !strings.Contains(string(svg), tc.shown) {
			t.Errorf("%s: the chart lacks %q:\n%s", tc.name, tc.shown, svg)
		}
	}
}

// A line of one point is a lone dot: it is labelled with its value, and
// the chart's description says the value, for a single point as for many.
func TestALineLabelsALonePointAndItsDescriptionSaysTheValues(t *testing.T) {
	t.Parallel()
	one := string(Line{Meta: Meta{ID: "p", Title: "Pass rate per batch", Desc: "Pass rate of each batch."}, Max: 1, Percent: true,
		Points: []TimePoint{{At: t0, Value: 0.6, Label: "batch …1234abcd"}}}.SVG())
	if !strings.Contains(one, `<text class="value" x="348" y="93">60%</text>`) {
		t.Errorf("the lone point has no value label beside it:\n%s", one)
	}
	if !strings.Contains(one, `<desc id="p-desc">Pass rate of each batch. One point: batch …1234abcd, 60%.</desc>`) {
		t.Errorf("the description does not say the point's value:\n%s", one)
	}
	many := string(Line{Meta: Meta{ID: "m", Title: "T", Desc: "D."}, Max: 1, Percent: true,
		Points: []TimePoint{{At: t0, Value: 0.5, Label: "a"}, {At: t0.Add(time.Hour), Value: 0.25, Label: "b"}, {At: t0.Add(2 * time.Hour), Value: 1, Label: "c"}}}.SVG())
	if !strings.Contains(many, `<desc id="m-desc">D. 3 points, from 50% (a) to 100% (c); lowest 25%, highest 100%.</desc>`) {
		t.Errorf("the description does not sum up the values:\n%s", many)
	}
	if strings.Contains(many, `<text class="value"`) {
		t.Error("a line of several points labels its dots: the line and the axis carry them")
	}
}
