package runner_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// taskEvents are the events of task name: "Type: message", in order.
func taskEvents(a *store.Allocation, name string) []store.Event {
	var out []store.Event
	for _, ev := range a.Events {
		if ev.Task == name {
			out = append(out, ev)
		}
	}
	return out
}

func eventLines(evs []store.Event) string {
	var l []string
	for _, ev := range evs {
		l = append(l, ev.Type+": "+ev.Message)
	}
	return strings.Join(l, "\n")
}

// Task events are Nomad's: a batch task failing twice with attempts 1 and
// mode "fail" is received, set up, started, terminated with its exit
// code, restarted within the policy, and not restarted after its second
// failure, with Nomad's words.
func TestTaskEventsRestartFail(t *testing.T) {
	e := newEnv(t, "10.199.240.0/24")
	a, _ := runOne(t, e, `job "evfail" {
  type = "batch"
  group "g" {
    reschedule {
      attempts = 0
    }
    restart {
      attempts = 1
      interval = "1m"
      delay    = "100ms"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 3"]
      }
    }
  }
}`)
	if a.Status != store.AllocFailed {
		t.Fatalf("allocation %s, want failed\n%s", a.Status, eventTypes(a))
	}
	got := eventLines(taskEvents(a, "t"))
	restarting := regexp.MustCompile(`^Restarting: Task restarting in 1[0-2][0-9](\.[0-9]+)?ms$`)
	lines := strings.Split(got, "\n")
	want := []string{
		"Received: Task received by client",
		"Task Setup: Building Task Directory",
		"Started: Task started by client",
		"Terminated: Exit Code: 3",
		"", // Restarting, with the delay and its jitter (up to 25 %)
		"Started: Task started by client",
		"Terminated: Exit Code: 3",
		`Not Restarting: Exceeded allowed attempts 1 in interval 1m0s and mode is "fail"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("task events:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	for i, w := range want {
		if (w == "" && !restarting.MatchString(lines[i])) || (w != "" && lines[i] != w) {
			t.Errorf("event %d: %q, want %q\n%s", i, lines[i], w, got)
		}
	}
}

// restart mode "delay", as Nomad 1.6.5: once the attempts are used within
// the interval, the task waits until the interval ends (the allocation
// pending meanwhile, none of its tasks running), with Nomad's Restarting
// event; the next failure opens a new interval with a fresh count.
func TestRestartModeDelay(t *testing.T) {
	e := newEnv(t, "10.199.240.0/24")
	j := e.job(t, `job "evdelay" {
  type = "batch"
  group "g" {
    restart {
      attempts = 1
      interval = "5s"
      delay    = "100ms"
      mode     = "delay"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo run >> $NOMAD_ALLOC_DIR/runs; [ $(wc -l < $NOMAD_ALLOC_DIR/runs) -ge 4 ]"]
      }
    }
  }
}`)
	// The allocation's statuses as the store has them while it runs.
	var mu sync.Mutex
	var statuses []store.AllocStatus
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var alloc *store.Allocation
	sum, err := e.r.RunJob(testenv.Context(t, 3*time.Minute), j, runner.RunOptions{
		OnStart: func(a *store.Allocation) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if cur, err := e.st.GetAllocation(ctx, a.ID); err == nil {
						mu.Lock()
						if n := len(statuses); n == 0 || statuses[n-1] != cur.Status {
							statuses = append(statuses, cur.Status)
						}
						mu.Unlock()
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		},
		OnAlloc: func(a *store.Allocation) { alloc = a },
	})
	testenv.Must(t, err)
	cancel()
	wg.Wait()
	checkClean(t, e, sum)
	if alloc == nil || alloc.Status != store.AllocComplete {
		t.Fatalf("allocation %+v", alloc)
	}
	evs := taskEvents(alloc, "t")
	got := eventLines(evs)
	var types []string
	var delayed []int
	for i, ev := range evs {
		types = append(types, ev.Type)
		if ev.Type == runner.TaskRestarting && strings.HasPrefix(ev.Message, "Exceeded allowed attempts, applying a delay - Task restarting in ") {
			delayed = append(delayed, i)
		}
	}
	// run 1 fails, restart within the policy; run 2 fails, the interval
	// is waited out; run 3 fails in a new interval, restart within the
	// policy; run 4 succeeds.
	wantTypes := "Received, Task Setup, Started, Terminated, Restarting, Started, Terminated, Restarting, Started, Terminated, Restarting, Started, Terminated"
	if strings.Join(types, ", ") != wantTypes || len(delayed) != 1 || delayed[0] != 7 {
		t.Fatalf("task events:\n%s\nwant types %s, the second Restarting applying a delay", got, wantTypes)
	}
	if !strings.HasPrefix(evs[10].Message, "Task restarting in ") {
		t.Errorf("the restart after the interval is not within the policy (a fresh count): %q", evs[10].Message)
	}
	// Lower bound: the interval opened when the task was received at the
	// earliest, and the third run waited for its end.
	if d := evs[8].Time.Sub(evs[0].Time); d < 5*time.Second {
		t.Errorf("third run started %s after the task was received, before the 5s interval ended\n%s", d, got)
	}
	if ts := taskState(t, alloc, "t"); ts.Restarts != 3 || ts.Failed {
		t.Errorf("task: %+v", ts)
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(statuses, store.AllocPending); i < 0 || !slices.Contains(statuses[i:], store.AllocRunning) {
		t.Errorf("statuses while it ran: %v; want pending while it waited, then running again", statuses)
	}
}
