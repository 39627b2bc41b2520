package exec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/pidfd"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// handle is one task, started by this process or re-attached by Recover.
type handle struct {
	drv           *Driver
	id            string // alloc/task, for messages
	allocID, task string

	// The supervisor is watched through its pidfd: its exit is the task's
	// end, and then the status file says how the task ended. ourChild: this
	// process started it and must reap it.
	sup      *pidfd.Process
	supPID   int
	supStart uint64
	ourChild bool

	// The task's main process, watched only to signal it safely (nil once
	// it is gone, or when it was gone at Recover).
	taskProc  *pidfd.Process
	pid       int
	startTime uint64
	startedAt time.Time
	cg        *cgroup.Set

	statusPath string
	// killSignal is what Stop sends first; 0 means SIGTERM.
	killSignal syscall.Signal

	done   chan struct{} // closed once the supervisor exited and result is set
	result driver.ExitResult

	destroyMu sync.Mutex
	destroyed bool
}

var _ driver.Handle = (*handle)(nil)

func (h *handle) cgroupPath() string {
	if h.cg == nil {
		return ""
	}
	return h.cg.Primary()
}

// State is what Recover and Cleanup need if this berth dies.
func (h *handle) State() store.TaskHandle {
	return store.TaskHandle{
		Driver:              h.drv.name,
		PID:                 h.pid,
		PIDStartTime:        h.startTime,
		CgroupPath:          h.cgroupPath(),
		AllocID:             h.allocID,
		Task:                h.task,
		SupervisorPID:       h.supPID,
		SupervisorStartTime: h.supStart,
		StatusPath:          h.statusPath,
		KillSignal:          int(h.killSignal),
	}
}

// watch parks (on the poller, no thread) until the supervisor exits, then
// reads the task's exit status.
func (h *handle) watch() {
	if err := h.sup.Wait(context.Background()); err != nil {
		// The pidfd was closed under the watch: the handle was dropped.
		h.result = driver.ExitResult{ExitCode: -1, Err: fmt.Errorf("%s: task %s: %w", h.drv.name, h.id, err)}
		close(h.done)
		return
	}
	var ws syscall.WaitStatus
	var reapErr error
	if h.ourChild {
		ws, reapErr = h.sup.Reap()
	} else {
		// Adopted after a restart: init reaps it, unless it is this
		// process's child after all (Recover in the berth that started it).
		_, _ = h.sup.Reap()
	}
	h.result = h.fromStatus(ws, reapErr)
	close(h.done)
}

