package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// role is a task's place in its group's lifecycle, as Nomad orders it.
type role int

const (
	// rolePrestart runs to completion before the main tasks start; its
	// failure fails the allocation.
	rolePrestart role = iota
	// rolePrestartSidecar starts before the main tasks (they wait until it
	// runs) and is stopped after them.
	rolePrestartSidecar
	roleMain
	// rolePoststart starts once every main task has started and runs to
	// completion.
	rolePoststart
	// rolePoststartSidecar starts with the poststart tasks and is stopped
	// after the main tasks.
	rolePoststartSidecar
	// rolePoststop runs to completion once every other task has ended,
	// before the network is torn down.
	rolePoststop
)

func roleOf(t *jobspec.Task) role {
	if t.IsMain() {
		return roleMain
	}
	side := t.Lifecycle.Sidecar
	switch t.Lifecycle.Hook {
	case jobspec.HookPrestart:
		if side {
			return rolePrestartSidecar
		}
		return rolePrestart
	case jobspec.HookPoststart:
		if side {
			return rolePoststartSidecar
		}
		return rolePoststart
	}
	return rolePoststop
}

func (r role) sidecar() bool { return r == rolePrestartSidecar || r == rolePoststartSidecar }

// ephemeral roles run to completion whatever the job type: a successful
// exit ends them for good, as Nomad's restart tracker decides.
func (r role) ephemeral() bool { return r == rolePrestart || r == rolePoststart || r == rolePoststop }

func (r role) String() string {
	return [...]string{"prestart", "prestart sidecar", "main", "poststart", "poststart sidecar", "poststop"}[r]
}

// completes reports whether a successful exit of t ends it for good
// rather than restarting it: in a batch or sysbatch job, and for the
// lifecycle hooks that are not sidecars.
func (a *allocRun) completes(t *jobspec.Task) bool {
	return a.job.RunsToCompletion() || roleOf(t).ephemeral()
}

// poststopGrace bounds a poststop task that runs because the allocation was
// stopped (Ctrl-C, job stop): it still runs, as in Nomad, but a stop must
// end. It is then stopped as any task (kill_signal, kill_timeout).
const poststopGrace = time.Minute

// taskCtl is one task of a running allocation, as the lifecycle sees it.
type taskCtl struct {
	i    int
	t    *jobspec.Task
	role role
	// ctx ends when the lifecycle kills the task; it is not the
	// allocation's context, so that the kill comes in Nomad's order.
	ctx    context.Context
	cancel context.CancelFunc

	launched  bool // owned by the lifecycle loop
	started   chan struct{}
	startOnce sync.Once
	done      chan struct{}
	err       error // set before done closes
	// overran: killed for exceeding max_run_duration (guarded by allocRun.mu).
	overran bool
	// While the task runs (guarded by allocRun.mu): its handle, and what
	// ends its wait for a restart the operator asked (restartReq).
	h          driver.Handle
	restart    context.CancelCauseFunc
	restartReq bool
}

func (c *taskCtl) isDone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *taskCtl) isStarted() bool {
	select {
	case <-c.started:
		return true
	default:
		return false
	}
}

// lifecycle runs the tasks of one allocation in Nomad's order.
type lifecycle struct {
	a     *allocRun
	netns string
	ctl   []*taskCtl
	// poke wakes the loop when a task starts or ends.
	poke chan struct{}
}

func (lc *lifecycle) wake() {
	select {
	case lc.poke <- struct{}{}:
	default:
	}
}

// taskStarted is called by runOnce when a task's process or container runs.
func (a *allocRun) taskStarted(i int) {
	if a.lc == nil {
		return
	}
	c := a.lc.ctl[i]
	c.startOnce.Do(func() { close(c.started) })
	a.lc.wake()
}

// markOverran records that task i is being killed for running longer than
// its max_run_duration; runTask then fails it without a restart.
func (a *allocRun) markOverran(i int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lc != nil {
		a.lc.ctl[i].overran = true
	}
}

func (a *allocRun) overran(i int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lc != nil && a.lc.ctl[i].overran
}

func (lc *lifecycle) launch(c *taskCtl) {
	lc.launchWith(c, nil)
}

// launchWith runs the task, supervising a recovered handle first when it
// has one (a re-adopted allocation).
func (lc *lifecycle) launchWith(c *taskCtl, recovered driver.Handle) {
	c.launched = true
	go func() {
		defer lc.wake()
		defer close(c.done)
		c.err = lc.a.runTask(c.ctx, c.i, c.t, lc.netns, recovered)
	}()
}

