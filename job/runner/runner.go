// Package runner runs allocations of Nomad-style jobs on this machine in
// Nomad's order: network set up before any task starts; all tasks of the
// group run and exit; each driver lets go of everything it held; the
// network is torn down. A failure in any step is recorded on the
// allocation and never leaves the network behind.
package runner

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/service"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
	"github.com/berth/berth/task/artifact"
	"github.com/berth/berth/task/driver"
)

// Metrics receives allocation outcomes and phase durations; nil means none.
type Metrics interface {
	AllocPhase(phase string, d time.Duration)
	AllocDone(status string)
}

// Options configure a Runner.
type Options struct {
	Attach  *attach.Manager
	Store   *store.Store
	Drivers *Drivers
	// AllocDir holds one directory per allocation with its task logs.
	AllocDir string
	Bridge   BridgeConfig
	Node     jobspec.NodeAttrs
	Logger   *slog.Logger
	Metrics  Metrics
	// Services is the catalog of native services and Checks runs their
	// checks; without them service blocks are not registered and
	// templates see no services.
	Services *service.Registry
	Checks   *service.Checker
	// OwnerPID and OwnerStartTime mark the allocations this process owns,
	// so that the next berth can tell they were orphaned by a crash.
	OwnerPID       int
	OwnerStartTime uint64
	// Capacity, when set, is what allocations may use: each waits until
	// its group's resources fit (admission), and Admissible refuses a job
	// that could never fit. Nil admits everything.
	Capacity *Capacity
	// StartWorkers bounds the allocations being started (admitted, network
	// being set up) at once; 0 means no bound.
	StartWorkers int
	// MaxPendingLaunches skips a periodic launch while that many earlier
	// launches of the job have allocations not started yet; 0 means no
	// bound.
	MaxPendingLaunches int
	// MaxKillTimeout caps a task's kill_timeout; 0 means no cap.
	MaxKillTimeout time.Duration
	// Agent marks the allocations as an agent's: the next agent on the
	// data dir may re-adopt them (AdoptAlloc) when this one is gone.
	Agent bool
	// ArtifactLimits bound each artifact's fetch; zero fields are Nomad's
	// defaults (artifact.DefaultLimits).
	ArtifactLimits artifact.Limits
	// HostVolumes are the node's host volumes by name, which a group's
	// `volume { type = "host" source = "<name>" }` mounts.
	HostVolumes map[string]HostVolume
	// HostIP is the host address the node advertises (the node's
	// client.network_interface): NOMAD_IP_<label>, NOMAD_ADDR_<label>,
	// NOMAD_HOST_*, services with address_mode "host", the recorded port
	// mappings and the address of an allocation on the host network.
	// portmap publishes the ports on every host address. Default:
	// DefaultHostIP.
	HostIP string
}

// Runner runs allocations.
type Runner struct {
	o   Options
	log *slog.Logger

	netMu sync.Mutex
	nets  map[string]cachedNet

	admit  *admission // nil: no admission
	starts startPool  // nil: no bound

	liveMu sync.Mutex
	live   map[string]*allocRun // the allocations in flight, by ID (control.go)
	// detached ends with Detach: runs return leaving their tasks and
	// networks in place, recorded for the next agent.
	detached context.Context
	detach   context.CancelFunc

	// landlock is the kernel's Landlock ABI, probed once (landlockABI).
	landlockOnce sync.Once
	landlock     int
}

// landlockABI is the Landlock ABI artifact fetches are sandboxed with, 0
// when the kernel has none: said once in the log, the fetches then run as
// the task's user within their limits, without the filesystem sandbox.
func (r *Runner) landlockABI() int {
	r.landlockOnce.Do(func() {
		r.landlock = artifact.LandlockABI()
		if r.landlock == 0 {
			r.log.Warn("this kernel has no Landlock: artifacts are fetched as the task's user, within their limits, from directories the runner opens, but without a filesystem sandbox")
		}
	})
	return r.landlock
}

// Detach makes every run return without stopping anything: tasks keep
// running, networks stay, and each allocation is recorded as detached (its
// tasks' handles with it) for the next agent to re-adopt (AdoptAlloc). An
// agent calls it when it stops without draining; nothing starts after it.
func (r *Runner) Detach() { r.detach() }

// Detached reports whether Detach was called: a run that returned since
// did not end by itself.
func (r *Runner) Detached() bool { return r.detached.Err() != nil }

// errDetached ends the supervision of a task or allocation when the
// runner detaches: nothing was stopped.
var errDetached = errors.New("runner detached: left running for the next agent")

// untilDetach is ctx, also ended by Detach. It costs no goroutine: one
// waits per running task.
func (r *Runner) untilDetach(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.detached, cancel)
	return c, func() {
		stop()
		cancel()
	}
}

// cachedNet is a network configuration loaded from the config dir. It is
// reused for a second: a launch of count allocations reads the config dir
// once, while an edited file is still picked up by the next launch.
type cachedNet struct {
	net    *cni.Network
	loaded time.Time
}

