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
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
)

// The tests of re-adoption across agent restarts (this file) use the
// subnets 10.199.180-189.0/24.

func hasEvent(a *api.Allocation, typ string) (api.Event, bool) {
	for _, e := range a.Events {
		if e.Type == typ {
			return e, true
		}
	}
	return api.Event{}, false
}

// readopted waits until the next agent has re-adopted allocation id (its
// supervision resumed, its namespace checked) and returns it.
func readopted(t *testing.T, c *api.Client, id string) *api.Allocation {
	t.Helper()
	var a *api.Allocation
	waitFor(t, "allocation "+id+" to be re-adopted", 2*time.Minute, func() (bool, error) {
		var err error
		a, err = c.Allocation(context.Background(), id)
		if err != nil {
			return false, err
		}
		_, r := hasEvent(a, "Re-attached")
		_, c1 := hasEvent(a, "Network Checked")
		_, c2 := hasEvent(a, "Network Check Skipped")
		return r && (c1 || c2) && a.Status == api.AllocRunning, nil
	})
	return a
}

// sameTask reports whether the task of a is the one h recorded.
func sameTask(a *api.Allocation, h *api.TaskHandle) bool {
	n := a.Tasks[0].Handle
	return n != nil && n.PID == h.PID && n.PIDStartTime == h.PIDStartTime && n.ContainerID == h.ContainerID
}

// drainAndCheck drains the agent with `berth agent drain` and checks that
// the allocation's task and namespace are gone and nothing is recorded.
func drainAndCheck(t *testing.T, e *testEnv, p *agentProc, a *api.Allocation) {
	t.Helper()
	h := a.Tasks[0].Handle
	testenv.Must(t, p.drain())
	if p.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("agent exit status %v after the drain, want 0", p.cmd.ProcessState)
	}
	if !taskGone(t, h) {
		t.Errorf("task %+v still running after the drain", h)
	}
	if netnsExists(a.Network.NetnsPath) {
		t.Errorf("namespace %s left after the drain", a.Network.NetnsPath)
	}
	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	defer st.Close()
	if recs, _ := st.ListAttachments(context.Background()); len(recs) != 0 {
		t.Errorf("%d attachment records left after the drain", len(recs))
	}
	got, err := st.GetAllocation(context.Background(), a.ID)
	testenv.Must(t, err)
	if got.Status != store.AllocComplete {
		t.Errorf("drained allocation is %s (%s), want complete", got.Status, got.StatusDesc)
	}
}

// SIGTERM leaves the workload running (task, namespace, records), a
// second agent re-attaches the same allocation (same task, same
// namespace, CHECK passed), and `berth agent drain` stops everything and
// leaves nothing.
func TestSIGTERMLeavesWorkloadsRunning(t *testing.T) {
	for i, drv := range signalDrivers(t) {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, fmt.Sprintf("10.199.%d.0/24", 180+i))
			c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
			testenv.Must(t, err)
			defer c.Close()
			cfgPath := e.writeConfig(t)
			p := e.startBinary(t, cfgPath, c)
			_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, serviceJob(drv))), "svc.hcl")
			testenv.Must(t, err)
			old := runningAlloc(t, c, "btag-svc")
			h := old.Tasks[0].Handle

			st, err := p.signal(syscall.SIGTERM, 2*time.Minute)
			testenv.Must(t, err)
			if st.ExitCode() != 0 {
				t.Errorf("agent exit status %v after SIGTERM, want 0", st)
			}
			if taskGone(t, h) || !netnsExists(old.Network.NetnsPath) {
				t.Fatalf("after SIGTERM the task (gone %v) and its namespace (exists %v) must still be there", taskGone(t, h), netnsExists(old.Network.NetnsPath))
			}
			sto, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
			testenv.Must(t, err)
			rec, err := sto.GetAllocation(context.Background(), old.ID)
			sto.Close()
			testenv.Must(t, err)
			if rec.Status != store.AllocRunning || !rec.Detached {
				t.Errorf("allocation after SIGTERM: status %s detached %v, want running and detached", rec.Status, rec.Detached)
			}

			p = e.startBinary(t, cfgPath, c)
			cur := readopted(t, c, old.ID)
			if !sameTask(cur, h) || cur.Network.NetnsPath != old.Network.NetnsPath {
				t.Fatalf("after the restart: task %+v netns %s, want %+v %s", cur.Tasks[0].Handle, cur.Network.NetnsPath, h, old.Network.NetnsPath)
			}
			if cur.Detached {
				t.Errorf("re-adopted allocation still marked detached")
			}
			if l := allocsOf(t, c, "btag-svc"); len(l) != 1 {
				t.Errorf("%d allocations after the restart, want the one re-adopted: %+v", len(l), l)
			}
			drainAndCheck(t, e, p, cur)
		})
	}
}

