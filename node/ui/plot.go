package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// plot is an SVG chart over the last hour's minutes, laid out here and
// drawn by the "plot" template: the template only places what is
// computed here. Coordinates are in the viewBox (W×H); the SVG scales
// to its container's width.
type plot struct {
	Label  string // the SVG's accessible name
	W, H   float64
	L, R   float64 // the plot area's left and right edges
	T, B   float64 // its top and bottom edges
	Empty  string  // shown instead of data when there is none
	XTicks []tick
	YTicks []tick
	Rects  []rect
	Lines  []polyline
	Dots   []dot
	Hits   []hit // one per minute: the tooltip
}

type tick struct {
	At    float64
	Label string
}

type rect struct {
	X, Y, W, H float64
	Class      string
}

type polyline struct {
	Points string
	Class  string
}

type dot struct {
	X, Y  float64
	Class string
}

type hit struct {
	X, W  float64
	Title string
}

// plotSize is a plot's viewBox: wide for a desktop, narrow for a phone,
// where the wide one's text would shrink below reading size.
type plotSize struct{ W, H float64 }

var (
	wide   = plotSize{640, 200}
	narrow = plotSize{360, 210}
)

func newPlot(label string, size plotSize) *plot {
	return &plot{Label: label, W: size.W, H: size.H, L: 46, R: size.W - 8, T: 10, B: size.H - 22}
}

// x is the left edge of minute i of n, and step a minute's width.
func (p *plot) x(i, n int) float64 { return p.L + float64(i)*p.step(n) }

func (p *plot) step(n int) float64 { return (p.R - p.L) / float64(n) }

// y maps v in [0, top] to the plot area.
func (p *plot) y(v, top float64) float64 {
	if top <= 0 {
		return p.B
	}
	return p.B - (p.B-p.T)*math.Min(v, top)/top
}

func (p *plot) xTicks(ms []Minute) {
	n := len(ms)
	backs := []int{60, 45, 30, 15, 0}
	if p.W < 500 {
		backs = []int{60, 30, 0}
	}
	for _, back := range backs {
		i := n - 1 - back
		label := fmt.Sprintf("−%dm", back)
		switch {
		case back == 0:
			label = "now"
		case i < 0:
			i = 0
		}
		p.XTicks = append(p.XTicks, tick{At: p.x(i, n) + p.step(n)/2, Label: label})
	}
}

func (p *plot) yTicks(top float64, format func(float64) string) {
	for _, f := range []float64{0, 0.5, 1} {
		p.YTicks = append(p.YTicks, tick{At: p.y(f*top, top), Label: format(f * top)})
	}
}

// niceCeil is the smallest 1, 2 or 5 times a power of ten at or above v.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v*(1-1e-9) {
			return m * e
		}
	}
	return 10 * e
}

func axisMS(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'g', 3, 64) + "s"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + "ms"
}

// latencyPlot draws each minute's network setup and teardown times: a
// line from the fastest to the slowest, and the median as a dot, the
// medians of neighbouring minutes joined.
func latencyPlot(ms []Minute, size plotSize) *plot {
	p := newPlot("Network setup and teardown latency per minute, last hour", size)
	if len(ms) == 0 {
		p.Empty = "no history"
		return p
	}
	top := 0.0
	for _, m := range ms {
		top = math.Max(top, math.Max(m.Setup.Max, m.Teardown.Max))
	}
	if top == 0 {
		p.Empty = "no allocation with a network ended in the last hour"
	}
	top = niceCeil(top)
	p.xTicks(ms)
	p.yTicks(top, axisMS)
	n := len(ms)
	w := p.step(n)
	series := []struct {
		class  string
		offset float64
		get    func(Minute) Latency
	}{
		{"s-setup", -w / 5, func(m Minute) Latency { return m.Setup }},
		{"s-teardown", w / 5, func(m Minute) Latency { return m.Teardown }},
	}
	for _, s := range series {
		var run []string
		flush := func() {
			if len(run) > 1 {
				p.Lines = append(p.Lines, polyline{Points: strings.Join(run, " "), Class: s.class})
			}
			run = nil
		}
		for i, m := range ms {
			l := s.get(m)
			if l.N == 0 {
				flush()
				continue
			}
			cx := p.x(i, n) + w/2 + s.offset
			y0, y1 := p.y(l.Max, top), p.y(l.Min, top)
			p.Rects = append(p.Rects, rect{X: cx - 0.8, Y: y0, W: 1.6, H: math.Max(y1-y0, 0.5), Class: s.class + " range"})
			cy := p.y(l.P50, top)
			p.Dots = append(p.Dots, dot{X: cx, Y: cy, Class: s.class})
			run = append(run, pt(cx, cy))
		}
		flush()
	}
	for i, m := range ms {
		if m.Setup.N == 0 && m.Teardown.N == 0 {
			continue
		}
		title := m.Start.Local().Format("15:04")
		if l := m.Setup; l.N > 0 {
			title += fmt.Sprintf("\nsetup: median %s, %s–%s, %d allocations", fmtMS(l.P50), fmtMS(l.Min), fmtMS(l.Max), l.N)
		}
		if l := m.Teardown; l.N > 0 {
			title += fmt.Sprintf("\nteardown: median %s, %s–%s, %d allocations", fmtMS(l.P50), fmtMS(l.Min), fmtMS(l.Max), l.N)
		}
		p.Hits = append(p.Hits, hit{X: p.x(i, n), W: w, Title: title})
	}
	return p
}

// ratePlot draws how many allocations ended in each minute, stacked by
// status.
func ratePlot(ms []Minute, size plotSize) *plot {
	p := newPlot("Allocations ended per minute, by status, last hour", size)
	if len(ms) == 0 {
		p.Empty = "no history"
		return p
	}
	most := 0
	for _, m := range ms {
		most = max(most, m.Ended())
	}
	if most == 0 {
		p.Empty = "no allocation ended in the last hour"
	}
	top := niceCeil(float64(most))
	p.xTicks(ms)
	p.yTicks(top, func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) })
	n := len(ms)
	w := p.step(n)
	for i, m := range ms {
		if m.Ended() == 0 {
			continue
		}
		x := p.x(i, n) + w*0.1
		base := 0.0
		var parts []string
		for _, s := range []struct {
			n     int
			class string
			name  string
		}{
			{m.Complete, "s-complete", "complete"},
			{m.Failed, "s-failed", "failed"},
			{m.Lost, "s-lost", "lost"},
			{m.Other, "s-other", "other"},
		} {
			if s.n == 0 {
				continue
			}
			y0, y1 := p.y(base+float64(s.n), top), p.y(base, top)
			p.Rects = append(p.Rects, rect{X: x, Y: y0, W: w * 0.8, H: y1 - y0, Class: s.class})
			base += float64(s.n)
			parts = append(parts, fmt.Sprintf("%d %s", s.n, s.name))
		}
		p.Hits = append(p.Hits, hit{X: p.x(i, n), W: w, Title: m.Start.Local().Format("15:04") + "\n" + strings.Join(parts, ", ")})
	}
	return p
}

func pt(x, y float64) string {
	return strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64)
}
