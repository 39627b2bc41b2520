package gc

import (
	"context"
	"testing"

	"github.com/berth/berth/store"
)

// A quick command's replay sweeps tasks only when a task of the store can
// be running: an allocation not terminal, or one replay just found lost.
func TestMayHaveTasks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		allocs []store.AllocStatus
		lost   bool // replay reclaimed an allocation of a dead owner
		want   bool
	}{
		{"empty store", nil, false, false},
		{"only terminal allocations", []store.AllocStatus{store.AllocComplete, store.AllocFailed, store.AllocLost}, false, false},
		{"a pending allocation", []store.AllocStatus{store.AllocComplete, store.AllocPending}, false, true},
		{"a running allocation", []store.AllocStatus{store.AllocRunning}, false, true},
		{"one just found lost", []store.AllocStatus{store.AllocLost}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(ctx, t.TempDir(), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for i, s := range tc.allocs {
				a := &store.Allocation{ID: "a" + string(rune('0'+i)), JobID: "j", Status: s}
				if err := st.PutAllocation(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			r := &run{o: Options{Store: st}, rep: &Report{}}
			if tc.lost {
				r.rep.Reclaimed = append(r.rep.Reclaimed, Item{Kind: KindAllocOwner, ID: "a0"})
			}
			if got := r.mayHaveTasks(ctx); got != tc.want {
				t.Errorf("mayHaveTasks = %v, want %v", got, tc.want)
			}
		})
	}
	// Without a store there is nothing to tell: no sweep (Run sweeps).
	if (&run{rep: &Report{}}).mayHaveTasks(ctx) {
		t.Error("no store: mayHaveTasks = true")
	}
}
