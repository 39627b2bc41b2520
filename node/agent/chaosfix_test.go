package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/store"
)

// The tests of durable stops and re-adoption under repeated SIGKILLs
// (this file) use the subnets 10.199.220-227.0/24.

// spawn starts an agent process without waiting for it to answer (a kill
// may come at any moment of its start), with the cleanup startBinary
// registers.
func (e *testEnv) spawn(t *testing.T, cfgPath string, c *api.Client) *agentProc {
	t.Helper()
	if !e.reaping {
		e.reaping = true
		t.Cleanup(func() { e.reap(t, cfgPath, c) })
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	testenv.Must(t, err)
	cmd := exec.Command(berthBinary.Path(t), "agent", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	testenv.Must(t, cmd.Start())
	p := &agentProc{t: t, cfg: cfgPath, sock: e.cfg.API.Socket, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.terminate()
		logf.Close()
	})
	return p
}

// berthCLI runs the berth binary against the agent's socket.
func (e *testEnv) berthCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append(args[:1:1], append([]string{"--address", "unix://" + e.cfg.API.Socket}, args[1:]...)...)
	out, err := exec.Command(berthBinary.Path(t), args...).CombinedOutput()
	return string(out), err
}

// gone reports whether pid has exited (a zombie not yet reaped counts).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// hostAfter tidies the shared chains nothing uses (as berth gc and the
// leak check do) and takes a snapshot of the host.
func hostAfter(t *testing.T) testenv.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if unlock, err := attach.LockHost(ctx, "", true); err == nil {
		_, _ = hostclean.TidySharedChains(ctx, hostclean.Plan{})
		unlock()
	}
	s, err := testenv.TakeSnapshot(ctx)
	testenv.Must(t, err)
	return s
}

// jobContainers lists the podman containers labelled berth.job=job.
func jobContainers(t *testing.T, job string) []string {
	t.Helper()
	out, err := exec.Command("podman", "ps", "-a", "-q", "--filter", "label=berth.job="+job).Output()
	testenv.Must(t, err)
	return strings.Fields(string(out))
}

const chaosSeedJob = `job "cfx-seed" {
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
    task "sleep" {
      driver = "podman"
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "echo run >> /alloc/runs; exit 0"]
      }
    }
  }
}
`