func (r *Runner) network(ctx context.Context, name string) (*cni.Network, error) {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if c, ok := r.nets[name]; ok && time.Since(c.loaded) < time.Second {
		return c.net, nil
	}
	n, err := cni.LoadNetwork(ctx, r.o.Attach.ConfDir(), name)
	if err != nil {
		return nil, err
	}
	if r.nets == nil {
		r.nets = map[string]cachedNet{}
	}
	r.nets[name] = cachedNet{net: n, loaded: time.Now()}
	return n, nil
}

// New returns a Runner.
func New(o Options) *Runner {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Bridge = o.Bridge.withDefaults()
	if o.HostIP == "" {
		o.HostIP = DefaultHostIP
	}
	r := &Runner{o: o, log: o.Logger}
	r.detached, r.detach = context.WithCancel(context.Background())
	if o.Capacity != nil {
		r.admit = newAdmission(*o.Capacity)
	}
	if o.StartWorkers > 0 {
		r.starts = make(startPool, o.StartWorkers)
	}
	return r
}

// NewAllocID returns a random UUID, the form Nomad's allocation IDs take.
func NewAllocID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// DefaultHostIP is the host address without Options.HostIP: loopback,
// which the host's own processes can always reach (a task in a namespace
// cannot: its loopback is its own).
const DefaultHostIP = "127.0.0.1"

// allocRun is one allocation in flight.
type allocRun struct {
	r     *Runner
	job   *jobspec.Job
	group *jobspec.Group
	index int
	alloc *store.Allocation
	log   *slog.Logger
	dir   string
	// net is the group's network resolved for this allocation: the only
	// reader of its mode.
	net netPlan
	// lastExit is when the last task process exited, to measure how long
	// the namespace outlives the workload.
	lastExit time.Time
	started  func(*store.Allocation)
	lc       *lifecycle
	// ext is the allocation's services, templates and restarts.
	ext allocExt
	// cancel stops the allocation (berth alloc stop); done closes once
	// RunAlloc returned. opStopped: the operator stopped it (guarded by mu).
	cancel    context.CancelFunc
	done      chan struct{}
	opStopped bool
	// adopted: an earlier agent made this allocation; found are the
	// tasks findUnrecorded adopted, until the run supervises them.
	adopted bool
	found   []driver.Handle
	// reschedule: its failure may be rescheduled (rescheduleLocked); a
	// job's run (runSlot) runs the replacement, RunAlloc does not.
	reschedule bool
	// saveMu orders the record's writes: the last one written is the
	// last snapshot taken (a stop request saved beside the run's end).
	saveMu sync.Mutex

	mu sync.Mutex // guards alloc

	// t0 is the first reading of the allocation's clock (now).
	clockOnce sync.Once
	t0        time.Time
	// clocked are the tasks whose start this process saw: their end is
	// read from the same clock.
	clocked map[int]bool
}

// now is the allocation's clock: the wall time of its first reading plus
// the monotonic time since. Every timestamp of the allocation (events,
// task starts and ends) comes from it, never from another process's clock
// or a wall clock that steps, so their order is the order things were
// seen in: a task never finishes before it started.
func (a *allocRun) now() time.Time {
	a.clockOnce.Do(func() { a.t0 = time.Now() })
	return a.t0.Add(time.Since(a.t0))
}

// finishedAt is when task i was seen ending: now, on the clock that saw
// it start. A task re-attached after a restart keeps the driver's end
// when it ended while no berth watched, never before its start.
func (a *allocRun) finishedAt(i int, ts *store.TaskState, res *driver.ExitResult) time.Time {
	end := a.now()
	if !a.clocked[i] && res != nil && !res.FinishedAt.IsZero() && res.FinishedAt.Before(end) {
		end = res.FinishedAt
	}
	if end.Before(ts.StartedAt) {
		end = ts.StartedAt
	}
	return end
}

// RunAlloc runs one allocation of group to its end and returns its final
// record. It returns early only when ctx ends; the tasks are then stopped
// and the network torn down before it returns.
//
// started, if set, is called once the network is up and the tasks are about
// to start, with the allocation as it then stands (address and ports).
func (r *Runner) RunAlloc(ctx context.Context, job *jobspec.Job, group *jobspec.Group, index int, started func(*store.Allocation)) *store.Allocation {
	al, _ := r.runAlloc(ctx, job, group, index, started, "", false)
	return al
}

