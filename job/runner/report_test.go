package runner_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// A task's FINISHED is never before its STARTED, and an allocation's
// events are in order: one clock per allocation. A prestart task that
// exits at once and a burst of allocations are where berth's clock and
// the supervisor's used to disagree.
func TestReportTaskTimesInOrder(t *testing.T) {
	e := newEnv(t, "10.199.236.0/24")
	src := `job "btrep-times" {
  type = "batch"
  group "g" {
    count = 4
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "pre" {
      lifecycle {
        hook = "prestart"
      }
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}`
	j := e.job(t, src)
	var mu sync.Mutex
	var allocs []*store.Allocation
	sum, err := e.r.RunJob(testenv.Context(t, 3*time.Minute), j, runner.RunOptions{OnAlloc: func(a *store.Allocation) {
		mu.Lock()
		allocs = append(allocs, a)
		mu.Unlock()
	}})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if len(allocs) != 4 {
		t.Fatalf("%d allocations, want 4", len(allocs))
	}
	for _, a := range allocs {
		for _, ts := range a.Tasks {
			if ts.StartedAt.IsZero() || ts.FinishedAt.Before(ts.StartedAt) {
				t.Errorf("alloc %s task %s: started %s, finished %s", a.ID, ts.Name, ts.StartedAt.Format(time.StampNano), ts.FinishedAt.Format(time.StampNano))
			}
			if got := api.ExitText(ts.State, ts.NotStarted != "", ts.ExitCode, ts.Signal); got != "0" {
				t.Errorf("alloc %s task %s: exit %q, want 0", a.ID, ts.Name, got)
			}
		}
		pre, main := taskState(t, a, "pre"), taskState(t, a, "main")
		if main.StartedAt.Before(pre.FinishedAt) {
			t.Errorf("alloc %s: main started %s before its prestart finished %s", a.ID, main.StartedAt.Format(time.StampNano), pre.FinishedAt.Format(time.StampNano))
		}
		for i := 1; i < len(a.Events); i++ {
			if a.Events[i].Time.Before(a.Events[i-1].Time) {
				t.Errorf("alloc %s: event %q before the one above it %q", a.ID, a.Events[i].Type, a.Events[i-1].Type)
			}
		}
	}
}

// A task that never started says so (and why) instead of an exit code;
// EXIT is empty while a task runs.
func TestReportTaskNeverStarted(t *testing.T) {
	if got := api.ExitText("running", false, 0, 0); got != "" {
		t.Errorf("running task's exit text %q, want empty", got)
	}
	e := newEnv(t, "10.199.237.0/24")
	a, _ := runOne(t, e, `job "btrep-nostart" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/no/such/command"
      }
    }
  }
}`)
	ts := taskState(t, a, "t")
	if ts.NotStarted == "" || !strings.Contains(ts.NotStarted, "/no/such/command") || !ts.StartedAt.IsZero() {
		t.Errorf("task that could not start: %+v", ts)
	}
	if got := api.ExitText(ts.State, ts.NotStarted != "", ts.ExitCode, ts.Signal); got != "not started" {
		t.Errorf("exit text %q, want \"not started\"", got)
	}
}

// An allocation a new agent claims is not reported running until the
// agent has re-attached its tasks and CHECKed its network: it is pending,
// and its status description says it is being re-adopted.
func TestReportClaimedIsReadopting(t *testing.T) {
	e := newEnv(t, "10.199.238.0/24")
	ctx := testenv.Context(t, time.Minute)
	rec := &store.Allocation{ID: "btrep-" + testenv.RandSuffix(8), JobID: "btrep-claim", Group: "g", Agent: true,
		Status: store.AllocRunning, OwnerPID: 0, Tasks: []store.TaskState{{Name: "t", Driver: "raw_exec", State: "running"}}}
	testenv.Must(t, e.st.PutAllocation(ctx, rec))
	t.Cleanup(func() { _ = e.st.DeleteAllocation(context.Background(), rec.ID) })
	testenv.Must(t, e.r.Claim(ctx, rec))
	got, err := e.st.GetAllocation(ctx, rec.ID)
	testenv.Must(t, err)
	if got.Status != store.AllocPending || got.StatusDesc != runner.ReadoptingDesc {
		t.Errorf("claimed allocation: status %s (%q), want pending (%q)", got.Status, got.StatusDesc, runner.ReadoptingDesc)
	}
	if !runner.Adoptable(got) && got.OwnerPID != os.Getpid() {
		t.Errorf("claimed allocation is neither adoptable nor this process's: %+v", got)
	}
}

// Tasks an allocation ends without having started say so, whatever path
// ended it (one rule, where the allocation finishes): a main task whose
// prestart failed, a poststart that never came: dead, "not started" with
// the allocation's reason, never an exit code.
func TestReportUnstartedTasksAtFinish(t *testing.T) {
	e := newEnv(t, "10.199.74.0/24")
	a, _ := runOne(t, e, `job "btrep-unstarted" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "pre" {
      lifecycle {
        hook = "prestart"
      }
      driver = "raw_exec"
      config {
        command = "/bin/false"
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
    task "post" {
      lifecycle {
        hook = "poststart"
      }
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}`)
	if pre := taskState(t, a, "pre"); pre.NotStarted != "" || pre.StartedAt.IsZero() || api.ExitText(pre.State, false, pre.ExitCode, pre.Signal) != "1" {
		t.Errorf("the prestart task ran and exited 1: %+v", pre)
	}
	for _, name := range []string{"main", "post"} {
		ts := taskState(t, a, name)
		if ts.State != "dead" || !ts.StartedAt.IsZero() || !strings.HasPrefix(ts.NotStarted, runner.NotStartedFailed) {
			t.Errorf("task %s that never started: %+v, want dead with NotStarted %q...", name, ts, runner.NotStartedFailed)
		}
		if got := api.ExitText(ts.State, ts.NotStarted != "", ts.ExitCode, ts.Signal); got != "not started" {
			t.Errorf("task %s: exit text %q, want \"not started\"", name, got)
		}
	}
}
