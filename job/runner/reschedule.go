package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
)

// Events of rescheduling.
const (
	// EventRescheduled, on a failed allocation: its replacement is made
	// and starts after the policy's delay.
	EventRescheduled = "Rescheduled"
	// EventNotRescheduled, on a failed allocation: its policy allows no
	// more reschedules.
	EventNotRescheduled = "Not Rescheduled"
	// EventRescheduleDelayed, on the replacement: it waits out the delay.
	EventRescheduleDelayed = "Reschedule Delayed"
)

// maxPastRescheduleEvents is how many reschedules an unlimited policy's
// tracker keeps (Nomad's maxPastRescheduleEvents).
const maxPastRescheduleEvents = 5

// reschedules reports whether the group's allocations are rescheduled
// when they fail: as in Nomad, in batch and service jobs whose policy
// has attempts or is unlimited (system and sysbatch jobs never are).
func reschedules(job *jobspec.Job, g *jobspec.Group) bool {
	if job.Type != jobspec.TypeBatch && job.Type != jobspec.TypeService {
		return false
	}
	p := g.Reschedule
	return p.Unlimited || p.Attempts > 0
}

// lastEventTime is when the allocation's last task ended (Nomad's
// Allocation.LastEventTime), or now when none recorded an end.
func lastEventTime(al *store.Allocation, now time.Time) time.Time {
	var last time.Time
	for _, t := range al.Tasks {
		if t.FinishedAt.After(last) {
			last = t.FinishedAt
		}
	}
	if last.IsZero() {
		return now
	}
	return last
}

// nextDelay is Nomad's Allocation.NextDelay: the policy's delay, grown by
// its delay function from the last reschedule's, capped at max_delay (and
// back to the delay when the allocation ran longer than the cap).
func nextDelay(p jobspec.ReschedulePolicy, al *store.Allocation, failTime time.Time) time.Duration {
	d := p.Delay
	ev := al.RescheduleTracker
	if len(ev) == 0 {
		return d
	}
	switch p.DelayFunction {
	case "exponential":
		d = ev[len(ev)-1].Delay * 2
	case "fibonacci":
		if len(ev) >= 2 {
			n1, n2 := ev[len(ev)-1].Delay, ev[len(ev)-2].Delay
			if n2 == p.MaxDelay && n1 == p.Delay {
				d = n1
			} else {
				d = n1 + n2
			}
		}
	default:
		return d
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
		if failTime.Sub(ev[len(ev)-1].RescheduleTime) > d {
			d = p.Delay
		}
	}
	return d
}

// attemptsWithin counts the reschedules of the tracker within the
// policy's interval before failTime.
func attemptsWithin(p jobspec.ReschedulePolicy, ev []store.RescheduleEvent, failTime time.Time) int {
	n := 0
	for _, e := range ev {
		if failTime.Sub(e.RescheduleTime) < p.Interval {
			n++
		}
	}
	return n
}

// rescheduleDecision is Nomad's NextRescheduleTime for a failed
// allocation: when its replacement starts, and whether the policy allows
// one (attempts within the interval, or unlimited).
func rescheduleDecision(p jobspec.ReschedulePolicy, al *store.Allocation, now time.Time) (at time.Time, delay time.Duration, ok bool) {
	failTime := lastEventTime(al, now)
	delay = nextDelay(p, al, failTime)
	ok = p.Unlimited || (p.Attempts > 0 && len(al.RescheduleTracker) == 0)
	if p.Attempts > 0 && len(al.RescheduleTracker) > 0 {
		ok = attemptsWithin(p, al.RescheduleTracker, failTime) < p.Attempts && delay < p.Interval
	}
	return failTime.Add(delay), delay, ok
}

// replacementTracker is the tracker of prev's replacement (Nomad's
// updateRescheduleTracker): prev's events within the interval (the last
// five when unlimited), then this reschedule.
func replacementTracker(p jobspec.ReschedulePolicy, prev *store.Allocation, now time.Time, delay time.Duration) []store.RescheduleEvent {
	var out []store.RescheduleEvent
	if p.Attempts > 0 {
		for _, e := range prev.RescheduleTracker {
			if p.Interval > 0 && now.Sub(e.RescheduleTime) <= p.Interval {
				out = append(out, e)
			}
		}
	} else {
		ev := prev.RescheduleTracker
		out = append(out, ev[max(0, len(ev)-maxPastRescheduleEvents):]...)
	}
	return append(out, store.RescheduleEvent{RescheduleTime: now, PrevAllocID: prev.ID, Delay: delay})
}

