package gc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	execdrv "github.com/berth/berth/task/driver/exec"
)

// waits maps a process started by startProcess to the channel closed when
// it has been reaped.
var waits sync.Map

// TestCrashPoints kills berth (SIGKILL, no deferred cleanup) at each crash
// point of setup and teardown, then runs `berth gc` as a new process and
// checks that the host is exactly as before: no namespace, veth, lease,
// iptables chain or rule, cache entry or record of the attachment, and the
// network's bridge and host-local dir tidied away.
func TestCrashPoints(t *testing.T) {
	cases := []struct {
		point  string
		subnet string
		// down: crash in `net down` after a successful `net up`.
		down bool
	}{
		{point: fault.AfterIntent, subnet: "10.199.50.0/24"},
		{point: fault.AfterNetns, subnet: "10.199.51.0/24"},
		{point: fault.MidChainPrefix + "firewall", subnet: "10.199.52.0/24"},
		{point: fault.AfterAdd, subnet: "10.199.53.0/24"},
		{point: fault.AfterDel, subnet: "10.199.54.0/24", down: true},
		{point: fault.DuringRemove, subnet: "10.199.55.0/24", down: true},
	}
	for i, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			e := newEnv(t, full(tc.subnet))
			id := e.id()
			up := []string{"net", "up", id, "--network", e.net.Name, "-p", strconv.Itoa(29500+i) + ":80"}
			var r result
			if tc.down {
				e.mustBerth(t, up...)
				r = e.berth(t, e.dataDir, tc.point, "net", "down", id)
			} else {
				r = e.berth(t, e.dataDir, tc.point, up...)
			}
			if !r.status.Signaled() || r.status.Signal() != syscall.SIGKILL {
				t.Fatalf("berth did not die by SIGKILL at %s: status %v\nstdout: %s\nstderr: %s", tc.point, r.status, r.stdout, r.stderr)
			}
			st := e.openStore(t)
			rec, err := st.GetAttachment(context.Background(), id)
			if err != nil {
				t.Fatalf("after the crash the record of %s is missing: %v", id, err)
			}
			// Which phases attach records between steps is its business;
			// a crash must leave the record short of ready, or tearing
			// down once a teardown began.
			if (tc.down && rec.Phase != store.PhaseTearingDown) || (!tc.down && rec.Phase == store.PhaseReady) {
				t.Errorf("phase after crash at %s = %s", tc.point, rec.Phase)
			}
			st.Close()
			// Every point after the namespace's creation leaves its file.
			_, err = os.Stat("/run/netns/" + id)
			if left := err == nil; left != (tc.point != fault.AfterIntent) {
				t.Errorf("after the crash at %s, /run/netns/%s exists: %v", tc.point, id, left)
			}

			rep, gr := e.gcJSON(t, e.dataDir)
			if !gr.status.Exited() || gr.status.ExitStatus() != 0 || rep.Failed() {
				t.Fatalf("berth gc: status %v, errors %v\nstderr: %s", gr.status, rep.Errors, gr.stderr)
			}
			if !has(rep.Found, gc.KindAttachment, id) || !has(rep.Reclaimed, gc.KindAttachment, id) {
				t.Errorf("gc did not report the attachment %s as found and reclaimed: %+v", id, rep)
			}
			e.assertClean(t, id)

			// A second run finds nothing: the first left nothing half-done.
			rep, _ = e.gcJSON(t, e.dataDir)
			if len(rep.Found) != 0 || rep.Failed() {
				t.Errorf("second gc found %+v, errors %v", rep.Found, rep.Errors)
			}
		})
	}
}

