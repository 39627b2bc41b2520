package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/berth/berth/job/jobspec"
)

// Capacity is what the node offers allocations, as Nomad's scheduler
// counts it: CPU in MHz, memory in MB, after the node's reserve, and a
// hard cap on allocations running at once. The zero value offers nothing
// and so admits nothing; a Runner without one admits everything (tests,
// programs that do their own admission).
type Capacity struct {
	CPU      int
	MemoryMB int
	Allocs   int
	// TotalCPU and TotalMemoryMB are the node's before the reserve, for
	// messages.
	TotalCPU, TotalMemoryMB int
	// Cores is how many CPUs TotalCPU spans, to count `cores` in MHz; 0
	// counts a core as 1000 MHz.
	Cores int
}

// ErrExhausted is matched (errors.Is) by an *ExhaustedError: a job asks
// more than the node has at all, so it could never run.
var ErrExhausted = errors.New("node resources exhausted")

// ExhaustedError says which dimension a job's launch exceeds and by how
// much: "memory exhausted: 100000 x 300 MB = 30000000 MB > 24105 MB".
type ExhaustedError struct {
	Job       string
	Dimension string // "cpu", "memory" or "allocations"
	Detail    string
	// Pos is the group that asks the most of that dimension.
	Pos jobspec.Pos
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("job %q cannot run on this node: %s exhausted: %s", e.Job, e.Dimension, e.Detail)
}

// Is makes errors.Is(err, ErrExhausted) true.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Diagnostic is the refusal at the group, for an API's 400 answer.
func (e *ExhaustedError) Diagnostic() jobspec.Diagnostic {
	return jobspec.Diagnostic{File: e.Pos.File, Line: e.Pos.Line, Column: e.Pos.Column,
		Summary: fmt.Sprintf("job %q cannot run on this node: %s exhausted", e.Job, e.Dimension), Detail: e.Detail}
}

// Demand is what allocations ask of the node.
type Demand struct {
	CPU      int64 // MHz
	MemoryMB int64
	Allocs   int64
}

func (d Demand) add(o Demand) Demand {
	return Demand{d.CPU + o.CPU, d.MemoryMB + o.MemoryMB, d.Allocs + o.Allocs}
}

func (d Demand) sub(o Demand) Demand {
	return Demand{d.CPU - o.CPU, d.MemoryMB - o.MemoryMB, d.Allocs - o.Allocs}
}

// coreMHz is what one whole core (resources { cores }) counts for.
func (c Capacity) coreMHz() int64 {
	if c.Cores > 0 && c.TotalCPU > 0 {
		return int64(c.TotalCPU / c.Cores)
	}
	return 1000
}

// GroupDemand is what one allocation of g asks: the sum of its tasks'
// resources (Nomad's defaults, cpu 100 MHz and memory 300 MB, filled in by
// the parser where a task has no resources block).
func (c Capacity) GroupDemand(g *jobspec.Group) Demand {
	d := Demand{Allocs: 1}
	for _, t := range g.Tasks {
		d.CPU += int64(t.Resources.CPU) + int64(t.Resources.Cores)*c.coreMHz()
		d.MemoryMB += int64(t.Resources.MemoryMB)
	}
	return d
}

func (c Capacity) offered() Demand {
	return Demand{int64(c.CPU), int64(c.MemoryMB), int64(c.Allocs)}
}

// Admissible returns an *ExhaustedError when one launch of job (every
// group's count of allocations at once, as a service job runs them) asks
// more CPU, memory or allocations than the node offers at all: such a job
// could never run whole, so run and plan refuse it before creating
// anything. A job that fits the node but not what is free now is admissible:
// its allocations wait.
func (c Capacity) Admissible(job *jobspec.Job) error {
	var total Demand
	type part struct {
		g *jobspec.Group
		d Demand
	}
	var parts []part
	for _, g := range job.Groups {
		if g.Count == 0 {
			continue
		}
		one := c.GroupDemand(g)
		n := int64(g.Count)
		d := Demand{one.CPU * n, one.MemoryMB * n, n}
		parts = append(parts, part{g, d})
		total = total.add(d)
	}
	off := c.offered()
	dims := []struct {
		name, unit string
		get        func(Demand) int64
		offered    int64
		node       int
	}{
		{"memory", " MB", func(d Demand) int64 { return d.MemoryMB }, off.MemoryMB, c.TotalMemoryMB},
		{"cpu", " MHz", func(d Demand) int64 { return d.CPU }, off.CPU, c.TotalCPU},
		{"allocations", "", func(d Demand) int64 { return d.Allocs }, off.Allocs, 0},
	}
	for _, dim := range dims {
		if dim.get(total) <= dim.offered {
			continue
		}
		var terms []string
		var biggest part
		for _, p := range parts {
			if dim.get(p.d) > dim.get(biggest.d) || biggest.g == nil {
				biggest = p
			}
			per := dim.get(c.GroupDemand(p.g))
			if dim.name == "allocations" {
				terms = append(terms, fmt.Sprintf("%d (group %q)", p.g.Count, p.g.Name))
				continue
			}
			terms = append(terms, fmt.Sprintf("%d x %d%s (group %q)", p.g.Count, per, dim.unit, p.g.Name))
		}
		var offer string
		switch {
		case dim.name == "allocations":
			offer = fmt.Sprintf("%d running at once (client.max_allocs)", dim.offered)
		case int64(dim.node) != dim.offered:
			offer = fmt.Sprintf("%d%s (the node's %d%s less %d%s reserved)", dim.offered, dim.unit, dim.node, dim.unit, int64(dim.node)-dim.offered, dim.unit)
		default:
			offer = fmt.Sprintf("%d%s (the node's)", dim.offered, dim.unit)
		}
		sum := strings.Join(terms, " + ")
		if len(parts) > 1 || dim.name != "allocations" {
			sum += fmt.Sprintf(" = %d%s", dim.get(total), dim.unit)
		}
		return &ExhaustedError{Job: job.ID, Dimension: dim.name, Pos: biggest.g.Pos,
			Detail: fmt.Sprintf("%s > %s; lower count or resources, or raise the node's (client block)", sum, offer)}
	}
	return nil
}

