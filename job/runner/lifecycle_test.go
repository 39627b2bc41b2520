package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// stamp is a shell line a task runs to record "<what> <unix ns>" in the
// allocation's shared order file: the tasks' own clocks, not berth's. It
// is quoted for an HCL string.
func stamp(what string) string {
	return `echo \"` + what + ` $(date +%s%N)\" >> $NOMAD_ALLOC_DIR/order`
}

// readStamps returns the first time each event was recorded.
func readStamps(t *testing.T, allocDir string) map[string]time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(allocDir, "alloc", "order"))
	testenv.Must(t, err)
	out := map[string]time.Time{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		ns, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("order line %q: %v", l, err)
		}
		if _, ok := out[l[:i]]; !ok {
			out[l[:i]] = time.Unix(0, ns)
		}
	}
	return out
}

func before(t *testing.T, st map[string]time.Time, a, b string) {
	t.Helper()
	ta, oka := st[a]
	tb, okb := st[b]
	if !oka || !okb {
		t.Errorf("%q or %q not recorded: %v", a, b, st)
		return
	}
	if !ta.Before(tb) {
		t.Errorf("%q (%s) is not before %q (%s)", a, ta.Format(time.StampNano), b, tb.Format(time.StampNano))
	}
}

func runOne(t *testing.T, e *env, src string) (*store.Allocation, *runner.Summary) {
	t.Helper()
	j := e.job(t, src)
	var alloc *store.Allocation
	sum, err := e.r.RunJob(testenv.Context(t, 3*time.Minute), j, runner.RunOptions{OnAlloc: func(a *store.Allocation) { alloc = a }})
	testenv.Must(t, err)
	if alloc == nil {
		t.Fatal("no allocation")
	}
	checkClean(t, e, sum)
	return alloc, sum
}

// eventTypes are an allocation's events, one a line: "Type: message",
// "Type (task): message" for a task's.
func eventTypes(a *store.Allocation) string {
	var l []string
	for _, ev := range a.Events {
		typ := ev.Type
		if ev.Task != "" {
			typ += " (" + ev.Task + ")"
		}
		l = append(l, typ+": "+ev.Message)
	}
	return strings.Join(l, "\n")
}

func taskState(t *testing.T, a *store.Allocation, name string) store.TaskState {
	t.Helper()
	for _, ts := range a.Tasks {
		if ts.Name == name {
			return ts
		}
	}
	t.Fatalf("no task %q in %+v", name, a.Tasks)
	return store.TaskState{}
}

// Nomad's lifecycle order, from timestamps the tasks write themselves: the
// prestart task completes and the prestart sidecar runs before the main
// task starts; the poststart task starts after it; the sidecars are
// stopped after the main task ends; the poststop task runs after all of
// them, while the namespace still exists. Every task is in the group's
// namespace and writes into the shared alloc dir.
func TestLifecycleOrder(t *testing.T) {
	e := newEnv(t, "10.199.130.0/24")
	sidecar := func(name string) string {
		return `trap '` + stamp(name+" stopped") + `; exit 0' TERM; ` + stamp(name+" start") + `; readlink /proc/self/ns/net > $NOMAD_ALLOC_DIR/` + name + `.ns; while :; do sleep 0.05; done`
	}
	src := `job "order" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "init" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("init start") + `; readlink /proc/self/ns/net > $NOMAD_ALLOC_DIR/init.ns; sleep 0.5; ` + stamp("init end") + `"]
      }
    }
    task "side" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + sidecar("side") + `"]
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("main start") + `; readlink /proc/self/ns/net > $NOMAD_ALLOC_DIR/main.ns; sleep 1; ` + stamp("main end") + `"]
      }
    }
    task "post" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("post start") + `; readlink /proc/self/ns/net > $NOMAD_ALLOC_DIR/post.ns"]
      }
    }
    task "postside" {
      driver = "raw_exec"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + sidecar("postside") + `"]
      }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("cleanup start") + `; readlink /proc/self/ns/net > $NOMAD_ALLOC_DIR/cleanup.ns; grep -q eth0 /proc/net/dev && ` + stamp("cleanup saw eth0") + `"]
      }
    }
  }
}`
	a, _ := runOne(t, e, src)
	if a.Status != store.AllocComplete {
		t.Fatalf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
	}
	dir := filepath.Join(e.dataDir, "alloc", a.ID)
	st := readStamps(t, dir)
	before(t, st, "init end", "main start")
	before(t, st, "side start", "main start")
	before(t, st, "main start", "post start")
	before(t, st, "main start", "postside start")
	before(t, st, "main end", "side stopped")
	before(t, st, "main end", "postside stopped")
	before(t, st, "side stopped", "cleanup start")
	before(t, st, "postside stopped", "cleanup start")
	before(t, st, "post start", "cleanup start")
	if _, ok := st["cleanup saw eth0"]; !ok {
		t.Errorf("the poststop task did not see the namespace's eth0: %v", st)
	}
	host, _ := os.Readlink("/proc/self/ns/net")
	var ns []string
	for _, n := range []string{"init", "side", "main", "post", "postside", "cleanup"} {
		b, err := os.ReadFile(filepath.Join(dir, "alloc", n+".ns"))
		testenv.Must(t, err)
		ns = append(ns, strings.TrimSpace(string(b)))
	}
	sort.Strings(ns)
	if ns[0] != ns[len(ns)-1] || ns[0] == host {
		t.Errorf("tasks are not all in the group's namespace (host %s): %v", host, ns)
	}
	for _, ts := range a.Tasks {
		if ts.Failed || ts.State != "dead" {
			t.Errorf("task %s: %+v", ts.Name, ts)
		}
	}
}