// fromStatus is the task's result as its supervisor recorded it.
func (h *handle) fromStatus(ws syscall.WaitStatus, reapErr error) driver.ExitResult {
	st, err := readStatus(h.statusPath)
	if err == nil && (st.SupervisorPID != h.supPID || st.SupervisorStart != h.supStart) {
		err = fmt.Errorf("%s was written by supervisor pid %d (start %d), not %d (start %d)", h.statusPath, st.SupervisorPID, st.SupervisorStart, h.supPID, h.supStart)
	}
	if err != nil {
		how := "exited"
		if h.ourChild && reapErr == nil {
			how = describeWait(ws)
		}
		return driver.ExitResult{ExitCode: -1, StartedAt: h.startedAt, FinishedAt: time.Now(),
			Err: fmt.Errorf("%s: task %s: supervisor pid %d %s without recording the task's exit: %w", h.drv.name, h.id, h.supPID, how, err)}
	}
	if st.Error != "" {
		h.drv.log.Warn("task supervisor reported a problem", "task", h.id, "err", st.Error)
	}
	res := driver.ExitResult{ExitCode: st.ExitCode, Signal: st.Signal, OOMKilled: st.OOMKilled, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
	if res.StartedAt.IsZero() {
		res.StartedAt = h.startedAt
	}
	return res
}

// Wait returns how the task ended; every call returns the same result.
func (h *handle) Wait(ctx context.Context) (*driver.ExitResult, error) {
	select {
	case <-h.done:
		res := h.result
		return &res, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: wait for task %s: %w", h.drv.name, h.id, ctx.Err())
	}
}

func (h *handle) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// signal sends sig to everything in the task's cgroup (each process
// pinned by a pidfd before it is signalled), and to its main process and,
// without a cgroup, its process group, while the main process lives.
func (h *handle) signal(sig syscall.Signal) error {
	var errs []error
	if h.cg != nil {
		if sig == syscall.SIGKILL {
			errs = append(errs, h.cg.KillAll(context.Background()))
		} else {
			errs = append(errs, h.cg.Signal(sig))
		}
	}
	if p := h.taskProc; p != nil && !p.Exited() {
		errs = append(errs, p.Signal(sig))
		if h.cg == nil {
			// The leader is alive (a zombie at worst): the group ID is
			// still the task's.
			if err := syscall.Kill(-h.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("signal process group %d: %w", h.pid, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: task %s: %w", h.drv.name, h.id, err)
	}
	return nil
}

// Stop sends SIGTERM to the task (its cgroup, its main process) and
// SIGKILL after timeout if the main process has not exited. It returns
// once the supervisor recorded the exit (the leftovers are killed then),
// or when ctx ends. A task alone in a PID namespace (exec) is its
// namespace's init: it dies of SIGTERM only if it handles it, as in Nomad.
func (h *handle) Stop(ctx context.Context, timeout time.Duration) error {
	if h.exited() {
		return nil
	}
	sig := h.killSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if err := h.signal(sig); err != nil {
		h.drv.log.Warn("kill signal failed", "task", h.id, "signal", sig, "err", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: stop task %s: %w", h.drv.name, h.id, ctx.Err())
	case <-t.C:
	}
	h.drv.log.Debug("task ignored its kill signal, killing", "task", h.id, "timeout", timeout)
	if err := h.signal(syscall.SIGKILL); err != nil {
		h.drv.log.Warn("SIGKILL failed", "task", h.id, "err", err)
	}
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: stop task %s after SIGKILL: %w", h.drv.name, h.id, ctx.Err())
	}
}

// Destroy kills the task with everything in its cgroup (or process
// group), waits for its supervisor to exit, and removes the cgroup. It
// returns an error (and can be called again) if ctx ends first.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Lock()
	defer h.destroyMu.Unlock()
	if h.destroyed {
		return nil
	}
	release, err := h.drv.acquire(ctx)
	if err != nil {
		return fmt.Errorf("%s: destroy task %s: %w", h.drv.name, h.id, err)
	}
	defer release()
	// A supervisor that died without recording the task's exit (killed)
	// may leave the task running: it is killed too.
	if !h.exited() || h.result.Err != nil {
		if err := h.signal(syscall.SIGKILL); err != nil {
			h.drv.log.Warn("SIGKILL failed", "task", h.id, "err", err)
		}
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		return fmt.Errorf("%s: destroy task %s: supervisor pid %d still running: %w", h.drv.name, h.id, h.supPID, ctx.Err())
	}
	if h.cg != nil {
		// The supervisor removed it already, unless it was killed.
		if err := h.cg.Remove(ctx); err != nil {
			return fmt.Errorf("%s: destroy task %s: %w", h.drv.name, h.id, err)
		}
	} else if err := h.drv.killGroup(ctx, h.pid, h.startTime); err != nil {
		return fmt.Errorf("destroy task %s: %w", h.id, err)
	}
	h.sup.Close()
	h.taskProc.Close()
	h.destroyed = true
	return nil
}

// Signal implements driver.Signaler: sig goes to the task's main process
// only, as Nomad's executor sends it.
func (h *handle) Signal(ctx context.Context, sig syscall.Signal) error {
	p := h.taskProc
	if p == nil || p.Exited() {
		return fmt.Errorf("%s: task %s: its main process (pid %d) has exited", h.drv.name, h.id, h.pid)
	}
	if err := p.Signal(sig); err != nil {
		return fmt.Errorf("%s: task %s: %w", h.drv.name, h.id, err)
	}
	return nil
}
