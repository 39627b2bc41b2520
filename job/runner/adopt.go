package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// Event types of re-adoption.
const (
	// EventClaimed: a new agent took the allocation over from a dead one.
	EventClaimed = "Claimed"
	// EventReattached: a task the last agent started is supervised again.
	EventReattached = "Re-attached"
	// EventNotReattached: a task could not be proven to be the recorded
	// one (or is gone without an exit status); it was cleaned up and is
	// started again.
	EventNotReattached = "Not Re-attached"
	// EventCheckPassed, EventCheckSkipped, EventCheckFailed: the CNI CHECK
	// of a re-adopted allocation's namespace.
	EventCheckPassed  = "Network Checked"
	EventCheckSkipped = "Network Check Skipped"
	EventCheckFailed  = "Network Check Failed"
	// EventHealed: after a failed CHECK the namespace was recreated and the
	// group's tasks restarted into it.
	EventHealed = "Network Healed"
	// EventAdopted: a task an earlier agent started and did not record
	// was found (its container by label, its status file) and adopted.
	EventAdopted = "Adopted Unrecorded"
	// EventRemovedUnrecorded: what an earlier agent started for a task
	// and did not record, and that could not be adopted (a duplicate, a
	// supervisor), was removed before the task started.
	EventRemovedUnrecorded = "Removed Unrecorded"
	// EventExitRecorded: a task ended while no agent ran; its exit was
	// read from what it left (supervisor status file, container state).
	EventExitRecorded = "Exit Recorded"
	// EventExitUnknown: a task of a job that runs to completion was gone
	// while no agent ran and how it ended cannot be known: it is not run
	// again.
	EventExitUnknown = "Exit Unknown"
	// EventTeardownFailed: the allocation's network could not be torn
	// down (its record stays, for berth gc or the next agent).
	EventTeardownFailed = "Teardown failed"
	// EventStopFinished: a stop an earlier agent was asked (job stop,
	// alloc stop, drain) and did not finish was finished by this one.
	EventStopFinished = "Stop Finished"
)

// ReadoptingDesc is the status description of an allocation a new agent
// has claimed and not yet re-adopted (status pending): its tasks are not
// re-attached and its network not CHECKed yet.
const ReadoptingDesc = "re-adopting: the agent restarted and has not yet re-attached the tasks and CHECKed the network"

// Adoptable reports whether a is an allocation the next agent may take
// over: an agent's, not terminal, whose owner is gone (killed, or stopped
// without draining).
func Adoptable(a *store.Allocation) bool {
	return a.Agent && !a.Status.Terminal() && a.Status != store.AllocUnreadable &&
		(a.OwnerPID <= 0 || !proc.Alive(a.OwnerPID, a.OwnerStartTime))
}

// Claim records this runner's process as a's owner, so that no garbage
// collection (this agent's reconcile at start, or a `berth gc` beside it)
// takes it for an orphan while it is re-adopted. It must run before the
// reconcile; AdoptAlloc then resumes it.
func (r *Runner) Claim(ctx context.Context, a *store.Allocation) error {
	a.OwnerPID, a.OwnerStartTime = r.o.OwnerPID, r.o.OwnerStartTime
	a.Detached = false
	// Not running as far as this agent knows until it has re-attached
	// the tasks and CHECKed the network (resume): the API, the status
	// page and the metrics say so meanwhile.
	a.Status, a.StatusDesc = store.AllocPending, ReadoptingDesc
	a.Agent = r.o.Agent
	a.Events = append(a.Events, store.Event{Time: time.Now(), Type: EventClaimed, Message: "re-adopted by a new agent"})
	if err := r.o.Store.PutAllocation(ctx, a); err != nil {
		return fmt.Errorf("claim allocation %s: %w", a.ID, err)
	}
	fault.Point(fault.AfterClaim)
	return nil
}

