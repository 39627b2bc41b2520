package ui

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/berth/berth/api"
)

// Window is how far back the status page's plots reach, in minutes; the
// History keeps exactly that many one-minute buckets.
const Window = 60

// MaxGCRuns is how many garbage collections the History remembers.
const MaxGCRuns = 10

// maxGCLines bounds the error and reclaimed lines kept per gc run, so a
// sweep that found thousands of leftovers costs what one that found ten
// does.
const maxGCLines = 8

// Latency buckets: bucket i holds values up to latFloor·2^(i/4) ms, the
// last one everything above. 72 buckets span 0.25 ms to about 65 s, each
// a factor 2^¼ wide, so a median read back is within ±9 % of the truth.
const (
	latBuckets   = 72
	latPerOctave = 4
	latFloor     = 0.25
)

// History is what the agent remembers of the last hour for the status
// page's plots, and its last garbage collections. Its size is fixed: a
// ring of one-minute buckets (allocations ended, by status, and
// histograms of their network setup and teardown times) and a ring of gc
// summaries, whatever the rate of allocations. Safe for concurrent use.
type History struct {
	mu      sync.Mutex
	minutes [Window]minute
	gcs     [MaxGCRuns]GCRun
	gcNext  int // where the next gc run goes in gcs
	gcCount int // runs recorded, up to MaxGCRuns
}

// minute is one bucket of the ring; at says which minute it holds (Unix
// minutes), so a bucket left from an hour ago is recognised as stale.
type minute struct {
	at              int64
	ended           statusCounts
	setup, teardown latency
}

type statusCounts struct{ complete, failed, lost, other int }

func (c *statusCounts) add(status string) {
	switch status {
	case api.AllocComplete:
		c.complete++
	case api.AllocFailed:
		c.failed++
	case api.AllocLost:
		c.lost++
	default:
		c.other++
	}
}

type latency struct {
	n        int
	min, max float64
	sum      float64
	buckets  [latBuckets]uint32
}

func (l *latency) add(ms float64) {
	if l.n == 0 || ms < l.min {
		l.min = ms
	}
	if l.n == 0 || ms > l.max {
		l.max = ms
	}
	l.n++
	l.sum += ms
	l.buckets[latBucket(ms)]++
}

func latBucket(ms float64) int {
	if ms <= latFloor {
		return 0
	}
	i := int(math.Ceil(latPerOctave * math.Log2(ms/latFloor)))
	return min(max(i, 0), latBuckets-1)
}

// quantile estimates the q-quantile as the geometric middle of the bucket
// it falls in, clamped to the minimum and maximum seen.
func (l *latency) quantile(q float64) float64 {
	if l.n == 0 {
		return 0
	}
	rank := uint32(math.Ceil(q * float64(l.n)))
	var seen uint32
	for i, c := range l.buckets {
		seen += c
		if seen >= rank && c > 0 {
			hi := latFloor * math.Pow(2, float64(i)/latPerOctave)
			mid := hi / math.Pow(2, 0.5/latPerOctave)
			return min(max(mid, l.min), l.max)
		}
	}
	return l.max
}

// NewHistory returns an empty History.
func NewHistory() *History { return &History{} }

// bucket returns the ring's bucket for t, emptied if it held an older
// minute. The caller holds h.mu.
func (h *History) bucket(t time.Time) *minute {
	at := t.Unix() / 60
	b := &h.minutes[int(((at%Window)+Window)%Window)]
	if b.at != at {
		*b = minute{at: at}
	}
	return b
}

// RecordAlloc counts an allocation that ended at t, and its network
// setup (namespace and CNI ADD) and teardown (CNI DEL and namespace
// removal) times when it had a network of its own.
func (h *History) RecordAlloc(t time.Time, a *api.Allocation) {
	if a == nil {
		return
	}
	setup, teardown := SetupMS(a.Timings), TeardownMS(a.Timings)
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bucket(t)
	b.ended.add(a.Status)
	if setup > 0 {
		b.setup.add(setup)
	}
	if teardown > 0 {
		b.teardown.add(teardown)
	}
}

// SetupMS is an allocation's network setup: creating its namespace and
// CNI ADD, as the agent logs it.
func SetupMS(t *api.Timings) float64 {
	if t == nil {
		return 0
	}
	return t.Netns + t.Add
}

