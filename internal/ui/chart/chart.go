package chart

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// Drawing size in SVG user units; the page scales it to its width.
const (
	width      = 640
	lineHeight = 240
	marginL    = 56
	marginR    = 16
	marginT    = 16
	marginB    = 44
)

// Meta is what every chart says about itself.
type Meta struct {
	// ID makes the chart's element ids unique on its page.
	ID string
	// Title names the chart; Desc says what it shows, for screen readers.
	Title string
	Desc  string
	// Empty is the sentence shown instead of the chart when it has no data.
	Empty string
}

// TimePoint is one point of a line chart.
type TimePoint struct {
	At    time.Time
	Value float64
	// Label names the point in its tooltip and the data table (a batch
	// id, say); empty uses the time.
	Label string
}

// Line is a line chart of values over time.
type Line struct {
	Meta
	Points []TimePoint
	// YLabel names the values; Max is the top of the y axis (1 for a
	// rate); Percent formats values as percentages.
	YLabel  string
	Max     float64
	Percent bool
}

// Bar is one category of a bar chart.
type Bar struct {
	Label string
	Value float64
}

// Bars is a horizontal bar chart of categories, largest first as given.
type Bars struct {
	Meta
	Bars []Bar
	// ValueLabel names the values (the data table's column).
	ValueLabel string
}

// Histogram counts values into equal-width bins over [Lo, Hi].
type Histogram struct {
	Meta
	Counts []int
	Lo, Hi float64
	// XLabel names the binned value.
	XLabel string
}

func esc(s string) string { return html.EscapeString(s) }

// num formats a coordinate: at most one decimal, no trailing zeros.
func num(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

func (m Meta) open(b *strings.Builder, height int) {
	fmt.Fprintf(b, `<figure class="chart" id="%s">`, esc(m.ID))
	fmt.Fprintf(b, `<figcaption>%s</figcaption>`, esc(m.Title))
	fmt.Fprintf(b, `<svg class="chart-svg" viewBox="0 0 %d %d" role="img" aria-labelledby="%s-title %s-desc" xmlns="http://www.w3.org/2000/svg">`,
		width, height, esc(m.ID), esc(m.ID))
	fmt.Fprintf(b, `<title id="%s-title">%s</title><desc id="%s-desc">%s</desc>`, esc(m.ID), esc(m.Title), esc(m.ID), esc(m.Desc))
}

func (m Meta) empty() template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart chart-empty" id="%s"><figcaption>%s</figcaption><p class="empty">%s</p></figure>`,
		esc(m.ID), esc(m.Title), esc(m.Empty))
	return template.HTML(b.String())
}

// table writes the text alternative: the chart's data as a table.
func table(b *strings.Builder, head [2]string, rows [][2]string) {
	b.WriteString(`<details class="chart-data"><summary>Data table</summary><table><thead><tr>`)
	fmt.Fprintf(b, `<th scope="col">%s</th><th scope="col">%s</th></tr></thead><tbody>`, esc(head[0]), esc(head[1]))
	for _, r := range rows {
		fmt.Fprintf(b, `<tr><td>%s</td><td>%s</td></tr>`, esc(r[0]), esc(r[1]))
	}
	b.WriteString(`</tbody></table></details>`)
}

// niceMax rounds a positive maximum up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// countTicks chooses a whole tick step of 1, 2 or 5 times a power of ten
// giving at most five steps, and the axis top, a multiple of it.
func countTicks(most int) (step, top float64) {
	for p := 1.0; ; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if step = m * p; float64(most) <= 5*step {
				return step, math.Max(step, math.Ceil(float64(most)/step)*step)
			}
		}
	}
}