// The README's seed job (podman, every second, a CNI network) while the
// agent is SIGKILLed at varied moments and restarted each time; then
// `berth job stop` and `berth agent drain`: nothing is left (the host as
// the leak check sees it, the store, the containers), and the drain
// returns only once the agent has exited. BERTH_CHAOSFIX_KILLS sets the
// number of kills (13), BERTH_CHAOSFIX_SEED the moments' seed.
func TestChaosFixSIGKILLSeedJob(t *testing.T) {
	requireImage(t)
	kills := 13
	if s := os.Getenv("BERTH_CHAOSFIX_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BERTH_CHAOSFIX_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (BERTH_CHAOSFIX_SEED replays it), %d kills", seed, kills)
	rng := rand.New(rand.NewPCG(seed, seed))

	e := newTestEnv(t, "10.199.220.0/24")
	before, err := testenv.TakeSnapshot(context.Background())
	testenv.Must(t, err)
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, chaosSeedJob)), "seed.hcl")
	testenv.Must(t, err)
	for i := 0; i < kills; i++ {
		d := 1300*time.Millisecond + time.Duration(rng.Int64N(int64(2600*time.Millisecond)))
		time.Sleep(d)
		if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
			t.Fatal(err)
		}
		p = e.spawn(t, cfgPath, c)
	}
	// Let the last agent answer, then stop and drain as an operator would.
	waitFor(t, "the last agent to answer", 2*time.Minute, func() (bool, error) {
		_, err := c.Health(context.Background())
		return err == nil, err
	})
	if out, err := e.berthCLI(t, "job", "stop", "cfx-seed"); err != nil {
		t.Fatalf("berth job stop: %v: %s", err, out)
	}
	out, err := e.berthCLI(t, "agent", "drain", "--wait", "3m")
	exited := gone(p.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("berth agent drain: %v: %s", err, out)
	}
	t.Logf("drain: %s", out)
	if !exited {
		t.Errorf("berth agent drain returned while the agent (pid %d) still ran", p.cmd.Process.Pid)
	}
	<-p.done

	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	live, err := st.ListAllocations(context.Background(), store.AllocFilter{NonTerminal: true})
	testenv.Must(t, err)
	recs, _ := st.ListAttachments(context.Background())
	all, _ := st.ListAllocations(context.Background(), store.AllocFilter{})
	st.Close()
	for _, a := range live {
		t.Errorf("allocation %s is %s (%s) after stop and drain; events: %+v", a.ID, a.Status, a.StatusDesc, a.Events)
	}
	if len(recs) != 0 {
		t.Errorf("%d attachment records left after stop and drain", len(recs))
	}
	if cs := jobContainers(t, "cfx-seed"); len(cs) != 0 {
		t.Errorf("containers of the job left after stop and drain: %v", cs)
	}
	var leaked []string
	for _, l := range testenv.Leaked(before, hostAfter(t)) {
		// The network's bridge stays for the next attachment by design
		// (berth gc removes it); the test network's cleanup does.
		if !strings.HasSuffix(l, " "+e.net.Bridge) {
			leaked = append(leaked, l)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("left on the host after stop and drain:\n  %s", strings.Join(leaked, "\n  "))
	}
	ran := 0
	for _, a := range all {
		b, err := os.ReadFile(filepath.Join(e.cfg.DataDir, "alloc", a.ID, "alloc", "runs"))
		if err != nil {
			continue
		}
		ran++
		if n := strings.Count(string(b), "run"); n > 1 {
			t.Errorf("the batch task of allocation %s ran %d times; events: %+v", a.ID, n, a.Events)
		}
	}
	t.Logf("%d allocations recorded, all terminal; %d ran their task, none twice", len(all), ran)
}

// batchRunsJob is a one-task batch job that counts its runs in a file of
// its allocation dir, runs a few seconds and exits 3.
func batchRunsJob(drv string) string {
	config := `
      config {
        command = "/bin/sh"
        args    = ["-c", "echo run >> ${NOMAD_ALLOC_DIR}/runs; sleep 4; exit 3"]
      }`
	if drv == "podman" {
		config = `
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "echo run >> /alloc/runs; sleep 4; exit 3"]
      }`
	}
	return `job "cfx-batch" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    # The one allocation's exit is what the tests read: no replacement.
    reschedule {
      attempts = 0
    }
    network {
      mode = "cni/private"
    }
    task "t" {
      driver       = "` + drv + `"
      kill_timeout = "3s"` + config + `
    }
  }
}
`
}

