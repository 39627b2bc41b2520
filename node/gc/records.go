package gc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// ownerAlive says whether the recorded berth process still runs. A record
// without an owner has no process to wait for.
func ownerAlive(pid int, start uint64) bool {
	return pid > 0 && proc.Alive(pid, start)
}

func describeOwner(pid int, start uint64) string {
	if pid <= 0 {
		return "owner not recorded"
	}
	return fmt.Sprintf("owner berth pid %d (start %d) is gone", pid, start)
}

// allocState is what step 1 learnt about allocations, for step 2's
// judgement of the records that belong to them.
type allocState struct {
	byID map[string]*store.Allocation
	// ok is false when the allocations could not be read: attachments of
	// allocations are then kept.
	ok bool
	// lost: allocations whose owner died and whose tasks are stopped (or,
	// in a dry run, would be): their networks go. blocked: a task could
	// not be stopped, so its network stays.
	lost, blocked map[string]bool
}

// replay is steps 1 and 2: stop the tasks of allocations whose owner is
// gone, then drive every record that is not a live attachment to a clean
// state through attach.Manager.Reclaim.
func (r *run) replay(ctx context.Context) {
	if r.o.Store == nil {
		return
	}
	as := r.stopOrphans(ctx)
	r.sweepServices(ctx, as)
	r.finishRecords(ctx, as)
}

// stopOrphans is step 1: stop the tasks of every allocation whose owning
// berth process is gone, and mark it lost.
func (r *run) stopOrphans(ctx context.Context) *allocState {
	allocs, err := r.o.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		r.errorf("read allocations: %w (attachments of allocations are kept)", err)
	}
	as := &allocState{byID: make(map[string]*store.Allocation, len(allocs)), ok: err == nil, lost: map[string]bool{}, blocked: map[string]bool{}}
	// Marked lost in batches, one transaction each: a killed agent may
	// leave tens of thousands of allocations, and one write (one fsync)
	// per allocation took minutes.
	var lost []Item
	for _, a := range allocs {
		as.byID[a.ID] = a
		if it, ok := r.stopOrphan(ctx, a, as); ok {
			if lost = append(lost, it); len(lost) == lostBatch {
				r.markLost(ctx, lost)
				lost = nil
			}
		}
	}
	r.markLost(ctx, lost)
	return as
}

// lostBatch is how many allocations one transaction marks lost.
const lostBatch = 512

// stopOrphan stops the tasks of a whose owner died; ok says a is to be
// marked lost (it is the item that reports it).
func (r *run) stopOrphan(ctx context.Context, a *store.Allocation, as *allocState) (it Item, ok bool) {
	if a.Status.Terminal() {
		return it, false
	}
	if a.OwnerPID <= 0 {
		r.kept(Item{Kind: KindAllocOwner, ID: a.ID, Reason: "allocation is " + string(a.Status) + " and has no recorded owner: cannot tell whether it runs"})
		return it, false
	}
	if ownerAlive(a.OwnerPID, a.OwnerStartTime) {
		return it, false
	}
	if a.Detached && !r.o.ReclaimDetached {
		r.kept(Item{Kind: KindAllocOwner, ID: a.ID, Reason: "allocation was left running by a stopped agent for the next one: `berth agent` re-adopts it, `berth gc --detached` reclaims it"})
		return it, false
	}
	it = Item{Kind: KindAllocOwner, ID: a.ID, Reason: fmt.Sprintf("allocation is %s but its %s: stop its tasks, mark it lost", a.Status, describeOwner(a.OwnerPID, a.OwnerStartTime))}
	r.found(it)
	if r.o.DryRun {
		as.lost[a.ID] = true
		return it, false
	}
	if err := r.stopTasks(ctx, a); err != nil {
		as.blocked[a.ID] = true
		r.fail(it, err)
		return it, false
	}
	// Its tasks are stopped: its network may go even if the record
	// cannot be marked.
	as.lost[a.ID] = true
	return it, true
}

// finishRecords is step 2: tear down every record judge says is garbage.
func (r *run) finishRecords(ctx context.Context, as *allocState) {
	recs, err := r.o.Store.ListAttachments(ctx)
	if err != nil {
		r.errorf("read attachments: %w", err)
		return
	}
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		r.finishRecord(ctx, rec, as)
	}
}

