package runner_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// This file's tests use the subnets 10.199.214-215.0/24.

// Issue 18 item 6: a periodic job every second piled up 405 pending
// allocations on a loaded node. With every start slot taken (the load),
// launches stop at client.max_pending_launches launches not started, the
// rest are skipped and counted; once starts keep up nothing is skipped.
func TestHarden2PeriodicPendingLaunchesBounded(t *testing.T) {
	e := newEnv(t, "10.199.214.0/24")
	const maxPending = 2
	r := runner.New(runner.Options{
		Attach: e.m, Store: e.st, Drivers: e.drivers, AllocDir: filepath.Join(e.dataDir, "alloc"),
		OwnerPID: os.Getpid(), Capacity: &runner.Capacity{CPU: 100000, MemoryMB: 100000, Allocs: 1000},
		StartWorkers: 1, MaxPendingLaunches: maxPending,
	})
	job := e.job(t, `job "btrun-pending" {
  type = "batch"
  periodic {
    crons = ["*/1 * * * * * *"]
  }
  group "g" {
    count = 2
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
`)
	ctx := testenv.Context(t, 2*time.Minute)

	t.Run("starts blocked", func(t *testing.T) {
		release, err := r.TakeStartSlot(ctx)
		testenv.Must(t, err)
		defer release()
		// Four launch times or more; none of their allocations can start.
		sum, err := r.RunJob(ctx, job, runner.RunOptions{For: 4500 * time.Millisecond})
		testenv.Must(t, err)
		if sum.Launches != maxPending || sum.Skipped < 2 {
			t.Errorf("launches %d, skipped %d; want %d launches and the rest (2 or more) skipped", sum.Launches, sum.Skipped, maxPending)
		}
		if n := sum.ByStatus[store.AllocComplete]; n != maxPending*2 {
			t.Errorf("allocations by status %v; want the %d launched complete (stopped while queued)", sum.ByStatus, maxPending*2)
		}
		checkClean(t, e, sum)
	})
	t.Run("starts keep up", func(t *testing.T) {
		sum, err := r.RunJob(ctx, job, runner.RunOptions{MaxRuns: 3})
		testenv.Must(t, err)
		if sum.Launches != 3 || sum.Skipped != 0 || sum.ByStatus[store.AllocComplete] != 6 {
			t.Errorf("launches %d, skipped %d, by status %v; want 3 launches, none skipped, 6 complete", sum.Launches, sum.Skipped, sum.ByStatus)
		}
		checkClean(t, e, sum)
	})
}