// AdoptAlloc resumes an allocation a previous agent left (claimed first):
// its tasks are re-attached from their recorded handles (driver.Recover),
// its namespace CHECKed against the cached attachment, and supervision
// goes on as if this process had started it. A failed CHECK (or a
// namespace that vanished) is healed once: the group's running tasks are
// stopped, the namespace torn down and made again, and the tasks restarted
// into it; a second failure fails the allocation with both causes. A task
// that cannot be re-attached is cleaned up and started again. It returns
// the final record, as RunAlloc does.
func (r *Runner) AdoptAlloc(ctx context.Context, job *jobspec.Job, group *jobspec.Group, rec *store.Allocation, started func(*store.Allocation)) *store.Allocation {
	al, _ := r.adoptAlloc(ctx, job, group, rec, started)
	return al
}

// adoptAlloc is AdoptAlloc; opStopped reports that the operator stopped
// the allocation (StopAlloc).
func (r *Runner) adoptAlloc(ctx context.Context, job *jobspec.Job, group *jobspec.Group, rec *store.Allocation, started func(*store.Allocation)) (_ *store.Allocation, opStopped bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := r.newAllocRun(job, group, rec.ID, rec.Index, rec, started, cancel, true)
	untrack := r.track(a, rec.ID)
	defer func() { opStopped = untrack() }()
	if !sameTasks(a.alloc.Tasks, group.Tasks) {
		// The job changed under the record: its tasks cannot be matched.
		return r.Abandon(ctx, job, rec, fmt.Sprintf("its job's group %q has other tasks now", group.Name)), false
	}
	ran := false
	for _, t := range a.alloc.Tasks {
		if t.Handle != nil || t.State == "dead" || t.Exited {
			ran = true
		}
	}
	a.adopted = true
	if rec.StopRequested != "" {
		// Stopped by the operator while an earlier agent ran it: the
		// stop is finished, not the allocation resumed.
		return r.stopAdopted(ctx, a, "the stop an earlier agent was asked ("+rec.StopRequested+") is finished"), true
	}
	if a.tasksEnded() {
		// The last agent died tearing it down (its tasks had run to
		// their end): only the teardown is left. No CHECK, no heal of a
		// half-removed network, no task started.
		return r.finishEnded(ctx, a), false
	}
	if !ran {
		// Nothing recorded as started (queued, its network just made, or
		// a task started and not yet recorded): what an earlier agent may
		// have made for it is found first (adopted or removed), then it
		// runs as new. Setup finds an existing attachment and CHECKs it.
		a.log.Info("re-adopting an allocation whose tasks had not started")
		a.alloc.Status, a.alloc.StatusDesc = store.AllocPending, ""
		a.found = a.findUnrecorded(context.WithoutCancel(ctx))
		return a.admitAndRun(ctx, time.Now()), false
	}
	// Already running: it was admitted by the last agent.
	release := r.admitForce(a.group)
	defer release()
	a.resume(ctx)
	return a.snapshot(), false
}