func (r *run) finishRecord(ctx context.Context, rec *store.Attachment, as *allocState) {
	reason, keep := r.judge(rec, as)
	if reason == "" {
		return
	}
	it := Item{Kind: KindAttachment, ID: rec.ID, Network: rec.Network, Path: rec.NetnsPath, Reason: reason}
	if keep {
		r.kept(it)
		return
	}
	r.found(it)
	r.markHandled(rec.Network, rec.ID)
	if r.o.DryRun {
		// The plan tidies what the real run would.
		conf, _ := cni.ParseNetwork(rec.ConfList, "record of "+rec.ID)
		r.touch(rec.Network, conf)
		return
	}
	// Judged again under the ID's lock: another berth process may
	// have finished it, or made a new one, since the list was read.
	_, done, err := r.o.Attach.Reclaim(ctx, rec.ID, func(now *store.Attachment) bool {
		reason, keep := r.judge(now, as)
		return reason != "" && !keep
	})
	if err != nil {
		r.fail(it, err)
		return
	}
	if !done {
		r.withdraw(it, "the record changed since it was read (another berth process finished it or made it anew): left to that process")
		return
	}
	r.reclaimed(it)
	// Tidy with what ADD used, which the config dir may no longer have.
	conf, _ := cni.ParseNetwork(rec.ConfList, "record of "+rec.ID)
	r.touch(rec.Network, conf)
}

// judge decides what becomes of one record: nothing (reason ""), kept
// with a reason, or torn down for the reason given.
func (r *run) judge(rec *store.Attachment, as *allocState) (reason string, keep bool) {
	alive := ownerAlive(rec.OwnerPID, rec.OwnerStartTime)
	switch rec.Phase {
	case store.PhaseUnreadable:
		// Nothing about it is known but its ID: its namespace, cache
		// entry and leases are kept as the ID's, never swept as nobody's.
		return fmt.Sprintf("record cannot be decoded (%s): kept; `berth net down %s` tears it down from libcni's cache, `berth store rm attachment %s` drops the record", rec.LastError, rec.ID, rec.ID), true
	case store.PhaseIntent:
		if alive {
			return "", false // a setup in flight
		}
		return fmt.Sprintf("half-made setup (phase %s) whose %s: undo it", rec.Phase, describeOwner(rec.OwnerPID, rec.OwnerStartTime)), false
	case store.PhaseTearingDown:
		if alive && rec.OwnerPID != os.Getpid() {
			return "", false // its owner is tearing it down
		}
		if !r.o.IgnoreBackoff && r.o.Now().Before(rec.NextAttempt) {
			return fmt.Sprintf("pending teardown (attempt %d failed: %s); next retry at %s", rec.TeardownAttempts, rec.LastError, rec.NextAttempt.Format(time.RFC3339)), true
		}
		if rec.TeardownAttempts > 0 {
			return fmt.Sprintf("pending teardown, retry %d (last error: %s)", rec.TeardownAttempts+1, rec.LastError), false
		}
		return fmt.Sprintf("teardown interrupted (%s): finish it", describeOwner(rec.OwnerPID, rec.OwnerStartTime)), false
	case store.PhaseReady:
		pinned, _ := netns.IsPinned(rec.NetnsPath)
		if rec.AllocID == "" {
			// Made by `berth net up`: the user's until `net down`, as
			// long as the namespace exists.
			if pinned {
				return "", false
			}
			return fmt.Sprintf("namespace %s is gone (reboot, or removed behind berth's back)", rec.NetnsPath), false
		}
		if !as.ok {
			return "", false
		}
		if as.blocked[rec.AllocID] {
			return fmt.Sprintf("allocation %s has a task that could not be stopped: its network is kept", rec.AllocID), true
		}
		if as.lost[rec.AllocID] {
			return fmt.Sprintf("allocation %s is lost (its owner is gone)", rec.AllocID), false
		}
		a := as.byID[rec.AllocID]
		switch {
		case a == nil && alive:
			return "", false
		case a == nil:
			return fmt.Sprintf("allocation %s no longer exists and the attachment's %s", rec.AllocID, describeOwner(rec.OwnerPID, rec.OwnerStartTime)), false
		case a.Status.Terminal() && !ownerAlive(a.OwnerPID, a.OwnerStartTime):
			return fmt.Sprintf("allocation %s is %s and its %s", a.ID, a.Status, describeOwner(a.OwnerPID, a.OwnerStartTime)), false
		}
		return "", false
	default:
		if alive {
			return "", false
		}
		return fmt.Sprintf("unknown phase %q and %s: tear it down", rec.Phase, describeOwner(rec.OwnerPID, rec.OwnerStartTime)), false
	}
}

