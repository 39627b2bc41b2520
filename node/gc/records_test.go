package gc

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/store"
)

// TestJudge covers the decision about each record without touching the host.
func TestJudge(t *testing.T) {
	self, selfStart := os.Getpid(), mustSelfStart(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead, deadStart := cmd.Process.Pid, uint64(1)
	now := time.Now()
	running := &store.Allocation{ID: "live", Status: store.AllocRunning, OwnerPID: self, OwnerStartTime: selfStart}
	doneDead := &store.Allocation{ID: "done", Status: store.AllocComplete, OwnerPID: dead, OwnerStartTime: deadStart}
	allocs := map[string]*store.Allocation{"live": running, "done": doneDead}
	gone := "/nonexistent/netns/x"

	cases := []struct {
		name     string
		rec      store.Attachment
		backoff  bool
		wantAct  bool // torn down
		wantKeep bool
	}{
		{"intent, owner alive: in flight", store.Attachment{Phase: store.PhaseIntent, OwnerPID: self, OwnerStartTime: selfStart}, false, false, false},
		{"intent, owner dead", store.Attachment{Phase: store.PhaseIntent, OwnerPID: dead, OwnerStartTime: deadStart}, false, true, false},
		{"intent, no owner", store.Attachment{Phase: store.PhaseIntent}, false, true, false},
		{"tearing down, backing off", store.Attachment{Phase: store.PhaseTearingDown, OwnerPID: dead, NextAttempt: now.Add(time.Hour), TeardownAttempts: 1}, false, false, true},
		{"tearing down, backoff ignored", store.Attachment{Phase: store.PhaseTearingDown, OwnerPID: dead, NextAttempt: now.Add(time.Hour), TeardownAttempts: 1}, true, true, false},
		{"tearing down, due", store.Attachment{Phase: store.PhaseTearingDown, OwnerPID: dead, NextAttempt: now.Add(-time.Second)}, false, true, false},
		{"net up, namespace gone", store.Attachment{Phase: store.PhaseReady, NetnsPath: gone, OwnerPID: dead}, false, true, false},
		{"alloc running, owner alive", store.Attachment{Phase: store.PhaseReady, NetnsPath: gone, AllocID: "live", OwnerPID: dead}, false, false, false},
		{"alloc complete, owner dead", store.Attachment{Phase: store.PhaseReady, NetnsPath: gone, AllocID: "done", OwnerPID: self, OwnerStartTime: selfStart}, false, true, false},
		{"alloc missing, owner dead", store.Attachment{Phase: store.PhaseReady, NetnsPath: gone, AllocID: "nope", OwnerPID: dead}, false, true, false},
		{"alloc missing, owner alive", store.Attachment{Phase: store.PhaseReady, NetnsPath: gone, AllocID: "nope", OwnerPID: self, OwnerStartTime: selfStart}, false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newRun(Options{Attach: attach.New(attach.Options{CNI: cni.NewClient(cni.Options{})}), IgnoreBackoff: tc.backoff, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			rec := tc.rec
			rec.ID = "x"
			reason, keep := r.judge(&rec, &allocState{byID: allocs, ok: true, lost: map[string]bool{}, blocked: map[string]bool{}})
			act := reason != "" && !keep
			if act != tc.wantAct || keep != tc.wantKeep {
				t.Errorf("judge = %q, keep %v; want act %v keep %v", reason, keep, tc.wantAct, tc.wantKeep)
			}
		})
	}
}

func mustSelfStart(t *testing.T) uint64 {
	t.Helper()
	s, err := proc.SelfStartTime()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
