package gc

import (
	"context"
	"fmt"

	"github.com/berth/berth/store"
)

// KindService is a registration of the native service catalog whose
// allocation is gone.
const KindService = "service"

// sweepServices deletes the registrations nobody stands behind: their
// allocation is gone, finished or lost, or the berth process that
// registered them (and ran their checks) died. Step 1's view of the
// allocations decides; without it nothing is deleted.
func (r *run) sweepServices(ctx context.Context, as *allocState) {
	if !as.ok {
		return
	}
	svcs, err := r.o.Store.ListServices(ctx, store.ServiceFilter{})
	if err != nil {
		r.errorf("read services: %w", err)
		return
	}
	var ids []string
	var items []Item
	for _, s := range svcs {
		why := ""
		a := as.byID[s.AllocID]
		switch {
		case a == nil:
			why = "its allocation " + s.AllocID + " is gone"
		case as.lost[a.ID]:
			why = "its allocation " + a.ID + " is lost"
		case a.Status.Terminal():
			why = fmt.Sprintf("its allocation %s is %s", a.ID, a.Status)
		case s.OwnerPID > 0 && !ownerAlive(s.OwnerPID, s.OwnerStartTime) &&
			!a.Detached && !ownerAlive(a.OwnerPID, a.OwnerStartTime):
			// A registration whose allocation is detached, or was claimed by
			// a new agent, is kept: that agent registers it again as it
			// re-adopts the task (no moment without it).
			why = "the " + describeOwner(s.OwnerPID, s.OwnerStartTime) + ": nothing checks it"
		default:
			continue
		}
		it := Item{Kind: KindService, ID: s.ID, Reason: fmt.Sprintf("service %q: %s", s.ServiceName, why)}
		r.found(it)
		ids = append(ids, s.ID)
		items = append(items, it)
	}
	if r.o.DryRun || len(ids) == 0 {
		return
	}
	if err := r.o.Store.DeleteServices(ctx, ids...); err != nil {
		for _, it := range items {
			r.fail(it, err)
		}
		return
	}
	for _, it := range items {
		r.reclaimed(it)
	}
}
