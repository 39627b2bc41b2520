package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/store"
)

// ErrParameterized is returned for a parameterized job: it runs only as
// the child jobs its dispatches make (jobspec.Job.Dispatch).
var ErrParameterized = errors.New("a parameterized job runs only when dispatched")

// RunOptions bound a foreground run of a job.
type RunOptions struct {
	// MaxRuns stops a periodic job after that many launches (0: no limit).
	MaxRuns int
	// For stops launching after this long and stops what still runs
	// (0: no limit; a batch job ends when its allocations do).
	For time.Duration
	// OnAlloc is called with each allocation as it finishes, from the
	// goroutine that ran it: calls may be concurrent.
	OnAlloc func(*store.Allocation)
	// OnStart is called with each allocation as its tasks start, its
	// network (address, ports) set up.
	OnStart func(*store.Allocation)
	// OnSchedule is told, from the launching goroutine, how many launches
	// there were so far and when the next one is due (zero: none).
	OnSchedule func(launches int, next time.Time)
	// Now and After let tests drive the periodic clock.
	Now func() time.Time

	// Adopt are allocations of this job a previous agent left running
	// (claimed with Runner.Claim): they are resumed (AdoptAlloc) in their
	// slots instead of new ones. With Resume, a batch job launches nothing
	// new: what it had finished stays finished.
	Adopt  []*store.Allocation
	Resume bool
	// LastLaunch is a periodic job's last launch before a restart: the
	// schedule goes on from it, and a launch missed meanwhile runs once at
	// start (as Nomad's periodic dispatcher does), never twice.
	LastLaunch time.Time
	// OnLaunch is told each periodic launch's time, to be kept as the
	// next LastLaunch.
	OnLaunch func(time.Time)
	// Force launches a periodic job at once, out of its schedule, on
	// each receive (Nomad's `job periodic force`); the schedule goes on.
	Force <-chan struct{}
	// OnPhase is told when an allocation enters a phase (Phase*), from
	// the goroutine that runs it: calls may be concurrent.
	OnPhase func(allocID, phase string)
}

// Summary is what a run did.
type Summary struct {
	Job         string                    `json:"job"`
	Launches    int                       `json:"launches"`
	Skipped     int                       `json:"skipped_overlapping"`
	ByStatus    map[store.AllocStatus]int `json:"allocations_by_status"`
	SetupP50    float64                   `json:"network_setup_ms_p50"`
	SetupP99    float64                   `json:"network_setup_ms_p99"`
	TeardownP50 float64                   `json:"network_teardown_ms_p50"`
	TeardownP99 float64                   `json:"network_teardown_ms_p99"`
	// ExitToGoneP50 is from the last task's exit to the namespace being
	// gone (driver cleanup and teardown): where Nomad failed.
	ExitToGoneP50 float64 `json:"exit_to_netns_gone_ms_p50"`
	// TeardownRetries counts removals that found the namespace busy or
	// had to retry; Holders are who held it.
	TeardownRetries int      `json:"teardown_retries"`
	Holders         []string `json:"holders,omitempty"`
	Leaks           []string `json:"leaks"`
	Duration        float64  `json:"duration_s"`
	Failed          []string `json:"failed_allocations,omitempty"`
	// Detached counts the allocations left running for the next agent
	// (Runner.Detach); they are not in ByStatus.
	Detached int `json:"detached,omitempty"`
	// Networks are the CNI networks the allocations attached to: their
	// bridges and the plugins' shared chains stay for the next
	// attachment, and gc tidies them once idle.
	Networks []string `json:"networks,omitempty"`
}

// OK reports whether every allocation succeeded and nothing leaked.
func (s *Summary) OK() bool {
	for st, n := range s.ByStatus {
		if st != store.AllocComplete && n > 0 {
			return false
		}
	}
	return len(s.Leaks) == 0
}