// rescheduleLocked decides, as the allocation is recorded failed, whether
// its slot is rescheduled; if so it returns the replacement's record
// (pending until RescheduleAt, the same group and index, a fresh ID) and
// links the two. The caller holds a.mu and records both in one write.
func (a *allocRun) rescheduleLocked(ctx context.Context) *store.Allocation {
	al := a.alloc
	if !a.reschedule || al.Status != store.AllocFailed || ctx.Err() != nil || a.opStopped || al.StopRequested != "" ||
		a.r.Detached() || !reschedules(a.job, a.group) {
		return nil
	}
	for _, ev := range al.Events {
		if ev.Type == EventExitUnknown {
			// Its task may have run: a replacement would run it again.
			a.eventLocked(EventNotRescheduled, "a task's exit is unknown and it may have run: not run again")
			return nil
		}
	}
	p := a.group.Reschedule
	now := a.now()
	at, delay, ok := rescheduleDecision(p, al, now)
	if !ok {
		a.eventLocked(EventNotRescheduled, fmt.Sprintf("reschedule policy allows no more attempts (%d in %s)", p.Attempts, p.Interval))
		return nil
	}
	next := &store.Allocation{
		ID: NewAllocID(), Namespace: al.Namespace, JobID: al.JobID, ParentJobID: al.ParentJobID, Group: al.Group,
		Status: store.AllocPending, OwnerPID: al.OwnerPID, OwnerStartTime: al.OwnerStartTime,
		Index: al.Index, Agent: al.Agent, CreatedAt: now, TimingsMS: map[string]float64{},
		PreviousAllocation: al.ID, RescheduleTracker: replacementTracker(p, al, now, delay), RescheduleAt: at,
		StatusDesc: "waiting to be rescheduled at " + at.UTC().Format(time.RFC3339),
	}
	for _, t := range a.group.Tasks {
		next.Tasks = append(next.Tasks, store.TaskState{Name: t.Name, Driver: t.Driver, State: "pending"})
	}
	next.Events = []store.Event{
		{Time: now, Type: "Received", Message: "allocation created: reschedules failed allocation " + al.ID},
		{Time: now, Type: EventRescheduleDelayed, Message: fmt.Sprintf("starts in %s, at %s", delay, at.UTC().Format(time.RFC3339))},
	}
	// Each task is received as in a first allocation (runAlloc).
	for _, t := range next.Tasks {
		next.Events = append(next.Events, store.Event{Time: now, Type: TaskReceived, Task: t.Name, Message: "Task received by client"})
	}
	al.NextAllocation = next.ID
	a.eventLocked(EventRescheduled, fmt.Sprintf("replaced by allocation %s in %s (reschedule %d)", next.ID, delay, len(next.RescheduleTracker)))
	return next
}

// saveWith writes the allocation and next (its replacement) in one
// transaction: the failure and the reschedule are recorded together.
func (a *allocRun) saveWith(ctx context.Context, next *store.Allocation) {
	if next == nil {
		a.save(ctx)
		return
	}
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	snap := a.snapshot()
	if err := a.r.o.Store.PutAllocations(context.WithoutCancel(ctx), []*store.Allocation{snap, next}); err != nil {
		a.log.Error("could not record the allocation and its reschedule", "next_alloc_id", next.ID, "err", err)
		a.event(EventNotRecorded, err.Error())
	}
}

// waitReschedule waits, for a rescheduled allocation, until its
// RescheduleAt. A stop meanwhile ends it complete, never started; a
// detach leaves it pending for the next agent, which waits out the rest.
func (a *allocRun) waitReschedule(ctx context.Context) bool {
	a.mu.Lock()
	at := a.alloc.RescheduleAt
	a.mu.Unlock()
	if at.IsZero() {
		return true
	}
	fault.Point(fault.RescheduleWaiting)
	wctx, cancel := a.r.untilDetach(ctx)
	ok := sleep(wctx, time.Until(at))
	cancel()
	switch {
	case ok:
		a.mu.Lock()
		a.alloc.StatusDesc = ""
		a.mu.Unlock()
		return true
	case a.r.Detached():
		a.detachRecord(ctx)
	default:
		a.stoppedQueued(ctx, "stopped while waiting to be rescheduled")
	}
	return false
}

// runRescheduled runs rec, a replacement rescheduleLocked recorded, once
// its delay has passed: as runAlloc, with its record.
func (r *Runner) runRescheduled(ctx context.Context, job *jobspec.Job, group *jobspec.Group, rec *store.Allocation, started func(*store.Allocation)) (_ *store.Allocation, opStopped bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := r.newAllocRun(job, group, rec.ID, rec.Index, rec, started, cancel, true)
	untrack := r.track(a, rec.ID)
	defer func() { opStopped = untrack() }()
	a.log.Info("rescheduling a failed allocation", "previous_alloc_id", rec.PreviousAllocation, "at", rec.RescheduleAt)
	return a.admitAndRun(ctx, time.Now()), false
}

// next is the replacement a finished allocation's reschedule recorded,
// nil if none (or it cannot be read: it stays pending in the store and
// the next agent runs it). It is returned even when ctx has ended: its
// run then records it stopped, never started.
func (r *Runner) next(ctx context.Context, al *store.Allocation) *store.Allocation {
	if al.NextAllocation == "" || al.Detached {
		return nil
	}
	n, err := r.o.Store.GetAllocation(context.WithoutCancel(ctx), al.NextAllocation)
	if err != nil {
		r.log.Error("cannot read the allocation that reschedules a failed one", "alloc_id", al.ID, "next_alloc_id", al.NextAllocation, "err", err)
		return nil
	}
	return n
}
