package runner_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// A failed allocation is rescheduled on this node as Nomad's reschedule
// policy says: a new allocation of the same index (NOMAD_ALLOC_INDEX and
// name kept), a fresh ID, linked both ways to the one it replaces, its
// tracker growing, started no earlier than its RescheduleAt; once the
// attempts are spent, the last failure says so. Subnet 10.199.245.0/24.
func TestReschedule(t *testing.T) {
	e := newEnvTB(t, testenv.NetworkSpec{Subnet: "10.199.245.0/24"})
	j := e.job(t, `job "btrun-resched" {
  type = "batch"
  group "g" {
    count = 2
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts       = 2
      interval       = "1h"
      delay          = "1s"
      delay_function = "constant"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo index=$NOMAD_ALLOC_INDEX name=$NOMAD_ALLOC_NAME; [ $NOMAD_ALLOC_INDEX = 0 ] || exit 3"]
      }
    }
  }
}`)
	ctx := testenv.Context(t, time.Minute)
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	all, err := e.st.ListAllocations(context.Background(), store.AllocFilter{JobID: j.ID})
	testenv.Must(t, err)
	byID := map[string]*store.Allocation{}
	var first *store.Allocation
	for _, a := range all {
		byID[a.ID] = a
		if a.Index == 1 && a.PreviousAllocation == "" {
			first = a
		}
	}
	// Index 0 completes: never rescheduled. Index 1 fails three times.
	if len(all) != 4 || first == nil || sum.ByStatus[store.AllocComplete] != 1 || sum.ByStatus[store.AllocFailed] != 3 {
		t.Fatalf("allocations %d %v (first of index 1: %v)", len(all), sum.ByStatus, first)
	}
	var chain []*store.Allocation
	for a := first; a != nil; a = byID[a.NextAllocation] {
		chain = append(chain, a)
	}
	if len(chain) != 3 {
		t.Fatalf("reschedule chain of index 1 has %d allocations, want 3", len(chain))
	}
	for i, a := range chain {
		out, err := taskStdout(e.dataDir, a.ID, "t")
		testenv.Must(t, err)
		if got := strings.TrimSpace(string(out)); got != "index=1 name=btrun-resched.g[1]" {
			t.Errorf("chain[%d] %s printed %q", i, a.ID, got)
		}
		if a.Status != store.AllocFailed || a.Index != 1 || len(a.RescheduleTracker) != i {
			t.Errorf("chain[%d] %s: %s index %d tracker %+v", i, a.ID, a.Status, a.Index, a.RescheduleTracker)
		}
		if i == 0 {
			continue
		}
		prev := chain[i-1]
		last := a.RescheduleTracker[i-1]
		if a.PreviousAllocation != prev.ID || last.PrevAllocID != prev.ID || last.Delay != time.Second {
			t.Errorf("chain[%d] %s: previous %q, tracker %+v; want %s", i, a.ID, a.PreviousAllocation, a.RescheduleTracker, prev.ID)
		}
		if a.Tasks[0].StartedAt.Before(a.RescheduleAt) || a.RescheduleAt.Before(prev.Tasks[0].FinishedAt) {
			t.Errorf("chain[%d] %s started %s, reschedule at %s, previous finished %s", i, a.ID, a.Tasks[0].StartedAt, a.RescheduleAt, prev.Tasks[0].FinishedAt)
		}
		if !hasEventType(prev, runner.EventRescheduled) || !hasEventType(a, runner.EventRescheduleDelayed) {
			t.Errorf("chain[%d]: events %v / %v", i, prev.Events, a.Events)
		}
	}
	if end := chain[2]; end.NextAllocation != "" || !hasEventType(end, runner.EventNotRescheduled) {
		t.Errorf("the last failure: next %q, events %v", end.NextAllocation, end.Events)
	}
}

// A stop while a replacement waits out its delay cancels it: it ends
// complete, never started, and nothing runs.
func TestRescheduleCancelledByStop(t *testing.T) {
	e := newEnvTB(t, testenv.NetworkSpec{Subnet: "10.199.245.0/24"})
	j := e.job(t, `job "btrun-resched-stop" {
  type = "service"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 1"]
      }
    }
  }
}`)
	ctx, cancel := context.WithCancel(testenv.Context(t, time.Minute))
	defer cancel()
	var mu sync.Mutex
	var got []*store.Allocation
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{OnAlloc: func(a *store.Allocation) {
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
		if a.NextAllocation != "" {
			// The service's default policy: 30 s before the replacement.
			cancel()
		}
	}})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if len(got) != 2 {
		t.Fatalf("allocations %d, want the failed one and its replacement", len(got))
	}
	failed, next := got[0], got[1]
	if failed.Status != store.AllocFailed || failed.NextAllocation != next.ID || next.PreviousAllocation != failed.ID {
		t.Errorf("failed %s %s next %q; replacement %s previous %q", failed.ID, failed.Status, failed.NextAllocation, next.ID, next.PreviousAllocation)
	}
	if next.Status != store.AllocComplete || !next.Tasks[0].StartedAt.IsZero() || next.Tasks[0].NotStarted == "" || !hasEventType(next, "Killed") ||
		next.RescheduleAt.Sub(failed.Tasks[0].FinishedAt) != 30*time.Second {
		t.Errorf("replacement after the stop: %s tasks %+v events %v at %s", next.Status, next.Tasks, next.Events, next.RescheduleAt)
	}
	if _, err := taskStdout(e.dataDir, next.ID, "t"); err == nil {
		t.Errorf("the cancelled replacement ran its task")
	}
}

func hasEventType(a *store.Allocation, typ string) bool {
	for _, ev := range a.Events {
		if ev.Type == typ {
			return true
		}
	}
	return false
}