// RunJob runs job in the foreground: a batch or service job once (count
// allocations per group), a periodic job at each launch time. It returns
// when everything launched has finished; ending ctx stops launching,
// stops running tasks and tears their networks down first.
func (r *Runner) RunJob(ctx context.Context, job *jobspec.Job, o RunOptions) (*Summary, error) {
	if job.IsParameterized() {
		return nil, fmt.Errorf("job %q: %w", job.ID, ErrParameterized)
	}
	start := time.Now()
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.For > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.For)
		defer cancel()
	}
	ctx = withPhaseHook(ctx, o.OnPhase)
	jr := &jobRun{r: r, ctx: ctx, job: job, o: o, adopted: map[slot]bool{},
		sum: &Summary{Job: job.ID, ByStatus: map[store.AllocStatus]int{}}}
	jr.adopt()
	// Periodic sleeps end on a detach too: nothing launches after it.
	sctx, stopSleeps := r.untilDetach(ctx)
	defer stopSleeps()
	if job.Periodic == nil || !job.Periodic.Enabled {
		if !(o.Resume && job.RunsToCompletion()) && !r.Detached() {
			jr.launch(job)
		}
		jr.schedule(time.Time{})
	} else {
		jr.periodic(sctx)
	}
	jr.wg.Wait()
	sum := jr.sum
	if r.Detached() {
		// What still runs is the next agent's; a leak check now would
		// list its namespaces.
		sum.Duration = time.Since(start).Seconds()
		sum.Leaks = []string{}
		return sum, nil
	}
	sum.SetupP50, sum.SetupP99 = jr.setup.quantile(50), jr.setup.quantile(99)
	sum.TeardownP50, sum.TeardownP99 = jr.teardown.quantile(50), jr.teardown.quantile(99)
	sum.ExitToGoneP50 = jr.gone.quantile(50)
	lctx, cancel := cleanup.Context(ctx, time.Minute)
	defer cancel()
	sum.Leaks = r.LeakCheck(lctx, jr.ids)
	sum.Duration = time.Since(start).Seconds()
	return sum, nil
}

// slot is an allocation's place in its job: group and index.
type slot struct {
	group string
	index int
}

// jobRun is one RunJob: what it launched, and the summary it keeps in
// memory that does not grow with the number of allocations but for their
// IDs (for the leak check).
type jobRun struct {
	r   *Runner
	ctx context.Context
	job *jobspec.Job
	o   RunOptions
	wg  sync.WaitGroup
	// adopted are the slots re-adopted allocations hold; adoptedRunning
	// counts those still running (the previous launch's, for
	// prohibit_overlap); nil without any.
	adopted        map[slot]bool
	adoptedRunning *atomic.Int64
	launched       bool // launch has run (owned by the launching goroutine)
	// pending counts the launches some allocation of which has not
	// started yet (MaxPendingLaunches).
	pending atomic.Int64

	mu                    sync.Mutex // guards what follows
	sum                   *Summary
	ids                   []string
	setup, teardown, gone quantiles
}

// done records a finished allocation.
func (jr *jobRun) done(a *store.Allocation) {
	jr.mu.Lock()
	if a.Detached {
		// Still running: neither finished nor to leak-check.
		jr.sum.Detached++
		jr.mu.Unlock()
		return
	}
	jr.sum.record(a, &jr.setup, &jr.teardown, &jr.gone)
	if len(jr.ids) >= maxLeakCheckIDs {
		// A job that runs for months checks its newest allocations; the
		// older ones were checked by gc.
		jr.ids = append(jr.ids[:0], jr.ids[len(jr.ids)/2:]...)
	}
	jr.ids = append(jr.ids, a.ID)
	jr.mu.Unlock()
	if jr.o.OnAlloc != nil {
		jr.o.OnAlloc(a)
	}
}

