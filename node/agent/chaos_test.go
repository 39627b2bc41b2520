package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/store"
)

// Environment of TestChaosRandom: the seed to replay, and how many kills
// a run makes (default chaosKills). Every chaosFullEvery kills, and at
// the end, the whole invariants are checked; after the others, the quick
// ones.
const (
	chaosSeedEnv   = "BERTH_CHAOS_SEED"
	chaosKillsEnv  = "BERTH_CHAOS_KILLS"
	chaosKills     = 50
	chaosFullEvery = 5
)

// randomSeedJob is the README's seed job: podman, every second, its own
// network namespace; a batch task with no restart, so that a task run
// twice shows as a restart. Each run appends its allocation's ID to a
// file of the host volume bcr-runs (the test's directory), which outlives
// the allocation: a task run twice shows there too, whatever the
// allocation's record says.
const randomSeedJob = `job "bcr-seed" {
  type = "batch"
  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = false
  }
  group "debug" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    volume "runs" {
      type   = "host"
      source = "bcr-runs"
    }
    task "sleep" {
      driver = "podman"
      volume_mount {
        volume      = "runs"
        destination = "/runs"
      }
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "echo $NOMAD_ALLOC_ID >> /runs/runs"]
      }
    }
  }
}
`

// randomServiceJob runs a supervised process (raw_exec) and a container
// (podman) in one namespace, with a native service; a task killed under
// it restarts within a second.
const randomServiceJob = `job "bcr-svc" {
  type = "service"
  group "g" {
    restart {
      attempts = 1000
      interval = "1h"
      delay    = "1s"
      mode     = "delay"
    }
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name     = "bcr-svc"
      port     = "http"
      provider = "nomad"
    }
    task "proc" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
    task "ctr" {
      driver       = "podman"
      kill_timeout = "2s"
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
`

// chaosVictims are what TestChaosRandom kills, with their weights: the
// agent most, then a task supervisor, conmon and the agent's podman
// service.
var chaosVictims = []struct {
	name   string
	weight int
}{
	{"agent", 6},
	{"supervisor", 2},
	{"conmon", 1},
	{"podman-service", 1},
}

