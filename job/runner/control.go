package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	"golang.org/x/sys/unix"
)

// The operator's controls of a running allocation (berth alloc stop,
// restart, signal, exec) reach it here, by its ID.
var (
	// ErrAllocNotRunning: no allocation with that ID is in flight in this
	// runner (it ended, or another process runs it).
	ErrAllocNotRunning = errors.New("allocation is not running")
	// ErrTaskNotRunning: the task exists but has no process or container
	// now (not started yet, between restarts, or dead).
	ErrTaskNotRunning = errors.New("task is not running")
	// ErrNoSuchTask: the allocation has no task by that name.
	ErrNoSuchTask = errors.New("no such task")
	// ErrNotSupported: the task's driver cannot do that.
	ErrNotSupported = errors.New("not supported by the task's driver")
)

// errUserRestart is the cause that ends a task's wait for a restart.
var errUserRestart = errors.New("restart requested by the operator")

func (r *Runner) register(a *allocRun, id string) {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	if r.live == nil {
		r.live = map[string]*allocRun{}
	}
	r.live[id] = a
}

// track registers a as allocation id's live run (StopAlloc and the like
// find it there) until the returned func, which unregisters it and
// reports whether the operator stopped it (StopAlloc).
func (r *Runner) track(a *allocRun, id string) (untrack func() (opStopped bool)) {
	r.register(a, id)
	return func() bool {
		a.mu.Lock()
		stopped := a.opStopped
		a.mu.Unlock()
		r.unregister(a, id)
		return stopped
	}
}

func (r *Runner) unregister(a *allocRun, id string) {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	if r.live[id] == a {
		delete(r.live, id)
	}
	close(a.done)
}

func (r *Runner) liveAlloc(id string) (*allocRun, error) {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	a := r.live[id]
	if a == nil {
		return nil, fmt.Errorf("allocation %s: %w", id, ErrAllocNotRunning)
	}
	return a, nil
}