// runSlot runs the allocation first starts in slot (g, i) of job (the
// job, or one launch of it: jobspec.Job.PeriodicChild) and, as Nomad's
// scheduler does, runs the replacement of one that failed and was
// rescheduled (after its delay), and replaces one the operator stopped in
// a service or system job; a batch job's work is not done twice.
func (jr *jobRun) runSlot(job *jobspec.Job, g *jobspec.Group, i int, first func() (*store.Allocation, bool)) {
	a, opStopped := first()
	for {
		jr.done(a)
		if next := jr.r.next(jr.ctx, a); next != nil {
			a, opStopped = jr.r.runRescheduled(jr.ctx, job, g, next, jr.o.OnStart)
			continue
		}
		if !opStopped || a.Detached || job.RunsToCompletion() || jr.ctx.Err() != nil {
			return
		}
		jr.r.log.Info("replacing the allocation the operator stopped", "job", job.ID, "group", g.Name, "alloc_id", a.ID)
		a, opStopped = jr.r.runAlloc(jr.ctx, job, g, i, jr.o.OnStart, a.ID, true)
	}
}

// ownJob is the job an adopted allocation belongs to: the job, or the
// periodic launch its record names (rebuilt from the launch time in its
// ID, so that it keeps its identity across agents); children caches them.
func (jr *jobRun) ownJob(rec *store.Allocation, children map[string]*jobspec.Job) (*jobspec.Job, error) {
	if rec.JobID == jr.job.ID {
		return jr.job, nil
	}
	if c := children[rec.JobID]; c != nil {
		return c, nil
	}
	parent, launch, ok := jobspec.ParsePeriodicChildID(rec.JobID)
	if !ok || parent != jr.job.ID || jr.job.Periodic == nil {
		return nil, fmt.Errorf("allocation %s belongs to job %q, not a launch of %q", rec.ID, rec.JobID, jr.job.ID)
	}
	c, err := jr.job.PeriodicChild(launch)
	if err != nil {
		return nil, err
	}
	children[rec.JobID] = c
	return c, nil
}

// adopt resumes, each in its slot, the allocations a previous agent left.
func (jr *jobRun) adopt() {
	if len(jr.o.Adopt) == 0 {
		return
	}
	jr.adoptedRunning = new(atomic.Int64)
	children := map[string]*jobspec.Job{}
	for _, rec := range jr.o.Adopt {
		job, jerr := jr.ownJob(rec, children)
		var g *jobspec.Group
		if jerr == nil {
			g = groupNamed(job, rec.Group)
		} else {
			job = jr.job
		}
		jr.adopted[slot{rec.Group, rec.Index}] = true
		jr.wg.Add(1)
		jr.adoptedRunning.Add(1)
		go func() {
			defer jr.wg.Done()
			defer jr.adoptedRunning.Add(-1)
			switch {
			case jerr != nil:
				jr.done(jr.r.Abandon(jr.ctx, job, rec, jerr.Error()))
				return
			case g == nil:
				jr.done(jr.r.Abandon(jr.ctx, job, rec, fmt.Sprintf("its group %q is no longer in the job", rec.Group)))
				return
			}
			jr.runSlot(job, g, rec.Index, func() (*store.Allocation, bool) { return jr.r.adoptAlloc(jr.ctx, job, g, rec, jr.o.OnStart) })
		}()
	}
}

// launch starts every allocation of one launch of job (the job, or a
// periodic job's child) but, the first time, in slots a re-adopted
// allocation holds; the counter it returns reaches zero when all of them
// have finished.
func (jr *jobRun) launch(job *jobspec.Job) *atomic.Int64 {
	running := new(atomic.Int64)
	// unstarted counts this launch's allocations that have not started
	// (nor ended before starting); the launch is pending until it is 0.
	unstarted := new(atomic.Int64)
	unstarted.Add(1) // until every allocation is counted
	jr.pending.Add(1)
	startedOne := func() {
		if unstarted.Add(-1) == 0 {
			jr.pending.Add(-1)
		}
	}
	for _, g := range job.Groups {
		for i := 0; i < g.Count; i++ {
			if !jr.launched && jr.job.Periodic == nil && jr.adopted[slot{g.Name, i}] {
				continue
			}
			jr.wg.Add(1)
			running.Add(1)
			unstarted.Add(1)
			var once sync.Once
			started := func(al *store.Allocation) {
				once.Do(startedOne)
				if jr.o.OnStart != nil {
					jr.o.OnStart(al)
				}
			}
			go func() {
				defer jr.wg.Done()
				defer running.Add(-1)
				jr.runSlot(job, g, i, func() (*store.Allocation, bool) {
					defer once.Do(startedOne) // ended before it started
					return jr.r.runAlloc(jr.ctx, job, g, i, started, "", true)
				})
			}()
		}
	}
	startedOne()
	jr.launched = true
	jr.mu.Lock()
	jr.sum.Launches++
	jr.mu.Unlock()
	return running
}

