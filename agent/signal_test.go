package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/store"
)

// agentProc is `berth agent -config FILE` run from the binary TestMain built.
type agentProc struct {
	t    *testing.T
	cfg  string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// writeConfig writes e.cfg as an HCL file for the binary.
func (e *testEnv) writeConfig(t *testing.T) string {
	t.Helper()
	c := e.cfg
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	var paths []string
	for _, p := range c.CNIPath {
		paths = append(paths, q(p))
	}
	src := strings.Join([]string{
		"data_dir = " + q(c.DataDir),
		"lock_dir = " + q(c.LockDir),
		"cni_config_dir = " + q(c.CNIConfigDir),
		"cni_path = [" + strings.Join(paths, ", ") + "]",
		"gc_mode = " + q(c.GCMode),
		"gc_interval = " + q(c.GCInterval),
		"log_level = \"debug\"",
		"bridge {\n  network = " + q(c.Bridge.Network) + "\n  iface = " + q(c.Bridge.Iface) + "\n  subnet = " + q(c.Bridge.Subnet) + "\n}",
		"api {\n  socket = " + q(c.API.Socket) + "\n}",
	}, "\n") + "\n"
	path := filepath.Join(e.dir, "agent.hcl")
	testenv.Must(t, os.WriteFile(path, []byte(src), 0o600))
	return path
}

// startBinary starts an agent process and waits until its API answers
// and its reconcile at start is done.
// Cleanup makes sure no agent of this test is left running and nothing of
// its jobs is left: an agent still running gets SIGTERM (it drains); if
// the last one was killed, a new one is started on the same data dir to
// reconcile, and then drained.
func (e *testEnv) startBinary(t *testing.T, cfgPath string, c *api.Client) *agentProc {
	t.Helper()
	if berthBin == "" {
		t.Fatalf("no berth binary: %v", buildErr)
	}
	if !e.reaping {
		// Registered before the process's own cleanup, so it runs after it.
		e.reaping = true
		t.Cleanup(func() { e.reap(t, cfgPath, c) })
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	testenv.Must(t, err)
	cmd := exec.Command(berthBin, "agent", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	testenv.Must(t, cmd.Start())
	p := &agentProc{t: t, cfg: cfgPath, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.terminate()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agent log:\n%s", b)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := c.Health(ctx)
		cancel()
		if err == nil && !h.Reconciling {
			return p
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("agent exited before answering (%v):\n%s", cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent does not answer after 2 minutes: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reap runs once every agent of the test has exited: if the last one
// was killed and left tasks or attachments, a new agent reconciles them
// and drains.
func (e *testEnv) reap(t *testing.T, cfgPath string, c *api.Client) {
	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	if err != nil {
		t.Errorf("cleanup: cannot check what the agent left: %v", err)
		return
	}
	recs, _ := st.ListAttachments(context.Background())
	live, _ := st.ListAllocations(context.Background(), store.AllocFilter{NonTerminal: true})
	st.Close()
	if len(recs) == 0 && len(live) == 0 {
		return
	}
	t.Logf("cleanup: %d attachments and %d live allocations left: starting an agent to reconcile them", len(recs), len(live))
	p := e.startBinary(t, cfgPath, c)
	p.terminate()
}

func (p *agentProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the agent and, for SIGTERM and SIGKILL, waits for it
// to exit; it returns the exit status.
func (p *agentProc) signal(sig syscall.Signal, wait time.Duration) (*os.ProcessState, error) {
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		return nil, err
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState, nil
	case <-time.After(wait):
		return nil, fmt.Errorf("agent pid %d still running %s after %s", p.cmd.Process.Pid, wait, sig)
	}
}

func (p *agentProc) terminate() {
	if p.exited() {
		return
	}
	if _, err := p.signal(syscall.SIGTERM, 5*time.Minute); err != nil {
		p.t.Errorf("cleanup: %v; killing it", err)
		_, _ = p.signal(syscall.SIGKILL, time.Minute)
	}
}

// serviceJob is a one-task service in the test network.
func serviceJob(driver string) string {
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
	return `job "btag-svc" {
  type = "service"
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver       = "` + driver + `"
      kill_timeout = "3s"` + config + `
    }
  }
}
`
}

// runningAlloc waits until the job's only allocation runs its task and
// returns it.
func runningAlloc(t *testing.T, c *api.Client, job string) *api.Allocation {
	t.Helper()
	var a *api.Allocation
	waitFor(t, "a running allocation of "+job, 2*time.Minute, func() (bool, error) {
		l, err := c.Allocations(context.Background(), job)
		if err != nil || len(l) == 0 || l[0].Status != api.AllocRunning {
			return false, err
		}
		a, err = c.Allocation(context.Background(), l[0].ID)
		return err == nil && len(a.Tasks) == 1 && a.Tasks[0].State == "running" && a.Tasks[0].Handle != nil, err
	})
	return a
}

// taskGone checks that the task of a is not running any more: its process
// (raw_exec) or its container (podman).
func taskGone(t *testing.T, h *api.TaskHandle) bool {
	t.Helper()
	switch h.Driver {
	case "podman":
		out, err := exec.Command("podman", "ps", "-a", "-q", "--filter", "id="+h.ContainerID).Output()
		testenv.Must(t, err)
		return strings.TrimSpace(string(out)) == ""
	default:
		return !proc.Alive(h.PID, h.PIDStartTime)
	}
}

func signalDrivers(t *testing.T) []string {
	if _, err := exec.LookPath("podman"); err == nil && exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run() == nil {
		return []string{"raw_exec", "podman"}
	}
	t.Log("podman or localhost/busybox:latest missing (scripts/setup.sh): the podman cases are skipped")
	return []string{"raw_exec"}
}

// SIGTERM drains: a running service's task is stopped within its
// kill_timeout, its namespace torn down, and the agent exits 0 leaving
// nothing: no socket, no attachment record.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	for i, drv := range signalDrivers(t) {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, fmt.Sprintf("10.199.%d.0/24", 72+i))
			c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
			testenv.Must(t, err)
			defer c.Close()
			p := e.startBinary(t, e.writeConfig(t), c)
			_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, serviceJob(drv))), "svc.hcl")
			testenv.Must(t, err)
			a := runningAlloc(t, c, "btag-svc")
			h := a.Tasks[0].Handle
			if taskGone(t, h) || !netnsExists(a.Network.NetnsPath) {
				t.Fatalf("task or namespace not there while running: %+v %+v", h, a.Network)
			}

			st, err := p.signal(syscall.SIGTERM, 3*time.Minute)
			testenv.Must(t, err)
			if st.ExitCode() != 0 {
				t.Errorf("agent exit status %v after SIGTERM, want 0", st)
			}
			if !taskGone(t, h) {
				t.Errorf("task %+v still running after the drain", h)
			}
			if netnsExists(a.Network.NetnsPath) {
				t.Errorf("namespace %s left after the drain", a.Network.NetnsPath)
			}
			if _, err := os.Lstat(e.cfg.API.Socket); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("API socket left after the drain: %v", err)
			}
			stor, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
			testenv.Must(t, err)
			defer stor.Close()
			recs, _ := stor.ListAttachments(context.Background())
			if len(recs) != 0 {
				t.Errorf("%d attachment records left", len(recs))
			}
			got, err := stor.GetAllocation(context.Background(), a.ID)
			testenv.Must(t, err)
			if got.Status != store.AllocComplete {
				t.Errorf("drained allocation is %s (%s), want complete", got.Status, got.StatusDesc)
			}
		})
	}
}