// TestChaosRandom SIGKILLs, at random moments, the agent (restarted each
// time), a task supervisor, a container's conmon or the agent's podman
// service, under the seed job (podman, every second, private network)
// and a service job. After each kill it waits for the quick invariants
// (every allocation running with its tasks alive and its namespace
// there, or terminal with nothing left; no batch task run twice), every
// chaosFullEvery kills for the whole ones (CNI CHECK, services, and
// nothing on the host that no live allocation accounts for); then it
// stops both jobs and drains: nothing may be left, and no batch task may
// have run twice. BERTH_CHAOS_SEED replays a seed, BERTH_CHAOS_KILLS
// sets the number of kills (default 50; a soak sets more).
func TestChaosRandom(t *testing.T) {
	requireImage(t)
	seed := time.Now().UnixNano()
	if s := os.Getenv(chaosSeedEnv); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
		}
		seed = v
	}
	kills := chaosKills
	if s := os.Getenv(chaosKillsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			t.Fatalf("%s=%q: want a count", chaosKillsEnv, s)
		}
		kills = v
	}
	t.Logf("seed %d, %d kills (replay: %s=%d)", seed, kills, chaosSeedEnv, seed)
	// The kills made, printed again at the end of a failed run's output
	// (after the agents' logs) with the seed.
	var schedule []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d after %d of %d kills: replay with %s=%d %s=%d; the kills:\n  %s",
				seed, len(schedule), kills, chaosSeedEnv, seed, chaosKillsEnv, kills, strings.Join(schedule, "\n  "))
		}
	})
	rng := rand.New(rand.NewSource(seed))

	e := newTestEnv(t, "10.199.232.0/24")
	before := hostSnapshot(t)
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	runsDir := filepath.Join(e.dir, "runs")
	testenv.Must(t, os.Mkdir(runsDir, 0o755))
	runs := filepath.Join(runsDir, "runs")
	cfgPath := e.writeConfig(t)
	// The host volume goes into the one client block writeConfig wrote.
	cfg, err := os.ReadFile(cfgPath)
	testenv.Must(t, err)
	withVol := strings.Replace(string(cfg), "client {\n", fmt.Sprintf("client {\n  host_volume \"bcr-runs\" {\n    path = %q\n  }\n", runsDir), 1)
	if withVol == string(cfg) {
		t.Fatalf("no client block in %s:\n%s", cfgPath, cfg)
	}
	testenv.Must(t, os.WriteFile(cfgPath, []byte(withVol), 0o600))
	p := e.startBinary(t, cfgPath, c)
	for _, src := range []string{randomServiceJob, randomSeedJob} {
		_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, src)), "job.hcl")
		testenv.Must(t, err)
	}
	full := invariantOpts{jobs: []string{"bcr-svc", "bcr-seed"}, services: map[string]bool{"bcr-svc": true}, inFlight: true}
	quick := full
	quick.quick, quick.ongoing = true, map[string]bool{"bcr-seed": true}
	e.waitInvariants(t, c, p.cmd.Process.Pid, full, time.Minute)

	total := 0
	for _, v := range chaosVictims {
		total += v.weight
	}
	done := map[string]int{}
	start := time.Now()
	for i := 0; i < kills; i++ {
		pick := rng.Intn(total)
		victim := ""
		for _, v := range chaosVictims {
			if pick < v.weight {
				victim = v.name
				break
			}
			pick -= v.weight
		}
		// A random moment: the seed job launches every second.
		time.Sleep(time.Duration(rng.Int63n(int64(2 * time.Second))))
		at := time.Since(start)
		what := ""
		switch victim {
		case "agent":
			if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
				t.Fatal(err)
			}
			p = e.startBinary(t, cfgPath, c)
			what = fmt.Sprintf("agent (the next reconciled %.1fs later)", (time.Since(start) - at).Seconds())
		default:
			pid, desc := e.chaosTarget(t, c, victim)
			if pid == 0 {
				// Not there now (between restarts): the agent instead.
				if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
					t.Fatal(err)
				}
				p = e.startBinary(t, cfgPath, c)
				what = fmt.Sprintf("agent, no %s to kill (the next reconciled %.1fs later)", victim, (time.Since(start) - at).Seconds())
				victim = "agent"
				break
			}
			if err := proc.KillIfSame(pid, startOf(pid), syscall.SIGKILL); err != nil {
				what = desc + ": " + err.Error()
			} else {
				what = desc
			}
		}
		done[victim]++
		whole := (i+1)%chaosFullEvery == 0
		schedule = append(schedule, fmt.Sprintf("%d at %.1fs: %s", i+1, at.Seconds(), what))
		settle := time.Now()
		if whole {
			e.waitInvariants(t, c, p.cmd.Process.Pid, full, time.Minute)
			e.waitStrays(t, before, time.Minute)
		} else {
			e.waitInvariants(t, c, p.cmd.Process.Pid, quick, time.Minute)
		}
		ranOnce(t, runs, nil)
		pass := "quick"
		if whole {
			pass = "whole"
		}
		t.Logf("kill %d/%d at %.1fs: %s (%s invariants held %.1fs later)", i+1, kills, at.Seconds(), what, pass, time.Since(settle).Seconds())
	}
	t.Logf("kills by victim: %v in %.1fs", done, time.Since(start).Seconds())

	e.stopAndDrain(t, c, p, full.jobs, before)
	// A batch task runs once: with no restart allowed, a restart is a
	// second run; and a task recorded as exited 0 did run.
	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	defer st.Close()
	allocs, err := st.ListAllocations(context.Background(), store.AllocFilter{JobID: "bcr-seed"})
	testenv.Must(t, err)
	var exited0 []string
	for _, a := range allocs {
		for _, ts := range a.Tasks {
			if ts.Exited && ts.ExitCode == 0 && ts.Signal == 0 && ts.NotStarted == "" {
				exited0 = append(exited0, a.ID)
			}
			if ts.Restarts > 0 {
				t.Errorf("batch allocation %s: task %s ran %d times", a.ID, ts.Name, ts.Restarts+1)
			}
		}
	}
	n := ranOnce(t, runs, exited0)
	t.Logf("%d seed runs, none twice; %d seed allocations recorded (retention bounds it), %d with their task exited 0", n, len(allocs), len(exited0))
}

