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
	"github.com/berth/berth/internal/testenv"
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
)

// crashSchedule is every crash point of the restore and stop paths.
var crashSchedule = []struct {
	point string
	path  crashPath
}{
	{fault.AfterClaim, restorePath},
	{fault.AfterRecover, restorePath},
	{fault.AfterCheck, restorePath},
	{fault.HealTasksStopped, healPath},
	{fault.HealScope + "/" + fault.AfterDel, healPath},
	{fault.HealScope + "/" + fault.DuringRemove, healPath},
	{fault.HealScope + "/" + fault.AfterNetns, healPath},
	{fault.HealScope + "/" + fault.AfterAdd, healPath},
	{fault.Healed, healPath},
	{fault.HealScope + "/" + fault.TaskStarted, healPath},
	{fault.HealScope + "/" + fault.TaskRunning, healPath},
	{fault.StopRequested, stopPath},
	{fault.TaskExited, stopPath},
	{fault.TaskExitRecorded, stopPath},
	{fault.TaskDestroyed, stopPath},
	{fault.AfterDel, stopPath},
	{fault.DuringRemove, stopPath},
	{fault.BeforeRecordTerminal, stopPath},
	{fault.AfterRecordTerminal, stopPath},
	{fault.DrainRequested, drainPath},
	{fault.DrainStopped, drainPath},
	{fault.AfterTasksDone, finishedPath},
	{fault.MidDelPrefix + "portmap", finishedPath},
}

// twiceJob is a one-task batch job in the test network whose task counts
// its runs in a file of its task dir (local/: an exec task's user may
// write there) and exits 0 at once (as the README's seed job does).
func twiceJob(driver string) string {
	config := `
      config {
        command = "/bin/sh"
        args    = ["-c", "echo run >> ${NOMAD_TASK_DIR}/runs; exit 0"]
      }`
	if driver == "podman" {
		config = `
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "echo run >> /local/runs; exit 0"]
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
			subnet := fmt.Sprintf("10.199.%d.0/24", 228+di)
			t.Run(drv+"/"+cp.point, func(t *testing.T) {
				start := time.Now()
				defer func() { t.Logf("%s/%s: %.1fs", drv, cp.point, time.Since(start).Seconds()) }()
				crashCase(t, drv, subnet, cp.point, cp.path)
			})
		}
	}
}

func crashCase(t *testing.T, drv, subnet, point string, path crashPath) {
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
		e.stopAndDrain(t, c, p, opts.jobs, before)

	case finishedPath:
		// The task ran to its end: the next agent tears the allocation
		// down (no CHECK of the half-removed network, no heal) and records
		// it complete; the task never runs again.
		const batch = "bcs-twice"
		pa := e.startArmed(t, cfgPath, c, point, true)
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, twiceJob(drv))), "twice.hcl")
		testenv.Must(t, err)
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		var l []api.AllocStub
		waitUntil(time.Minute, func() bool {
			l = allocsOf(t, c, batch)
			return len(l) == 1 && l[0].Status == api.AllocComplete
		})
		if len(l) != 1 || l[0].Status != api.AllocComplete {
			t.Fatalf("the finished batch allocation is not recorded complete after the restart: %+v", l)
		}
		a, err := c.Allocation(context.Background(), l[0].ID)
		testenv.Must(t, err)
		for _, ev := range a.Events {
			switch ev.Type {
			case "Network Checked", "Network Check Failed", "Network Healed", "Not Re-attached":
				t.Errorf("the finished allocation was resumed, not torn down: event %s: %s", ev.Type, ev.Message)
			}
		}
		// An exec task (user nobody, its own root) cannot write where the
		// test reads: its one run is proven by the events above.
		if drv != "exec" {
			b, err := os.ReadFile(filepath.Join(driver.TaskDir(filepath.Join(e.cfg.DataDir, "alloc", a.ID), "t"), "local", "runs"))
			if err != nil {
				t.Fatalf("the batch task's runs file: %v", err)
			}
			if n := strings.Count(string(b), "run"); n != 1 {
				t.Errorf("the batch task ran %d times, want 1; events: %+v", n, a.Events)
			}
		}
		e.waitInvariants(t, c, p.cmd.Process.Pid, invariantOpts{jobs: []string{batch}}, time.Minute)
		e.stopAndDrain(t, c, p, []string{batch}, before)

	case drainPath:
		pa := e.startArmed(t, cfgPath, c, point, true)
		submit()
		_ = pa.drain() // the agent dies draining
		diedAt(t, pa, point)
		p := e.startBinary(t, cfgPath, c)
		e.waitInvariants(t, c, p.cmd.Process.Pid, opts, time.Minute)
		e.stopAndDrain(t, c, p, opts.jobs, before)
	}
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
