package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// The crash-schedule suites (this file and chaos_test.go) use the subnets
// 10.199.228-235.0/24.

// crashPath is where a crash point lies, which says how the agent is
// brought there.
type crashPath int

const (
	// restorePath: the next agent dies re-adopting what a SIGKILLed agent
	// left.
	restorePath crashPath = iota
	// healPath: as restorePath, with the namespace broken (eth0 deleted)
	// while no agent ran, so that CHECK fails and the agent heals.
	healPath
	// stopPath: the agent dies stopping the job (berth job stop).
	stopPath
	// drainPath: the agent dies draining (berth agent drain).
	drainPath
	// finishedPath: the agent dies tearing down an allocation whose batch
	// task has run to its end (before the DEL, or half-way through it).
	finishedPath
	// startPath: the agent dies starting a batch allocation (before its
	// network, half-way, its task started and not recorded, recorded):
	// the next agent runs it to its end, its task exactly once.
	startPath
	// startServicePath: startPath for the service: the next agent has it
	// running with one instance of its task.
	startServicePath
	// startLostPath: startPath, and the task's supervisor SIGKILLed while
	// no agent runs (the task runs on in its cgroup, its exit will never
	// be known): the next agent removes it and records the batch task
	// failed, exit unknown, never run again. raw_exec and exec only (a
	// container's exit is always known to podman).
	startLostPath
	// reschedulePath: the agent dies while a failed batch allocation's
	// replacement waits out its reschedule delay (both recorded): the
	// next agent runs the replacement once, after the delay.
	reschedulePath
)

// Restore events (job/runner) the crash rows expect of the next agent.
const (
	evClaimed     = runner.EventClaimed
	evReattached  = runner.EventReattached
	evAdopted     = runner.EventAdopted
	evRemoved     = runner.EventRemovedUnrecorded
	evStopped     = runner.EventStopFinished
	evUnknown     = runner.EventExitUnknown
	evExit        = runner.EventExitRecorded
	evCheckFailed = runner.EventCheckFailed
	evHealed      = runner.EventHealed
)

// crashSchedule is every crash point of the start, restore and stop
// paths. want are the event types the next agent must record on the
// allocation (after its Claimed), each also counted in
// berth_restore_actions_total (Claimed aside), and none of not; only
// restricts a row to one driver (a point only it has), skip leaves one
// out.
var crashSchedule = []struct {
	point      string
	path       crashPath
	want, not  []string
	only, skip string
}{
	{point: fault.BeforeAllocSetup, path: startPath, want: []string{evClaimed}},
	{point: fault.AfterNetns, path: startPath, want: []string{evClaimed}},
	{point: fault.AfterAdd, path: startPath, want: []string{evClaimed}},
	{point: fault.AfterContainerCreate, path: startPath, want: []string{evClaimed, evRemoved}, only: "podman"},
	{point: fault.TaskStarted, path: startPath, want: []string{evClaimed, evAdopted}},
	{point: fault.TaskStarted, path: startServicePath, want: []string{evClaimed, evAdopted}},
	{point: fault.TaskStarted, path: startLostPath, want: []string{evClaimed, evUnknown}, skip: "podman"},
	{point: fault.TaskRunning, path: startPath, want: []string{evClaimed, evReattached}},
	{point: fault.AfterClaim, path: restorePath, want: []string{evClaimed, evReattached}},
	{point: fault.AfterRecover, path: restorePath, want: []string{evClaimed, evReattached}},
	{point: fault.AfterCheck, path: restorePath, want: []string{evClaimed, evReattached}},
	// Died healing before the heal was recorded: the next agent heals.
	{point: fault.HealTasksStopped, path: healPath, want: []string{evClaimed, evCheckFailed, evHealed}},
	{point: fault.HealScope + "/" + fault.AfterDel, path: healPath, want: []string{evClaimed, evCheckFailed, evHealed}},
	{point: fault.HealScope + "/" + fault.DuringRemove, path: healPath, want: []string{evClaimed, evCheckFailed, evHealed}},
	{point: fault.HealScope + "/" + fault.AfterNetns, path: healPath, want: []string{evClaimed, evCheckFailed, evHealed}},
	{point: fault.HealScope + "/" + fault.AfterAdd, path: healPath, want: []string{evClaimed, evCheckFailed, evHealed}},
	// Healed and recorded, the tasks not restarted: they start (the
	// status files of the attempts stopped for the heal are not taken
	// for unrecorded tasks' exits).
	{point: fault.Healed, path: healPath, want: []string{evClaimed}, not: []string{evAdopted}},
	{point: fault.HealScope + "/" + fault.TaskStarted, path: healPath, want: []string{evClaimed, evAdopted}},
	{point: fault.HealScope + "/" + fault.TaskRunning, path: healPath, want: []string{evClaimed, evReattached}},
	{point: fault.StopRequested, path: stopPath, want: []string{evClaimed, evStopped}},
	{point: fault.TaskExited, path: stopPath, want: []string{evClaimed, evStopped}},
	{point: fault.TaskExitRecorded, path: stopPath, want: []string{evClaimed, evStopped}},
	{point: fault.TaskDestroyed, path: stopPath, want: []string{evClaimed, evStopped}},
	{point: fault.AfterDel, path: stopPath, want: []string{evClaimed, evStopped}},
	{point: fault.DuringRemove, path: stopPath, want: []string{evClaimed, evStopped}},
	{point: fault.BeforeRecordTerminal, path: stopPath, want: []string{evClaimed, evStopped}},
	// Recorded terminal before the death: nothing left to restore.
	{point: fault.AfterRecordTerminal, path: stopPath},
	{point: fault.DrainRequested, path: drainPath, want: []string{evClaimed, evStopped}},
	{point: fault.DrainStopped, path: drainPath},
	{point: fault.AfterTasksDone, path: finishedPath, want: []string{evClaimed, evExit}},
	{point: fault.RescheduleWaiting, path: reschedulePath, want: []string{evClaimed}, only: "raw_exec"},
	{point: fault.MidDelPrefix + "portmap", path: finishedPath, want: []string{evClaimed, evExit}},
}