func (jr *jobRun) launches() int {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.sum.Launches
}

func (jr *jobRun) schedule(next time.Time) {
	if jr.o.OnSchedule != nil {
		jr.o.OnSchedule(jr.launches(), next)
	}
}

func (jr *jobRun) skipped() {
	jr.mu.Lock()
	jr.sum.Skipped++
	jr.mu.Unlock()
}

// periodic launches at each time of the job's schedule until MaxRuns,
// the end of ctx or a detach (sctx). After a restart the schedule goes
// on from LastLaunch: a launch missed meanwhile runs once, at once.
func (jr *jobRun) periodic(sctx context.Context) {
	job, o, r := jr.job, jr.o, jr.r
	last := jr.adoptedRunning
	from := o.LastLaunch
	for o.MaxRuns == 0 || jr.launches() < o.MaxRuns {
		now := o.Now()
		if from.IsZero() || from.After(now) {
			from = now
		}
		next := job.Periodic.Next(from)
		if !next.IsZero() && next.Before(now) {
			missed := missedLaunches(job.Periodic, from, now)
			r.log.Warn("periodic launch missed while no agent ran: launching it now, once", "job", job.ID, "missed", missed, "first_missed", next)
			next = now
		}
		from = time.Time{}
		jr.schedule(next)
		if next.IsZero() {
			break
		}
		if forced, ok := sleepOrForce(sctx, time.Until(next), o.Force); !ok {
			break
		} else if forced {
			next = o.Now()
			r.log.Info("periodic launch forced", "job", job.ID, "at", next)
		}
		if o.OnLaunch != nil {
			o.OnLaunch(next)
		}
		if r.admit != nil && r.admit.queued(job.ID) > 0 {
			// Launches of a job that outlive its period would otherwise
			// pile up in the queue without bound.
			r.log.Warn("periodic launch skipped: allocations of the previous launch still wait for resources", "job", job.ID, "at", next)
			jr.skipped()
			continue
		}
		if max := r.o.MaxPendingLaunches; max > 0 && jr.pending.Load() >= int64(max) {
			// Starts slower than the schedule (a loaded node, slow
			// plugins): launching more would only pile up allocations
			// that wait to start.
			r.log.Warn("periodic launch skipped: earlier launches have not started yet (client.max_pending_launches)",
				"job", job.ID, "at", next, "pending_launches", jr.pending.Load(), "max_pending_launches", max)
			jr.skipped()
			continue
		}
		if job.Periodic.ProhibitOverlap && last != nil && last.Load() > 0 {
			r.log.Info("periodic launch skipped: the previous one still runs (prohibit_overlap)", "job", job.ID, "at", next)
			jr.skipped()
			continue
		}
		// Each launch is a child job of its own, as Nomad's periodic
		// dispatcher makes: "<job>/periodic-<launch time>".
		child, err := job.PeriodicChild(next)
		if err != nil {
			r.log.Error("periodic launch skipped", "job", job.ID, "at", next, "err", err)
			jr.skipped()
			continue
		}
		last = jr.launch(child)
	}
	jr.schedule(time.Time{})
}