// stopTasks stops every task of an allocation whose owner died, from its
// recorded handle. Tasks without a handle never started.
func (r *run) stopTasks(ctx context.Context, a *store.Allocation) error {
	var errs []error
	for _, t := range a.Tasks {
		if t.Handle == nil {
			continue
		}
		name := t.Handle.Driver
		if name == "" {
			name = t.Driver
		}
		if err := r.stopTask(ctx, a.ID, t.Name, name, *t.Handle); err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (r *run) stopTask(ctx context.Context, allocID, task, name string, h store.TaskHandle) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.TaskTimeout)
	defer cancel()
	log := r.log.With("alloc_id", allocID, "task", task, "driver", name)
	d, err := r.driver(ctx, name)
	if err != nil {
		log.Warn("driver unavailable", "err", err)
	}
	if d != nil {
		if err := d.Cleanup(ctx, h); err != nil {
			return fmt.Errorf("%s driver cleanup: %w", name, err)
		}
		log.Info("stopped task of an allocation whose owner is gone", "pid", h.PID, "container", h.ContainerID+h.ContainerName)
		return nil
	}
	if h.PID > 0 && h.PIDStartTime > 0 {
		log.Warn("no driver to clean up the task: killing its recorded process only", "pid", h.PID)
		return killRecorded(ctx, h.PID, h.PIDStartTime)
	}
	log.Warn("no driver to clean up the task and no recorded PID: skipped; its allocation's network is kept")
	return fmt.Errorf("no %q driver to stop it: %w", name, driver.ErrUnknownDriver)
}

func (r *run) driver(ctx context.Context, name string) (driver.Driver, error) {
	if d := r.drivers[name]; d != nil {
		return d, nil
	}
	if r.o.OpenDriver == nil {
		return nil, fmt.Errorf("%q: %w", name, driver.ErrUnknownDriver)
	}
	d, err := r.o.OpenDriver(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open driver %q: %w", name, err)
	}
	if d == nil {
		return nil, fmt.Errorf("%q: %w", name, driver.ErrUnknownDriver)
	}
	r.drivers[name] = d
	r.opened = append(r.opened, d)
	return d, nil
}

// killRecorded SIGKILLs pid only if it still started at start, and waits
// until it is gone (a zombie counts as gone: it holds nothing).
func killRecorded(ctx context.Context, pid int, start uint64) error {
	err := proc.KillIfSame(pid, start, syscall.SIGKILL)
	switch {
	case errors.Is(err, proc.ErrNotFound), errors.Is(err, proc.ErrReused):
		return nil
	case err != nil:
		return err
	}
	for proc.Alive(pid, start) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d still alive after SIGKILL: %w", pid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// markLost marks the allocations of items lost, in one transaction, and
// reports each as reclaimed (or failed).
func (r *run) markLost(ctx context.Context, items []Item) {
	if len(items) == 0 {
		return
	}
	now := r.o.Now().UTC()
	ids := make([]string, len(items))
	reasons := make(map[string]string, len(items))
	for i, it := range items {
		ids[i], reasons[it.ID] = it.ID, it.Reason
	}
	errs, err := r.o.Store.UpdateAllocations(ctx, ids, func(a *store.Allocation) error {
		if a.Status.Terminal() {
			return nil
		}
		a.Status = store.AllocLost
		a.StatusDesc = "owning berth process died; tasks stopped by gc"
		for i := range a.Tasks {
			t := &a.Tasks[i]
			if t.State != "dead" {
				t.State, t.Failed, t.FinishedAt = "dead", true, now
			}
		}
		a.Events = append(a.Events, store.Event{Time: now, Type: "Lost", Message: reasons[a.ID]})
		return nil
	})
	for _, it := range items {
		e := err
		if e == nil {
			e = errs[it.ID]
		}
		if e != nil {
			r.fail(it, fmt.Errorf("mark allocation %s lost: %w", it.ID, e))
		}
		r.reclaimed(it)
	}
}
