package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	svgWidth   = 980
	svgLeft    = 70
	svgRight   = 200 // room for the legend
	svgTop     = 56
	svgPanelH  = 170
	svgPanelGa = 48
	svgBottom  = 40
)

var svgColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// WriteSVG writes a scenario's plot: request rate, effective delay (the
// mean gap between starts at the busiest host, log scale) and requests in flight at
// the server, per BucketWidth, one line per policy, with a legend. The
// storm, if any, is shaded, and the capacity is a dashed line.
func WriteSVG(w io.Writer, sr ScenarioResult) error {
	bw := bufio.NewWriter(w)
	sc := sr.Scenario
	plotW := float64(svgWidth - svgLeft - svgRight)
	height := svgTop + 3*svgPanelH + 2*svgPanelGa + svgBottom
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", svgLeft, esc(sc.Name))
	fmt.Fprintf(bw, `<text x="%d" y="38" fill="#444">%s</text>`+"\n", svgLeft, esc(sc.About))

	mins := sc.Duration.Minutes()
	xOf := func(i int) float64 { // bucket i's middle
		t := (float64(i) + 0.5) * BucketWidth.Minutes()
		return svgLeft + math.Min(t, mins)/mins*plotW
	}
	panels := []struct {
		title string
		get   func(Series) []float64
		log   bool
		ref   float64
	}{
		{"requests sent per second (10 s buckets)", func(s Series) []float64 { return s.Rate }, false, sc.Capacity},
		{"effective delay: mean gap between starts at the busiest host, s (log)", func(s Series) []float64 { return s.Gap }, true, 0},
		{"requests in flight at the server (mean per 10 s)", func(s Series) []float64 { return s.InFlight }, false, 0},
	}
	for pi, p := range panels {
		top := float64(svgTop + pi*(svgPanelH+svgPanelGa))
		bot := top + svgPanelH
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range sr.Results {
			for _, v := range p.get(r.Series) {
				if math.IsNaN(v) || (p.log && v <= 0) {
					continue
				}
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if p.ref > 0 {
			hi = math.Max(hi, p.ref)
		}
		var yOf func(float64) float64
		var ticks []float64
		if p.log {
			if math.IsInf(lo, 1) {
				lo, hi = 0.1, 10
			}
			l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
			if l1 <= l0 {
				l1 = l0 + 1
			}
			yOf = func(v float64) float64 { return bot - (math.Log10(v)-l0)/(l1-l0)*svgPanelH }
			for e := l0; e <= l1; e++ {
				ticks = append(ticks, math.Pow(10, e))
			}
		} else {
			if math.IsInf(hi, -1) || hi <= 0 {
				hi = 1
			}
			step := niceStep(hi / 5)
			top := math.Ceil(hi*1.05/step) * step
			yOf = func(v float64) float64 { return bot - v/top*svgPanelH }
			for v := 0.0; v <= top+step/2; v += step {
				ticks = append(ticks, v)
			}
		}
		// frame, storm, grid
		if sc.StormTo > sc.StormFrom {
			x0 := svgLeft + sc.StormFrom.Minutes()/mins*plotW
			x1 := svgLeft + sc.StormTo.Minutes()/mins*plotW
			fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#fde0dc"/>`+"\n", x0, top, x1-x0, svgPanelH)
			if pi == 0 {
				fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="#c0392b">storm</text>`+"\n", x0+3, top+12)
			}
		}
		for _, v := range ticks {
			y := yOf(v)
			fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", svgLeft, y, svgLeft+plotW, y)
			fmt.Fprintf(bw, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", svgLeft-5, y+4, fmtTick(v))
		}
		for _, m := range timeTicks(mins) {
			x := svgLeft + m/mins*plotW
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/>`+"\n", x, top, x, bot)
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, bot+14, fmtTick(m))
		}
		fmt.Fprintf(bw, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#888"/>`+"\n", svgLeft, top, plotW, svgPanelH)
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" font-weight="bold">%s</text>`+"\n", svgLeft, top-6, esc(p.title))
		if p.ref > 0 {
			y := yOf(p.ref)
			fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="6,4"/>`+"\n", svgLeft, y, svgLeft+plotW, y)
			fmt.Fprintf(bw, `<text x="%d" y="%.1f">capacity %s</text>`+"\n", svgLeft+4, y-4, fmtTick(p.ref))
		}
		// lines
		for ri, r := range sr.Results {
			color := svgColors[ri%len(svgColors)]
			var pts []string
			flush := func() {
				if len(pts) > 1 {
					fmt.Fprintf(bw, `<polyline fill="none" stroke="%s" stroke-width="1.4" stroke-opacity="0.9" points="%s"/>`+"\n",
						color, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for i, v := range p.get(r.Series) {
				if math.IsNaN(v) || (p.log && v <= 0) {
					if !p.log { // a delay holds between its samples: join them
						flush()
					}
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(i), yOf(v)))
			}
			flush()
		}
	}
	xLabelY := svgTop + 3*svgPanelH + 2*svgPanelGa + 30
	fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle">minutes</text>`+"\n", svgLeft+plotW/2, xLabelY)
	// legend
	lx := float64(svgWidth - svgRight + 20)
	for ri, r := range sr.Results {
		y := float64(svgTop + 10 + ri*18)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n",
			lx, y, lx+18, y, svgColors[ri%len(svgColors)])
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, y+4, esc(r.Metrics.Policy))
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

func esc(s string) string { return html.EscapeString(s) }

// niceStep returns 1, 2 or 5 times a power of ten, at least x.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func timeTicks(mins float64) []float64 {
	step := niceStep(mins / 8)
	var t []float64
	for m := 0.0; m <= mins+1e-9; m += step {
		t = append(t, m)
	}
	return t
}

func fmtTick(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}
