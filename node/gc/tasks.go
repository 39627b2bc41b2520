package gc

import (
	"context"
	"fmt"
	"sort"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// KindTask is what a driver made for a task (a container, a task cgroup,
// a task supervisor) whose allocation is terminal or unknown.
const KindTask = "task"

// sweepTasks removes what drivers made for this data dir's tasks when no
// live allocation explains it: the containers, task cgroups and
// supervisors of allocations that are terminal or unknown. It is how a
// crash between making a task and recording its handle is cleaned up:
// the allocation is marked lost by replay (its owner is gone), and what
// its task left is found by the marks the driver put on it (container
// labels, cgroup names, supervisor command lines), not by a record.
//
// Leftovers are listed before the allocations are read: a task is started
// only after its allocation was recorded, so every task listed has its
// record in the read that follows, and a task being started by a live
// berth is never taken for an orphan.
func (r *run) sweepTasks(ctx context.Context) {
	if r.o.Store == nil {
		return
	}
	storeID := r.o.StoreID
	if storeID == "" {
		storeID = r.o.Store.ID()
	}
	var left []driver.Leftover
	seen := map[string]bool{}
	for _, name := range r.sweepDrivers(ctx) {
		sw := r.sweeperOf(ctx, name)
		if sw == nil {
			continue
		}
		ls, err := sw.Leftovers(ctx, storeID)
		if err != nil {
			r.errorf("list %s task leftovers: %w", name, err)
		}
		for _, l := range ls {
			// raw_exec and exec share their cgroups and supervisors.
			key := l.Kind + "\x00" + l.ID
			if !seen[key] {
				seen[key] = true
				left = append(left, l)
			}
		}
	}
	if len(left) == 0 {
		return
	}
	allocs, err := r.o.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		r.errorf("read allocations: %w (task leftovers are kept)", err)
		return
	}
	byID := make(map[string]*store.Allocation, len(allocs))
	for _, a := range allocs {
		byID[a.ID] = a
	}
	for _, l := range left {
		if ctx.Err() != nil {
			return
		}
		a := byID[l.AllocID]
		if a != nil && !a.Status.Terminal() {
			continue
		}
		why := "its allocation is unknown"
		if a != nil {
			why = "its allocation is " + string(a.Status)
		}
		it := Item{Kind: KindTask, ID: l.AllocID, Path: l.Kind + " " + l.ID,
			Reason: fmt.Sprintf("%s %s of task %s/%s (driver %s): %s", l.Kind, l.ID, l.AllocID, l.Task, l.Driver, why)}
		r.found(it)
		if r.o.DryRun {
			continue
		}
		sw := r.sweeperOf(ctx, l.Driver)
		if sw == nil {
			continue
		}
		if err := sw.RemoveLeftover(ctx, l); err != nil {
			r.fail(it, err)
			continue
		}
		r.reclaimed(it)
	}
}

func (r *run) sweeperOf(ctx context.Context, name string) driver.Sweeper {
	d, err := r.driver(ctx, name)
	if err != nil {
		return nil
	}
	if sw, ok := d.(driver.Sweeper); ok {
		return sw
	}
	if u, ok := d.(interface{ Unwrap() driver.Driver }); ok {
		sw, _ := u.Unwrap().(driver.Sweeper)
		return sw
	}
	return nil
}

// sweepDrivers are the drivers worth asking: those given or opened
// already, exec's family and docker (cheap: one request to a daemon that
// is berth's to ask, none where no socket is), and any other driver a task of an
// allocation still running, or lost in this run, used: opening podman may
// start a service, which a collection with nothing of podman's to find
// must not pay for, and a dry run never does.
func (r *run) sweepDrivers(ctx context.Context) []string {
	names := map[string]bool{"raw_exec": true, "exec": true, "docker": true}
	for n := range r.drivers {
		names[n] = true
	}
	if !r.o.DryRun {
		lostNow := map[string]bool{}
		for _, it := range r.rep.Reclaimed {
			if it.Kind == KindAllocOwner {
				lostNow[it.ID] = true
			}
		}
		if allocs, err := r.o.Store.ListAllocations(ctx, store.AllocFilter{}); err == nil {
			for _, a := range allocs {
				if a.Status.Terminal() && !lostNow[a.ID] {
					continue
				}
				for _, t := range a.Tasks {
					names[t.Driver] = true
				}
			}
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