// ranOnce checks the seed job's record of its runs (one allocation ID a
// line): no allocation ran its task twice, and each of exited0 (its
// task recorded as exited 0) ran it.
// It returns the number of runs.
func ranOnce(t *testing.T, path string, exited0 []string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("seed job's runs: %v", err)
	}
	count := map[string]int{}
	lines := strings.Fields(string(b))
	for _, id := range lines {
		count[id]++
	}
	var twice []string
	for id, n := range count {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times", id, n))
		}
	}
	if len(twice) > 0 {
		sort.Strings(twice)
		t.Fatalf("a batch task ran more than once (%s):\n  %s", path, strings.Join(twice, "\n  "))
	}
	for _, id := range exited0 {
		if count[id] == 0 {
			t.Errorf("seed allocation %s: its task is recorded as exited 0, but it never ran (no line in %s)", id, path)
		}
	}
	return len(lines)
}

// chaosTarget finds, among what this test's agent runs, the PID to kill
// for victim: only processes the test can attribute to its own agent and
// allocations (through the allocation records and the data dir), never
// one found by name alone. 0 when there is none now.
func (e *testEnv) chaosTarget(t *testing.T, c *api.Client, victim string) (int, string) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	if victim == "podman-service" {
		// The agent's own podman service listens on a socket in its data
		// dir, which its command line names.
		sock := filepath.Join(e.cfg.DataDir, "podman", "podman.sock")
		des, _ := os.ReadDir("/proc")
		for _, de := range des {
			pid, err := strconv.Atoi(de.Name())
			if err != nil {
				continue
			}
			b, _ := os.ReadFile("/proc/" + de.Name() + "/cmdline")
			if strings.Contains(string(b), "system\x00service") && strings.Contains(string(b), sock) {
				return pid, fmt.Sprintf("podman service pid %d (%s)", pid, sock)
			}
		}
		return 0, ""
	}
	stubs, err := c.Allocations(ctx, "bcr-svc")
	if err != nil {
		return 0, ""
	}
	for _, s := range stubs {
		if s.Status != api.AllocRunning {
			continue
		}
		a, err := c.Allocation(ctx, s.ID)
		if err != nil {
			continue
		}
		for _, ts := range a.Tasks {
			h := ts.Handle
			if h == nil || ts.State != "running" {
				continue
			}
			switch {
			case victim == "supervisor" && h.Driver == "raw_exec":
				for _, pid := range supervisorsOf(a.ID, ts.Name) {
					return pid, fmt.Sprintf("supervisor pid %d of %s/%s", pid, a.ID[:8], ts.Name)
				}
			case victim == "conmon" && h.Driver == "podman":
				out, err := exec.CommandContext(ctx, "podman", "inspect", "--format", "{{.State.ConmonPid}}", h.ContainerID).Output()
				if err != nil {
					continue
				}
				pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
				// conmon names its container on its command line.
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if pid > 0 && strings.Contains(string(b), h.ContainerID) {
					return pid, fmt.Sprintf("conmon pid %d of %s/%s", pid, a.ID[:8], ts.Name)
				}
			}
		}
	}
	return 0, ""
}

// startOf is pid's start time, 0 if it is gone (KillIfSame then
// refuses).
func startOf(pid int) uint64 {
	st, _ := proc.StartTime(pid)
	return st
}

// supervisorsOf finds the berth-supervisor processes of a task of
// allocation id by their command line (supervisor.Args).
func supervisorsOf(id, task string) []int {
	var pids []int
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == "berth-supervisor" && len(args) == 8 && args[5] == id && args[7] == task {
			pids = append(pids, pid)
		}
	}
	return pids
}