// runAlloc is RunAlloc; opStopped reports that the operator stopped the
// allocation (StopAlloc), replaces names the allocation it replaces;
// with reschedule its failure may record a replacement (the caller runs
// it: jobRun.runSlot).
func (r *Runner) runAlloc(ctx context.Context, job *jobspec.Job, group *jobspec.Group, index int, started func(*store.Allocation), replaces string, reschedule bool) (_ *store.Allocation, opStopped bool) {
	id := NewAllocID()
	now := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := r.newAllocRun(job, group, id, index, nil, started, cancel, reschedule)
	untrack := r.track(a, id)
	defer func() { opStopped = untrack() }()
	a.alloc = &store.Allocation{
		ID: id, Namespace: job.Namespace, JobID: job.ID, Group: group.Name,
		ParentJobID: periodicParent(job),
		Status:      store.AllocPending, OwnerPID: r.o.OwnerPID, OwnerStartTime: r.o.OwnerStartTime,
		Index: index, Agent: r.o.Agent, CreatedAt: now, TimingsMS: map[string]float64{},
	}
	for _, t := range group.Tasks {
		a.alloc.Tasks = append(a.alloc.Tasks, store.TaskState{Name: t.Name, Driver: t.Driver, State: "pending"})
	}
	a.eventLocked("Received", "allocation created")
	for i := range group.Tasks {
		a.taskEventLocked(i, TaskReceived, "Task received by client")
	}
	if replaces != "" {
		a.eventLocked("Replacement", "replaces allocation "+replaces+", stopped by the operator")
	}
	if err := r.o.Store.PutAllocation(ctx, a.alloc); err != nil {
		a.mu.Lock()
		a.alloc.Status = store.AllocFailed
		a.alloc.StatusDesc = "could not record the allocation: " + err.Error()
		a.endUnstartedLocked(errors.New(a.alloc.StatusDesc))
		a.eventLocked(EventNotRecorded, err.Error())
		a.mu.Unlock()
		a.log.Error("could not record the allocation; it does not run", "err", err)
		return a.alloc, false
	}
	return a.admitAndRun(ctx, now), false
}

// newAllocRun is the run of allocation id, the group's index-th: its
// network plan, logger and directory. rec is its record when it has one
// (adopted, rescheduled); runAlloc makes a new allocation's.
func (r *Runner) newAllocRun(job *jobspec.Job, group *jobspec.Group, id string, index int, rec *store.Allocation, started func(*store.Allocation), cancel context.CancelFunc, reschedule bool) *allocRun {
	a := &allocRun{r: r, job: job, group: group, index: index, started: started, alloc: rec, cancel: cancel, done: make(chan struct{}), reschedule: reschedule}
	a.net = planNetwork(group.Network, r.o.Bridge, r.o.HostIP)
	a.log = r.log.With("alloc_id", id, "job", job.ID, "group", group.Name)
	a.dir = filepath.Join(r.o.AllocDir, id)
	if rec != nil && rec.TimingsMS == nil {
		rec.TimingsMS = map[string]float64{}
	}
	return a
}

// periodicParent is the periodic job a launch (jobspec.Job.PeriodicChild)
// belongs to, recorded on its allocations; "" for any other job.
func periodicParent(job *jobspec.Job) string {
	if job.IsPeriodicChild() {
		return job.ParentID
	}
	return ""
}

// admitAndRun waits for admission, then runs the allocation to its end
// (or until the runner detaches).
func (a *allocRun) admitAndRun(ctx context.Context, since time.Time) *store.Allocation {
	if !a.waitReschedule(ctx) {
		return a.snapshot()
	}
	actx, cancel := a.r.untilDetach(ctx)
	release, ok := a.admit(actx)
	cancel()
	if !ok {
		return a.snapshot()
	}
	defer release()
	fault.Point(fault.BeforeAllocSetup)
	a.run(ctx)
	a.timing("total", time.Since(since))
	return a.snapshot()
}

// detachRecord records the allocation as left running for the next agent.
func (a *allocRun) detachRecord(ctx context.Context) {
	a.servicesDetached()
	a.mu.Lock()
	a.alloc.Detached = true
	a.eventLocked(EventDetached, "the agent stopped without draining: tasks and network left as they are for the next agent to re-adopt")
	a.mu.Unlock()
	a.save(ctx)
	a.log.Info("allocation left running for the next agent")
}

// eventLocked records an allocation event; the caller holds a.mu.
func (a *allocRun) eventLocked(typ, msg string) {
	a.alloc.Events = append(a.alloc.Events, store.Event{Time: a.now(), Type: typ, Message: msg})
}

func (a *allocRun) snapshot() *store.Allocation {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := *a.alloc
	c.Tasks = append([]store.TaskState(nil), a.alloc.Tasks...)
	c.Events = append([]store.Event(nil), a.alloc.Events...)
	c.TimingsMS = make(map[string]float64, len(a.alloc.TimingsMS))
	for k, v := range a.alloc.TimingsMS {
		c.TimingsMS[k] = v
	}
	return &c
}

// save writes the allocation; a failure is logged, not fatal: the
// attachment record, not the allocation record, is what guarantees the
// network is cleaned up.
func (a *allocRun) save(ctx context.Context) {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	snap := a.snapshot()
	if err := a.r.o.Store.PutAllocation(context.WithoutCancel(ctx), snap); err != nil {
		a.log.Error("could not record allocation", "err", err)
		a.event(EventNotRecorded, err.Error())
	}
}

// timingMS adds to phase a step attach timed in milliseconds; a step
// that did not run (0) leaves the phase out of the allocation's timings.
func (a *allocRun) timingMS(phase string, ms float64) {
	if ms != 0 {
		a.timing(phase, time.Duration(ms*float64(time.Millisecond)))
	}
}

func (a *allocRun) timing(phase string, d time.Duration) {
	a.mu.Lock()
	a.alloc.TimingsMS[phase] += float64(d.Microseconds()) / 1000
	a.mu.Unlock()
	if m := a.r.o.Metrics; m != nil {
		m.AllocPhase(phase, d)
	}
}