// StopAlloc stops one allocation: its tasks are stopped as for a job stop
// (kill_signal, kill_timeout), its network torn down. The returned channel
// closes once that is done. In a service or system job the runner then
// starts a replacement; a batch job's allocation is not run again.
func (r *Runner) StopAlloc(id string) (<-chan struct{}, error) {
	a, err := r.liveAlloc(id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	first := !a.opStopped
	a.opStopped = true
	if first {
		a.alloc.StopRequested = "alloc stop"
		a.eventLocked("Stop Requested", "allocation stopped by the operator")
	}
	a.mu.Unlock()
	if first {
		// Recorded before anything stops: an agent killed meanwhile
		// leaves the stop to the next one (stopAdopted), not a
		// re-adoption.
		a.save(context.Background())
	}
	a.cancel()
	return a.done, nil
}

// RequestStops records on every allocation in flight that a stop was
// asked (why: "drain", "job stop"), before anything is stopped: an agent
// killed meanwhile leaves each stop to the next agent, which finishes it
// instead of re-adopting the allocation. With job set, only that job's.
func (r *Runner) RequestStops(ctx context.Context, job, why string) {
	r.liveMu.Lock()
	var live []*allocRun
	for _, a := range r.live {
		if job == "" || a.job.ID == job || periodicParent(a.job) == job {
			live = append(live, a)
		}
	}
	r.liveMu.Unlock()
	for _, a := range live {
		a.mu.Lock()
		set := a.alloc.StopRequested == ""
		if set {
			a.alloc.StopRequested = why
		}
		a.mu.Unlock()
		if set {
			a.save(ctx)
		}
	}
}

// targets are the running tasks named by task ("" is every running task);
// a named task that does not run is ErrTaskNotRunning. Called with a.mu.
func (a *allocRun) targets(task string) ([]*taskCtl, error) {
	if a.lc == nil {
		return nil, fmt.Errorf("allocation %s: its tasks have not started yet: %w", a.alloc.ID, ErrTaskNotRunning)
	}
	var names []string
	var out []*taskCtl
	for _, c := range a.lc.ctl {
		names = append(names, c.t.Name)
		if task != "" && c.t.Name != task {
			continue
		}
		if task != "" && c.h == nil {
			return nil, fmt.Errorf("allocation %s: task %s is %s: %w", a.alloc.ID, task, a.alloc.Tasks[c.i].State, ErrTaskNotRunning)
		}
		if c.h != nil {
			out = append(out, c)
		}
	}
	if task != "" && len(out) == 0 {
		return nil, fmt.Errorf("allocation %s has no task %q (tasks: %s): %w", a.alloc.ID, task, strings.Join(names, ", "), ErrNoSuchTask)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("allocation %s: no task runs now: %w", a.alloc.ID, ErrTaskNotRunning)
	}
	return out, nil
}

// running registers task i's handle while it runs: the returned context
// ends when the operator restarts the task (cause errUserRestart) or ctx
// ends; unwatch forgets the handle.
func (a *allocRun) running(ctx context.Context, i int, h driver.Handle) (context.Context, func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	a.mu.Lock()
	if a.lc != nil {
		c := a.lc.ctl[i]
		c.h, c.restart = h, cancel
	}
	a.mu.Unlock()
	return rctx, func() {
		a.mu.Lock()
		if a.lc != nil {
			c := a.lc.ctl[i]
			c.h, c.restart = nil, nil
		}
		a.mu.Unlock()
		cancel(nil)
	}
}

// takeRestart reports (once) whether task i ended because the operator
// restarted it.
func (a *allocRun) takeRestart(i int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lc == nil {
		return false
	}
	c := a.lc.ctl[i]
	req := c.restartReq
	c.restartReq = false
	return req
}

// RestartAlloc restarts the running tasks of an allocation (task "" is
// all of them) in place: same allocation, same network namespace. A
// restart is not a failure and does not count against the restart policy;
// the task's restart count grows, as in Nomad. It returns the tasks it
// restarted once each runs again (or ended for good, or ctx ended).
func (r *Runner) RestartAlloc(ctx context.Context, id, task string) ([]string, error) {
	a, err := r.liveAlloc(id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	cs, err := a.targets(task)
	if err != nil {
		a.mu.Unlock()
		return nil, err
	}
	names := make([]string, len(cs))
	before := make([]time.Time, len(cs))
	for k, c := range cs {
		names[k] = c.t.Name
		before[k] = a.alloc.Tasks[c.i].StartedAt
		c.restartReq = true
		a.taskEventLocked(c.i, TaskRestartSignal, "User requested restart")
		c.restart(errUserRestart)
	}
	a.mu.Unlock()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for k, c := range cs {
		for {
			a.mu.Lock()
			ts := a.alloc.Tasks[c.i]
			a.mu.Unlock()
			if (ts.State == "running" && ts.StartedAt.After(before[k])) || c.isDone() {
				break
			}
			select {
			case <-ctx.Done():
				return names, fmt.Errorf("allocation %s: task %s is restarting still: %w", id, c.t.Name, ctx.Err())
			case <-a.done:
				return names, nil
			case <-tick.C:
			}
		}
	}
	return names, nil
}

// SignalAlloc sends sig to the main process of the running tasks of an
// allocation (task "" is all of them). It returns the tasks signalled.
func (r *Runner) SignalAlloc(ctx context.Context, id, task string, sig syscall.Signal) ([]string, error) {
	a, err := r.liveAlloc(id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	cs, err := a.targets(task)
	type target struct {
		name string
		h    driver.Handle
	}
	var ts []target
	for _, c := range cs {
		ts = append(ts, target{c.t.Name, c.h})
		a.taskEventLocked(c.i, TaskSignaling, fmt.Sprintf("Task being sent signal %s: user requested signal", signalName(sig)))
	}
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	for _, t := range ts {
		s, ok := t.h.(driver.Signaler)
		if !ok {
			errs = append(errs, fmt.Errorf("allocation %s: task %s: signals: %w", id, t.name, ErrNotSupported))
			continue
		}
		if err := s.Signal(ctx, sig); err != nil {
			errs = append(errs, fmt.Errorf("allocation %s: task %s: %w", id, t.name, err))
			continue
		}
		names = append(names, t.name)
	}
	return names, errors.Join(errs...)
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// ExecTarget returns the handle of a running task of an allocation (task
// "" is the only task of the group, or an error naming them) to run a
// command beside it, and the task's name.
func (r *Runner) ExecTarget(id, task string) (driver.Execer, string, error) {
	a, err := r.liveAlloc(id)
	if err != nil {
		return nil, "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if task == "" {
		if len(a.group.Tasks) != 1 {
			var names []string
			for _, t := range a.group.Tasks {
				names = append(names, t.Name)
			}
			return nil, "", fmt.Errorf("allocation %s has %d tasks (%s): name one with -task: %w", id, len(names), strings.Join(names, ", "), ErrNoSuchTask)
		}
		task = a.group.Tasks[0].Name
	}
	cs, err := a.targets(task)
	if err != nil {
		return nil, "", err
	}
	e, ok := cs[0].h.(driver.Execer)
	if !ok {
		return nil, "", fmt.Errorf("allocation %s: task %s (driver %s): exec: %w", id, task, cs[0].t.Driver, ErrNotSupported)
	}
	return e, task, nil
}

// TaskStates returns the task states of an allocation in flight; false
// when it is not (its record in the store is then final).
func (r *Runner) TaskStates(id string) ([]store.TaskState, bool) {
	a, err := r.liveAlloc(id)
	if err != nil {
		return nil, false
	}
	return a.snapshot().Tasks, true
}
