package ui

import (
	"math"
	"testing"
	"time"
)

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.2: 2, 3: 5, 7: 10, 88: 100, 250: 500, 275: 500, 1001: 2000} {
		if got := niceCeil(in); math.Abs(got-want) > 1e-9 {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

// The plots place every mark inside their area, scale to the slowest
// minute, and have one tooltip per minute with data.
func TestPlots(t *testing.T) {
	ms := fixtureHistory().Snapshot(fixtureNow).Minutes
	withData := 0
	top := 0.0
	for _, m := range ms {
		if m.Ended() > 0 {
			withData++
		}
		top = math.Max(top, math.Max(m.Setup.Max, m.Teardown.Max))
	}
	for _, size := range []plotSize{wide, narrow} {
		for _, p := range []*plot{latencyPlot(ms, size), ratePlot(ms, size)} {
			if p.Empty != "" {
				t.Errorf("%s: empty (%s)", p.Label, p.Empty)
			}
			if len(p.Hits) != withData {
				t.Errorf("%s: %d tooltips, want %d", p.Label, len(p.Hits), withData)
			}
			for _, r := range p.Rects {
				if r.X < p.L-1 || r.X+r.W > p.R+1 || r.Y < p.T-0.01 || r.Y+r.H > p.B+0.01 || r.H < 0 {
					t.Errorf("%s: rect %+v outside [%v,%v]x[%v,%v]", p.Label, r, p.L, p.R, p.T, p.B)
				}
			}
			for _, d := range p.Dots {
				if d.X < p.L || d.X > p.R || d.Y < p.T || d.Y > p.B {
					t.Errorf("%s: dot %+v outside", p.Label, d)
				}
			}
			if n := len(p.XTicks); n < 3 || p.XTicks[n-1].Label != "now" {
				t.Errorf("%s: x ticks %+v", p.Label, p.XTicks)
			}
		}
	}
	lp := latencyPlot(ms, wide)
	if got := lp.YTicks[len(lp.YTicks)-1].Label; got != axisMS(niceCeil(top)) {
		t.Errorf("latency plot tops at %s, want %s", got, axisMS(niceCeil(top)))
	}
	if len(lp.Lines) == 0 || len(lp.Dots) == 0 {
		t.Errorf("latency plot has %d lines and %d dots", len(lp.Lines), len(lp.Dots))
	}

	empty := NewHistory().Snapshot(fixtureNow).Minutes
	if p := latencyPlot(empty, wide); p.Empty == "" || len(p.Rects) != 0 {
		t.Errorf("empty history: %+v", p)
	}
	if p := ratePlot(empty, narrow); p.Empty == "" || len(p.Rects) != 0 {
		t.Errorf("empty history: %+v", p)
	}
	_ = time.Minute
}
