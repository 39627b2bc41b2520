package runner

import (
	"context"
	"time"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
)

// Event types of admission.
const (
	// EventQueued: the allocation waits for resources; StatusDesc says
	// which.
	EventQueued = "Queued"
	// EventAdmitted: it got them and starts.
	EventAdmitted = "Admitted"
	// EventNotRecorded: the store refused a write of the allocation (a
	// full disk): what the store shows of it is stale or missing.
	EventNotRecorded = "Not Recorded"
	// EventDetached: the agent stopped without draining and left the
	// allocation as it was, for the next agent.
	EventDetached = "Detached"
)

// admit waits until the node has room for the allocation (its record
// says, meanwhile, pending with what it waits for), then for a start
// slot, which it gives back once the tasks are about to start. release
// gives everything back; ok is false when ctx ended first, the record
// then says so and is final.
func (a *allocRun) admit(ctx context.Context) (release func(), ok bool) {
	r := a.r
	if r.admit == nil {
		return func() {}, true
	}
	d := r.admit.capa.GroupDemand(a.group)
	waited := false
	// A periodic launch queues under its periodic job, which skips its
	// next launches while one waits.
	key := a.job.ID
	if p := periodicParent(a.job); p != "" {
		key = p
	}
	give, err := r.admit.acquire(ctx, key, d, func(why string) {
		waited = true
		a.mu.Lock()
		a.alloc.StatusDesc = "queued: waiting for " + why
		a.eventLocked(EventQueued, "waiting for "+why)
		a.mu.Unlock()
		a.log.Info("allocation queued: the node has no room for it now", "waiting_for", why)
		a.save(ctx)
	})
	if err != nil {
		a.notAdmitted(ctx)
		return nil, false
	}
	if waited {
		a.mu.Lock()
		a.alloc.StatusDesc = ""
		a.eventLocked(EventAdmitted, "resources available")
		a.mu.Unlock()
	}
	slot, err := r.starts.acquire(ctx)
	if err != nil {
		give()
		a.notAdmitted(ctx)
		return nil, false
	}
	started := a.started
	a.started = func(al *store.Allocation) {
		slot()
		if started != nil {
			started(al)
		}
	}
	return func() { slot(); give() }, true
}

// notAdmitted records an allocation that waited for admission until it
// was stopped, or until the runner detached (then the next agent admits
// it).
func (a *allocRun) notAdmitted(ctx context.Context) {
	if a.r.Detached() {
		a.detachRecord(ctx)
		return
	}
	a.stoppedQueued(ctx, "stopped while queued for resources")
}

// stoppedQueued records an allocation stopped before it was admitted (why
// says while waiting for what): it never ran, so it is complete, as
// Nomad's stopped allocations are.
func (a *allocRun) stoppedQueued(ctx context.Context, why string) {
	if a.adopted {
		// An earlier agent may have made its network, or started a task.
		a.mu.Lock()
		for i := range a.alloc.Tasks {
			a.alloc.Tasks[i].State = "dead"
		}
		a.eventLocked("Killed", why)
		a.mu.Unlock()
		a.finish(ctx, nil, true)
		return
	}
	a.mu.Lock()
	a.alloc.Status = store.AllocComplete
	a.alloc.StatusDesc = why + "; never started"
	a.endUnstartedLocked(nil)
	a.eventLocked("Killed", why)
	a.mu.Unlock()
	a.save(ctx)
	if m := a.r.o.Metrics; m != nil {
		m.AllocDone(string(store.AllocComplete))
	}
}

// killTimeout is the task's kill_timeout, cut to the node's
// max_kill_timeout.
func (r *Runner) killTimeout(d time.Duration) time.Duration {
	if max := r.o.MaxKillTimeout; max > 0 && d > max {
		return max
	}
	return d
}

// Admissible returns an *ExhaustedError (ErrExhausted) when one launch of
// job asks more than this runner's node offers at all; nil when it fits,
// or when the runner does no admission.
func (r *Runner) Admissible(job *jobspec.Job) error {
	if r.admit == nil {
		return nil
	}
	return r.admit.capa.Admissible(job)
}

// Used is what the allocations admitted by this runner use now.
func (r *Runner) Used() Demand {
	if r.admit == nil {
		return Demand{}
	}
	return r.admit.Used()
}

// admitForce counts a re-adopted allocation's resources without waiting:
// it already runs (the last agent admitted it). The returned func gives
// them back.
func (r *Runner) admitForce(g *jobspec.Group) (release func()) {
	if r.admit == nil {
		return func() {}
	}
	d := r.admit.capa.GroupDemand(g)
	r.admit.mu.Lock()
	r.admit.used = r.admit.used.add(d)
	r.admit.mu.Unlock()
	return r.admit.releaser(d)
}
