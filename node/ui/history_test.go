package ui

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
)

func allocWith(status string, setup, teardown float64) *api.Allocation {
	return &api.Allocation{Status: status, Timings: &api.Timings{Netns: setup / 10, Add: setup * 9 / 10, Del: teardown, Task: 1000}}
}

// Allocations land in the minute they ended in; an hour later the minute
// is gone, whatever the ring held there.
func TestHistoryMinutes(t *testing.T) {
	h := NewHistory()
	t0 := time.Date(2026, 1, 2, 10, 0, 30, 0, time.UTC)
	h.RecordAlloc(t0, allocWith(api.AllocComplete, 100, 80))
	h.RecordAlloc(t0.Add(10*time.Second), allocWith(api.AllocFailed, 200, 90))
	h.RecordAlloc(t0.Add(time.Minute), allocWith(api.AllocLost, 0, 0)) // no network
	h.RecordAlloc(t0.Add(2*time.Minute), &api.Allocation{Status: api.AllocComplete})
	h.RecordAlloc(t0, nil)

	s := h.Snapshot(t0.Add(2 * time.Minute))
	if len(s.Minutes) != Window {
		t.Fatalf("%d minutes, want %d", len(s.Minutes), Window)
	}
	last := s.Minutes[Window-3:]
	if !last[0].Start.Equal(t0.Truncate(time.Minute)) || !last[2].Start.Equal(t0.Add(2*time.Minute).Truncate(time.Minute)) {
		t.Errorf("minutes start at %v .. %v", last[0].Start, last[2].Start)
	}
	if m := last[0]; m.Complete != 1 || m.Failed != 1 || m.Ended() != 2 || m.Setup.N != 2 || m.Setup.Min != 100 || m.Setup.Max != 200 || m.Teardown.Mean != 85 {
		t.Errorf("first minute: %+v", m)
	}
	if m := last[1]; m.Lost != 1 || m.Setup.N != 0 || m.Teardown.N != 0 {
		t.Errorf("second minute: %+v", m)
	}
	if m := last[2]; m.Complete != 1 || m.Setup.N != 0 {
		t.Errorf("third minute: %+v", m)
	}
	for _, m := range s.Minutes[:Window-3] {
		if m.Ended() != 0 {
			t.Errorf("minute %v: %+v, want empty", m.Start, m)
		}
	}

	// 59 minutes on the first minute is the oldest; at 60 it is gone.
	if s := h.Snapshot(t0.Add(59 * time.Minute)); s.Minutes[0].Ended() != 2 {
		t.Errorf("59 minutes later the first minute holds %d", s.Minutes[0].Ended())
	}
	if s := h.Snapshot(t0.Add(60 * time.Minute)); s.Minutes[0].Ended() != 1 || s.Minutes[0].Lost != 1 {
		t.Errorf("an hour later the oldest minute is %+v", s.Minutes[0])
	}
	// Recording into the ring slot of a stale minute empties it first.
	h.RecordAlloc(t0.Add(time.Hour), allocWith(api.AllocComplete, 50, 50))
	s = h.Snapshot(t0.Add(time.Hour))
	if m := s.Minutes[Window-1]; m.Ended() != 1 || m.Setup.Max != 50 {
		t.Errorf("reused slot: %+v", m)
	}
	total := 0
	for _, m := range s.Minutes {
		total += m.Ended()
	}
	if total != 3 {
		t.Errorf("%d allocations in the hour, want 3 (the first minute's left)", total)
	}
}

// The median read back from the buckets is within their width of the
// true one, for spreads from a few ms to tens of seconds.
func TestHistoryMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, base := range []float64{0.3, 3, 85, 650, 20_000} {
		var l latency
		var vs []float64
		for i := 0; i < 500; i++ {
			v := base * math.Exp(rng.NormFloat64()*0.3)
			l.add(v)
			vs = append(vs, v)
		}
		sort.Float64s(vs)
		want := vs[len(vs)/2]
		got := l.summary().P50
		if r := got / want; r < 0.9 || r > 1.1 {
			t.Errorf("around %v ms: median %v, want %v (±10 %%)", base, got, want)
		}
	}
	var one latency
	one.add(88.4)
	if s := one.summary(); s.P50 != 88.4 || s.Min != 88.4 || s.Max != 88.4 {
		t.Errorf("one sample: %+v", s)
	}
	var huge latency
	huge.add(1e7)
	if s := huge.summary(); s.P50 != 1e7 {
		t.Errorf("above the last bucket: %+v", s)
	}
}

// The gc ring keeps the last MaxGCRuns, newest first, and bounds what it
// copies of each report.
func TestHistoryGC(t *testing.T) {
	h := NewHistory()
	t0 := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	var many []string
	var items []api.GCItem
	for i := 0; i < 1000; i++ {
		many = append(many, fmt.Sprintf("error %d", i))
		items = append(items, api.GCItem{Kind: api.GCNetns, ID: fmt.Sprint(i)})
	}
	h.RecordGC(t0, "start", &api.GCReport{Found: items, Reclaimed: items, Errors: many}, nil)
	h.RecordGC(t0.Add(time.Second), "api", nil, fmt.Errorf("store locked"))
	s := h.Snapshot(t0)
	if len(s.GC) != 2 || s.GC[0].Why != "api" || s.GC[0].Err != "store locked" || s.GC[1].Why != "start" {
		t.Fatalf("gc runs: %+v", s.GC)
	}
	if g := s.GC[1]; g.Found != 1000 || g.Reclaimed != 1000 || g.ErrorCount != 1000 || len(g.Errors) != maxGCLines || len(g.ReclaimedItems) != maxGCLines {
		t.Errorf("big report kept as %d found, %d reclaimed, %d errors, %d lines, %d items", g.Found, g.Reclaimed, g.ErrorCount, len(g.Errors), len(g.ReclaimedItems))
	}
	for i := 0; i < 3*MaxGCRuns; i++ {
		h.RecordGC(t0.Add(time.Duration(i)*time.Minute), fmt.Sprint("run ", i), &api.GCReport{}, nil)
	}
	s = h.Snapshot(t0)
	if len(s.GC) != MaxGCRuns || s.GC[0].Why != fmt.Sprint("run ", 3*MaxGCRuns-1) || s.GC[MaxGCRuns-1].Why != fmt.Sprint("run ", 2*MaxGCRuns) {
		var whys []string
		for _, g := range s.GC {
			whys = append(whys, g.Why)
		}
		t.Errorf("after %d runs: %s", 3*MaxGCRuns, strings.Join(whys, ", "))
	}
}

// Recording allocates nothing: the history's memory is what NewHistory
// made, however many allocations end.
func TestHistoryConstantMemory(t *testing.T) {
	h := NewHistory()
	a := allocWith(api.AllocComplete, 90, 80)
	now := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	n := testing.AllocsPerRun(10_000, func() {
		now = now.Add(700 * time.Millisecond)
		h.RecordAlloc(now, a)
	})
	if n != 0 {
		t.Errorf("RecordAlloc allocates %v times per call", n)
	}
}

func BenchmarkHistoryRecordAlloc(b *testing.B) {
	h := NewHistory()
	a := allocWith(api.AllocComplete, 90, 80)
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		h.RecordAlloc(now.Add(time.Duration(i)*time.Millisecond), a)
	}
}

func BenchmarkOverview(b *testing.B) {
	u := fixtureUI(newFixture(), nil)
	h := u.Handler()
	for b.Loop() {
		get(b, h, "/ui/")
	}
}
