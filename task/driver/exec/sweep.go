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
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/exec/supervisor"
)

// Leftover kinds of these drivers.
const (
	KindCgroup     = "cgroup"
	KindSupervisor = "supervisor"
)

// Leftovers lists a data dir's task cgroups (named
// <store>.<alloc>.<task>) and task supervisors (their command line names
// the store, alloc and task). raw_exec and exec share both, so either
// driver lists all of them.
func (d *Driver) Leftovers(ctx context.Context, storeID string) ([]driver.Leftover, error) {
	if storeID == "" || strings.ContainsAny(storeID, "./") {
		return nil, fmt.Errorf("%s: leftovers of store %q: not a store ID", d.name, storeID)
	}
	var out []driver.Leftover
	names, err := cgroup.Children(d.hierarchies(), d.cgroupParent)
	prefix := storeID + "."
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		alloc, task, _ := strings.Cut(rest, ".")
		out = append(out, driver.Leftover{Driver: d.name, StoreID: storeID, Kind: KindCgroup, ID: filepath.Join(d.cgroupParent, n), AllocID: alloc, Task: task})
	}
	sups, serr := d.supervisors(ctx, storeID)
	return append(out, sups...), errors.Join(err, serr)
}

func (d *Driver) supervisors(ctx context.Context, want string) ([]driver.Leftover, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []driver.Leftover
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
		if err != nil {
			continue
		}
		storeID, alloc, task, ok := supervisor.Identity(cmdline)
		if !ok || storeID != want {
			continue
		}
		st, err := proc.ReadStat(pid)
		if err != nil || st.Zombie() {
			continue
		}
		out = append(out, driver.Leftover{Driver: d.name, StoreID: want, Kind: KindSupervisor, ID: fmt.Sprintf("%d:%d", pid, st.StartTime), AllocID: alloc, Task: task})
	}
	return out, nil
}

// RemoveLeftover kills everything in a task cgroup and removes it, or
// kills a supervisor's task (its session) and then the supervisor. Only
// what carries l.StoreID is touched.
func (d *Driver) RemoveLeftover(ctx context.Context, l driver.Leftover) error {
	switch l.Kind {
	case KindCgroup:
		if l.StoreID == "" || filepath.Dir(l.ID) != d.cgroupParent || !strings.HasPrefix(filepath.Base(l.ID), l.StoreID+".") {
			return fmt.Errorf("%s: cgroup %s is not a task cgroup of this data dir", d.name, l.ID)
		}
		if err := cgroup.At(d.hierarchies(), l.ID).Remove(ctx); err != nil {
			return fmt.Errorf("%s: remove task cgroup: %w", d.name, err)
		}
		return nil
	case KindSupervisor:
		p, s, _ := strings.Cut(l.ID, ":")
		pid, err1 := strconv.Atoi(p)
		start, err2 := strconv.ParseUint(s, 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%s: supervisor %q: not pid:start", d.name, l.ID)
		}
		sup, err := pidfd.Open(pid, func(pid int) bool {
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			storeID, _, _, ok := supervisor.Identity(cmdline)
			return err == nil && ok && storeID == l.StoreID && proc.Alive(pid, start)
		})
		if err != nil || sup == nil {
			return err
		}
		defer sup.Close()
		// Its children are the task (a session leader: its group ID is
		// its PID, reserved while the supervisor has not reaped it).
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				// ESRCH is expected (a child gone, or leading no group);
				// WaitOrKill below reports a supervisor that stays.
				_ = syscall.Kill(-c, syscall.SIGKILL)
				_ = syscall.Kill(c, syscall.SIGKILL)
			}
		}
		if _, err := sup.WaitOrKill(ctx, 10*time.Second); err != nil {
			return fmt.Errorf("%s: supervisor pid %d: %w", d.name, pid, err)
		}
		// ECHILD unless berth started it: init reaps an adopted one.
		_, _ = sup.Reap()
		return nil
	}
	return fmt.Errorf("%s: unknown leftover kind %q", d.name, l.Kind)
}