func formatCount(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// SVG renders the line chart.
func (l Line) SVG() template.HTML {
	if len(l.Points) == 0 {
		return l.empty()
	}
	top := l.Max
	if top <= 0 {
		for _, p := range l.Points {
			top = math.Max(top, p.Value)
		}
		top = niceMax(top)
	}
	format := func(v float64) string {
		if l.Percent {
			return strconv.FormatFloat(v*100, 'f', 0, 64) + "%"
		}
		return formatCount(v)
	}
	plotW, plotH := float64(width-marginL-marginR), float64(lineHeight-marginT-marginB)
	t0, t1 := l.Points[0].At, l.Points[len(l.Points)-1].At
	span := t1.Sub(t0).Seconds()
	x := func(i int) float64 {
		if span <= 0 {
			if len(l.Points) == 1 {
				return marginL + plotW/2
			}
			return marginL + plotW*float64(i)/float64(len(l.Points)-1)
		}
		return marginL + plotW*l.Points[i].At.Sub(t0).Seconds()/span
	}
	y := func(v float64) float64 { return marginT + plotH*(1-math.Min(math.Max(v/top, 0), 1)) }

	name := func(p TimePoint) string {
		if p.Label != "" {
			return p.Label
		}
		return p.At.UTC().Format(time.RFC3339)
	}
	// The description ends with the values, so a screen reader hears what
	// the line shows and not only what it is.
	meta := l.Meta
	first, last := l.Points[0], l.Points[len(l.Points)-1]
	if len(l.Points) == 1 {
		meta.Desc = strings.TrimSpace(fmt.Sprintf("%s One point: %s, %s.", meta.Desc, name(first), format(first.Value)))
	} else {
		lo, hi := first.Value, first.Value
		for _, p := range l.Points {
			lo, hi = math.Min(lo, p.Value), math.Max(hi, p.Value)
		}
		meta.Desc = strings.TrimSpace(fmt.Sprintf("%s %d points, from %s (%s) to %s (%s); lowest %s, highest %s.", meta.Desc,
			len(l.Points), format(first.Value), name(first), format(last.Value), name(last), format(lo), format(hi)))
	}

	var b strings.Builder
	meta.open(&b, lineHeight)
	// y grid and ticks: five steps.
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%s" y2="%s"/>`, marginL, width-marginR, num(y(v)), num(y(v)))
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%s" text-anchor="end">%s</text>`, marginL-6, num(y(v)+4), esc(format(v)))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, marginL, width-marginR, lineHeight-marginB, lineHeight-marginB)
	fmt.Fprintf(&b, `<text class="axis-label" x="14" y="%s" transform="rotate(-90 14 %s)" text-anchor="middle">%s</text>`,
		num(marginT+plotH/2), num(marginT+plotH/2), esc(l.YLabel))
	// x ticks: first and last time, and the middle one when distinct.
	ticks := []int{0}
	if len(l.Points) > 2 {
		ticks = append(ticks, len(l.Points)/2)
	}
	if len(l.Points) > 1 {
		ticks = append(ticks, len(l.Points)-1)
	}
	for _, i := range ticks {
		anchor := "middle"
		if len(ticks) > 1 && i == 0 {
			anchor = "start"
		} else if len(ticks) > 1 && i == len(l.Points)-1 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%d" text-anchor="%s">%s</text>`, num(x(i)), lineHeight-marginB+18, anchor,
			esc(l.Points[i].At.UTC().Format("Jan 2 15:04")))
	}
	fmt.Fprintf(&b, `<text class="axis-label" x="%s" y="%d" text-anchor="middle">time (UTC)</text>`, num(marginL+plotW/2), lineHeight-6)
	var path strings.Builder
	for i, p := range l.Points {
		if i == 0 {
			path.WriteString("M")
		} else {
			path.WriteString(" L")
		}
		path.WriteString(num(x(i)) + " " + num(y(p.Value)))
	}
	fmt.Fprintf(&b, `<path class="series" d="%s"/>`, path.String())
	rows := make([][2]string, len(l.Points))
	for i, p := range l.Points {
		fmt.Fprintf(&b, `<circle class="point" cx="%s" cy="%s" r="3.5"><title>%s: %s</title></circle>`,
			num(x(i)), num(y(p.Value)), esc(name(p)), esc(format(p.Value)))
		rows[i] = [2]string{name(p), format(p.Value)}
	}
	if len(l.Points) == 1 {
		// A lone dot draws no line to read its height against: it carries
		// its value beside it.
		fmt.Fprintf(&b, `<text class="value" x="%s" y="%s">%s</text>`, num(x(0)+8), num(y(first.Value)+5), esc(format(first.Value)))
	}
	b.WriteString(`</svg>`)
	table(&b, [2]string{"point", l.YLabel}, rows)
	b.WriteString(`</figure>`)
	return template.HTML(b.String())
}

// Bar chart layout: one row per bar.
const (
	barRow    = 26
	barLabelW = 250
	barValueW = 56
	maxLabel  = 28
	// A bar chart's label column fits its longest label, at about
	// barCharW units a character of the 14-unit tick font, between
	// barLabelMin and barLabelMax units; labels longer than
	// maxBarLabel characters are cut (the title and the data table keep
	// them whole). Reason codes such as excluded:substrate_unavailable
	// thus show whole, and short state names leave the bars room.
	barCharW    = 7.5
	barLabelMin = 110
	barLabelMax = 320
	maxBarLabel = 40
)