// SIGKILL: the next agent re-attaches the same allocation, task and
// namespace instead of replacing them.
func TestSIGKILLThenRestartReattaches(t *testing.T) {
	for i, drv := range signalDrivers(t) {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, fmt.Sprintf("10.199.%d.0/24", 183+i))
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
			if taskGone(t, h) {
				t.Fatalf("the task died with the agent: %+v", h)
			}
			// Its secrets/ tmpfs lost while no agent ran (as after a
			// reboot): the next agent mounts it again before it renders
			// the task's templates there.
			allocDir := filepath.Join(e.cfg.DataDir, "alloc", old.ID)
			testenv.Must(t, allocdir.Unmount(context.Background(), allocDir))
			p = e.startBinary(t, cfgPath, c)
			cur := readopted(t, c, old.ID)
			var mounts []string
			waitUntil(30*time.Second, func() bool {
				ms, err := allocdir.Mounts(filepath.Dir(allocDir))
				testenv.Must(t, err)
				mounts = ms[old.ID]
				return len(mounts) == 1
			})
			if len(mounts) != 1 {
				t.Errorf("after the restart the allocation's mounts are %v, want its task's secrets/", mounts)
			}
			if !sameTask(cur, h) || cur.Network.NetnsPath != old.Network.NetnsPath {
				t.Fatalf("after the restart: task %+v netns %s, want %+v %s", cur.Tasks[0].Handle, cur.Network.NetnsPath, h, old.Network.NetnsPath)
			}
			if cur.OwnerPID != p.cmd.Process.Pid {
				t.Errorf("owner of the re-adopted allocation is pid %d, want the new agent %d", cur.OwnerPID, p.cmd.Process.Pid)
			}
			drainAndCheck(t, e, p, cur)
		})
	}
}

// A namespace broken while no agent ran (its eth0 deleted, or the
// namespace itself removed) fails CHECK at re-adoption: it is healed (torn
// down, made again) and the task is restarted into the new one; the
// events say which CHECK failed and what was done.
func TestReattachHealsBrokenNamespace(t *testing.T) {
	breaks := []struct {
		name  string
		brk   func(t *testing.T, path string)
		drvrs []string
	}{
		{"eth0 deleted", func(t *testing.T, path string) {
			out, err := exec.Command("nsenter", "--net="+path, "ip", "link", "del", "eth0").CombinedOutput()
			if err != nil {
				t.Fatalf("delete eth0 in %s: %v: %s", path, err, out)
			}
		}, nil},
		{"namespace removed", func(t *testing.T, path string) {
			// As `ip netns del` does: the task still holds the old one.
			if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil {
				t.Fatalf("unmount %s: %v", path, err)
			}
			testenv.Must(t, os.Remove(path))
		}, []string{"raw_exec"}},
	}
	n := 0
	for _, b := range breaks {
		drvs := b.drvrs
		if drvs == nil {
			drvs = signalDrivers(t)
		}
		for _, drv := range drvs {
			subnet := fmt.Sprintf("10.199.%d.0/24", 186+n%4)
			n++
			t.Run(b.name+"/"+drv, func(t *testing.T) {
				e := newTestEnv(t, subnet)
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
				b.brk(t, old.Network.NetnsPath)

				p = e.startBinary(t, cfgPath, c)
				var cur *api.Allocation
				waitFor(t, "the healed allocation's task to run", 2*time.Minute, func() (bool, error) {
					cur = runningAlloc(t, c, "btag-svc")
					_, healed := hasEvent(cur, "Network Healed")
					return healed && !sameTask(cur, h), nil
				})
				if cur.ID != old.ID {
					t.Errorf("healing replaced the allocation (%s, was %s)", cur.ID, old.ID)
				}
				failed, ok := hasEvent(cur, "Network Check Failed")
				if !ok {
					t.Errorf("no Network Check Failed event: %+v", cur.Events)
				}
				healed, ok := hasEvent(cur, "Network Healed")
				if !ok || !strings.Contains(healed.Message, "restarted into it") {
					t.Errorf("no Network Healed event saying the task was restarted: %+v", cur.Events)
				}
				t.Logf("events: %s | %s", failed.Message, healed.Message)
				if !taskGone(t, h) {
					t.Errorf("the task of the broken namespace still runs: %+v", h)
				}
				if !netnsExists(cur.Network.NetnsPath) {
					t.Fatalf("healed namespace %s does not exist", cur.Network.NetnsPath)
				}
				out, err := exec.Command("nsenter", "--net="+cur.Network.NetnsPath, "ip", "-4", "-o", "addr", "show", "eth0").CombinedOutput()
				if err != nil || !strings.Contains(string(out), strings.Split(cur.Network.IPv4[0], "/")[0]) {
					t.Errorf("healed namespace's eth0: %v: %s (want %v)", err, out, cur.Network.IPv4)
				}
				// The new task is in the healed namespace.
				if nh := cur.Tasks[0].Handle; nh != nil && nh.PID > 0 {
					if !samePidNetns(t, nh.PID, cur.Network.NetnsPath) {
						t.Errorf("restarted task pid %d is not in the healed namespace %s", nh.PID, cur.Network.NetnsPath)
					}
				}
				drainAndCheck(t, e, p, cur)
			})
		}
	}
}

