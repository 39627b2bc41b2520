package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// taskStdout is what task wrote to stdout in allocation id: in its log
// dir (alloc/logs/<task>.stdout.0) or, before logs moved there, beside it.
func taskStdout(dataDir, id, task string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "alloc", id, "alloc", "logs", task+".stdout.0"))
	if err == nil {
		return b, nil
	}
	return os.ReadFile(filepath.Join(dataDir, "alloc", id, task+".stdout"))
}

// Each periodic launch runs as a child job of its own, as Nomad's
// periodic dispatcher makes it: "<job>/periodic-<launch unix time>", its
// allocations named after it, NOMAD_JOB_PARENT_ID the periodic job, and
// the store records the parent on each allocation (listing, re-adoption,
// retention). prohibit_overlap still skips a launch while one runs.
// Subnet 10.199.243.0/24.
func TestPeriodicChildIdentity(t *testing.T) {
	e := newEnvTB(t, testenv.NetworkSpec{Subnet: "10.199.243.0/24"})
	j := e.job(t, `job "btrun-pchild" {
  type = "batch"
  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = true
  }
  group "g" {
    count = 2
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep '^NOMAD_' ; sleep 1.5"]
      }
    }
  }
}`)
	ctx := testenv.Context(t, time.Minute)
	var mu sync.Mutex
	var launches []time.Time
	var allocs []*store.Allocation
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{
		MaxRuns:  2,
		OnLaunch: func(at time.Time) { mu.Lock(); launches = append(launches, at); mu.Unlock() },
		OnAlloc:  func(a *store.Allocation) { mu.Lock(); allocs = append(allocs, a); mu.Unlock() },
	})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if sum.Skipped == 0 {
		t.Errorf("prohibit_overlap skipped no launch of a task that outlives the period: %+v", sum)
	}
	if sum.Launches != 2 || len(allocs) != 4 || sum.ByStatus[store.AllocComplete] != 4 {
		t.Fatalf("launches %d, allocations %d %v %v", sum.Launches, len(allocs), sum.ByStatus, sum.Failed)
	}
	children := map[string]int{}
	for _, a := range allocs {
		children[a.JobID]++
		parent, at, ok := jobspec.ParsePeriodicChildID(a.JobID)
		if !ok || parent != j.ID || a.ParentJobID != j.ID {
			t.Errorf("alloc %s: job %q parent %q", a.ID, a.JobID, a.ParentJobID)
			continue
		}
		launched := false
		for _, l := range launches {
			launched = launched || l.Unix() == at.Unix()
		}
		if !launched {
			t.Errorf("alloc %s: job %q names no launch time of %v", a.ID, a.JobID, launches)
		}
		out, err := taskStdout(e.dataDir, a.ID, "t")
		testenv.Must(t, err)
		env := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				env[k] = v
			}
		}
		want := map[string]string{
			"NOMAD_JOB_ID":        a.JobID,
			"NOMAD_JOB_NAME":      a.JobID,
			"NOMAD_JOB_PARENT_ID": j.ID,
			"NOMAD_ALLOC_NAME":    a.JobID + ".g[" + string(rune('0'+a.Index)) + "]",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("alloc %s: %s=%q, want %q", a.ID, k, env[k], v)
			}
		}
	}
	if len(children) != 2 {
		t.Errorf("children %v, want 2 launches of 2 allocations each", children)
	}
	for child, n := range children {
		if n != 2 {
			t.Errorf("child %s has %d allocations, want 2", child, n)
		}
	}
	// The parent's ID lists its children's allocations; a child's only its own.
	for _, tc := range []struct {
		job  string
		want int
	}{{j.ID, 4}, {allocs[0].JobID, 2}} {
		l, err := e.st.ListAllocations(context.Background(), store.AllocFilter{JobID: tc.job})
		testenv.Must(t, err)
		if len(l) != tc.want {
			t.Errorf("allocations of %s: %d, want %d", tc.job, len(l), tc.want)
		}
	}
}