// A batch task that exits while no agent runs is recorded with its exit
// code by the next agent, and is not run again.
func TestChaosFixBatchExitWhileDown(t *testing.T) {
	drivers := []string{"raw_exec"}
	if _, err := exec.LookPath("podman"); err == nil && exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run() == nil {
		drivers = append(drivers, "podman")
	}
	for i, drv := range drivers {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, fmt.Sprintf("10.199.%d.0/24", 221+i))
			c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
			testenv.Must(t, err)
			defer c.Close()
			cfgPath := e.writeConfig(t)
			p := e.startBinary(t, cfgPath, c)
			_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, batchRunsJob(drv))), "batch.hcl")
			testenv.Must(t, err)
			old := runningAlloc(t, c, "cfx-batch")
			h := old.Tasks[0].Handle
			if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
				t.Fatal(err)
			}
			runs := filepath.Join(e.cfg.DataDir, "alloc", old.ID, "alloc", "runs")
			waitFor(t, "the task to exit while no agent runs", time.Minute, func() (bool, error) {
				if drv == "podman" {
					out, err := exec.Command("podman", "inspect", "--format", "{{.State.Status}}", h.ContainerID).Output()
					return err == nil && strings.TrimSpace(string(out)) == "exited", err
				}
				return taskGone(t, h), nil
			})

			e.startBinary(t, cfgPath, c)
			var cur *api.Allocation
			waitFor(t, "the allocation to end", 2*time.Minute, func() (bool, error) {
				cur, err = c.Allocation(context.Background(), old.ID)
				return err == nil && (cur.Status == api.AllocFailed || cur.Status == api.AllocComplete), err
			})
			ts := cur.Tasks[0]
			if ts.ExitCode != 3 || ts.Restarts != 0 {
				t.Errorf("task after exiting while no agent ran: exit %d restarts %d; want 3, 0 (events %+v)", ts.ExitCode, ts.Restarts, cur.Events)
			}
			if _, ok := hasEvent(cur, "Re-attached"); !ok {
				t.Errorf("no Re-attached event saying the exit was taken over: %+v", cur.Events)
			}
			b, err := os.ReadFile(runs)
			testenv.Must(t, err)
			if n := strings.Count(string(b), "run"); n != 1 {
				t.Errorf("the batch task ran %d times, want once", n)
			}
			l := allocsOf(t, c, "cfx-batch")
			if len(l) != 1 {
				t.Errorf("%d allocations, want the one re-adopted: %+v", len(l), l)
			}
			if m := scrape(t, c); metricSum(m, "berth_restore_actions_total", map[string]string{"action": "Re-attached"}) < 1 {
				t.Errorf("berth_restore_actions_total{action=\"Re-attached\"} not counted")
			}
		})
	}
}

// The podman service an agent started does not outlive the agent's
// SIGKILL (parent-death signal); the next agent starts its own.
func TestChaosFixPodmanServiceDiesWithAgent(t *testing.T) {
	requireImage(t)
	e := newTestEnv(t, "10.199.223.0/24")
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, serviceJob("podman"))), "svc.hcl")
	testenv.Must(t, err)
	old := runningAlloc(t, c, "btag-svc")
	b, err := os.ReadFile(filepath.Join(e.cfg.DataDir, "podman", "service.pid"))
	testenv.Must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	testenv.Must(t, err)
	if gone(pid) {
		t.Fatalf("podman service pid %d not running while the agent runs", pid)
	}
	if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the podman service (pid %d) to exit after the agent's SIGKILL", pid), time.Minute, func() (bool, error) { return gone(pid), nil })
	if taskGone(t, old.Tasks[0].Handle) {
		t.Errorf("the task's container went with the podman service")
	}
	p = e.startBinary(t, cfgPath, c)
	cur := readopted(t, c, old.ID)
	if !sameTask(cur, old.Tasks[0].Handle) {
		t.Errorf("the next agent did not re-attach the same container: %+v", cur.Tasks[0].Handle)
	}
	drainAndCheck(t, e, p, cur)
}

// `berth agent drain` returns only once the agent process has exited, and
// says what it stopped.
func TestChaosFixDrainWaitsForExit(t *testing.T) {
	e := newTestEnv(t, "10.199.224.0/24")
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	// A task that ignores SIGTERM: the drain lasts its kill_timeout.
	job := strings.Replace(serviceJob("raw_exec"), `command = "/bin/sleep"
        args    = ["600"]`, `command = "/bin/sh"
        args    = ["-c", "trap '' TERM; sleep 600 & wait; wait"]`, 1)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, job)), "svc.hcl")
	testenv.Must(t, err)
	a := runningAlloc(t, c, "btag-svc")
	out, err := e.berthCLI(t, "agent", "drain", "--wait", "3m")
	exited := gone(p.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("berth agent drain: %v: %s", err, out)
	}
	if !exited {
		t.Errorf("berth agent drain returned while the agent (pid %d) still ran: %s", p.cmd.Process.Pid, out)
	}
	if !strings.Contains(out, "stopped "+a.ID) {
		t.Errorf("drain output does not name the allocation %s it stopped: %s", a.ID, out)
	}
	<-p.done
	if !taskGone(t, a.Tasks[0].Handle) || netnsExists(a.Network.NetnsPath) {
		t.Errorf("task or namespace left after the drain")
	}
}