// SIGKILL leaves the task and its namespace; the next agent's reconcile
// stops the task, tears the namespace down and marks the allocation lost,
// then resumes the service with a new allocation.
func TestSIGKILLThenRestartReconciles(t *testing.T) {
	t.Parallel()
	for i, drv := range signalDrivers(t) {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, fmt.Sprintf("10.199.%d.0/24", 74+i))
			c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
			testenv.Must(t, err)
			defer c.Close()
			cfgPath := e.writeConfig(t)
			p := e.startBinary(t, cfgPath, c)
			_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, serviceJob(drv))), "svc.hcl")
			testenv.Must(t, err)
			old := runningAlloc(t, c, "btag-svc")
			h := old.Tasks[0].Handle

			if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
				t.Fatal(err)
			}
			// Nothing cleaned up after a SIGKILL: that is the next start's job.
			if taskGone(t, h) || !netnsExists(old.Network.NetnsPath) {
				t.Fatalf("after SIGKILL the task (gone %v) and namespace (exists %v) should still be there", taskGone(t, h), netnsExists(old.Network.NetnsPath))
			}
			if _, err := os.Lstat(e.cfg.API.Socket); err != nil {
				t.Fatalf("a killed agent leaves its socket; it is gone: %v", err)
			}

			// The stale socket is replaced; startBinary waits for the
			// reconcile, which runs while the API answers.
			e.startBinary(t, cfgPath, c)
			if !taskGone(t, h) {
				t.Errorf("task %+v of the killed agent still runs after the restart", h)
			}
			if netnsExists(old.Network.NetnsPath) {
				t.Errorf("namespace %s of the killed agent still exists after the restart", old.Network.NetnsPath)
			}
			got, err := c.Allocation(context.Background(), old.ID)
			testenv.Must(t, err)
			if got.Status != api.AllocLost {
				t.Errorf("allocation of the killed agent is %s, want lost", got.Status)
			}
			self, err := c.Self(context.Background())
			testenv.Must(t, err)
			if self.LastGC == nil || len(self.LastGC.Reclaimed) == 0 {
				t.Errorf("the reconcile at start reclaimed nothing: %+v", self.LastGC)
			}
			nsl, err := c.Namespaces(context.Background())
			testenv.Must(t, err)
			for _, ns := range nsl {
				if ns.Name == old.ID {
					t.Errorf("namespace of the lost allocation still listed: %+v", ns)
				}
			}

			// The service resumed; stopping it leaves nothing.
			cur := runningAlloc(t, c, "btag-svc")
			if cur.ID == old.ID {
				t.Fatalf("no new allocation after the restart")
			}
			st, err := c.StopJob(context.Background(), "btag-svc")
			testenv.Must(t, err)
			if !st.Stopped || netnsExists(cur.Network.NetnsPath) || !taskGone(t, cur.Tasks[0].Handle) {
				t.Errorf("stop after restart: %+v; netns exists %v", st, netnsExists(cur.Network.NetnsPath))
			}
		})
	}
}