// twiceJob is a one-task batch job in the test network whose task counts
// its runs in a file of the allocation's shared dir (any task user may
// write there), then runs for sleep seconds and exits 0 (as the README's
// seed job does, with 0).
func twiceJob(driver string, sleep int) string {
	script := fmt.Sprintf("echo run >> ${NOMAD_ALLOC_DIR}/runs; sleep %d; exit 0", sleep)
	config := `
      config {
        command = "/bin/sh"
        args    = ["-c", "` + script + `"]
      }`
	if driver == "podman" {
		config = `
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "` + script + `"]
      }`
	}
	return `job "bcs-twice" {
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
      driver = "` + driver + `"` + config + `
    }
  }
}
`
}

// runsOf is how many times the batch task of allocation id ran (twiceJob's
// count).
func (e *testEnv) runsOf(t *testing.T, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(driver.SharedDir(filepath.Join(e.cfg.DataDir, "alloc", id)), "runs"))
	if err != nil {
		t.Fatalf("the batch task's runs file: %v", err)
	}
	return strings.Count(string(b), "run")
}

// crashJob is a one-task service with a port and a native service, in
// the test network.
func crashJob(driver string) string {
	config := `
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }`
	if driver == "podman" {
		config = `
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sleep"
        args    = ["600"]
      }`
	}
	return `job "bcs-svc" {
  type = "service"
  group "g" {
    restart {
      attempts = 3
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name     = "bcs-svc"
      port     = "http"
      provider = "nomad"
    }
    task "t" {
      driver       = "` + driver + `"
      kill_timeout = "2s"` + config + `
    }
  }
}
`
}

// TestCrashSchedule kills the agent (SIGKILL, by its own crash point) at
// every step of the restore and stop paths, for each driver, restarts it
// unarmed, and checks the invariants: every allocation running (task
// alive, one instance, namespace passing CHECK, service registered) or
// terminal with nothing left; a stop survives the death (the job's
// allocations end terminal); after stop and drain the host is as before.
func TestCrashSchedule(t *testing.T) {
	drivers := signalDrivers(t)
	for di, drv := range drivers {
		for _, cp := range crashSchedule {
			if cp.only != "" && cp.only != drv || cp.skip == drv {
				continue
			}
			subnet := fmt.Sprintf("10.199.%d.0/24", 228+di)
			name := drv + "/" + cp.point
			switch cp.path {
			case startServicePath:
				name += "/service"
			case startLostPath:
				name += "/supervisor-killed"
			}
			t.Run(name, func(t *testing.T) {
				start := time.Now()
				defer func() { t.Logf("%s: %.1fs", name, time.Since(start).Seconds()) }()
				crashCase(t, drv, subnet, cp.point, cp.path, cp.want, cp.not)
			})
		}
	}
}