func (a *allocRun) run(ctx context.Context) {
	start := time.Now()
	namespaced := a.net.namespaced()
	netns := ""
	if err := os.MkdirAll(a.dir, 0o750); err != nil {
		a.finish(ctx, fmt.Errorf("create alloc dir %s: %w", a.dir, err), false)
		return
	}

	if namespaced {
		a.phase(ctx, PhaseNetwork)
		// A stop while the plugins run must not kill them half-way: the
		// setup finishes (bounded by the CNI timeouts), then the tasks are
		// skipped and the network torn down.
		st, err := a.setupNetwork(context.WithoutCancel(ctx))
		if err != nil {
			// Setup undoes itself; the teardown finishes whatever it
			// could not (it is idempotent).
			a.finish(ctx, err, true)
			return
		}
		netns = st.NetnsPath
	} else {
		ns, err := a.net.hostOnly()
		a.alloc.Network = ns
		if err != nil {
			a.finish(ctx, err, false)
			return
		}
	}
	// Recorded with the first task's handle, one write fewer.
	a.mu.Lock()
	a.alloc.Status = store.AllocRunning
	if a.alloc.Network != nil {
		a.alloc.Network.Ports = a.net.recordPorts()
	}
	a.mu.Unlock()
	if a.started != nil && ctx.Err() == nil && !a.announceLater() {
		a.started(a.snapshot())
	}

	if ctx.Err() != nil {
		a.event("Killed", "allocation stopped before its tasks started")
		a.finish(ctx, nil, namespaced)
		return
	}
	if a.r.Detached() {
		a.detachRecord(ctx)
		return
	}
	a.runAndFinish(ctx, netns, namespaced, a.takeFound(), start)
}

// runAndFinish runs the group's tasks (resuming those of handles, when
// re-adopted), then tears the network down and records the outcome; a
// detach records the allocation as it stands instead.
func (a *allocRun) runAndFinish(ctx context.Context, netns string, hasNetwork bool, handles []driver.Handle, start time.Time) {
	taskStart := time.Now()
	err := a.runLifecycle(ctx, netns, handles)
	a.timing("task", time.Since(taskStart))
	if errors.Is(err, errDetached) {
		a.detachRecord(ctx)
		return
	}
	a.r.log.Debug("alloc tasks done", "alloc_id", a.alloc.ID, "ms", time.Since(start).Milliseconds())
	fault.Point(fault.AfterTasksDone)
	a.finish(ctx, err, hasNetwork)
}

// setupNetwork picks the group's ports and sets up the allocation's
// namespace on its network (a heal sets it up again, with ports picked
// again), recording it on the allocation.
func (a *allocRun) setupNetwork(ctx context.Context) (*attach.Status, error) {
	if err := a.net.pickPorts(); err != nil {
		return nil, err
	}
	req := a.net.request(a.alloc.ID, a.job, a.group.Name)
	var err error
	if req.Config, err = a.net.confList(ctx, a.r); err != nil {
		return nil, err
	}
	st, err := a.r.o.Attach.Setup(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("network setup: %w", err)
	}
	// The namespace and ADD are phases of their own; records and CHECK
	// (and a heal's teardown) are berth's own work.
	t := st.Timings
	a.timingMS("netns", t.Netns)
	a.timingMS("add", t.Add)
	a.timingMS("berth", t.Record+t.Check+t.HealTeardown)
	ns := a.net.attached(st)
	a.mu.Lock()
	a.alloc.Network = ns
	a.eventLocked("Network", fmt.Sprintf("namespace %s on network %s, %s", st.NetnsPath, st.Network, strings.Join(st.IPv4, ",")))
	a.mu.Unlock()
	return st, nil
}

// NotStartedStopped and NotStartedFailed are why a task that an
// allocation's end found never started did not: the allocation was
// stopped first, or failed first (the failure follows).
const (
	NotStartedStopped = "allocation stopped before it started"
	NotStartedFailed  = "allocation failed before it started"
)

// endUnstartedLocked is the one rule for the tasks an allocation ends
// without having started (still pending, or marked dead by a path that
// gave no reason): dead, with why they never ran instead of an exit code,
// whichever path ended the allocation. A reason recorded earlier (a start
// that failed) is kept. The caller holds a.mu.
func (a *allocRun) endUnstartedLocked(runErr error) {
	why := NotStartedStopped
	var failed []string
	for _, ts := range a.alloc.Tasks {
		if ts.Failed {
			failed = append(failed, ts.Name)
		}
	}
	switch {
	case runErr != nil:
		why = NotStartedFailed + ": " + runErr.Error()
	case len(failed) > 0:
		why = NotStartedFailed + ": task(s) " + strings.Join(failed, ", ") + " failed"
	}
	for i := range a.alloc.Tasks {
		ts := &a.alloc.Tasks[i]
		if !ts.StartedAt.IsZero() || ts.Handle != nil || ts.Exited {
			continue
		}
		ts.State = "dead"
		if ts.NotStarted == "" {
			ts.ExitCode, ts.Signal, ts.NotStarted = -1, 0, why
		}
	}
}