// TestCrashWhileTaskRuns fakes an allocation whose berth died while its task
// ran in the namespace: gc must kill the task (only the process whose PID
// and start time match the record), mark the allocation lost, and tear its
// network down.
func TestCrashWhileTaskRuns(t *testing.T) {
	cases := []struct {
		name    string
		subnet  string
		drivers map[string]driver.Driver
	}{
		{name: "raw_exec driver", subnet: "10.199.56.0/24", drivers: map[string]driver.Driver{execdrv.NameRawExec: execdrv.NewRawExec(execdrv.Options{})}},
		{name: "no driver, kill by recorded pid", subnet: "10.199.57.0/24"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, full(tc.subnet))
			ctx := testenv.Context(t, 3*time.Minute)
			deadPID, deadStart := deadProcess(t)
			st := e.openStore(t)
			m := e.manager(st, deadPID, deadStart)
			id, allocID := e.id(), "btgc-alloc-"+testenv.RandSuffix(6)
			if _, err := m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name, AllocID: allocID}); err != nil {
				t.Fatalf("setup: %v", err)
			}
			task := startProcess(t, "ip", "netns", "exec", id, "sleep", "300")
			// A process whose PID is recorded with another start time
			// stands for a reused PID: it must survive.
			other := startProcess(t, "sleep", "300")
			taskStart, err := proc.StartTime(task.Process.Pid)
			testenv.Must(t, err)
			otherStart, err := proc.StartTime(other.Process.Pid)
			testenv.Must(t, err)
			testenv.Must(t, st.PutAllocation(ctx, &store.Allocation{
				ID: allocID, JobID: "btgc-job", Group: "g", Status: store.AllocRunning,
				OwnerPID: deadPID, OwnerStartTime: deadStart,
				Tasks: []store.TaskState{
					{Name: "web", Driver: execdrv.NameRawExec, State: "running", Handle: &store.TaskHandle{Driver: execdrv.NameRawExec, PID: task.Process.Pid, PIDStartTime: taskStart}},
					{Name: "reused", Driver: execdrv.NameRawExec, State: "running", Handle: &store.TaskHandle{Driver: execdrv.NameRawExec, PID: other.Process.Pid, PIDStartTime: otherStart + 1}},
				},
			}))

			o := e.options(st, m)
			o.Drivers = tc.drivers
			rep, err := gc.Run(ctx, o)
			testenv.Must(t, err)
			if rep.Failed() {
				t.Fatalf("gc errors: %v", rep.Errors)
			}
			if !has(rep.Reclaimed, gc.KindAllocOwner, allocID) || !has(rep.Reclaimed, gc.KindAttachment, id) {
				t.Errorf("gc did not reclaim allocation %s and attachment %s: %+v", allocID, id, rep)
			}
			if !exitedBySignal(t, task, syscall.SIGKILL) {
				t.Errorf("task process %d was not killed", task.Process.Pid)
			}
			if !proc.Alive(other.Process.Pid, otherStart) {
				t.Errorf("process %d whose start time differs from the record was killed", other.Process.Pid)
			}
			a, err := st.GetAllocation(ctx, allocID)
			testenv.Must(t, err)
			if a.Status != store.AllocLost {
				t.Errorf("allocation status %s, want lost", a.Status)
			}
			st.Close()
			e.assertClean(t, id)
		})
	}
}

// deadProcess returns the PID and start time of a process that has exited.
func deadProcess(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "0.01")
	testenv.Must(t, cmd.Start())
	start, err := proc.StartTime(cmd.Process.Pid)
	testenv.Must(t, err)
	testenv.Must(t, cmd.Wait())
	return cmd.Process.Pid, start
}

// startProcess starts a process in its own process group (as the exec
// drivers do) and kills it at the end of the test whatever happened.
func startProcess(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	testenv.Must(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	waits.Store(cmd, done)
	return cmd
}

// exitedBySignal waits (bounded) for a process started by startProcess
// and reports whether sig ended it.
func exitedBySignal(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) bool {
	t.Helper()
	v, _ := waits.Load(cmd)
	select {
	case <-v.(chan struct{}):
	case <-time.After(10 * time.Second):
		return false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// TestSimulatedReboot removes the namespace behind berth's back (as a
// reboot empties /run while leases and the cache stay on disk) and checks
// that gc recognises it and reclaims the rest.
func TestSimulatedReboot(t *testing.T) {
	e := newEnv(t, full("10.199.58.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name, "-p", "29510:80")
	testenv.Run(t, "ip", "netns", "del", id)
	if _, err := os.Stat("/run/netns/" + id); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ip netns del left %s", id)
	}
	rep, r := e.gcJSON(t, e.dataDir)
	if rep.Failed() || r.status.ExitStatus() != 0 {
		t.Fatalf("gc: status %v errors %v\n%s", r.status, rep.Errors, r.stderr)
	}
	if !rep.Reboot {
		t.Errorf("gc did not recognise the reboot: %+v", rep)
	}
	if !has(rep.Reclaimed, gc.KindAttachment, id) {
		t.Errorf("gc did not reclaim %s: %+v", id, rep)
	}
	e.assertClean(t, id)
}
