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
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/store"
)

// agentProc is `berth agent -config FILE` run from the binary TestMain built.
type agentProc struct {
	t    *testing.T
	cfg  string
	sock string
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
		"client {\n  network_interface = " + q(c.Client.NetworkInterface) + "\n}",
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
	return e.startBinaryEnv(t, cfgPath, c, nil, true)
}

// startBinaryEnv is startBinary with env added to the agent's
// environment; without healthy it returns once the process started.
func (e *testEnv) startBinaryEnv(t *testing.T, cfgPath string, c *api.Client, env []string, healthy bool) *agentProc {
	t.Helper()
	bin := berthBinary.Path(t)
	if !e.reaping {
		// Registered before the process's own cleanup, so it runs after it.
		e.reaping = true
		t.Cleanup(func() { e.reap(t, cfgPath, c) })
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	testenv.Must(t, err)
	// This agent's part of the log, shown if the test fails.
	var from int64
	if fi, err := logf.Stat(); err == nil {
		from = fi.Size()
	}
	cmd := exec.Command(bin, "agent", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	testenv.Must(t, cmd.Start())
	p := &agentProc{t: t, cfg: cfgPath, sock: e.cfg.API.Socket, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.terminate()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if from <= int64(len(b)) {
				b = b[from:]
			}
			t.Logf("log of agent pid %d:\n%s", cmd.Process.Pid, b)
		}
	})
	if !healthy {
		return p
	}
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

// terminate drains the agent (SIGTERM alone leaves its workloads
// running) and waits for it to exit.
func (p *agentProc) terminate() {
	if p.exited() {
		return
	}
	if err := p.drain(); err != nil {
		p.t.Errorf("cleanup: drain: %v; sending SIGTERM", err)
		if _, err := p.signal(syscall.SIGTERM, 5*time.Minute); err != nil {
			p.t.Errorf("cleanup: %v; killing it", err)
			_, _ = p.signal(syscall.SIGKILL, time.Minute)
		}
	}
}

// drain runs `berth agent drain` against the agent and waits for it to
// exit.
func (p *agentProc) drain() error {
	cmd := exec.Command(berthBinary.Path(p.t), "agent", "drain", "--address", "unix://"+p.sock, "--wait", "5m")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("berth agent drain: %v: %s", err, out)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("agent pid %d still running after the drain", p.cmd.Process.Pid)
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
	case "docker":
		out, err := exec.Command("docker", "ps", "-a", "-q", "--filter", "id="+h.ContainerID).Output()
		testenv.Must(t, err)
		return strings.TrimSpace(string(out)) == ""
	default:
		return !proc.Alive(h.PID, h.PIDStartTime)
	}
}

func signalDrivers(t *testing.T) []string {
	if _, err := exec.LookPath("podman"); err == nil && exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run() == nil {
		return []string{"raw_exec", "exec", "podman"}
	}
	t.Log("podman or localhost/busybox:latest missing (scripts/setup.sh): the podman cases are skipped")
	return []string{"raw_exec", "exec"}
}