func groupNamed(job *jobspec.Job, name string) *jobspec.Group {
	for _, g := range job.Groups {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// missedLaunches counts the launches of p after from and before now
// (bounded: a job that fires every second, down for a day, says "1000").
func missedLaunches(p *jobspec.Periodic, from, now time.Time) int {
	n := 0
	for t := p.Next(from); !t.IsZero() && t.Before(now) && n < 1000; t = p.Next(t) {
		n++
	}
	return n
}

// maxListed bounds the failures and holders a summary lists.
const maxListed = 100

// maxLeakCheckIDs bounds the allocation IDs a run remembers for its leak
// check (36 bytes each).
const maxLeakCheckIDs = 100_000

// record adds a finished allocation to the summary.
func (s *Summary) record(a *store.Allocation, setup, teardown, gone *quantiles) {
	s.ByStatus[a.Status]++
	if a.Status != store.AllocComplete && len(s.Failed) < maxListed {
		s.Failed = append(s.Failed, a.ID+": "+a.StatusDesc)
	}
	if a.Network != nil && a.Network.Network != "" && !slices.Contains(s.Networks, a.Network.Network) {
		s.Networks = append(s.Networks, a.Network.Network)
	}
	if a.Network != nil && a.Network.NetnsPath != "" {
		setup.add(a.TimingsMS["netns"] + a.TimingsMS["add"])
		teardown.add(a.TimingsMS["del"] + a.TimingsMS["remove"])
		if v, ok := a.TimingsMS["exit_to_netns_gone"]; ok {
			gone.add(v)
		}
	}
	s.TeardownRetries += a.TeardownRetries
	for _, h := range a.Holders {
		if len(s.Holders) < maxListed {
			s.Holders = append(s.Holders, h)
		}
	}
}

// LeakCheck looks for anything the given allocations left on the host:
// their namespaces, attachment records, service registrations, libcni
// cache entries, host-local leases, iptables rules and containers. It returns one line per leak.
func (r *Runner) LeakCheck(ctx context.Context, allocIDs []string) []string {
	leaks := []string{}
	ids := map[string]bool{}
	for _, id := range allocIDs {
		ids[id] = true
		if p := r.o.Attach.Netns().Path(id); p != "" {
			if _, err := os.Lstat(p); err == nil {
				leaks = append(leaks, "netns "+p)
			}
		}
		if _, err := r.o.Store.GetAttachment(ctx, id); err == nil {
			leaks = append(leaks, "pending teardown of "+id)
		}
	}
	if len(ids) == 0 {
		return leaks
	}
	if svcs, err := r.o.Store.ListServices(ctx, store.ServiceFilter{}); err == nil {
		for _, s := range svcs {
			if ids[s.AllocID] {
				leaks = append(leaks, "service registration "+s.ID)
			}
		}
	}
	// Evidence that cannot be read is skipped: the check lists what the
	// run visibly left; gc and doctor report a host they cannot read.
	cache, _ := evidence.ReadCache(ctx, r.o.Attach.CNI().CacheDir(), "")
	for _, e := range cache {
		if ids[e.ContainerID] {
			leaks = append(leaks, "CNI cache entry "+filepath.Base(e.File))
		}
	}
	leases, _ := evidence.ReadAllLeases(evidence.HostLocalDir)
	for _, l := range leases {
		if ids[l.ID] {
			leaks = append(leaks, "lease "+l.Path)
		}
	}
	sets, _ := evidence.ReadRulesets(ctx)
	for _, set := range sets {
		for _, rl := range set.Rules {
			if _, id, ok := evidence.ParseMarker(rl.Line); ok && ids[id] {
				leaks = append(leaks, fmt.Sprintf("%s rule %s", set.Family.SaveTool(), rl.Line))
			}
		}
	}
	for name, drv := range r.o.Drivers.Made() {
		lister, ok := drv.(interface {
			ListByLabel(ctx context.Context, key, value string) ([]string, error)
		})
		if !ok {
			continue
		}
		for id := range ids {
			if c, err := lister.ListByLabel(ctx, "berth.alloc_id", id); err == nil && len(c) > 0 {
				leaks = append(leaks, fmt.Sprintf("%s container(s) %s of %s", name, strings.Join(c, ","), id))
			}
		}
	}
	sort.Strings(leaks)
	return leaks
}

// sleepOrForce is sleep, cut short by a receive on force (nil: never):
// ok is false when ctx ended.
func sleepOrForce(ctx context.Context, d time.Duration, force <-chan struct{}) (forced, ok bool) {
	if force == nil {
		return false, sleep(ctx, d)
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return false, true
	case <-force:
		return true, true
	}
}