func crashCase(t *testing.T, drv, subnet, point string, path crashPath, want, not []string) {
	e := newTestEnv(t, subnet)
	before := hostSnapshot(t)
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	const job = "bcs-svc"
	opts := invariantOpts{jobs: []string{job}, services: map[string]bool{job: true}}
	submit := func() *api.Allocation {
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, crashJob(drv))), "svc.hcl")
		testenv.Must(t, err)
		return runningAlloc(t, c, job)
	}

	switch path {
	case restorePath, healPath:
		p := e.startBinary(t, cfgPath, c)
		old := submit()
		if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
			t.Fatal(err)
		}
		if path == healPath {
			out, err := exec.Command("nsenter", "--net="+old.Network.NetnsPath, "ip", "link", "del", "eth0").CombinedOutput()
			if err != nil {
				t.Fatalf("delete eth0 in %s: %v: %s", old.Network.NetnsPath, err, out)
			}
		}
		diedAt(t, e.startArmed(t, cfgPath, c, point, false), point)
		p = e.startBinary(t, cfgPath, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, opts, time.Minute)
		if l := allocsOf(t, c, job); countStatus(l, api.AllocRunning) != 1 {
			t.Errorf("after the restart the service has %d running allocations, want 1: %+v", countStatus(l, api.AllocRunning), l)
		}
		assertRestore(t, c, job, point, want, not)
		e.stopAndDrain(t, c, p, opts.jobs, before)

	case stopPath:
		pa := e.startArmed(t, cfgPath, c, point, true)
		submit()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, _ = c.StopJob(ctx, job) // the agent dies answering it
		}()
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, opts, time.Minute)
		// A stop is a desired state: the next agent finishes it.
		stopped := false
		waitUntil(30*time.Second, func() bool {
			l := allocsOf(t, c, job)
			stopped = countStatus(l, api.AllocRunning)+countStatus(l, api.AllocPending) == 0
			return stopped
		})
		if !stopped {
			t.Errorf("the job stop did not survive the agent's death at %s: the next agent runs it again: %+v", point, allocsOf(t, c, job))
		}
		assertRestore(t, c, job, point, want, not)
		e.stopAndDrain(t, c, p, opts.jobs, before)

	case finishedPath:
		// The task ran to its end: the next agent tears the allocation
		// down (no CHECK of the half-removed network, no heal) and records
		// it complete; the task never runs again.
		pa := e.startArmed(t, cfgPath, c, point, true)
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, twiceJob(drv, 0))), "twice.hcl")
		testenv.Must(t, err)
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		a := e.batchRanOnce(t, c, api.AllocComplete)
		for _, ev := range a.Events {
			switch ev.Type {
			case "Network Checked", "Network Check Failed", "Network Healed", "Not Re-attached":
				t.Errorf("the finished allocation was resumed, not torn down: event %s: %s", ev.Type, ev.Message)
			}
		}
		e.waitInvariants(t, c, p.cmd.Process.Pid, invariantOpts{jobs: []string{batchJob}}, time.Minute)
		assertRestore(t, c, batchJob, point, want, not)
		e.stopAndDrain(t, c, p, []string{batchJob}, before)

	case startPath:
		// The task runs 3 s: long enough to be running when the next
		// agent comes, which adopts it (or its exit), never starts it
		// again.
		pa := e.startArmed(t, cfgPath, c, point, true)
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, twiceJob(drv, 3))), "twice.hcl")
		testenv.Must(t, err)
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, invariantOpts{jobs: []string{batchJob}}, time.Minute)
		e.batchRanOnce(t, c, api.AllocComplete)
		e.waitInvariants(t, c, p.cmd.Process.Pid, invariantOpts{jobs: []string{batchJob}}, time.Minute)
		assertRestore(t, c, batchJob, point, want, not)
		e.stopAndDrain(t, c, p, []string{batchJob}, before)

	case startLostPath:
		pa := e.startArmed(t, cfgPath, c, point, true)
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, twiceJob(drv, 3))), "twice.hcl")
		testenv.Must(t, err)
		diedAt(t, pa, point)
		e.killBatchSupervisor(t)
		p := e.startBinary(t, cfgPath, c)
		e.batchRanOnce(t, c, api.AllocFailed)
		e.waitInvariants(t, c, p.cmd.Process.Pid, invariantOpts{jobs: []string{batchJob}}, time.Minute)
		assertRestore(t, c, batchJob, point, want, not)
		e.stopAndDrain(t, c, p, []string{batchJob}, before)

	case startServicePath:
		pa := e.startArmed(t, cfgPath, c, point, true)
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, crashJob(drv))), "svc.hcl")
		testenv.Must(t, err)
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, opts, time.Minute)
		if l := allocsOf(t, c, job); countStatus(l, api.AllocRunning) != 1 {
			t.Errorf("after the restart the service has %d running allocations, want 1: %+v", countStatus(l, api.AllocRunning), l)
		}
		assertRestore(t, c, job, point, want, not)
		e.stopAndDrain(t, c, p, opts.jobs, before)

	case reschedulePath:
		pa := e.startArmed(t, cfgPath, c, point, true)
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, failJob(drv))), "fail.hcl")
		testenv.Must(t, err)
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		e.rescheduledOnce(t, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, invariantOpts{jobs: []string{failJobID}}, time.Minute)
		assertRestore(t, c, failJobID, point, want, not)
		e.stopAndDrain(t, c, p, []string{failJobID}, before)

	case drainPath:
		pa := e.startArmed(t, cfgPath, c, point, true)
		submit()
		_ = pa.drain() // the agent dies draining
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, opts, time.Minute)
		assertRestore(t, c, job, point, want, not)
		e.stopAndDrain(t, c, p, opts.jobs, before)
	}
}