// admission counts what running allocations use and makes the others
// wait, first come first served, until they fit.
type admission struct {
	capa Capacity

	mu    sync.Mutex
	used  Demand
	queue []*waiter
	// queuedJob counts the waiting allocations of each job (by job ID),
	// so that a periodic launch is skipped while the last one still waits.
	queuedJob map[string]int
}

type waiter struct {
	d     Demand
	job   string
	ready chan struct{}
	done  bool // admitted (closed ready) or gave up; guarded by mu
}

func newAdmission(c Capacity) *admission {
	return &admission{capa: c, queuedJob: map[string]int{}}
}

func (ad *admission) fits(d Demand) bool {
	u, off := ad.used.add(d), ad.capa.offered()
	return u.CPU <= off.CPU && u.MemoryMB <= off.MemoryMB && u.Allocs <= off.Allocs
}

// acquire admits d, waiting while it does not fit or others wait before
// it. queued is called (once, before waiting) with why it waits. The
// returned release gives d back; it must be called once.
func (ad *admission) acquire(ctx context.Context, job string, d Demand, queued func(why string)) (release func(), err error) {
	ad.mu.Lock()
	if len(ad.queue) == 0 && ad.fits(d) {
		ad.used = ad.used.add(d)
		ad.mu.Unlock()
		return ad.releaser(d), nil
	}
	w := &waiter{d: d, job: job, ready: make(chan struct{})}
	ad.queue = append(ad.queue, w)
	ad.queuedJob[job]++
	why := ad.whyLocked(d, len(ad.queue)-1)
	ad.mu.Unlock()
	if queued != nil {
		queued(why)
	}
	select {
	case <-w.ready:
		return ad.releaser(d), nil
	case <-ctx.Done():
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if w.done {
		// Admitted as ctx ended: give it back.
		ad.used = ad.used.sub(d)
		ad.wakeLocked()
		return nil, ctx.Err()
	}
	w.done = true
	for i, q := range ad.queue {
		if q == w {
			ad.queue = append(ad.queue[:i], ad.queue[i+1:]...)
			break
		}
	}
	ad.unqueueLocked(job)
	// Those behind it may fit now.
	ad.wakeLocked()
	return nil, ctx.Err()
}

func (ad *admission) releaser(d Demand) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			ad.mu.Lock()
			ad.used = ad.used.sub(d)
			ad.wakeLocked()
			ad.mu.Unlock()
		})
	}
}

// wakeLocked admits waiters in order for as long as the first fits.
func (ad *admission) wakeLocked() {
	for len(ad.queue) > 0 && ad.fits(ad.queue[0].d) {
		w := ad.queue[0]
		ad.queue = ad.queue[1:]
		ad.used = ad.used.add(w.d)
		w.done = true
		ad.unqueueLocked(w.job)
		close(w.ready)
	}
}

func (ad *admission) unqueueLocked(job string) {
	if ad.queuedJob[job]--; ad.queuedJob[job] <= 0 {
		delete(ad.queuedJob, job)
	}
}

// queued is how many allocations of job wait.
func (ad *admission) queued(job string) int {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	return ad.queuedJob[job]
}

// whyLocked says what d waits for: the first dimension that does not fit,
// or the allocations queued before it.
func (ad *admission) whyLocked(d Demand, ahead int) string {
	u, off := ad.used.add(d), ad.capa.offered()
	free := off.sub(ad.used)
	switch {
	case u.Allocs > off.Allocs:
		return fmt.Sprintf("allocations: %d of %d running (client.max_allocs)", ad.used.Allocs, off.Allocs)
	case u.MemoryMB > off.MemoryMB:
		return fmt.Sprintf("memory: needs %d MB, %d MB free of %d MB", d.MemoryMB, free.MemoryMB, off.MemoryMB)
	case u.CPU > off.CPU:
		return fmt.Sprintf("cpu: needs %d MHz, %d MHz free of %d MHz", d.CPU, free.CPU, off.CPU)
	}
	return fmt.Sprintf("%d allocation(s) queued before it", ahead)
}

// Used is what admitted allocations use now.
func (ad *admission) Used() Demand {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	return ad.used
}

// startPool bounds the allocations being started at once.
type startPool chan struct{}

func (p startPool) acquire(ctx context.Context) (release func(), err error) {
	if p == nil {
		return func() {}, nil
	}
	select {
	case p <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { <-p }) }, nil
}