// A prestart task that fails fails the allocation: the main task never
// starts, the sidecar is stopped, the poststop task still runs.
func TestLifecyclePrestartFailure(t *testing.T) {
	e := newEnv(t, "10.199.131.0/24")
	src := `job "badinit" {
  type = "service"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    # One allocation: its failure is not rescheduled.
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "init" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("init") + `; exit 7"]
      }
    }
    task "side" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '` + stamp("side stopped") + `; exit 0' TERM; while :; do sleep 0.05; done"]
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("main") + `; sleep 60"]
      }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("cleanup") + `"]
      }
    }
  }
}`
	a, sum := runOne(t, e, src)
	if a.Status != store.AllocFailed || sum.ByStatus[store.AllocFailed] != 1 {
		t.Fatalf("allocation %s, want failed\n%s", a.Status, eventTypes(a))
	}
	st := readStamps(t, filepath.Join(e.dataDir, "alloc", a.ID))
	if _, ok := st["main"]; ok {
		t.Error("the main task started after its prestart task failed")
	}
	before(t, st, "init", "cleanup")
	before(t, st, "side stopped", "cleanup")
	if ts := taskState(t, a, "init"); !ts.Failed || ts.ExitCode != 7 {
		t.Errorf("init: %+v", ts)
	}
	if ts := taskState(t, a, "main"); ts.State != "dead" || !ts.StartedAt.IsZero() {
		t.Errorf("main: %+v", ts)
	}
	if ev := eventTypes(a); !strings.Contains(ev, "Not Started: task(s) main not started: task init (prestart) failed") {
		t.Errorf("events:\n%s", ev)
	}
}

// When the leader exits the other tasks are stopped, and the allocation
// is complete.
func TestLifecycleLeader(t *testing.T) {
	e := newEnv(t, "10.199.131.0/24")
	src := `job "lead" {
  type = "batch"
  group "g" {
    task "leader" {
      driver = "raw_exec"
      leader = true
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 0.3; ` + stamp("leader end") + `"]
      }
    }
    task "follower" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '` + stamp("follower stopped") + `; exit 0' TERM; while :; do sleep 0.05; done"]
      }
    }
  }
}`
	a, _ := runOne(t, e, src)
	if a.Status != store.AllocComplete {
		t.Fatalf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
	}
	st := readStamps(t, filepath.Join(e.dataDir, "alloc", a.ID))
	before(t, st, "leader end", "follower stopped")
	if ev := eventTypes(a); !strings.Contains(ev, "leader task leader ended: stopping follower") || !strings.Contains(ev, "Leader Task Dead (follower): Leader Task in Group dead") {
		t.Errorf("events:\n%s", ev)
	}
}

// kill_signal is what a stop sends; shutdown_delay (group, then task) is
// waited before it; a task that ignores it is SIGKILLed after kill_timeout.
func TestKillSignalShutdownDelay(t *testing.T) {
	e := newEnv(t, "10.199.131.0/24")
	src := `job "stopper" {
  type = "service"
  group "g" {
    shutdown_delay = "700ms"
    task "polite" {
      driver         = "raw_exec"
      kill_signal    = "SIGINT"
      shutdown_delay = "500ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '` + stamp("polite TERM") + `; exit 0' TERM; trap '` + stamp("polite INT") + `; exit 0' INT; ` + stamp("polite start") + `; while :; do sleep 0.05; done"]
      }
    }
    task "stubborn" {
      driver       = "raw_exec"
      kill_signal  = "SIGUSR1"
      kill_timeout = "1s"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '` + stamp("stubborn USR1") + `' USR1; ` + stamp("stubborn start") + `; while :; do sleep 0.05; done"]
      }
    }
  }
}`
	j := e.job(t, src)
	ctx, cancel := context.WithCancel(testenv.Context(t, 2*time.Minute))
	defer cancel()
	var stopAt time.Time
	started := make(chan struct{})
	go func() {
		<-started
		// Both tasks have written their start line before they wait.
		dir := ""
		for dir == "" || !strings.Contains(readFile(dir), "polite start") || !strings.Contains(readFile(dir), "stubborn start") {
			time.Sleep(20 * time.Millisecond)
			dir = lastAllocOrder(e)
		}
		stopAt = time.Now()
		cancel()
	}()
	var alloc *store.Allocation
	var once bool
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{
		OnStart: func(*store.Allocation) {
			if !once {
				once = true
				close(started)
			}
		},
		OnAlloc: func(a *store.Allocation) { alloc = a },
	})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if alloc.Status != store.AllocComplete {
		t.Fatalf("stopped allocation %s: %s\n%s", alloc.Status, alloc.StatusDesc, eventTypes(alloc))
	}
	st := readStamps(t, filepath.Join(e.dataDir, "alloc", alloc.ID))
	if _, ok := st["polite TERM"]; ok {
		t.Error("SIGTERM was sent to a task whose kill_signal is SIGINT")
	}
	intAt, ok := st["polite INT"]
	if !ok {
		t.Fatalf("SIGINT not received: %v\n%s", st, eventTypes(alloc))
	}
	// Lower bounds only: both delays must have passed before the signal.
	if d := intAt.Sub(stopAt); d < 1200*time.Millisecond {
		t.Errorf("SIGINT came %s after the stop, before the group's 700ms and the task's 500ms shutdown delays", d)
	}
	if _, ok := st["stubborn USR1"]; !ok {
		t.Errorf("SIGUSR1 not received: %v", st)
	}
	if ts := taskState(t, alloc, "stubborn"); ts.Signal != 9 {
		t.Errorf("stubborn task: %+v, want SIGKILLed after its kill_timeout", ts)
	}
	ev := eventTypes(alloc)
	for _, want := range []string{"Waiting Shutdown Delay: group g: shutdown_delay 700ms", "Waiting Shutdown Delay (polite): Waiting 500ms before killing (shutdown_delay)", "Killing (polite): Sent interrupt. Waiting"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// lastAllocOrder is the order file of the newest allocation dir.
func lastAllocOrder(e *env) string {
	ents, _ := os.ReadDir(filepath.Join(e.dataDir, "alloc"))
	var newest string
	var at time.Time
	for _, de := range ents {
		if fi, err := de.Info(); err == nil && fi.ModTime().After(at) {
			newest, at = de.Name(), fi.ModTime()
		}
	}
	if newest == "" {
		return ""
	}
	return filepath.Join(e.dataDir, "alloc", newest, "alloc", "order")
}

// A task that runs longer than max_run_duration is killed and fails, and
// is not restarted.
func TestMaxRunDuration(t *testing.T) {
	e := newEnv(t, "10.199.131.0/24")
	src := `job "bounded" {
  type = "service"
  group "g" {
    restart {
      attempts = 3
      delay    = "100ms"
      interval = "1m"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver           = "raw_exec"
      max_run_duration = "1s"
      kill_timeout     = "1s"
      config {
        command = "/bin/sleep"
        args    = ["60"]
      }
    }
  }
}`
	a, _ := runOne(t, e, src)
	if a.Status != store.AllocFailed {
		t.Fatalf("allocation %s, want failed\n%s", a.Status, eventTypes(a))
	}
	ts := taskState(t, a, "t")
	if !ts.Failed || ts.Restarts != 0 || ts.Signal != 15 {
		t.Errorf("task: %+v", ts)
	}
	if d := ts.FinishedAt.Sub(ts.StartedAt); d < time.Second {
		t.Errorf("killed after %s, before its max_run_duration", d)
	}
	if ev := eventTypes(a); !strings.Contains(ev, "Max Run Duration Exceeded (t): Task ran longer than its max_run_duration 1s") {
		t.Errorf("events:\n%s", ev)
	}
}

// A task's restart block overrides its group's.
func TestTaskRestart(t *testing.T) {
	e := newEnv(t, "10.199.131.0/24")
	src := `job "retry" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      restart {
        attempts = 2
        delay    = "50ms"
        interval = "1m"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "` + stamp("run") + `; exit 3"]
      }
    }
    task "once" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}`
	a, _ := runOne(t, e, src)
	if ts := taskState(t, a, "t"); ts.Restarts != 2 || !ts.Failed || ts.ExitCode != 3 {
		t.Errorf("task t: %+v", ts)
	}
	if n := strings.Count(readFile(filepath.Join(e.dataDir, "alloc", a.ID, "alloc", "order")), "run "); n != 3 {
		t.Errorf("task ran %d times, want 3", n)
	}
}
