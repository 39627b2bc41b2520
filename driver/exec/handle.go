package exec

import (
	"context"
	"errors"
	"fmt"
	osexec "os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/berth/berth/driver"
	"github.com/berth/berth/store"
	"golang.org/x/sys/unix"
)

// handle is one started task.
type handle struct {
	drv       *Driver
	id        string // alloc/task, for messages
	cmd       *osexec.Cmd
	pid       int
	startTime uint64
	startedAt time.Time
	cg        *cgroupSet
	// killSignal is what Stop sends first; 0 means SIGTERM.
	killSignal syscall.Signal

	done   chan struct{} // closed once the leader is reaped and result set
	result driver.ExitResult

	// reapMu orders group signals before the leader's reaping: while the
	// leader is unreaped its PID, hence the process group ID, cannot name
	// anything else, so kill(-pid) is safe exactly until reaped is set.
	reapMu sync.Mutex
	reaped bool

	destroyMu sync.Mutex
	destroyed bool
}

var _ driver.Handle = (*handle)(nil)

func (h *handle) cgroupPath() string {
	if h.cg == nil {
		return ""
	}
	return h.cg.primary()
}

// State is the record Cleanup needs if this berth dies.
func (h *handle) State() store.TaskHandle {
	return store.TaskHandle{
		Driver:       h.drv.name,
		PID:          h.pid,
		PIDStartTime: h.startTime,
		CgroupPath:   h.cgroupPath(),
	}
}

// reap waits for the leader to exit, kills what it leaves behind in its
// process group and cgroup (the task is over when its main process is,
// as in Nomad's executor), then reaps it.
func (h *handle) reap() {
	var info unix.Siginfo
	for {
		// WNOWAIT: see the exit but keep the zombie, which keeps the group
		// ID reserved while the leftovers are killed.
		err := unix.Waitid(unix.P_PID, h.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	h.reapMu.Lock()
	_ = syscall.Kill(-h.pid, syscall.SIGKILL)
	if h.cg != nil {
		_ = h.cg.killAll(context.Background())
	}
	waitErr := h.cmd.Wait()
	h.reaped = true
	h.reapMu.Unlock()

	res := driver.ExitResult{StartedAt: h.startedAt, FinishedAt: time.Now()}
	var exitErr *osexec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = int(ws.Signal())
			// The shell's convention, as Nomad reports it.
			res.ExitCode = 128 + res.Signal
		} else {
			res.ExitCode = exitErr.ExitCode()
		}
	default:
		res.Err = fmt.Errorf("%s: wait for task %s pid %d: %w", h.drv.name, h.id, h.pid, waitErr)
	}
	if h.cg != nil && res.Signal == int(syscall.SIGKILL) {
		res.OOMKilled = h.cg.oomKilled()
	}
	h.result = res
	close(h.done)
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

// signal sends sig to the task's process group (only while its leader is
// unreaped) and to everything in its cgroup.
func (h *handle) signal(sig syscall.Signal) error {
	var errs []error
	h.reapMu.Lock()
	if !h.reaped {
		if err := syscall.Kill(-h.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal process group %d: %w", h.pid, err))
		}
	}
	h.reapMu.Unlock()
	if h.cg != nil {
		if sig == syscall.SIGKILL {
			errs = append(errs, h.cg.killAll(context.Background()))
		} else {
			errs = append(errs, h.cg.signal(sig))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: task %s: %w", h.drv.name, h.id, err)
	}
	return nil
}

// Stop sends the kill signal (SIGTERM unless the task says otherwise) to
// the task's process group and cgroup, and SIGKILL after timeout if the
// main process has not exited. It returns once the main process is reaped
// (its leftovers are SIGKILLed then), or when ctx ends.
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
	h.drv.log.Debug("task ignored its kill signal, killing", "task", h.id, "signal", sig, "timeout", timeout)
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

// Destroy kills the task with everything in its process group and cgroup,
// reaps it, waits until no member is left alive and removes the cgroup.
// It returns an error (and can be called again) if ctx ends first.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Lock()
	defer h.destroyMu.Unlock()
	if h.destroyed {
		return nil
	}
	if err := h.signal(syscall.SIGKILL); err != nil {
		h.drv.log.Warn("SIGKILL failed", "task", h.id, "err", err)
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		return fmt.Errorf("%s: destroy task %s: pid %d not reaped: %w", h.drv.name, h.id, h.pid, ctx.Err())
	}
	// reap() SIGKILLed the group before reaping, but members can take a
	// moment to die (or be in uninterruptible sleep).
	if err := h.awaitGroupGone(ctx); err != nil {
		return err
	}
	if h.cg != nil {
		if err := h.cg.remove(ctx); err != nil {
			return fmt.Errorf("%s: destroy task %s: %w", h.drv.name, h.id, err)
		}
	}
	h.destroyed = true
	return nil
}

// awaitGroupGone kills and waits for the members of the reaped leader's
// process group. The group ID stays reserved while any member exists, so
// a live process with PID == group ID means the number was reused and the
// group is no longer ours.
func (h *handle) awaitGroupGone(ctx context.Context) error {
	if err := h.drv.killGroup(ctx, h.pid, h.startTime); err != nil {
		return fmt.Errorf("destroy task %s: %w", h.id, err)
	}
	return nil
}