// findUnrecorded looks, for each task of the allocation recorded neither
// as started nor as ended, for what an earlier agent may have started and
// not recorded (driver.Finder: a container by its labels, a supervisor
// and cgroup by name, a status file): a task found is adopted (its handle
// recorded, supervised from here on; one that ended while no agent ran
// reports its real exit, and is not run again), what cannot be adopted
// is removed. A task of a job that runs to completion that had run and
// could not be adopted (driver.ErrExitUnknown) is recorded dead, its exit
// unknown, and not run again; a service's starts again. It returns the
// adopted handles (nil when none and no task was so ended), for the run
// to supervise.
func (a *allocRun) findUnrecorded(ctx context.Context) []driver.Handle {
	var found []driver.Handle
	mark := func() {
		if found == nil {
			found = make([]driver.Handle, len(a.alloc.Tasks))
		}
	}
	for i := range a.alloc.Tasks {
		a.mu.Lock()
		ts := a.alloc.Tasks[i]
		a.mu.Unlock()
		if ts.Handle != nil || ts.State == "dead" {
			continue
		}
		drv, err := a.r.o.Drivers.Get(ctx, ts.Driver)
		if err != nil {
			continue
		}
		f, ok := drv.(driver.Finder)
		if !ok {
			continue
		}
		req := driver.FindRequest{AllocID: a.alloc.ID, Task: ts.Name, AllocDir: a.dir, Since: ts.FinishedAt}
		if i < len(a.group.Tasks) {
			if sig, ok := jobspec.SignalNumber(a.group.Tasks[i].KillSignal); ok {
				req.KillSignal = sig
			}
		}
		h, removed, err := f.Find(ctx, req)
		switch {
		case errors.Is(err, driver.ErrExitUnknown) && a.job.RunsToCompletion():
			// Its work may be done: running it again could do it twice.
			a.log.Warn("an unrecorded task ran and could not be adopted; its exit cannot be known, not run again", "task", ts.Name, "err", err)
			a.restoreTaskEvent(i, EventExitUnknown, fmt.Sprintf("Started by an earlier agent that did not record it: %v; how it ended cannot be known: not run again", err))
			a.setTask(i, exitUnknown)
			mark() // the run must see it dead, not start it
			continue
		case errors.Is(err, driver.ErrExitUnknown):
			a.restoreTaskEvent(i, EventRemovedUnrecorded, fmt.Sprintf("%v; a service: started again", err))
			continue
		case len(removed) > 0:
			a.restoreTaskEvent(i, EventRemovedUnrecorded, "Removed what an earlier agent started and did not record: "+strings.Join(removed, ", "))
		}
		if err != nil {
			a.log.Warn("could not look for what an earlier agent started for a task", "task", ts.Name, "err", err)
			continue
		}
		if h == nil {
			continue
		}
		mark()
		found[i] = h
		st := h.State()
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Handle, ts.StartedAt = "running", &st, a.now() })
		a.restoreTaskEvent(i, EventAdopted, fmt.Sprintf("Adopted %s, started by an earlier agent that did not record it", describeHandle(&st)))
	}
	if found != nil {
		a.save(ctx)
	}
	return found
}

// takeFound hands the adopted handles to the run (once).
func (a *allocRun) takeFound() []driver.Handle {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.found
	a.found = nil
	return f
}

// dropFound stops and removes adopted tasks the run never supervised (it
// ended before its tasks started).
func (a *allocRun) dropFound(ctx context.Context) {
	for i, h := range a.takeFound() {
		if h == nil {
			continue
		}
		sctx, cancel := cleanup.Context(ctx, time.Minute)
		serr := h.Stop(sctx, 5*time.Second)
		err := h.Destroy(sctx)
		cancel()
		if err != nil {
			// Destroy kills what Stop left: a failed stop matters only
			// when Destroy failed too, and then explains it.
			err = errors.Join(err, stopErr(serr))
			a.log.Warn("could not remove an adopted task", "task", a.alloc.Tasks[i].Name, "err", err)
		}
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Handle = "dead", nil })
	}
}

// restoreEvent records what a new agent found of an allocation and did,
// and counts it (Metrics.Restore).
func (a *allocRun) restoreEvent(typ, msg string) {
	a.event(typ, msg)
	a.countRestore(typ)
}

// restoreTaskEvent is restoreEvent about task i.
func (a *allocRun) restoreTaskEvent(i int, typ, msg string) {
	a.taskEvent(i, typ, msg)
	a.countRestore(typ)
}

func (a *allocRun) countRestore(typ string) {
	if m, ok := a.r.o.Metrics.(RestoreMetrics); ok {
		m.Restore(typ)
	}
}

// RestoreMetrics counts what agents found and did when they took over
// what a killed one left (the event types of re-adoption).
type RestoreMetrics interface {
	Restore(action string)
}