// finish tears the network down and records the outcome.
func (a *allocRun) finish(ctx context.Context, runErr error, hasNetwork bool) {
	a.phase(ctx, PhaseTeardown)
	defer a.phase(ctx, PhaseDone)
	// Teardown must happen even when the run was cancelled.
	tctx, cancel := cleanup.Context(ctx, 3*time.Minute)
	defer cancel()
	// Tasks adopted and never supervised (the run ended first) go first.
	a.dropFound(tctx)
	// An earlier agent may have made the network of a re-adopted
	// allocation that this one never set up.
	hasNetwork = hasNetwork || a.adopted
	// Nothing may still point at the allocation once its network goes.
	a.servicesGone(tctx)
	// Its tasks are gone: their secrets/ tmpfs go too (a killed agent's
	// are gc's, kind "mount"). The directory stays, as Nomad's, for
	// its logs.
	if a.dir == "" {
		// No directory, nothing mounted.
	} else if err := allocdir.Unmount(tctx, a.dir); err != nil {
		a.log.Warn("could not unmount the allocation's secrets (berth gc retries it)", "dir", a.dir, "err", err)
		a.event("Unmount Failed", err.Error())
	}
	var tdErr error
	if hasNetwork {
		rep, err := a.r.o.Attach.Teardown(tctx, a.alloc.ID)
		tdErr = err
		if rep != nil {
			a.timingMS("del", rep.Timings.Del)
			a.timingMS("remove", rep.Timings.Remove)
			a.timingMS("berth", rep.Timings.Record)
			a.mu.Lock()
			a.alloc.TeardownRetries += rep.Retries
			if rep.Busy {
				a.alloc.TeardownRetries++
			}
			a.alloc.Holders = append(a.alloc.Holders, rep.Holders...)
			a.mu.Unlock()
		}
	}
	a.mu.Lock()
	if hasNetwork && tdErr == nil && !a.lastExit.IsZero() {
		// From the workload's exit to its namespace being gone: the
		// window in which Nomad's teardown failed.
		a.alloc.TimingsMS["exit_to_netns_gone"] = float64(time.Since(a.lastExit).Microseconds()) / 1000
	}
	a.endUnstartedLocked(runErr)
	failed := runErr != nil || tdErr != nil
	for _, t := range a.alloc.Tasks {
		if t.Failed {
			failed = true
		}
	}
	a.alloc.Status = store.AllocComplete
	if failed {
		a.alloc.Status = store.AllocFailed
	}
	var msgs []string
	if runErr != nil {
		msgs = append(msgs, runErr.Error())
		a.eventLocked("Failed", runErr.Error())
	}
	if tdErr != nil {
		msgs = append(msgs, "network teardown failed (berth gc retries it): "+tdErr.Error())
		a.eventLocked(EventTeardownFailed, tdErr.Error())
	} else {
		a.eventLocked("Network removed", "namespace and CNI attachment removed")
	}
	a.alloc.StatusDesc = strings.Join(msgs, "; ")
	next := a.rescheduleLocked(ctx)
	a.mu.Unlock()
	fault.Point(fault.BeforeRecordTerminal)
	a.saveWith(ctx, next)
	fault.Point(fault.AfterRecordTerminal)
	if m := a.r.o.Metrics; m != nil {
		m.AllocDone(string(a.alloc.Status))
	}
	lvl := slog.LevelDebug
	if failed {
		lvl = slog.LevelWarn
	}
	a.log.Log(ctx, lvl, "allocation finished", "status", a.alloc.Status, "desc", a.alloc.StatusDesc)
}