// TeardownMS is an allocation's network teardown: CNI DEL and removing
// its namespace.
func TeardownMS(t *api.Timings) float64 {
	if t == nil {
		return 0
	}
	return t.Del + t.Remove
}

// GCRun is what the status page shows of one garbage collection.
type GCRun struct {
	At time.Time
	// Why is "start" (the reconcile), "periodic" or "api".
	Why    string
	DryRun bool
	// Found, Reclaimed and Kept count the report's items.
	Found, Reclaimed, Kept int
	// ReclaimedItems and Errors are the first few of each; the counts
	// above and ErrorCount are complete.
	ReclaimedItems   []api.GCItem
	Errors           []string
	ErrorCount       int
	StoreUnavailable string
	DurationMS       float64
	// Err is why the run failed before it could report (no report).
	Err string
}

// RecordGC remembers a garbage collection that ended at t; rep is nil
// when it failed before reporting, with err saying why.
func (h *History) RecordGC(t time.Time, why string, rep *api.GCReport, err error) {
	r := GCRun{At: t, Why: why}
	if err != nil {
		r.Err = err.Error()
	}
	if rep != nil {
		r.DryRun, r.StoreUnavailable, r.DurationMS = rep.DryRun, rep.StoreUnavailable, rep.DurationMS
		r.Found, r.Reclaimed, r.Kept, r.ErrorCount = len(rep.Found), len(rep.Reclaimed), len(rep.Kept), len(rep.Errors)
		r.ReclaimedItems = slices.Clone(rep.Reclaimed[:min(len(rep.Reclaimed), maxGCLines)])
		r.Errors = slices.Clone(rep.Errors[:min(len(rep.Errors), maxGCLines)])
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gcs[h.gcNext] = r
	h.gcNext = (h.gcNext + 1) % MaxGCRuns
	h.gcCount = min(h.gcCount+1, MaxGCRuns)
}

// Minute is one minute of the last hour.
type Minute struct {
	Start time.Time
	// Ended counts the allocations that ended in it, by status.
	Complete, Failed, Lost, Other int
	// Setup and Teardown are the network setup and teardown times of
	// those allocations, in milliseconds.
	Setup, Teardown Latency
}

// Ended is how many allocations ended in the minute.
func (m Minute) Ended() int { return m.Complete + m.Failed + m.Lost + m.Other }

// Latency summarises the times of one minute; all zero without samples.
type Latency struct {
	N             int
	Min, P50, Max float64
	Mean          float64
}

func (l *latency) summary() Latency {
	if l.n == 0 {
		return Latency{}
	}
	return Latency{N: l.n, Min: l.min, P50: l.quantile(0.5), Max: l.max, Mean: l.sum / float64(l.n)}
}

// Snapshot is the History as of one moment.
type Snapshot struct {
	// Minutes are the Window minutes up to and including now's, oldest
	// first; a minute nothing happened in is present with zeros.
	Minutes []Minute
	// GC are the remembered gc runs, newest first.
	GC []GCRun
}

// Snapshot copies what the History holds for the hour up to now.
func (h *History) Snapshot(now time.Time) Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := now.Unix() / 60
	s := Snapshot{Minutes: make([]Minute, 0, Window)}
	for at := cur - Window + 1; at <= cur; at++ {
		m := Minute{Start: time.Unix(at*60, 0).In(now.Location())}
		if b := &h.minutes[int(((at%Window)+Window)%Window)]; b.at == at {
			m.Complete, m.Failed, m.Lost, m.Other = b.ended.complete, b.ended.failed, b.ended.lost, b.ended.other
			m.Setup, m.Teardown = b.setup.summary(), b.teardown.summary()
		}
		s.Minutes = append(s.Minutes, m)
	}
	for i := 1; i <= h.gcCount; i++ {
		r := h.gcs[((h.gcNext-i)%MaxGCRuns+MaxGCRuns)%MaxGCRuns]
		r.ReclaimedItems, r.Errors = slices.Clone(r.ReclaimedItems), slices.Clone(r.Errors)
		s.GC = append(s.GC, r)
	}
	return s
}