// StopAdopted ends an allocation a previous agent left, claimed by this
// one, whose job or allocation was stopped (why says how): its recorded
// tasks and what was started and not recorded are stopped and removed,
// its network torn down, and it is recorded complete.
func (r *Runner) StopAdopted(ctx context.Context, job *jobspec.Job, rec *store.Allocation, why string) *store.Allocation {
	a := &allocRun{r: r, job: job, group: &jobspec.Group{Name: rec.Group}, index: rec.Index, alloc: rec, adopted: true}
	if g := groupNamed(job, rec.Group); g != nil {
		a.group = g
	}
	a.net = planNetwork(a.group.Network, r.o.Bridge, r.o.HostIP)
	a.log = r.log.With("alloc_id", rec.ID, "job", job.ID, "group", rec.Group)
	a.dir = filepath.Join(r.o.AllocDir, rec.ID)
	if a.alloc.TimingsMS == nil {
		a.alloc.TimingsMS = map[string]float64{}
	}
	return r.stopAdopted(ctx, a, why)
}

func (r *Runner) stopAdopted(ctx context.Context, a *allocRun, why string) *store.Allocation {
	ctx = context.WithoutCancel(ctx)
	a.found = a.findUnrecorded(ctx)
	a.dropFound(ctx)
	a.stopRecorded(ctx, why)
	a.mu.Lock()
	for i := range a.alloc.Tasks {
		a.alloc.Tasks[i].State = "dead"
	}
	a.mu.Unlock()
	a.restoreEvent(EventStopFinished, why)
	a.finish(ctx, nil, true)
	return a.snapshot()
}

func sameTasks(ts []store.TaskState, tasks []*jobspec.Task) bool {
	if len(ts) != len(tasks) {
		return false
	}
	for i, t := range tasks {
		if ts[i].Name != t.Name || ts[i].Driver != t.Driver {
			return false
		}
	}
	return true
}

func (a *allocRun) hasNetwork() bool {
	return a.alloc.Network != nil && a.alloc.Network.NetnsPath != ""
}

// resume re-attaches the tasks, checks (and heals) the network, and
// supervises the allocation to its end.
func (a *allocRun) resume(ctx context.Context) {
	start := time.Now()
	a.restoreNetwork()
	// Tasks recorded as neither started nor ended first (another task
	// of the group ran): what an earlier agent started for them and did
	// not record is adopted or removed.
	found := a.findUnrecorded(context.WithoutCancel(ctx))
	handles := a.recoverTasks(ctx, found)
	netns := ""
	if a.hasNetwork() {
		heals := a.heals()
		path, err := a.checkNetwork(ctx, handles)
		if err != nil {
			a.finish(ctx, err, true)
			return
		}
		if a.heals() > heals {
			// The tasks restart into the healed namespace: their start is
			// a crash point of the heal (heal/task-started).
			ctx = fault.Within(ctx, fault.HealScope)
		}
		netns = path
	}
	a.mu.Lock()
	a.alloc.Status = store.AllocRunning
	if a.alloc.StatusDesc == ReadoptingDesc {
		a.alloc.StatusDesc = ""
	}
	a.mu.Unlock()
	a.save(ctx)
	a.log.Info("allocation re-adopted", "tasks_reattached", countHandles(handles), "netns", netns)
	if a.started != nil {
		a.started(a.snapshot())
	}
	a.runAndFinish(ctx, netns, a.hasNetwork(), handles, start)
}

// heals counts the allocation's Network Healed events.
func (a *allocRun) heals() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, e := range a.alloc.Events {
		if e.Type == EventHealed {
			n++
		}
	}
	return n
}

func countHandles(hs []driver.Handle) int {
	n := 0
	for _, h := range hs {
		if h != nil {
			n++
		}
	}
	return n
}

// restoreNetwork gives the allocation the address and ports its record
// has, as the tasks' environment needs them.
func (a *allocRun) restoreNetwork() {
	if n := a.alloc.Network; n != nil {
		a.net.restore(n)
	}
}