// env builds the task's environment as Nomad's task runner does: the
// agent's own environment for drivers without an image of their own
// (agentEnv), the NOMAD_* variables of the allocation, its resources and
// meta, then its env block (interpolated, see taskEnv). drv may be nil (a
// service's variables): the host's paths and no cgroup parent.
func (a *allocRun) env(t *jobspec.Task, drv driver.Driver) (vars map[string]string, env map[string]string) {
	j, g := a.job, a.group
	var dirs driver.TaskPaths
	if drv != nil {
		dirs = a.taskPaths(drv, t)
	}
	vars = map[string]string{
		"NOMAD_ALLOC_ID":       a.alloc.ID,
		"NOMAD_SHORT_ALLOC_ID": a.alloc.ID[:8],
		"NOMAD_ALLOC_NAME":     fmt.Sprintf("%s.%s[%d]", j.ID, g.Name, a.index),
		"NOMAD_ALLOC_INDEX":    strconv.Itoa(a.index),
		"NOMAD_ALLOC_DIR":      dirs.AllocDir,
		"NOMAD_TASK_DIR":       dirs.TaskDir,
		"NOMAD_SECRETS_DIR":    dirs.SecretsDir,
		"NOMAD_JOB_ID":         j.ID,
		"NOMAD_JOB_NAME":       j.ID,
		"NOMAD_GROUP_NAME":     g.Name,
		"NOMAD_TASK_NAME":      t.Name,
		"NOMAD_NAMESPACE":      j.Namespace,
		"NOMAD_REGION":         j.Region,
		"NOMAD_DC":             a.r.o.Node["node.datacenter"],
	}
	if j.ParentID != "" {
		vars["NOMAD_JOB_PARENT_ID"] = j.ParentID
	}
	resourceVars(vars, t.Resources)
	if cp, ok := drv.(driver.CgroupParenter); ok {
		if p := cp.CgroupParent(); p != "" {
			vars["NOMAD_PARENT_CGROUP"] = p
		}
	}
	a.net.portVars(vars)
	// Job, then group, then task: the innermost wins, as in Nomad.
	for _, meta := range []map[string]string{j.Meta, g.Meta, t.Meta} {
		metaVars(vars, meta)
	}
	env = map[string]string{}
	if inheritsAgentEnv(t.Driver) {
		env = agentEnv(os.Environ())
		// The block may override the agent's NOMAD_* variables
		// (NOMAD_ADDR...), which taskEnv would keep as the runtime's.
		for k := range t.Env {
			if _, runtime := vars[k]; !runtime && strings.HasPrefix(k, "NOMAD_") {
				delete(env, k)
			}
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for k, v := range vars {
		if strings.HasPrefix(k, "NOMAD_") {
			env[k] = v
		}
	}
	for k, v := range a.r.o.Node {
		vars[k] = v
	}
	return vars, taskEnv(env, t.Env, vars)
}

// interpolateConfig substitutes runtime variables in every string of a
// driver config.
func interpolateConfig(v any, vars map[string]string) any {
	switch x := v.(type) {
	case string:
		return jobspec.Interpolate(x, vars)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = interpolateConfig(e, vars)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = interpolateConfig(e, vars)
		}
		return out
	}
	return v
}

// runTask runs one task with its restart policy. It returns an error only
// for failures of berth or the driver, not for a task exiting non-zero
// (that is recorded on the task state). A re-adopted task comes with its
// recovered handle: its first run is supervised, not started.
func (a *allocRun) runTask(ctx context.Context, i int, t *jobspec.Task, netns string, recovered driver.Handle) error {
	drv, dt, err := a.driverTask(ctx, i, t, netns, recovered != nil)
	if err != nil {
		return err
	}
	restarts := &restartTracker{start: time.Now()}
	for {
		res, forced, err := a.attempt(ctx, i, drv, dt, recovered)
		recovered = nil
		again, err := a.afterAttempt(ctx, i, t, res, err, forced, restarts)
		if !again {
			return err
		}
	}
}

// driverTask builds what the driver is given to run task i. A new task's
// directories, artifacts and templates are set up; a re-adopted one's
// templates are rendered again and watched.
func (a *allocRun) driverTask(ctx context.Context, i int, t *jobspec.Task, netns string, readopted bool) (driver.Driver, *driver.Task, error) {
	drv, err := a.r.o.Drivers.Get(ctx, t.Driver)
	if err != nil {
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", true })
		return nil, nil, fmt.Errorf("task %q: %w", t.Name, err)
	}
	vars, env := a.env(t, drv)
	cfg, _ := interpolateConfig(t.Config, vars).(map[string]any)
	dt := &driver.Task{
		AllocID: a.alloc.ID, JobName: a.job.ID, GroupName: a.group.Name, TaskName: t.Name,
		Config: cfg, Env: env, NetnsPath: netns, LogDir: driver.LogDir(a.dir), AllocDir: a.dir, KillTimeout: a.r.killTimeout(t.KillTimeout),
		User:   t.User,
		Logs:   driver.LogConfig{MaxFiles: t.Logs.MaxFiles, MaxFileSizeMB: t.Logs.MaxFileSizeMB, Disabled: t.Logs.Disabled},
		Labels: map[string]string{"berth.job": a.job.ID, "berth.group": a.group.Name},
	}
	if !readopted {
		if err := a.setupTask(ctx, t, dt, vars); err != nil {
			// A fetch cut short by a stop is no failure of the task.
			failed := ctx.Err() == nil
			a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", failed })
			return nil, nil, err
		}
	} else {
		// Mounted still, unless something unmounted it while no agent
		// ran: the templates rendered again must not land on disk. (After
		// a reboot no task is re-adopted: setupTask mounts it again.)
		if err := allocdir.MountSecrets(ctx, filepath.Join(driver.TaskDir(a.dir, t.Name), "secrets")); err != nil {
			a.log.Warn("secrets of a re-adopted task", "task", t.Name, "err", err)
		}
		if err := a.startTemplates(ctx, t, dt, vars); err != nil {
			// Re-adopted: its templates are rendered again (what changed
			// while no agent ran is written, its env kept for a restart) and
			// watched; the task runs already, so a failure is only an event.
			a.log.Warn("templates of a re-adopted task", "task", t.Name, "err", err)
		}
	}
	return drv, dt, nil
}

// attempt runs task i once, or supervises its recovered handle, and says
// how the attempt was ended from outside (a template's change_mode, a
// restart asked for).
func (a *allocRun) attempt(ctx context.Context, i int, drv driver.Driver, dt *driver.Task, recovered driver.Handle) (*driver.ExitResult, restartOutcome, error) {
	actx, endAttempt := a.beginAttempt(ctx, i, dt)
	var res *driver.ExitResult
	var err error
	if recovered != nil {
		// Re-adopted: its services are registered again, by this
		// process, and checked from here on.
		a.taskRunning(actx, i, recovered)
		res, err = a.supervise(actx, i, recovered, dt)
	} else {
		res, err = a.runOnce(actx, i, drv, dt)
	}
	return res, endAttempt(), err
}

// afterAttempt decides, after an attempt of task i ended, whether it runs
// again (again) or what runTask returns. restarts are the restarts the
// policy counts.
func (a *allocRun) afterAttempt(ctx context.Context, i int, t *jobspec.Task, res *driver.ExitResult, err error, forced restartOutcome, restarts *restartTracker) (again bool, _ error) {
	if errors.Is(err, errDetached) {
		return false, err
	}
	if ctx.Err() == nil && a.takeRestart(i) {
		// Asked by the operator: not a failure, and not counted
		// against the restart policy (as in Nomad).
		a.setTask(i, func(ts *store.TaskState) { ts.Restarts++; ts.State, ts.Failed = "pending", false })
		a.taskEvent(i, TaskRestarting, restartingMsg("", 0))
		return true, nil
	}
	if ctx.Err() != nil {
		// Killed because the allocation was stopped, not failed.
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", false })
		if res != nil {
			a.taskEvent(i, TaskKilled, "Task successfully killed")
		}
		return false, err
	}
	if a.overran(i) {
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", true })
		return false, err
	}
	if err != nil {
		// The driver could not start it: counts as a failure for the
		// restart policy too.
		a.taskEvent(i, TaskDriverFailure, err.Error())
	}
	if errors.Is(err, driver.ErrExitUnknown) && a.job.RunsToCompletion() {
		// The start failed half-way and the task may have run: running
		// it again could do its work twice.
		a.taskEvent(i, EventExitUnknown, "Its start got no answer and it may have run; how it ended cannot be known: not run again")
		a.setTask(i, exitUnknown)
		return false, fmt.Errorf("task %q: %w", t.Name, err)
	}
	if forced.fatal {
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", true })
		return false, fmt.Errorf("task %q: killed: its template's change_script failed (fail_on_error)", t.Name)
	}
	if forced.restarted && !forced.failure {
		// A template's change_mode "restart": at once, not counted.
		a.setTask(i, func(ts *store.TaskState) { ts.Restarts++; ts.State = "pending" })
		a.taskEvent(i, TaskRestarting, restartingMsg("", 0))
		return true, nil
	}
	success := err == nil && res.Successful() && !forced.restarted
	if success && a.completes(t) {
		a.setTask(i, func(ts *store.TaskState) { ts.State = "dead" })
		return false, nil
	}
	return a.restartByPolicy(ctx, i, t, err, restarts)
}

// restartTracker counts a task's restarts as Nomad's restart tracker
// does: in a window of the policy's interval that opens when the task is
// first run, and again at the first failure after it closed.
type restartTracker struct {
	start time.Time
	count int
}

// restartByPolicy applies task i's restart policy after a failed or
// ended attempt, as Nomad 1.6.5: attempts within the interval, each after
// the delay plus up to a quarter of it (jitter); beyond them mode "fail"
// ends the task and mode "delay" waits until the interval's end, the next
// failure opening a new one. While it waits the task is pending (and so
// is the allocation when none of its tasks runs).
func (a *allocRun) restartByPolicy(ctx context.Context, i int, t *jobspec.Task, err error, rt *restartTracker) (again bool, _ error) {
	pol := t.Restart
	now := time.Now()
	notRestarting := func(reason string) (bool, error) {
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", true })
		a.taskEvent(i, TaskNotRestarting, reason)
		if err != nil {
			return false, fmt.Errorf("task %q: %w", t.Name, err)
		}
		return false, nil
	}
	if pol.Attempts == 0 {
		return notRestarting(reasonNoRestarts)
	}
	if now.After(rt.start.Add(pol.Interval)) {
		rt.start, rt.count = now, 0
	}
	rt.count++
	reason, wait := "", jitter(pol.Delay)
	if rt.count > pol.Attempts {
		if pol.Mode != jobspec.RestartDelay {
			return notRestarting(fmt.Sprintf("Exceeded allowed attempts %d in interval %v and mode is %q", pol.Attempts, pol.Interval, pol.Mode))
		}
		reason, wait = reasonDelay, rt.start.Add(pol.Interval).Sub(now)
	}
	a.setTask(i, func(ts *store.TaskState) { ts.Restarts++; ts.State = "pending" })
	a.pendingIfIdle(ctx)
	a.taskEvent(i, TaskRestarting, restartingMsg(reason, wait))
	dctx, cancel := a.r.untilDetach(ctx)
	slept := sleep(dctx, wait)
	cancel()
	if a.r.Detached() && ctx.Err() == nil {
		// Restarted by the next agent.
		return false, errDetached
	}
	if !slept {
		// Stopped while waiting to restart: stopped, not failed.
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Failed = "dead", false })
		return false, nil
	}
	return true, nil
}