func (lc *lifecycle) launchRoles(roles ...role) {
	for _, c := range lc.ctl {
		for _, r := range roles {
			if c.role == r && !c.launched {
				lc.launch(c)
			}
		}
	}
}

func (lc *lifecycle) failed(c *taskCtl) bool {
	lc.a.mu.Lock()
	defer lc.a.mu.Unlock()
	return lc.a.alloc.Tasks[c.i].Failed
}

// each reports whether every task with one of roles satisfies ok.
func (lc *lifecycle) each(ok func(*taskCtl) bool, roles ...role) bool {
	for _, c := range lc.ctl {
		for _, r := range roles {
			if c.role == r && !ok(c) {
				return false
			}
		}
	}
	return true
}

// killReason says why the allocation's tasks must be stopped before their
// time, or "": a stop, a failed task, the leader's end.
func (lc *lifecycle) killReason(ctx context.Context) (why string, ev killEvent) {
	if ctx.Err() != nil {
		return "allocation stopped", killEvent{}
	}
	for _, c := range lc.ctl {
		if c.role != rolePoststop && c.launched && c.isDone() && lc.failed(c) {
			return fmt.Sprintf("task %s (%s) failed", c.t.Name, c.role), killEvent{TaskSiblingFailed, fmt.Sprintf("Task's sibling %q failed", c.t.Name)}
		}
	}
	for _, c := range lc.ctl {
		if c.t.Leader && c.launched && c.isDone() {
			return fmt.Sprintf("leader task %s ended", c.t.Name), killEvent{TaskLeaderDead, "Leader Task in Group dead"}
		}
	}
	return "", killEvent{}
}

// killEvent is the task event Nomad gives each task a sibling's end
// kills (none for a stop).
type killEvent struct{ typ, msg string }

// mainEnded reports whether the main tasks, and the poststart tasks that
// are not sidecars, have all ended: what is left are sidecars.
func (lc *lifecycle) mainEnded() bool {
	return lc.each((*taskCtl).isDone, roleMain) &&
		lc.each(func(c *taskCtl) bool { return !c.launched || c.isDone() }, rolePoststart)
}

