package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// newLimitedEnv is newEnv with a runner that admits against capa and
// cuts kill timeouts to maxKill. The subnets are 10.199.175-179.0/24.
func newLimitedEnv(t *testing.T, subnet string, capa runner.Capacity, maxKill time.Duration) *env {
	t.Helper()
	e := newEnv(t, subnet)
	e.r = runner.New(runner.Options{
		Attach: e.m, Store: e.st, Drivers: e.drivers, AllocDir: filepath.Join(e.dataDir, "alloc"),
		OwnerPID: os.Getpid(), Capacity: &capa, StartWorkers: 2, MaxKillTimeout: maxKill,
	})
	return e
}

// Three allocations of 50 MB on a node offering 100 MB: two run, the
// third waits, visible as pending with what it waits for, and runs once
// one of the others is done. Real processes.
func TestAdmissionQueuesWhatDoesNotFitNow(t *testing.T) {
	t.Parallel()
	e := newLimitedEnv(t, "10.199.175.0/24", runner.Capacity{CPU: 100000, MemoryMB: 100, Allocs: 100}, 0)
	job := e.job(t, `job "adm" {
  type = "batch"
  group "g" {
    count = 3
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 1"]
      }
      resources {
        cpu    = 10
        memory = 50
      }
    }
  }
}`)
	var mu sync.Mutex
	var queuedDesc string
	ctx := testenv.Context(t, 2*time.Minute)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			l, _ := e.st.ListAllocations(ctx, store.AllocFilter{JobID: "adm", Status: store.AllocPending})
			for _, a := range l {
				if strings.HasPrefix(a.StatusDesc, "queued: ") {
					mu.Lock()
					queuedDesc = a.StatusDesc
					mu.Unlock()
				}
			}
		}
	}()
	sum, err := e.r.RunJob(ctx, job, runner.RunOptions{})
	close(stop)
	<-watched
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if sum.ByStatus[store.AllocComplete] != 3 {
		t.Fatalf("allocations: %v (%v)", sum.ByStatus, sum.Failed)
	}
	mu.Lock()
	defer mu.Unlock()
	if queuedDesc != "queued: waiting for memory: needs 50 MB, 0 MB free of 100 MB" {
		t.Errorf("the waiting allocation's status description: %q", queuedDesc)
	}
	all, err := e.st.ListAllocations(ctx, store.AllocFilter{JobID: "adm"})
	testenv.Must(t, err)
	// From the tasks' recorded lives, not from the run's callbacks: an
	// allocation gives its room back before the run reports it ended.
	if m := mostAtOnce(all); m != 2 {
		t.Errorf("%d allocations' tasks ran at once; the node fits 2", m)
	}
	queued := 0
	for _, a := range all {
		var types []string
		for _, ev := range a.Events {
			types = append(types, ev.Type)
		}
		if strings.Contains(strings.Join(types, ","), runner.EventQueued+","+runner.EventAdmitted) {
			queued++
		}
	}
	if queued != 1 {
		t.Errorf("%d allocations have Queued then Admitted events, want 1", queued)
	}
}

// mostAtOnce is the largest number of tasks alive at one moment, from
// their recorded start and finish times.
func mostAtOnce(allocs []*store.Allocation) int {
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, a := range allocs {
		for _, ts := range a.Tasks {
			edges = append(edges, edge{ts.StartedAt, 1}, edge{ts.FinishedAt, -1})
		}
	}
	// An end and a start at the same instant do not overlap.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].d < edges[j].d
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	return most
}

// A queued allocation of a stopped run never starts and is complete.
func TestStopWhileQueued(t *testing.T) {
	t.Parallel()
	e := newLimitedEnv(t, "10.199.176.0/24", runner.Capacity{CPU: 100000, MemoryMB: 100000, Allocs: 1}, 0)
	job := e.job(t, `job "q" {
  group "g" {
    count = 1
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["60"]
      }
    }
  }
}`)
	ctx, cancel := context.WithCancel(testenv.Context(t, 2*time.Minute))
	defer cancel()
	first := make(chan struct{})
	done := make(chan *runner.Summary, 2)
	go func() {
		s, _ := e.r.RunJob(ctx, job, runner.RunOptions{OnStart: func(*store.Allocation) { close(first) }})
		done <- s
	}()
	<-first
	second := *job
	second.ID = "q2"
	go func() {
		s, _ := e.r.RunJob(ctx, &second, runner.RunOptions{OnStart: func(*store.Allocation) { t.Error("q2 started although the cap is 1") }})
		done <- s
	}()
	waitPending(t, e, "q2", "queued: waiting for allocations: 1 of 1 running (client.max_allocs)")
	cancel()
	for range 2 {
		s := <-done
		checkClean(t, e, s)
	}
	l, err := e.st.ListAllocations(context.Background(), store.AllocFilter{JobID: "q2"})
	testenv.Must(t, err)
	if len(l) != 1 || l[0].Status != store.AllocComplete || !strings.Contains(l[0].StatusDesc, "never started") || l[0].Tasks[0].State != "dead" {
		t.Errorf("the queued allocation after the stop: %+v", l)
	}
}