// pendingIfIdle reports the running allocation pending while none of
// its tasks runs (one waits to restart), as Nomad derives its client
// status from its tasks'; the next start reports it running again.
func (a *allocRun) pendingIfIdle(ctx context.Context) {
	a.mu.Lock()
	idle := a.alloc.Status == store.AllocRunning
	for _, ts := range a.alloc.Tasks {
		idle = idle && ts.State != "running"
	}
	if idle {
		a.alloc.Status = store.AllocPending
	}
	a.mu.Unlock()
	if idle {
		a.save(ctx)
	}
}

// event records an allocation event.
func (a *allocRun) event(typ, msg string) {
	a.mu.Lock()
	a.eventLocked(typ, msg)
	a.mu.Unlock()
}

func (a *allocRun) setTask(i int, fn func(*store.TaskState)) {
	a.mu.Lock()
	fn(&a.alloc.Tasks[i])
	a.mu.Unlock()
}

// runOnce starts the task, waits for it (stopping it when ctx ends) and
// destroys it: when it returns, the driver holds nothing of the namespace.
func (a *allocRun) runOnce(ctx context.Context, i int, drv driver.Driver, dt *driver.Task) (*driver.ExitResult, error) {
	if a.r.Detached() && ctx.Err() == nil {
		return nil, errDetached
	}
	a.phase(ctx, PhaseStarting)
	start := time.Now()
	// Resolved at each start: a re-adopted task restarted after the
	// node's host volumes changed fails here, naming the volume.
	mounts, err := a.r.mounts(a.group, a.group.Tasks[i], a.index)
	dt.Mounts = mounts
	var h driver.Handle
	if err == nil {
		h, err = drv.Start(ctx, dt)
	}
	a.timing("task_start", time.Since(start))
	if err != nil {
		why := "start failed: " + err.Error()
		if ctx.Err() != nil {
			// The start was cut short by a stop, not by the task.
			why = "stopped while starting"
		}
		a.setTask(i, func(ts *store.TaskState) {
			ts.State, ts.ExitCode, ts.NotStarted = "dead", -1, why
		})
		return nil, err
	}
	// Started, not yet recorded: what a crash here leaves is found by
	// gc's task sweep (container labels, task cgroups, supervisors).
	fault.PointCtx(ctx, fault.TaskStarted)
	st := h.State()
	a.mu.Lock()
	if a.alloc.Status == store.AllocPending {
		// Back from waiting to restart (pendingIfIdle).
		a.alloc.Status = store.AllocRunning
	}
	a.taskEventLocked(i, TaskStarted, "Task started by client")
	a.mu.Unlock()
	a.setTask(i, func(ts *store.TaskState) {
		ts.State, ts.StartedAt, ts.Handle, ts.NotStarted, ts.Exited = "running", a.now(), &st, "", false
		ts.FinishedAt, ts.ExitCode, ts.Signal = time.Time{}, 0, 0
		if a.clocked == nil {
			a.clocked = map[int]bool{}
		}
		a.clocked[i] = true
	})
	a.save(ctx)
	a.phase(ctx, PhaseRunning)
	a.taskStarted(i)
	a.taskRunning(ctx, i, h)
	fault.PointCtx(ctx, fault.TaskRunning)
	return a.supervise(ctx, i, h, dt)
}