// barLabelWidth is the label column of bars: room for the longest label
// (cut at maxBarLabel characters) and the gap before the axis.
func barLabelWidth(bars []Bar) int {
	longest := 0
	for _, b := range bars {
		longest = max(longest, min(len([]rune(b.Label)), maxBarLabel))
	}
	return min(max(int(math.Ceil(float64(longest)*barCharW))+12, barLabelMin), barLabelMax)
}

// SVG renders the bar chart.
func (c Bars) SVG() template.HTML {
	if len(c.Bars) == 0 {
		return c.empty()
	}
	top := 0.0
	for _, bar := range c.Bars {
		top = math.Max(top, bar.Value)
	}
	if top <= 0 {
		top = 1
	}
	height := marginT + barRow*len(c.Bars) + 8
	labelW := barLabelWidth(c.Bars)
	plotW := float64(width - labelW - barValueW - marginR)
	var b strings.Builder
	c.open(&b, height)
	rows := make([][2]string, len(c.Bars))
	for i, bar := range c.Bars {
		y := marginT + barRow*i
		label := bar.Label
		if r := []rune(label); len(r) > maxBarLabel {
			label = string(r[:maxBarLabel-1]) + "…"
		}
		w := plotW * math.Max(bar.Value, 0) / top
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s<title>%s</title></text>`,
			labelW-8, y+15, esc(label), esc(bar.Label))
		fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="%s" height="%d"><title>%s: %s</title></rect>`,
			labelW, y+3, num(w), barRow-8, esc(bar.Label), esc(formatCount(bar.Value)))
		fmt.Fprintf(&b, `<text class="value" x="%s" y="%d">%s</text>`, num(float64(labelW)+w+6), y+15, esc(formatCount(bar.Value)))
		rows[i] = [2]string{bar.Label, formatCount(bar.Value)}
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, labelW, labelW, marginT, marginT+barRow*len(c.Bars))
	b.WriteString(`</svg>`)
	table(&b, [2]string{"category", c.ValueLabel}, rows)
	b.WriteString(`</figure>`)
	return template.HTML(b.String())
}

// SVG renders the histogram.
func (h Histogram) SVG() template.HTML {
	total, most := 0, 0
	for _, n := range h.Counts {
		total += n
		most = max(most, n)
	}
	if total == 0 {
		return h.empty()
	}
	step, top := countTicks(most)
	plotW, plotH := float64(width-marginL-marginR), float64(lineHeight-marginT-marginB)
	binW := plotW / float64(len(h.Counts))
	y := func(v float64) float64 { return marginT + plotH*(1-v/top) }
	edge := func(i int) float64 { return h.Lo + (h.Hi-h.Lo)*float64(i)/float64(len(h.Counts)) }
	fe := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

	var b strings.Builder
	h.open(&b, lineHeight)
	for v := 0.0; v <= top; v += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%s" y2="%s"/>`, marginL, width-marginR, num(y(v)), num(y(v)))
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%s" text-anchor="end">%s</text>`, marginL-6, num(y(v)+4), esc(formatCount(v)))
	}
	fmt.Fprintf(&b, `<text class="axis-label" x="14" y="%s" transform="rotate(-90 14 %s)" text-anchor="middle">rollouts</text>`,
		num(marginT+plotH/2), num(marginT+plotH/2))
	rows := make([][2]string, len(h.Counts))
	for i, n := range h.Counts {
		x := marginL + binW*float64(i)
		bin := fe(edge(i)) + "–" + fe(edge(i+1))
		fmt.Fprintf(&b, `<rect class="bar" x="%s" y="%s" width="%s" height="%s"><title>%s: %d</title></rect>`,
			num(x+1), num(y(float64(n))), num(binW-2), num(plotH*float64(n)/top), esc(bin), n)
		rows[i] = [2]string{bin, strconv.Itoa(n)}
	}
	// x ticks at every other edge, so labels never collide.
	every := 1
	if len(h.Counts) > 5 {
		every = 2
	}
	for i := 0; i <= len(h.Counts); i += every {
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%d" text-anchor="middle">%s</text>`,
			num(marginL+binW*float64(i)), lineHeight-marginB+18, esc(fe(edge(i))))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, marginL, width-marginR, lineHeight-marginB, lineHeight-marginB)
	fmt.Fprintf(&b, `<text class="axis-label" x="%s" y="%d" text-anchor="middle">%s</text>`, num(marginL+plotW/2), lineHeight-6, esc(h.XLabel))
	b.WriteString(`</svg>`)
	table(&b, [2]string{h.XLabel, "rollouts"}, rows)
	b.WriteString(`</figure>`)
	return template.HTML(b.String())
}