func waitPending(t *testing.T, e *env, job, desc string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		l, _ := e.st.ListAllocations(context.Background(), store.AllocFilter{JobID: job})
		for _, a := range l {
			if a.Status == store.AllocPending && a.StatusDesc == desc {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pending allocation of %s says %q", job, desc)
}

// kill_timeout = "87600h" is cut to the node's max_kill_timeout: a task
// that ignores SIGTERM is killed after it, and the stop returns.
func TestKillTimeoutCapped(t *testing.T) {
	t.Parallel()
	e := newLimitedEnv(t, "10.199.177.0/24", runner.Capacity{CPU: 100000, MemoryMB: 100000, Allocs: 10}, 2*time.Second)
	job := e.job(t, `job "kt" {
  group "g" {
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "87600h"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '' TERM; echo ready; while :; do sleep 1; done"]
      }
    }
  }
}`)
	ctx, cancel := context.WithCancel(testenv.Context(t, 2*time.Minute))
	defer cancel()
	var id string
	started := make(chan struct{})
	var last *store.Allocation
	done := make(chan *runner.Summary, 1)
	go func() {
		s, _ := e.r.RunJob(ctx, job, runner.RunOptions{
			OnStart: func(a *store.Allocation) { id = a.ID; close(started) },
			OnAlloc: func(a *store.Allocation) { last = a },
		})
		done <- s
	}()
	<-started
	// Stop once the trap is set.
	log := filepath.Join(e.dataDir, "alloc", id, "alloc", "logs", "t.stdout.0")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "ready") {
			break
		}
	}
	t0 := time.Now()
	cancel()
	var sum *runner.Summary
	select {
	case sum = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the stop still waits after a minute: kill_timeout was not capped")
	}
	checkClean(t, e, sum)
	t.Logf("stop took %s", time.Since(t0).Round(time.Millisecond))
	if last == nil || last.Tasks[0].Signal != 9 {
		t.Errorf("the task should have been SIGKILLed after max_kill_timeout: %+v", last)
	}
}

// The task's environment: NOMAD_ALLOC_ID is the runtime's whatever the
// env block says, and ${env.X} reads the task's environment, which for
// raw_exec holds the agent's, as in Nomad (this test process's HOME).
func TestTaskEnvironment(t *testing.T) {
	t.Parallel()
	if os.Getenv("HOME") == "" {
		t.Skip("the test process needs a HOME to show that the task inherits it")
	}
	e := newLimitedEnv(t, "10.199.178.0/24", runner.Capacity{CPU: 100000, MemoryMB: 100000, Allocs: 10}, 0)
	job := e.job(t, `job "envj" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$NOMAD_ALLOC_ID|$FOO|$BAR|$ARG\""]
      }
      env {
        NOMAD_ALLOC_ID = "forged"
        FOO            = "${env.HOME}"
        BAR            = "${env.NOMAD_JOB_ID}"
        ARG            = "x"
      }
    }
  }
}`)
	var a *store.Allocation
	sum, err := e.r.RunJob(testenv.Context(t, time.Minute), job, runner.RunOptions{OnAlloc: func(x *store.Allocation) { a = x }})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if a == nil || a.Status != store.AllocComplete {
		t.Fatalf("allocation: %+v", a)
	}
	b, err := os.ReadFile(filepath.Join(e.dataDir, "alloc", a.ID, "alloc", "logs", "t.stdout.0"))
	testenv.Must(t, err)
	if got, want := strings.TrimSpace(string(b)), a.ID+"|"+os.Getenv("HOME")+"|envj|x"; got != want {
		t.Errorf("task printed %q, want %q", got, want)
	}
}