// recoverTasks re-attaches every recorded running task. One that cannot
// be re-attached is cleaned up from its handle and left pending, to be
// started again (counted as a restart).
func (a *allocRun) recoverTasks(ctx context.Context, found []driver.Handle) []driver.Handle {
	handles := make([]driver.Handle, len(a.alloc.Tasks))
	for i := range a.alloc.Tasks {
		if found != nil && found[i] != nil {
			// Adopted by findUnrecorded.
			handles[i] = found[i]
			continue
		}
		a.mu.Lock()
		ts := a.alloc.Tasks[i]
		a.mu.Unlock()
		if ts.Handle == nil {
			if a.taskEnded(i) {
				// Its end was recorded and the driver let go of it: it
				// stays ended, not started again.
				a.setTask(i, func(ts *store.TaskState) { ts.State = "dead" })
				continue
			}
			if ts.State == "running" {
				a.setTask(i, func(ts *store.TaskState) { ts.State = "pending" })
			}
			continue
		}
		drv, err := a.r.o.Drivers.Get(ctx, ts.Driver)
		if err == nil && ts.Exited {
			// Its exit was recorded; the agent died before the driver let
			// go of it: the exit stands, what is left is removed.
			handles[i] = &exitedHandle{res: &driver.ExitResult{ExitCode: ts.ExitCode, Signal: ts.Signal, StartedAt: ts.StartedAt, FinishedAt: ts.FinishedAt},
				cleanup: func(ctx context.Context) error { return drv.Cleanup(ctx, *ts.Handle) }}
			a.restoreTaskEvent(i, EventExitRecorded, fmt.Sprintf("Task had exited (Exit Code: %d) before the last agent died; its exit is kept, %s removed", ts.ExitCode, describeHandle(ts.Handle)))
			continue
		}
		var h driver.Handle
		for attempt := 0; err == nil; attempt++ {
			// A driver's service starting (podman) may fail a first
			// inspect: only a task proven gone is given up.
			if h, err = drv.Recover(ctx, *ts.Handle); err == nil || errors.Is(err, driver.ErrNotRecoverable) || attempt == 4 || !sleep(ctx, time.Second) {
				break
			}
		}
		if err == nil {
			fault.Point(fault.AfterRecover)
			handles[i] = h
			a.restoreTaskEvent(i, EventReattached, fmt.Sprintf("Task (%s) re-attached after an agent restart", describeHandle(ts.Handle)))
			continue
		}
		if drv != nil {
			if cerr := drv.Cleanup(ctx, *ts.Handle); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
			}
		}
		if a.job.RunsToCompletion() {
			// Its work may be done: running it again could do it twice.
			a.log.Warn("task not re-attached and its exit cannot be known; not run again", "task", ts.Name, "err", err)
			a.restoreTaskEvent(i, EventExitUnknown, fmt.Sprintf("%v; how it ended cannot be known (it ended while no agent ran, and what recorded its exit is gone): not run again", err))
			a.setTask(i, exitUnknown)
			continue
		}
		a.log.Warn("task not re-attached; it is cleaned up and started again", "task", ts.Name, "err", err)
		a.restoreTaskEvent(i, EventNotReattached, fmt.Sprintf("%v; started again", err))
		a.setTask(i, func(ts *store.TaskState) {
			ts.State, ts.Handle = "pending", nil
			ts.Restarts++
		})
	}
	return handles
}

// exitUnknown records a task that ran and whose exit cannot be known:
// dead and failed, its exit code -1 (shown "unknown"), and Exited, since
// that is all that will ever be known of its end: it is neither run again
// nor taken for a task that never started.
func exitUnknown(ts *store.TaskState) {
	ts.State, ts.Handle, ts.Failed, ts.ExitCode, ts.Signal, ts.Exited = "dead", nil, true, -1, 0, true
}

// exitedHandle is a task whose exit was recorded before the agent that
// ran it died: Wait reports that exit, Destroy removes what is left.
type exitedHandle struct {
	res     *driver.ExitResult
	cleanup func(context.Context) error
}

func (h *exitedHandle) State() store.TaskHandle { return store.TaskHandle{} }
func (h *exitedHandle) Wait(context.Context) (*driver.ExitResult, error) {
	return h.res, nil
}
func (h *exitedHandle) Stop(context.Context, time.Duration) error { return nil }
func (h *exitedHandle) Destroy(ctx context.Context) error         { return h.cleanup(ctx) }