// runLifecycle runs the group's tasks in Nomad's order and returns once all
// have ended: prestart tasks first (the main tasks wait until those that
// are not sidecars have completed and the sidecars run), then the main
// tasks, then the poststart tasks once every main task has started. When
// the main tasks have ended, the leader has, a task has failed or the
// allocation is stopped, what still runs is stopped (the group's
// shutdown_delay first; the leader, the other tasks, the sidecars last);
// then the poststop tasks run to completion.
//
// A re-adopted allocation resumes where the last agent left it: tasks with
// a recovered handle (handles[i]) are supervised again, dead ones stay
// dead, pending ones start when their turn comes. A detach returns
// errDetached once every task's supervision has let go (nothing stopped).
func (a *allocRun) runLifecycle(ctx context.Context, netns string, handles []driver.Handle) error {
	lc := &lifecycle{a: a, netns: netns, poke: make(chan struct{}, 1)}
	for i, t := range a.group.Tasks {
		tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		lc.ctl = append(lc.ctl, &taskCtl{i: i, t: t, role: roleOf(t), ctx: tctx, cancel: cancel,
			started: make(chan struct{}), done: make(chan struct{})})
	}
	defer func() {
		for _, c := range lc.ctl {
			c.cancel()
		}
	}()
	a.mu.Lock()
	a.lc = lc
	a.mu.Unlock()
	if err := a.makeAllocDirs(); err != nil {
		return err
	}

	mainLaunched, postLaunched := false, false
	if handles != nil {
		mainLaunched, postLaunched = lc.resume(handles)
	}
	lc.launchRoles(rolePrestart, rolePrestartSidecar)
	if mainLaunched {
		lc.launchRoles(roleMain)
	}
	if postLaunched {
		lc.launchRoles(rolePoststart, rolePoststartSidecar)
	}
	var killed chan struct{}
	stopped := ctx.Done()
	detach := a.r.detached.Done()
	for {
		if killed == nil {
			if why, ev := lc.killReason(ctx); why != "" {
				killed = lc.kill(why, ev)
			}
		}
		if killed == nil && !mainLaunched &&
			lc.each((*taskCtl).isDone, rolePrestart) && lc.each((*taskCtl).isStarted, rolePrestartSidecar) {
			lc.launchRoles(roleMain)
			mainLaunched = true
		}
		if killed == nil && mainLaunched && !postLaunched && lc.each((*taskCtl).isStarted, roleMain) {
			// A main task that has already ended has started too: the
			// poststart tasks still run, as in Nomad.
			lc.launchRoles(rolePoststart, rolePoststartSidecar)
			postLaunched = true
		}
		if killed == nil && mainLaunched && lc.mainEnded() {
			killed = lc.kill("main tasks ended", killEvent{TaskMainDead, "Main tasks in the group died"})
		}
		if killed != nil {
			stopped = nil
		}
		if killed != nil && isClosed(killed) {
			break
		}
		select {
		case <-lc.poke:
		case <-stopped:
			stopped = nil
		case <-killed:
		case <-detach:
			if killed == nil {
				// Each task's supervision returns without stopping it.
				for _, c := range lc.ctl {
					if c.launched {
						<-c.done
					}
				}
				return errDetached
			}
			// Already stopping: finish that.
			detach = nil
		}
	}

	a.runPoststop(ctx, lc)
	var errs []error
	for _, c := range lc.ctl {
		if c.launched {
			<-c.done
			errs = append(errs, c.err)
		}
	}
	if ctx.Err() != nil {
		// Stopped by the operator (Ctrl-C, job stop, end of --for): as in
		// Nomad, a stopped allocation is complete, not failed.
		a.event("Killed", "allocation stopped")
		return nil
	}
	return errors.Join(errs...)
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// kill stops every task that runs, in Nomad's order, and closes the
// returned channel once they have ended. Tasks not launched yet never
// will be (poststop tasks aside).
func (lc *lifecycle) kill(why string, ev killEvent) chan struct{} {
	a := lc.a
	var never []string
	for _, c := range lc.ctl {
		if !c.launched && c.role != rolePoststop {
			c.launched = true // by nobody: it is dead
			close(c.done)
			a.setTask(c.i, func(ts *store.TaskState) { ts.State = "dead" })
			never = append(never, c.t.Name)
		}
	}
	if len(never) > 0 {
		a.event("Not Started", fmt.Sprintf("task(s) %s not started: %s", strings.Join(never, ", "), why))
	}
	var live []*taskCtl
	for _, c := range lc.ctl {
		if c.role != rolePoststop && !c.isDone() {
			live = append(live, c)
		}
	}
	done := make(chan struct{})
	if len(live) == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		names := make([]string, len(live))
		for i, c := range live {
			names[i] = c.t.Name
		}
		a.event("Killing", fmt.Sprintf("%s: stopping %s", why, strings.Join(names, ", ")))
		if ev.typ != "" {
			for _, c := range live {
				a.taskEvent(c.i, ev.typ, ev.msg)
			}
		}
		a.groupStopping()
		if d := a.group.ShutdownDelay; d > 0 {
			// Nomad's group shutdown_delay: between deregistering the
			// group's services and stopping its tasks. Not cut short by a
			// stop: that is what it is for.
			a.event("Waiting Shutdown Delay", fmt.Sprintf("group %s: shutdown_delay %s", a.group.Name, d))
			waitAny(d, live)
		}
		var leader, others, sidecars []*taskCtl
		for _, c := range live {
			switch {
			case c.t.Leader:
				leader = append(leader, c)
			case c.role.sidecar():
				sidecars = append(sidecars, c)
			default:
				others = append(others, c)
			}
		}
		for _, set := range [][]*taskCtl{leader, others, sidecars} {
			for _, c := range set {
				c.cancel()
			}
			for _, c := range set {
				<-c.done
			}
		}
	}()
	return done
}

// resume marks the tasks of a re-adopted allocation as its record has
// them and launches those with a recovered handle; it reports whether the
// main and the poststart tasks had been launched.
func (lc *lifecycle) resume(handles []driver.Handle) (mainLaunched, postLaunched bool) {
	a := lc.a
	for _, c := range lc.ctl {
		a.mu.Lock()
		state := a.alloc.Tasks[c.i].State
		a.mu.Unlock()
		switch {
		case handles[c.i] != nil:
			c.startOnce.Do(func() { close(c.started) })
			lc.launchWith(c, handles[c.i])
		case state == "dead":
			c.launched = true
			c.startOnce.Do(func() { close(c.started) })
			close(c.done)
		default:
			continue
		}
		switch c.role {
		case roleMain:
			mainLaunched = true
		case rolePoststart, rolePoststartSidecar:
			postLaunched = true
		}
	}
	return mainLaunched, postLaunched
}

