package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/pidfd"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/exec/supervisor"
	"golang.org/x/sys/unix"
)

// Recover re-attaches a task from its recorded handle, after the berth
// that started it died:
//   - its supervisor is alive, with the recorded start time and the
//     command line of this data dir's supervisor of that alloc and task:
//     the handle watches it as Start's does (logs keep growing in the same
//     files, the exit is read from the status file when it comes);
//   - it is gone and left the status file it was to write (its PID and
//     start time in it): the handle is done, with the task's real exit;
//   - anything else (gone without a status, the PID now another
//     process's or another data dir's supervisor): ErrNotRecoverable.
func (d *Driver) Recover(ctx context.Context, th store.TaskHandle) (driver.Handle, error) {
	if err := d.checkHandle(th); err != nil {
		return nil, err
	}
	id := th.AllocID + "/" + th.Task
	notRecoverable := func(format string, a ...any) error {
		return fmt.Errorf("%s: recover task %s: %s: %w", d.name, id, fmt.Sprintf(format, a...), driver.ErrNotRecoverable)
	}
	if th.SupervisorPID <= 0 || th.StatusPath == "" || th.AllocID == "" || th.Task == "" {
		return nil, notRecoverable("the handle names no supervisor (recorded by an older berth)")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := &handle{
		drv: d, id: id, allocID: th.AllocID, task: th.Task,
		supPID: th.SupervisorPID, supStart: th.SupervisorStartTime,
		pid: th.PID, startTime: th.PIDStartTime, statusPath: th.StatusPath,
		killSignal: syscall.Signal(th.KillSignal),
		done:       make(chan struct{}),
	}
	if th.CgroupPath != "" {
		cg, err := cgroup.FromPath(d.hierarchies(), d.cgroupParent, th.CgroupPath)
		if err != nil {
			return nil, notRecoverable("%v", err)
		}
		if len(cg.Dirs()) > 0 {
			h.cg = cg
		}
	}
	why := ""
	sup, err := pidfd.Open(th.SupervisorPID, func(pid int) bool {
		st, err := proc.ReadStat(pid)
		switch {
		case err != nil:
			why = "it is gone"
			return false
		case st.StartTime != th.SupervisorStartTime:
			why = fmt.Sprintf("the PID now names another process (start time %d, recorded %d)", st.StartTime, th.SupervisorStartTime)
			return false
		case st.Zombie():
			why = "it has exited"
			return false
		}
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !supervisor.IsSupervisorOf(cmdline, d.storeID, th.AllocID, th.Task) {
			why = fmt.Sprintf("it is not the supervisor of task %s of this data dir (store %s): %q", id, d.storeID, cmdline)
			return false
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("%s: recover task %s: %w", d.name, id, err)
	}
	if sup != nil {
		h.sup = sup
		// Without a pidfd (the task gone, or its PID reused) the handle
		// falls back to the supervisor's status: nothing to report.
		h.taskProc, _ = pidfd.Open(th.PID, func(pid int) bool {
			st, err := proc.ReadStat(pid)
			return err == nil && st.StartTime == th.PIDStartTime
		})
		h.startedAt = time.Now()
		go h.watch()
		d.log.Debug("task re-attached", "task", id, "pid", th.PID, "supervisor", th.SupervisorPID)
		return h, nil
	}
	// Gone: then it wrote the status before it exited, or it was killed.
	st, err := readStatus(th.StatusPath)
	switch {
	case err != nil:
		return nil, notRecoverable("supervisor pid %d: %s, and no exit status: %v", th.SupervisorPID, why, err)
	case st.SupervisorPID != th.SupervisorPID || st.SupervisorStart != th.SupervisorStartTime || st.StoreID != d.storeID:
		return nil, notRecoverable("supervisor pid %d: %s, and %s is another supervisor's (pid %d, start %d, store %s)",
			th.SupervisorPID, why, th.StatusPath, st.SupervisorPID, st.SupervisorStart, st.StoreID)
	}
	h.result = driver.ExitResult{ExitCode: st.ExitCode, Signal: st.Signal, OOMKilled: st.OOMKilled, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
	close(h.done)
	d.log.Debug("task ended while nobody watched", "task", id, "exit_code", st.ExitCode, "signal", st.Signal)
	return h, nil
}

// killGroup SIGKILLs the recorded leader (if still the same process) and
// the members of its process group, and waits until none is alive.
func (d *Driver) killGroup(ctx context.Context, pid int, start uint64) error {
	const poll = 5 * time.Millisecond
	for {
		st, err := proc.ReadStat(pid)
		leaderOurs := err == nil && st.StartTime == start
		if err == nil && !leaderOurs {
			// The PID names another process now; so does its group ID.
			d.log.Debug("recorded pid belongs to another process, not killing", "pid", pid, "start", start, "found_start", st.StartTime)
			return nil
		}
		if leaderOurs && !st.Zombie() {
			if err := proc.KillIfSame(pid, start, syscall.SIGKILL); err != nil &&
				!errors.Is(err, proc.ErrNotFound) && !errors.Is(err, proc.ErrReused) {
				return fmt.Errorf("%s: cleanup pid %d: %w", d.name, pid, err)
			}
		}
		if !leaderOurs || st.Zombie() {
			// ESRCH proves that no process has this group ID, ours or not:
			// nothing is left, and the /proc scan below can be skipped.
			if err := syscall.Kill(-pid, 0); errors.Is(err, syscall.ESRCH) {
				return nil
			}
		}
		members, err := proc.GroupMembers(ctx, pid)
		if err != nil {
			return fmt.Errorf("%s: cleanup process group %d: %w", d.name, pid, err)
		}
		left := 0
		for _, m := range members {
			if m.StartTime < start {
				continue // cannot descend from our task
			}
			left++
			if err := proc.KillIfSame(m.PID, m.StartTime, syscall.SIGKILL); err != nil &&
				!errors.Is(err, proc.ErrNotFound) && !errors.Is(err, proc.ErrReused) {
				return fmt.Errorf("%s: cleanup pid %d of process group %d: %w", d.name, m.PID, pid, err)
			}
		}
		if left == 0 && (!leaderOurs || st.Zombie()) {
			return nil
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return fmt.Errorf("%s: cleanup process group %d: %d processes left: %w", d.name, pid, left, err)
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var _ driver.Finder = (*Driver)(nil)

// Find implements driver.Finder for a task an earlier berth started and
// did not record. Its running supervisor (found by its command line) is
// adopted: the sealed spec it holds on descriptor 3 gives the status file
// and the cgroup, /proc its start time and the task's PID, so that the
// handle is the one Start would have returned. A second supervisor of the
// task, one that cannot be adopted, and a task cgroup no adopted
// supervisor owns are removed; when what was removed ran (or may have: a
// cgroup left without its supervisor or a status), the error wraps
// driver.ErrExitUnknown. A task that already ended left its status file
// in req.AllocDir: it is re-attached from it (Recover), so that its exit
// is recorded and it is not run again.
func (d *Driver) Find(ctx context.Context, req driver.FindRequest) (driver.Handle, []string, error) {
	id := req.AllocID + "/" + req.Task
	sups, err := d.supervisors(ctx, d.storeID)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: find the supervisors of task %s: %w", d.name, id, err)
	}
	var (
		h       driver.Handle
		removed []string
		lost    []string // what ran and was removed unadopted
	)
	for _, l := range sups {
		if l.AllocID != req.AllocID || l.Task != req.Task {
			continue
		}
		if h == nil {
			ah, err := d.adopt(ctx, l, req)
			if err == nil {
				h = ah
				continue
			}
			d.log.Warn("cannot adopt the supervisor of an unrecorded task; removing it", "task", id, "supervisor", l.ID, "err", err)
			lost = append(lost, fmt.Sprintf("supervisor %s (%v)", l.ID, err))
		} else {
			lost = append(lost, "supervisor "+l.ID+" (a second one)")
		}
		if err := d.RemoveLeftover(ctx, l); err != nil {
			return h, removed, err
		}
		removed = append(removed, "supervisor "+l.ID)
	}
	if cg, err := cgroup.Children(d.hierarchies(), d.cgroupParent); err == nil {
		name := d.storeID + "." + req.AllocID + "." + req.Task
		for _, n := range cg {
			if n != name {
				continue
			}
			path := filepath.Join(d.cgroupParent, n)
			if h != nil && filepath.Base(h.State().CgroupPath) == n {
				continue // the adopted task's own
			}
			l := driver.Leftover{Driver: d.name, StoreID: d.storeID, Kind: KindCgroup, ID: path, AllocID: req.AllocID, Task: req.Task}
			// Made by Start for the task, its supervisor gone without a
			// status (killed; the task may run on in it): the task ran,
			// or may have, and how it ended is lost.
			procs, _ := cgroup.At(d.hierarchies(), path).Procs()
			lost = append(lost, fmt.Sprintf("cgroup %s (%d processes, no supervisor)", path, len(procs)))
			if err := d.RemoveLeftover(ctx, l); err != nil {
				return h, removed, err
			}
			removed = append(removed, "cgroup "+l.ID)
		}
	}
	if h != nil {
		return h, removed, nil
	}
	if req.AllocDir != "" {
		path := filepath.Join(req.AllocDir, statusName(req.Task))
		st, err := readStatus(path)
		if err == nil && st.StoreID == d.storeID && st.AllocID == req.AllocID && st.Task == req.Task && st.FinishedAt.After(req.Since) {
			// Ended while no agent ran (its supervisor gone after writing
			// it): its exit is this attempt's.
			rh, err := d.Recover(ctx, store.TaskHandle{Driver: d.name, SupervisorPID: st.SupervisorPID, SupervisorStartTime: st.SupervisorStart,
				PID: st.PID, PIDStartTime: st.PIDStart, StatusPath: path, AllocID: req.AllocID, Task: req.Task, KillSignal: int(req.KillSignal)})
			if err == nil {
				return rh, removed, nil
			}
		}
	}
	if len(lost) > 0 {
		return nil, removed, fmt.Errorf("%s: task %s: removed %s: %w", d.name, id, strings.Join(lost, ", "), driver.ErrExitUnknown)
	}
	return nil, removed, nil
}

// adoptWait bounds how long adopt waits for a supervisor still starting
// its task (killed agent mid-Start) to have a child.
const adoptWait = 5 * time.Second

// adopt builds the handle of a live supervisor l an earlier berth started
// and did not record, from what the supervisor itself holds: its sealed
// task spec (status file, cgroup) and its child (the task), then
// re-attaches it as Recover does.
func (d *Driver) adopt(ctx context.Context, l driver.Leftover, req driver.FindRequest) (driver.Handle, error) {
	p, s, _ := strings.Cut(l.ID, ":")
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("supervisor %q: not pid:start", l.ID)
	}
	pd, err := openProc(pid, start)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	// Found by its command line, which any process can forge (a task, with
	// a setuid binary and a memfd of its own on descriptor 3): only a
	// process that berth started, root's and running the supervisor
	// binary, is trusted with the spec that names a cgroup and a status
	// file the agent acts on.
	err = d.isSupervisor(pd)
	var spec *supervisor.Spec
	if err == nil {
		spec, err = pd.taskSpec(d.storeID, req.AllocID, req.Task)
	}
	pd.close()
	if err != nil {
		return nil, err
	}
	th := store.TaskHandle{Driver: d.name, AllocID: req.AllocID, Task: req.Task,
		SupervisorPID: pid, SupervisorStartTime: start,
		StatusPath: filepath.Join(spec.StatusDir, spec.StatusName), KillSignal: int(req.KillSignal)}
	if spec.Cgroup != nil {
		th.CgroupPath = spec.Cgroup.Primary()
	}
	// Its one child is the task (the task's init with a PID namespace of
	// its own). None yet: still starting it, or it ended and the status
	// is being written; Recover then reads the status once it exits.
	deadline := time.Now().Add(adoptWait)
	for {
		if c := childOf(pid); c > 0 {
			if st, err := proc.ReadStat(c); err == nil && !st.Zombie() {
				th.PID, th.PIDStartTime = c, st.StartTime
				break
			}
		}
		if !proc.Alive(pid, start) || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	h, err := d.Recover(ctx, th)
	if err != nil {
		return nil, err
	}
	d.log.Info("adopted a task an earlier berth started and did not record", "task", req.AllocID+"/"+req.Task, "supervisor", pid, "pid", th.PID)
	return h, nil
}

// childOf is the first child of pid (0: none), whichever of its threads
// forked it.
func childOf(pid int) int {
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range threads {
		b, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(w); err == nil {
				return c
			}
		}
	}
	return 0
}

// isSupervisor checks that p is a process berth started as a supervisor:
// real user root (a setuid program run by a task keeps the task's) and
// its executable the supervisor binary this driver runs.
func (d *Driver) isSupervisor(p *procDir) error {
	b, err := p.read("status")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" && f[1] != "0" {
			return fmt.Errorf("%s runs as user %s, not root: not a supervisor berth started", p.name, f[1])
		}
	}
	bin, err := d.supervisorPath()
	if err != nil {
		return err
	}
	var want, got unix.Stat_t
	if err := unix.Stat(bin, &want); err != nil {
		return fmt.Errorf("stat the supervisor binary %s: %w", bin, err)
	}
	if err := unix.Fstatat(int(p.dir.Fd()), "exe", &got, 0); err != nil {
		return fmt.Errorf("stat %s/exe: %w", p.name, err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		return fmt.Errorf("%s/exe is not the supervisor binary %s (replaced since it started, or not berth's)", p.name, bin)
	}
	return nil
}