// samePidNetns reports whether pid (or, for a supervisor, one of its
// descendants) lives in the namespace pinned at path.
func samePidNetns(t *testing.T, pid int, path string) bool {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(path, &want); err != nil {
		return false
	}
	pids := []int{pid}
	for len(pids) > 0 {
		p := pids[0]
		pids = pids[1:]
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", p), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			return true
		}
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
		for _, k := range strings.Fields(string(kids)) {
			var c int
			fmt.Sscan(k, &c)
			pids = append(pids, c)
		}
	}
	return false
}

// A task that exits while no agent runs is recorded with its real exit
// code by the next agent, and its restart policy applies.
func TestExitWhileAgentDown(t *testing.T) {
	e := newTestEnv(t, "10.199.189.0/24")
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	job := `job "btag-svc" {
  type = "service"
  group "g" {
    network {
      mode = "cni/private"
    }
    restart {
      attempts = 1
      interval = "10m"
      delay    = "1s"
      mode     = "fail"
    }
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "3s"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 3; exit 7"]
      }
    }
  }
}
`
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, job)), "svc.hcl")
	testenv.Must(t, err)
	old := runningAlloc(t, c, "btag-svc")
	h := old.Tasks[0].Handle
	if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to exit while no agent runs", time.Minute, func() (bool, error) { return taskGone(t, h), nil })

	e.startBinary(t, cfgPath, c)
	var cur *api.Allocation
	waitFor(t, "the allocation to fail after its one restart", 2*time.Minute, func() (bool, error) {
		cur, err = c.Allocation(context.Background(), old.ID)
		return err == nil && cur.Status == api.AllocFailed, err
	})
	ts := cur.Tasks[0]
	if ts.ExitCode != 7 || ts.Restarts != 1 || !ts.Failed {
		t.Errorf("task after exit-while-down and one restart: exit %d restarts %d failed %v; want 7, 1, true", ts.ExitCode, ts.Restarts, ts.Failed)
	}
	if _, ok := hasEvent(cur, "Re-attached"); !ok {
		t.Errorf("the exited task was not re-attached for its exit status: %+v", cur.Events)
	}
	if _, ok := hasEvent(cur, "Restarting"); !ok {
		t.Errorf("the restart policy did not apply: %+v", cur.Events)
	}
	if netnsExists(cur.Network.NetnsPath) {
		t.Errorf("namespace %s left after the allocation failed", cur.Network.NetnsPath)
	}
}