// waitAny waits d, or less if every task of live has ended meanwhile.
func waitAny(d time.Duration, live []*taskCtl) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range live {
		select {
		case <-c.done:
		case <-t.C:
			return
		}
	}
}

// runPoststop runs the poststop tasks to completion. After a stop they get
// poststopGrace to finish.
func (a *allocRun) runPoststop(ctx context.Context, lc *lifecycle) {
	var post []*taskCtl
	for _, c := range lc.ctl {
		if c.role == rolePoststop {
			post = append(post, c)
		}
	}
	if len(post) == 0 {
		return
	}
	graceTimer := make(chan *time.Timer, 1)
	stopWatch := context.AfterFunc(ctx, func() {
		a.event("Poststop Grace", fmt.Sprintf("allocation stopped: poststop tasks have %s to finish", poststopGrace))
		graceTimer <- time.AfterFunc(poststopGrace, func() {
			for _, c := range post {
				c.cancel()
			}
		})
	})
	defer func() {
		if !stopWatch() {
			if t := <-graceTimer; t != nil {
				t.Stop()
			}
		}
	}()
	for _, c := range post {
		lc.launch(c)
	}
	for _, c := range post {
		<-c.done
	}
}

// await waits for the task of handle h to exit. When the lifecycle kills
// it (ctx ends) it waits the task's shutdown_delay, then stops it: its
// kill_signal, SIGKILL after kill_timeout. A task that runs longer than
// its max_run_duration is stopped the same way and marked overran.
func (a *allocRun) await(ctx context.Context, i int, h driver.Handle, dt *driver.Task) (*driver.ExitResult, error) {
	t := a.group.Tasks[i]
	rctx, unwatch := a.running(ctx, i, h)
	defer unwatch()
	wctx := rctx
	if t.MaxRunDuration > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(rctx, t.MaxRunDuration)
		defer cancel()
	}
	wctx, stopWait := a.r.untilDetach(wctx)
	defer stopWait()
	res, werr := h.Wait(wctx)
	if wctx.Err() == nil {
		return res, werr
	}
	if a.r.Detached() && ctx.Err() == nil {
		// Left running, registered: the next agent takes its services
		// over with the task.
		return nil, errDetached
	}
	// Deregistered before the shutdown_delay: that is what it is for.
	a.taskStopping(ctx, i)
	if ctx.Err() == nil && errors.Is(context.Cause(rctx), errUserRestart) {
		// Restarted in place: stopped as the lifecycle stops it, without
		// the shutdown_delay.
	} else if ctx.Err() == nil {
		a.markOverran(i)
		a.taskEvent(i, "Max Run Duration Exceeded", fmt.Sprintf("Task ran longer than its max_run_duration %s", t.MaxRunDuration))
	} else if t.ShutdownDelay > 0 {
		a.taskEvent(i, "Waiting Shutdown Delay", fmt.Sprintf("Waiting %s before killing (shutdown_delay)", t.ShutdownDelay))
		dctx, cancel := cleanup.Context(ctx, t.ShutdownDelay)
		res, werr = h.Wait(dctx)
		cancel()
		if dctx.Err() == nil {
			return res, werr
		}
	}
	sig := "SIGTERM"
	if t.KillSignal != "" {
		sig = t.KillSignal
	}
	if !errors.Is(context.Cause(rctx), errUserRestart) && !errors.Is(context.Cause(ctx), errRestart) {
		// Nomad says Killing for a kill; a restart has said Restart
		// Signaled already.
		a.taskEvent(i, TaskKilling, killingMsg(dt.KillTimeout))
	}
	a.log.Info("stopping task", "task", t.Name, "signal", sig, "kill_timeout", dt.KillTimeout)
	sctx, cancel := cleanup.Context(ctx, dt.KillTimeout+30*time.Second)
	defer cancel()
	serr := h.Stop(sctx, dt.KillTimeout)
	res, werr = h.Wait(sctx)
	if werr != nil {
		// A failed stop explains a wait that then ran out; after a stop
		// that failed and a wait that saw the exit, the task ended.
		werr = errors.Join(werr, stopErr(serr))
	}
	return res, werr
}