func describeHandle(h *store.TaskHandle) string {
	if h.ContainerID != "" {
		id := h.ContainerID
		if len(id) > 12 {
			id = id[:12]
		}
		return "container " + id
	}
	return fmt.Sprintf("pid %d", h.PID)
}

// checkNetwork CHECKs the re-adopted namespace. On failure it stops the
// running tasks (cut off from the network they were given), heals the
// namespace (Setup: DEL, remove, recreate, ADD) and leaves the tasks
// pending, to be started into the new namespace; it returns the
// namespace's path. An error means healing failed too.
func (a *allocRun) checkNetwork(ctx context.Context, handles []driver.Handle) (string, error) {
	id := a.alloc.ID
	st, cerr := a.r.o.Attach.Check(ctx, id)
	fault.Point(fault.AfterCheck)
	switch {
	case cerr == nil && st.CheckSkipped != "":
		a.event(EventCheckSkipped, "CHECK of namespace "+st.NetnsPath+" skipped: "+st.CheckSkipped)
		return st.NetnsPath, nil
	case cerr == nil:
		a.timingMS("berth", st.Timings.Check)
		a.event(EventCheckPassed, fmt.Sprintf("CNI CHECK passed: namespace %s on network %s", st.NetnsPath, st.Network))
		return st.NetnsPath, nil
	}
	a.log.Warn("CNI CHECK of a re-adopted namespace failed; healing it", "err", cerr)
	var names []string
	for i, h := range handles {
		if _, exited := h.(*exitedHandle); h == nil || exited {
			// An ended task keeps its exit: it is not run again.
			continue
		}
		t := a.group.Tasks[i]
		names = append(names, t.Name)
		sctx, cancel := cleanup.Context(ctx, a.r.killTimeout(t.KillTimeout)+30*time.Second)
		serr := h.Stop(sctx, a.r.killTimeout(t.KillTimeout))
		_, werr := h.Wait(sctx)
		derr := h.Destroy(sctx)
		cancel()
		if derr != nil {
			// Destroy kills what Stop left: a failed stop or wait matters
			// only when Destroy failed too, and then explains it.
			derr = errors.Join(derr, stopErr(serr), waitErr(werr))
			return "", fmt.Errorf("network CHECK failed (%v) and task %s could not be stopped to heal it: %w", cerr, t.Name, derr)
		}
		handles[i] = nil
		a.setTask(i, func(ts *store.TaskState) {
			// FinishedAt: the status file the stopped attempt left is
			// not an unrecorded task's for the next agent's Find (it
			// would take the stop for the task's exit).
			ts.State, ts.Handle, ts.FinishedAt = "pending", nil, a.now()
			ts.Restarts++
		})
	}
	fault.Point(fault.HealTasksStopped)
	what := "CNI CHECK failed"
	if errors.Is(cerr, attach.ErrNetnsGone) {
		what = "the namespace vanished while no agent ran"
	}
	a.restoreEvent(EventCheckFailed, fmt.Sprintf("%s: %v", what, cerr))
	// The heal's teardown and setup steps are crash points of their own
	// (heal/after-del, ...).
	nst, err := a.setupNetwork(fault.Within(context.WithoutCancel(ctx), fault.HealScope))
	if err != nil {
		return "", fmt.Errorf("network CHECK failed: %v; healing it failed: %w", cerr, err)
	}
	msg := fmt.Sprintf("CHECK failed (%v): namespace %s torn down and made again (DEL, remove, recreate, ADD), address %s", cerr, nst.NetnsPath, strings.Join(nst.IPv4, ","))
	if len(names) > 0 {
		msg += "; tasks " + strings.Join(names, ", ") + " restarted into it"
	}
	a.restoreEvent(EventHealed, msg)
	a.save(ctx)
	fault.Point(fault.Healed)
	return nst.NetnsPath, nil
}