// batchJob is twiceJob's name.
const batchJob = "bcs-twice"

// failJobID is failJob's name.
const failJobID = "bcs-fail"

// failJob is twiceJob whose task fails (exit 3) at once, with the batch
// reschedule policy's defaults (one reschedule, after 5 s).
func failJob(driver string) string {
	return strings.NewReplacer(`job "bcs-twice"`, `job "`+failJobID+`"`, "exit 0", "exit 3").Replace(twiceJob(driver, 0))
}

// rescheduledOnce waits until failJob's failure and its one replacement
// are recorded failed and checks the chain: linked both ways, the same
// index, each task run once.
func (e *testEnv) rescheduledOnce(t *testing.T, c *api.Client) {
	t.Helper()
	var l []api.AllocStub
	waitUntil(time.Minute, func() bool {
		l = allocsOf(t, c, failJobID)
		return len(l) == 2 && countStatus(l, api.AllocFailed) == 2
	})
	if len(l) != 2 || countStatus(l, api.AllocFailed) != 2 {
		t.Fatalf("want the failed allocation and its one replacement, both failed: %+v", l)
	}
	var first, next *api.Allocation
	for _, s := range l {
		a, err := c.Allocation(context.Background(), s.ID)
		testenv.Must(t, err)
		if a.PreviousAllocation == "" {
			first = a
		} else {
			next = a
		}
		if n := e.runsOf(t, a.ID); n != 1 {
			t.Errorf("allocation %s: the task ran %d times, want 1", a.ID, n)
		}
	}
	if first == nil || next == nil || first.NextAllocation != next.ID || next.PreviousAllocation != first.ID || next.Index != first.Index ||
		len(next.RescheduleTracker) != 1 || next.NextAllocation != "" {
		t.Errorf("reschedule chain: %+v / %+v", first, next)
	}
}

