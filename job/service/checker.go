package service

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/berth/berth/store"
)

// DefaultConcurrency bounds the probes in flight at once. A probe waits
// at most its timeout, so a few slow checks hold a few slots and the
// others go on within their interval.
const DefaultConcurrency = 64

// Checker runs checks. Each check has its own timer, fixed to its
// interval from its first run (a late run does not shift the next); a run
// takes one of Concurrency slots while it probes. A check never overlaps
// itself: a probe still running at its next time skips that time.
type Checker struct {
	log  *slog.Logger
	sem  chan struct{}
	base context.Context
	stop context.CancelFunc

	mu   sync.Mutex
	lags lagRing
}

// NewChecker returns a checker with at most concurrency probes in flight
// (0: DefaultConcurrency).
func NewChecker(concurrency int, log *slog.Logger) *Checker {
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Checker{log: log, sem: make(chan struct{}, concurrency), base: ctx, stop: cancel}
}

// Close cancels every probe in flight; the checks' owners still Stop them.
func (c *Checker) Close() { c.stop() }

// Spec is one check to run.
type Spec struct {
	Probe    Probe
	Interval time.Duration
	Timeout  time.Duration
	// InitialStatus is the status before the first result ("" is pending).
	InitialStatus          string
	SuccessBeforePassing   int
	FailuresBeforeCritical int
	// OnResult is told of each run, one at a time for a check. It must not
	// wait for the check's Stop.
	OnResult func(Result)
}

// Result is one run of a check.
type Result struct {
	// Status is the check's status after this run; Seen is what this run
	// saw, which moves Status only once success_before_passing or
	// failures_before_critical runs in a row agree.
	Status, Seen string
	Output       string
	Time         time.Time
	// Changed: this run changed Status.
	Changed bool
}

// Handle is a running check.
type Handle struct {
	c    *Checker
	spec Spec

	mu       sync.Mutex
	stopped  bool
	timer    *time.Timer
	due      time.Time
	cancel   context.CancelFunc
	inflight sync.WaitGroup
	m        machine
}

// Start schedules spec: its first run comes within a second (spread, so
// that many checks registered together do not probe in step), then one
// every interval.
func (c *Checker) Start(spec Spec) *Handle {
	h := &Handle{c: c, spec: spec, m: machine{status: spec.InitialStatus, sbp: spec.SuccessBeforePassing, fbc: spec.FailuresBeforeCritical}}
	if h.m.status == "" {
		h.m.status = store.CheckPending
	}
	first := min(spec.Interval, time.Second)
	h.mu.Lock()
	h.schedule(time.Now().Add(time.Duration(rand.Int64N(int64(first) + 1))))
	h.mu.Unlock()
	return h
}

// Status is the check's status now.
func (h *Handle) Status() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m.status
}

// Stop ends the check: no run starts after it, one in flight is
// cancelled and waited for (its result is not reported).
func (h *Handle) Stop() {
	h.mu.Lock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
	}
	if h.cancel != nil {
		h.cancel()
	}
	h.mu.Unlock()
	h.inflight.Wait()
}

// schedule arms the timer for due. The caller holds mu.
func (h *Handle) schedule(due time.Time) {
	h.due = due
	h.timer = time.AfterFunc(time.Until(due), h.fire)
}

func (h *Handle) fire() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(h.c.base)
	h.cancel = cancel
	h.inflight.Add(1)
	due := h.due
	h.mu.Unlock()
	defer h.inflight.Done()
	defer cancel()

	select {
	case h.c.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	start := time.Now()
	h.c.recordLag(start.Sub(due), h.spec.Interval)
	seen, out := h.spec.Probe.Run(ctx, h.spec.Timeout)
	<-h.c.sem
	if ctx.Err() != nil && !h.isStopped() {
		// Cut short by Close, not by its own timeout (that one is the
		// probe's, inside Run).
		return
	}
	if h.isStopped() {
		return
	}
	h.mu.Lock()
	changed := h.m.observe(seen)
	res := Result{Status: h.m.status, Seen: seen, Output: out, Time: start, Changed: changed}
	h.mu.Unlock()
	if h.spec.OnResult != nil {
		h.spec.OnResult(res)
	}
	h.mu.Lock()
	if !h.stopped {
		next := due.Add(h.spec.Interval)
		for now := time.Now(); !next.After(now); next = next.Add(h.spec.Interval) {
			h.c.recordSkip()
		}
		h.schedule(next)
	}
	h.mu.Unlock()
}

func (h *Handle) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// machine is a check's status with Consul's counters: success_before_passing
// runs that pass in a row make it passing, failures_before_critical runs
// that fail in a row make it what they saw (0 and 1 both mean at once).
type machine struct {
	status     string
	sbp, fbc   int
	succ, fail int
}

func (m *machine) observe(seen string) bool {
	old := m.status
	if seen == store.CheckPassing {
		m.succ++
		m.fail = 0
		if m.succ >= max(m.sbp, 1) {
			m.status = store.CheckPassing
		}
	} else {
		m.fail++
		m.succ = 0
		if m.fail >= max(m.fbc, 1) {
			m.status = seen
		}
	}
	return m.status != old
}

// Stats describe how punctually checks ran since the checker started.
type Stats struct {
	Runs int64
	// Late counts runs that started an interval or more after their time;
	// Skipped counts times passed over because the check was still busy.
	Late, Skipped int64
	// LagP50, LagP99 and LagMax are how long after its time a run started.
	LagP50, LagP99, LagMax time.Duration
}

// Stats returns the checker's punctuality so far.
func (c *Checker) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.lags.quantiles(0.50, 0.99)
	return Stats{Runs: c.lags.n, Late: c.lags.late, Skipped: c.lags.skipped, LagP50: q[0], LagP99: q[1], LagMax: c.lags.max}
}

func (c *Checker) recordLag(lag, interval time.Duration) {
	c.mu.Lock()
	c.lags.add(lag, lag >= interval)
	c.mu.Unlock()
}

func (c *Checker) recordSkip() {
	c.mu.Lock()
	c.lags.skipped++
	c.mu.Unlock()
}

// lagRing keeps the lags of the last lagSamples runs (fixed memory
// whatever the number of runs) for exact quantiles of the recent past.
type lagRing struct {
	samples          []time.Duration
	next             int
	n, late, skipped int64
	max              time.Duration
}

const lagSamples = 1 << 16

func (l *lagRing) add(d time.Duration, late bool) {
	if d < 0 {
		d = 0
	}
	if len(l.samples) < lagSamples {
		l.samples = append(l.samples, d)
	} else {
		l.samples[l.next] = d
		l.next = (l.next + 1) % lagSamples
	}
	l.n++
	if late {
		l.late++
	}
	l.max = max(l.max, d)
}

func (l *lagRing) quantiles(qs ...float64) []time.Duration {
	out := make([]time.Duration, len(qs))
	if len(l.samples) == 0 {
		return out
	}
	s := slices.Clone(l.samples)
	slices.Sort(s)
	for i, q := range qs {
		k := int(q*float64(len(s))+0.5) - 1
		out[i] = s[min(max(k, 0), len(s)-1)]
	}
	return out
}