// Abandon ends an allocation a previous agent left that cannot be
// re-adopted (why says why): its recorded tasks are stopped, its network
// torn down, and it is recorded failed.
func (r *Runner) Abandon(ctx context.Context, job *jobspec.Job, rec *store.Allocation, why string) *store.Allocation {
	a := &allocRun{r: r, job: job, group: &jobspec.Group{Name: rec.Group}, index: rec.Index, alloc: rec}
	a.log = r.log.With("alloc_id", rec.ID, "job", job.ID, "group", rec.Group)
	a.dir = filepath.Join(r.o.AllocDir, rec.ID)
	if a.alloc.TimingsMS == nil {
		a.alloc.TimingsMS = map[string]float64{}
	}
	a.stopRecorded(ctx, why)
	a.finish(ctx, fmt.Errorf("allocation %s: not re-adopted: %s", rec.ID, why), a.hasNetwork())
	return a.snapshot()
}

// stopRecorded stops every recorded task of an allocation that is not
// re-adopted, from its handle.
func (a *allocRun) stopRecorded(ctx context.Context, why string) {
	for i, ts := range a.alloc.Tasks {
		if ts.Handle == nil {
			continue
		}
		if drv, err := a.r.o.Drivers.Get(ctx, ts.Driver); err == nil {
			if err := drv.Cleanup(ctx, *ts.Handle); err != nil {
				a.log.Warn("could not stop a task of an allocation not re-adopted", "task", ts.Name, "err", err)
			}
		}
		a.alloc.Tasks[i].State, a.alloc.Tasks[i].Handle = "dead", nil
	}
	a.event("Killed", "not re-adopted: "+why)
}

// taskEnded reports whether the record of task i says it has run to its
// end: dead, or its exit recorded as one that ends it for good (a
// successful exit of a task that runs to completion).
func (a *allocRun) taskEnded(i int) bool {
	a.mu.Lock()
	ts := a.alloc.Tasks[i]
	a.mu.Unlock()
	if ts.State == "dead" {
		return true
	}
	return ts.Exited && ts.ExitCode == 0 && ts.Signal == 0 && i < len(a.group.Tasks) && a.completes(a.group.Tasks[i])
}

// tasksEnded reports whether every task of a re-adopted allocation has
// run to its end: then an earlier agent was tearing it down when it died.
func (a *allocRun) tasksEnded() bool {
	for i := range a.alloc.Tasks {
		if !a.taskEnded(i) {
			return false
		}
	}
	return len(a.alloc.Tasks) > 0
}

// finishEnded ends a re-adopted allocation whose tasks have all run to
// their end: what the drivers still hold of them is removed from the
// recorded handles, the network torn down from what the CNI cache holds
// (DEL, remove), and the allocation recorded terminal with the exits its
// record has.
func (r *Runner) finishEnded(ctx context.Context, a *allocRun) *store.Allocation {
	ctx = context.WithoutCancel(ctx)
	a.log.Info("re-adopting an allocation whose tasks had ended: tearing it down")
	for i := range a.alloc.Tasks {
		a.mu.Lock()
		ts := a.alloc.Tasks[i]
		a.mu.Unlock()
		if ts.Handle != nil {
			if drv, err := r.o.Drivers.Get(ctx, ts.Driver); err == nil {
				if err := drv.Cleanup(ctx, *ts.Handle); err != nil {
					a.log.Warn("could not remove what is left of an ended task", "task", ts.Name, "err", err)
				}
			}
		}
		if ts.Exited && ts.State != "dead" {
			a.restoreTaskEvent(i, EventExitRecorded, fmt.Sprintf("Task had exited (Exit Code: %d) before the last agent died; its exit is kept, not run again", ts.ExitCode))
		}
		a.setTask(i, func(ts *store.TaskState) { ts.State, ts.Handle = "dead", nil })
	}
	a.finish(ctx, nil, true)
	return a.snapshot()
}

// stopErr and waitErr name the step of a task's stop that failed, for
// joining with the error of the Destroy after it; nil stays nil.
func stopErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("stop: %w", err)
}

func waitErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("wait: %w", err)
}
