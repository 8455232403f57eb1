package report

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// Charts are drawn as inline SVG with fixed sizes and no fonts beyond the
// page's: they render the same in a browser, a mail client and a PDF.

// BurnDownSVG draws the error budget remaining from start to until: a line
// from 100% at start to what is left at each bucket end, with the zero line.
func BurnDownSVG(points []Point, start, until time.Time) template.HTML {
	const w, h, pad = 640, 200, 36
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" aria-label="error budget burn-down" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d">`, w, h, w, h)
	if len(points) == 0 {
		b.WriteString(`<text x="20" y="100" font-size="13">No write counts toward the SLI in this window.</text></svg>`)
		return template.HTML(b.String())
	}
	lo := 0.0
	for _, p := range points {
		lo = math.Min(lo, p.BudgetRemaining)
	}
	lo = math.Max(lo, -1) // an overspent budget is drawn down to -100%
	span := until.Sub(start).Seconds()
	x := func(t time.Time) float64 { return pad + (float64(w)-2*pad)*t.Sub(start).Seconds()/math.Max(span, 1) }
	y := func(v float64) float64 {
		v = math.Max(v, lo)
		return pad/2 + (float64(h)-pad)*(1-v)/(1-lo)
	}
	// Axes: 100% and 0% lines.
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`, pad, y(1), w-pad, y(1))
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c00"/>`, pad, y(0), w-pad, y(0))
	fmt.Fprintf(&b, `<text x="2" y="%.1f" font-size="11">100%%</text><text x="10" y="%.1f" font-size="11">0%%</text>`, y(1)+4, y(0)+4)
	pts := []string{fmt.Sprintf("%.1f,%.1f", x(start), y(1))}
	for _, p := range points {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.Time), y(p.BudgetRemaining)))
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f5fbf" stroke-width="2" points="%s"/>`, strings.Join(pts, " "))
	last := points[len(points)-1]
	label := Percent(last.BudgetRemaining) + " left"
	if last.BudgetRemaining < 0 {
		label = overspent(last.BudgetRemaining)
	}
	fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f5fbf"/><text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`,
		x(last.Time), y(last.BudgetRemaining), x(last.Time), y(last.BudgetRemaining)-6, label)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11">%s</text><text x="%d" y="%d" font-size="11" text-anchor="end">%s</text>`,
		pad, h-2, start.UTC().Format(time.DateOnly), w-pad, h-2, until.UTC().Format(time.DateOnly))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// NoBudgetSVG stands for the burn-down when the target is 1 (100 %): there
// is no error budget to burn down, and bad writes overspend it at once.
func NoBudgetSVG(bad int64) template.HTML {
	const w, h = 640, 200
	msg := "A target of 100% leaves no error budget: no write was bad, none of it is spent."
	if bad > 0 {
		msg = fmt.Sprintf("A target of 100%% leaves no error budget: %d bad writes overspend it.", bad)
	}
	return template.HTML(fmt.Sprintf(`<svg class="chart" role="img" aria-label="error budget burn-down" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d"><text x="20" y="100" font-size="13">%s</text></svg>`,
		w, h, w, h, template.HTMLEscapeString(msg)))
}

// DaysSVG draws the bad events of each bucket as bars.
func DaysSVG(days []Day) template.HTML {
	const w, h, pad = 640, 140, 24
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" aria-label="bad events per day" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d">`, w, h, w, h)
	var most int64
	for _, d := range days {
		most = max(most, d.Bad)
	}
	if len(days) == 0 || most == 0 {
		b.WriteString(`<text x="20" y="70" font-size="13">No bad events in this window.</text></svg>`)
		return template.HTML(b.String())
	}
	bw := (float64(w) - 2*pad) / float64(len(days))
	for i, d := range days {
		bh := (float64(h) - 2*pad) * float64(d.Bad) / float64(most)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#c0392b"><title>%s: %d bad</title></rect>`,
			pad+float64(i)*bw+0.5, float64(h)-pad-bh, math.Max(bw-1, 0.5), bh, d.Start.Format(time.DateOnly), d.Bad)
	}
	fmt.Fprintf(&b, `<text x="2" y="%d" font-size="11">%d</text>`, pad, most)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11">%s</text><text x="%d" y="%d" font-size="11" text-anchor="end">%s</text>`,
		pad, h-6, days[0].Start.Format(time.DateOnly), w-pad, h-6, days[len(days)-1].Start.Format(time.DateOnly))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// BarsSVG draws rows as horizontal bars with their counts.
func BarsSVG(rows []Row) template.HTML {
	const w, rowH = 640, 20
	if len(rows) == 0 {
		return ""
	}
	var most int64
	for _, r := range rows {
		most = max(most, r.Count)
	}
	h := rowH*len(rows) + 4
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d">`, w, h, w, h)
	for i, r := range rows {
		bw := 0.0
		if most > 0 {
			bw = 360 * float64(r.Count) / float64(most)
		}
		yy := i*rowH + 2
		fmt.Fprintf(&b, `<text x="0" y="%d" font-size="12">%s</text>`, yy+14, template.HTMLEscapeString(clip(r.Name, 34)))
		fmt.Fprintf(&b, `<rect x="240" y="%d" width="%.1f" height="%d" fill="#1f5fbf"/>`, yy+2, math.Max(bw, 1), rowH-6)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12">%d</text>`, 246+bw, yy+14, r.Count)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Percent prints a fraction as a percentage with up to two decimals.
func Percent(f float64) string {
	return fmt.Sprintf("%.2f%%", f*100)
}

// BudgetLeft prints the share of an error budget left at SLO target, as
// the API's error_budget_left says it (api.BudgetLeft): a percentage, or
// once overspent "none: spent 750× (error rate 75% against a budget of
// 0.1%)".
func BudgetLeft(f, target float64) string { return api.BudgetLeft(f, target) }

// overspent says how many times over a budget with share f < 0 left was
// spent: "spent 750×".
func overspent(f float64) string { return "spent " + api.Times(1-f) }