// batchRanOnce waits until twiceJob's one allocation is recorded with
// status and checks that its task ran exactly once; it returns the
// allocation.
func (e *testEnv) batchRanOnce(t *testing.T, c *api.Client, status string) *api.Allocation {
	t.Helper()
	var l []api.AllocStub
	waitUntil(time.Minute, func() bool {
		l = allocsOf(t, c, batchJob)
		return len(l) == 1 && l[0].Status == status
	})
	if len(l) != 1 || l[0].Status != status {
		t.Fatalf("the batch allocation is not recorded %s after the restart: %+v", status, l)
	}
	a, err := c.Allocation(context.Background(), l[0].ID)
	testenv.Must(t, err)
	if n := e.runsOf(t, a.ID); n != 1 {
		t.Errorf("the batch task ran %d times, want 1; events: %+v", n, a.Events)
	}
	return a
}

// killBatchSupervisor SIGKILLs the supervisor of twiceJob's task while
// no agent runs (the allocation read from the store).
func (e *testEnv) killBatchSupervisor(t *testing.T) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	st, err := store.Open(ctx, e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	live, err := st.ListAllocations(ctx, store.AllocFilter{NonTerminal: true})
	st.Close()
	testenv.Must(t, err)
	killed := 0
	for _, a := range live {
		if a.JobID != batchJob {
			continue
		}
		for _, pid := range supervisorsOf(a.ID, "t") {
			if err := proc.KillIfSame(pid, startOf(pid), syscall.SIGKILL); err != nil {
				t.Fatalf("kill supervisor %d: %v", pid, err)
			}
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d supervisors of %s's task, want 1: %+v", killed, batchJob, live)
	}
}

// restoreActions are the event types a new agent records of what it
// found and did (each counted in berth_restore_actions_total).
var restoreActions = map[string]bool{
	runner.EventReattached: true, runner.EventNotReattached: true,
	runner.EventCheckFailed: true, runner.EventHealed: true,
	runner.EventAdopted: true, runner.EventRemovedUnrecorded: true,
	runner.EventExitRecorded: true, runner.EventExitUnknown: true,
	runner.EventStopFinished: true,
}

// assertRestore checks that what the agent started after the death at
// point found and did is visible: the job's allocations have, after the
// new agent's Claimed event, each event type of want (waiting for them a
// while), and every restore action among their events is counted in the
// live agent's berth_restore_actions_total; none of not is recorded.
func assertRestore(t *testing.T, c *api.Client, job, point string, want, not []string) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	var got map[string][]string // type -> messages, after the last Claimed
	missing := func() []string {
		got = map[string][]string{}
		stubs, err := c.Allocations(ctx, job)
		if err != nil {
			return []string{err.Error()}
		}
		for _, s := range stubs {
			a, err := c.Allocation(ctx, s.ID)
			if err != nil {
				continue
			}
			claimed := -1
			for i, ev := range a.Events {
				if ev.Type == runner.EventClaimed {
					claimed = i
				}
			}
			if claimed < 0 {
				continue // not left by the dead agent
			}
			for _, ev := range a.Events[claimed:] {
				got[ev.Type] = append(got[ev.Type], ev.Message)
			}
		}
		var out []string
		for _, w := range want {
			if len(got[w]) == 0 {
				out = append(out, w)
			}
		}
		return out
	}
	var m []string
	waitUntil(30*time.Second, func() bool { m = missing(); return len(m) == 0 })
	if len(m) > 0 {
		t.Errorf("after the death at %s the allocations of %s lack the restore event(s) %v; the new agent recorded %v", point, job, m, got)
	}
	for _, n := range not {
		if len(got[n]) > 0 {
			t.Errorf("after the death at %s the new agent recorded %s: %v", point, n, got[n])
		}
	}
	if len(want) == 0 && len(got) > 0 {
		t.Logf("after the death at %s (nothing expected) the new agent recorded %v", point, got)
	}
	text := scrape(t, c)
	for typ, msgs := range got {
		if !restoreActions[typ] {
			continue
		}
		if n := metricSum(text, "berth_restore_actions_total", map[string]string{"action": typ}); n < 1 {
			t.Errorf("event %s (%s) not counted: berth_restore_actions_total{action=%q} is %v", typ, msgs[0], typ, n)
		}
	}
	t.Logf("restore after %s: %v", point, got)
}

// waitUntil polls cond until it holds or d passes; it reports the last
// result.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}