// supervise waits for a started (or re-attached) task, stops it when ctx
// ends, destroys it and records how it ended: when it returns, the driver
// holds nothing of the namespace. A berth that re-attached a task after a
// restart (driver.Driver.Recover) resumes here.
func (a *allocRun) supervise(ctx context.Context, i int, h driver.Handle, dt *driver.Task) (*driver.ExitResult, error) {
	res, werr := a.await(ctx, i, h, dt)
	if errors.Is(werr, errDetached) {
		// Left running: its handle stays recorded.
		return nil, werr
	}
	fault.Point(fault.TaskExited)
	a.taskStopping(ctx, i)
	if werr == nil && res != nil {
		// Recorded before the driver lets go of the task (a container
		// removed, a status file gone): an agent killed in between leaves
		// the next one this exit, not a task it would run again.
		a.setTask(i, func(ts *store.TaskState) {
			ts.Exited, ts.ExitCode, ts.Signal = true, res.ExitCode, res.Signal
			ts.FinishedAt = a.finishedAt(i, ts, res)
		})
		a.taskEvent(i, TaskTerminated, terminatedMsg(res))
		a.save(ctx)
		fault.Point(fault.TaskExitRecorded)
	}
	dstart := time.Now()
	dctx, cancel := cleanup.Context(ctx, 2*time.Minute)
	derr := h.Destroy(dctx)
	cancel()
	a.timing("driver_cleanup", time.Since(dstart))
	fault.Point(fault.TaskDestroyed)
	if derr != nil {
		return res, fmt.Errorf("driver cleanup: %w", derr)
	}
	if werr != nil {
		return res, werr
	}
	a.setTask(i, func(ts *store.TaskState) {
		// Seen ending now, on the clock that saw it start. A task
		// re-attached after a restart keeps the driver's end when it
		// ended while no berth watched, never before its start.
		ts.FinishedAt = a.finishedAt(i, ts, res)
		if ts.FinishedAt.After(a.lastExit) {
			a.lastExit = ts.FinishedAt
		}
		ts.Handle = nil
		if res != nil {
			ts.ExitCode, ts.Signal = res.ExitCode, res.Signal
			ts.Failed = !res.Successful()
		}
	})
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
