package gc_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

// The reconcile deletes the registrations of the native catalog that
// nobody stands behind, and only those: their allocation is missing,
// finished or lost (its owner died), or the process that registered them
// is gone. A dry run only reports them.
func TestSvcRegistrationsSwept(t *testing.T) {
	e := newEnv(t, full("10.199.152.0/24"))
	ctx := testenv.Context(t, time.Minute)
	st := e.openStore(t)
	me, err := proc.SelfStartTime()
	testenv.Must(t, err)
	deadPID, deadStart := deadProcess(t)
	allocs := []*store.Allocation{
		{ID: "a-live", JobID: "j", Status: store.AllocRunning, OwnerPID: os.Getpid(), OwnerStartTime: me},
		{ID: "a-done", JobID: "j", Status: store.AllocComplete},
		{ID: "a-orphan", JobID: "j", Status: store.AllocRunning, OwnerPID: deadPID, OwnerStartTime: deadStart},
		{ID: "a-live2", JobID: "j", Status: store.AllocRunning, OwnerPID: os.Getpid(), OwnerStartTime: me},
		// Left running by a stopped agent: its registration waits for the
		// next agent.
		{ID: "a-detached", JobID: "j", Status: store.AllocRunning, OwnerPID: deadPID, OwnerStartTime: deadStart, Detached: true},
	}
	for _, a := range allocs {
		testenv.Must(t, st.PutAllocation(ctx, a))
	}
	svc := func(id, alloc string, pid int, start uint64) *store.Service {
		return &store.Service{ID: id, ServiceName: "web", Namespace: "default", AllocID: alloc, Health: store.CheckPassing, OwnerPID: pid, OwnerStartTime: start}
	}
	testenv.Must(t, st.PutServices(ctx, []*store.Service{
		svc("s-live", "a-live", os.Getpid(), me),
		svc("s-done", "a-done", os.Getpid(), me),
		svc("s-missing", "a-nowhere", os.Getpid(), me),
		svc("s-orphan", "a-orphan", deadPID, deadStart),
		// Registered by a dead agent, its allocation claimed by a live one
		// (a restart): kept until the new agent registers it again.
		svc("s-dead-owner", "a-live2", deadPID, deadStart),
		svc("s-detached", "a-detached", deadPID, deadStart),
	}))
	m := e.manager(st, 0, 0)
	swept := []string{"s-done", "s-missing", "s-orphan"}
	ids := func(items []gc.Item) []string {
		var out []string
		for _, it := range items {
			if it.Kind == gc.KindService {
				out = append(out, it.ID)
			}
		}
		sort.Strings(out)
		return out
	}
	o := e.options(st, m)
	o.DryRun = true
	rep, err := gc.ReplayPending(ctx, o)
	testenv.Must(t, err)
	if got := ids(rep.Found); !equal(got, swept) || len(ids(rep.Reclaimed)) != 0 {
		t.Errorf("dry run found %v reclaimed %v, want found %v", got, ids(rep.Reclaimed), swept)
	}
	if l, _ := st.ListServices(ctx, store.ServiceFilter{}); len(l) != 6 {
		t.Errorf("dry run deleted registrations: %d left", len(l))
	}
	rep, err = gc.ReplayPending(ctx, e.options(st, m))
	testenv.Must(t, err)
	if got := ids(rep.Reclaimed); !equal(got, swept) {
		t.Errorf("reclaimed %v, want %v; errors %v", got, swept, rep.Errors)
	}
	l, err := st.ListServices(ctx, store.ServiceFilter{})
	var left []string
	for _, s := range l {
		left = append(left, s.ID)
	}
	sort.Strings(left)
	if want := []string{"s-dead-owner", "s-detached", "s-live"}; err != nil || !equal(left, want) {
		t.Errorf("left: %v, %v; want %v", left, err, want)
	}
	for _, id := range []string{"a-live", "a-live2"} {
		if a, err := st.GetAllocation(context.Background(), id); err != nil || a.Status != store.AllocRunning {
			t.Errorf("allocation %s: %+v, %v", id, a, err)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
