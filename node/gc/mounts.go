package gc

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
)

// KindMount is a mount beneath an allocation directory (a task's secrets/
// tmpfs) whose allocation is terminal or unknown.
const KindMount = "mount"

// sweepMounts unmounts what is mounted beneath the allocation directories
// of allocations that are terminal or unknown: an agent killed before it
// unmounted its allocation's secrets/ leaves them mounted in the host's
// namespace. As sweepTasks, the mounts are listed before the allocations
// are read: a task dir is made (and mounted) only after its allocation
// was recorded.
func (r *run) sweepMounts(ctx context.Context) {
	if r.o.Store == nil || r.o.AllocDir == "" || r.o.OwnersOnly || r.ids != nil {
		return
	}
	mounts, err := allocdir.Mounts(r.o.AllocDir)
	if err != nil {
		r.errorf("list the mounts beneath %s: %w", r.o.AllocDir, err)
		return
	}
	if len(mounts) == 0 {
		return
	}
	allocs, err := r.o.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		r.errorf("read allocations: %w (mounts are kept)", err)
		return
	}
	byID := make(map[string]*store.Allocation, len(allocs))
	for _, a := range allocs {
		byID[a.ID] = a
	}
	for id, paths := range mounts {
		if ctx.Err() != nil {
			return
		}
		a := byID[id]
		if a != nil && !a.Status.Terminal() {
			continue
		}
		why := "its allocation is unknown"
		if a != nil {
			why = "its allocation is " + string(a.Status)
		}
		for _, p := range paths {
			it := Item{Kind: KindMount, ID: id, Path: p, Reason: fmt.Sprintf("mount %s: %s", p, why)}
			r.found(it)
		}
		if r.o.DryRun {
			continue
		}
		dir := filepath.Join(r.o.AllocDir, id)
		err := allocdir.Unmount(ctx, dir)
		for _, p := range paths {
			it := Item{Kind: KindMount, ID: id, Path: p, Reason: fmt.Sprintf("mount %s: %s", p, why)}
			if err != nil {
				r.fail(it, err)
			} else {
				r.reclaimed(it)
			}
		}
	}
}
