package chart

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// PairedRow is one category with two rates, for instance a task's pass
// rate on a promotion's baseline (A) and candidate (B). A nil rate is
// unknown (nothing scored), drawn as a note, never as a zero bar.
type PairedRow struct {
	Label string
	A, B  *float64
}

// Paired is a horizontal bar chart of two rates in [0, 1] per category:
// A above B, each with its value written beside it.
type Paired struct {
	Meta
	Rows []PairedRow
	// ALabel and BLabel name the two series (the legend and the data
	// table's columns).
	ALabel, BLabel string
}

// Paired chart layout: two bars and a gap per row.
const (
	pairBar    = 12
	pairRow    = 2*pairBar + 14
	pairLegend = 22
)

func pct(v *float64) string {
	if v == nil {
		return "no scored rollout"
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

// SVG renders the paired chart with a legend, an x axis from 0% to 100%
// and its data as a table.
func (c Paired) SVG() template.HTML {
	if len(c.Rows) == 0 {
		return c.empty()
	}
	plotW := float64(width - barLabelW - barValueW - marginR)
	top := marginT + pairLegend
	height := top + pairRow*len(c.Rows) + marginB
	var b strings.Builder
	c.open(&b, height)
	// Legend.
	fmt.Fprintf(&b, `<rect class="bar-a" x="%d" y="%d" width="12" height="12"/><text class="tick" x="%d" y="%d">%s</text>`,
		barLabelW, marginT-2, barLabelW+18, marginT+9, esc(c.ALabel))
	fmt.Fprintf(&b, `<rect class="bar-b" x="%d" y="%d" width="12" height="12"/><text class="tick" x="%d" y="%d">%s</text>`,
		barLabelW+170, marginT-2, barLabelW+188, marginT+9, esc(c.BLabel))
	bottom := top + pairRow*len(c.Rows)
	for i := 0; i <= 4; i++ {
		x := float64(barLabelW) + plotW*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%s" x2="%s" y1="%d" y2="%d"/>`, num(x), num(x), top, bottom)
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%d" text-anchor="middle">%d%%</text>`, num(x), bottom+16, i*25)
	}
	fmt.Fprintf(&b, `<text class="axis-label" x="%s" y="%d" text-anchor="middle">pass rate</text>`, num(float64(barLabelW)+plotW/2), bottom+34)
	rows := make([][]string, len(c.Rows))
	for i, r := range c.Rows {
		y := top + pairRow*i
		label := r.Label
		if rs := []rune(label); len(rs) > maxLabel {
			label = string(rs[:maxLabel-1]) + "…"
		}
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s<title>%s</title></text>`,
			barLabelW-8, y+pairBar+5, esc(label), esc(r.Label))
		for j, side := range []struct {
			class, name string
			v           *float64
		}{{"bar-a", c.ALabel, r.A}, {"bar-b", c.BLabel, r.B}} {
			by := y + 2 + j*pairBar
			if side.v == nil {
				fmt.Fprintf(&b, `<text class="value none" x="%d" y="%d">%s: no scored rollout</text>`, barLabelW+4, by+pairBar-2, esc(side.name))
				continue
			}
			w := plotW * math.Min(math.Max(*side.v, 0), 1)
			fmt.Fprintf(&b, `<rect class="%s" x="%d" y="%d" width="%s" height="%d"><title>%s, %s: %s</title></rect>`,
				side.class, barLabelW, by, num(w), pairBar-1, esc(r.Label), esc(side.name), esc(pct(side.v)))
			fmt.Fprintf(&b, `<text class="value small" x="%s" y="%d">%s</text>`, num(float64(barLabelW)+w+4), by+pairBar-2, esc(pct(side.v)))
		}
		rows[i] = []string{r.Label, pct(r.A), pct(r.B)}
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, barLabelW, barLabelW, top, bottom)
	b.WriteString(`</svg>`)
	tableN(&b, []string{"category", c.ALabel, c.BLabel}, rows)
	b.WriteString(`</figure>`)
	return template.HTML(b.String())
}

// tableN is table with any number of columns.
func tableN(b *strings.Builder, head []string, rows [][]string) {
	b.WriteString(`<details class="chart-data"><summary>Data table</summary><table><thead><tr>`)
	for _, h := range head {
		fmt.Fprintf(b, `<th scope="col">%s</th>`, esc(h))
	}
	b.WriteString(`</tr></thead><tbody>`)
	for _, r := range rows {
		b.WriteString(`<tr>`)
		for _, c := range r {
			fmt.Fprintf(b, `<td>%s</td>`, esc(c))
		}
		b.WriteString(`</tr>`)
	}
	b.WriteString(`</tbody></table></details>`)
}
