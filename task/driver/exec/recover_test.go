package exec

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// forget drops a handle as a berth that dies would: its pidfds are closed,
// nothing is signalled, the supervisor and the task run on.
func forget(h driver.Handle) store.TaskHandle {
	hh := h.(*handle)
	hh.sup.Close()
	hh.taskProc.Close()
	<-hh.done
	return hh.State()
}

// startForgotten starts a task with one driver and forgets it; the
// returned record is all a new berth has. Whatever the test does, the
// task is cleaned up from its record at the end.
func startForgotten(t *testing.T, d *Driver, task *driver.Task) store.TaskHandle {
	t.Helper()
	h, err := d.Start(ctxT(t), task)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	rec := forget(h)
	t.Cleanup(func() {
		if err := d.Cleanup(context.Background(), rec); err != nil {
			t.Errorf("Cleanup in cleanup: %v", err)
		}
	})
	return rec
}

// A task started by one driver instance is re-attached by another from its
// record: same PID, its output goes on into the same log, and Stop and
// Destroy work on it.
func TestRecoverRunning(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, newNetns(t), sh(`echo before; trap "echo got TERM; exit 5" TERM; while :; do sleep 0.05; done`))
			rec := startForgotten(t, d, task)
			waitFor(t, "first output", func() bool { return strings.Contains(readLog(t, task, "stdout"), "before") })

			fresh := newDriver(d.Name(), d.isolate, Options{StoreID: testStore})
			h, err := fresh.Recover(ctxT(t), rec)
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if got := h.State(); got.PID != rec.PID || got.SupervisorPID != rec.SupervisorPID || got.CgroupPath != rec.CgroupPath {
				t.Fatalf("recovered state %+v, recorded %+v", got, rec)
			}
			if !proc.Alive(rec.PID, rec.PIDStartTime) {
				t.Fatal("the task died in Recover")
			}
			if err := h.Stop(ctxT(t), 10*time.Second); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			res := wait(t, h)
			if res.ExitCode != 5 || res.Err != nil {
				t.Fatalf("result %+v, want exit 5 from the TERM trap", res)
			}
			if err := h.Destroy(ctxT(t)); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if out := readLog(t, task, "stdout"); out != "before\ngot TERM\n" {
				t.Fatalf("stdout %q: the log did not go on in the same file", out)
			}
			if proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) || proc.Alive(rec.PID, rec.PIDStartTime) {
				t.Fatal("supervisor or task alive after Destroy")
			}
		})
	}
}

// A task that exits while nobody watches is recovered with its real exit
// code, read from the status file its supervisor wrote.
func TestRecoverExitedMeanwhile(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, "", sh("sleep 0.2; echo done; exit 7"))
			rec := startForgotten(t, d, task)
			// Nobody reaps the supervisor (its parent forgot it): it is a
			// zombie once it exited.
			waitFor(t, "the supervisor to exit", func() bool { return !proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) })

			fresh := newDriver(d.Name(), d.isolate, Options{StoreID: testStore})
			h, err := fresh.Recover(ctxT(t), rec)
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			res := wait(t, h)
			if res.ExitCode != 7 || res.Signal != 0 || res.Err != nil || res.FinishedAt.Before(res.StartedAt) {
				t.Fatalf("result %+v, want exit 7", res)
			}
			if err := h.Destroy(ctxT(t)); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if out := readLog(t, task, "stdout"); out != "done\n" {
				t.Fatalf("stdout %q", out)
			}
			reapZombie(rec.SupervisorPID)
		})
	}
}

// reapZombie reaps a forgotten child of the test process.
func reapZombie(pid int) {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}

// Recover refuses what it cannot prove is the recorded task: a PID whose
// start time differs (reused), another data dir's supervisor, a handle
// without a supervisor, and a task gone without an exit status.
func TestRecoverRefuses(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	task := newTask(t, "", sh("sleep 1000"))
	rec := startForgotten(t, d, task)

	reused := rec
	reused.SupervisorStartTime++
	otherStore := NewRawExec(Options{StoreID: testStore + "x"})
	old := rec
	old.SupervisorPID, old.StatusPath = 0, ""
	tests := []struct {
		name string
		d    *Driver
		rec  store.TaskHandle
		want string
	}{
		{"reused PID", d, reused, "another process"},
		{"another data dir", otherStore, rec, "not the supervisor of task"},
		{"older handle", d, old, "names no supervisor"},
		{"another driver", d, store.TaskHandle{Driver: "podman", ContainerID: "x"}, "podman"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.d.Recover(ctxT(t), tc.rec)
			if err == nil {
				_ = h.Destroy(context.Background())
				t.Fatal("Recover succeeded")
			}
			if !errors.Is(err, driver.ErrNotRecoverable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Recover: %v; want ErrNotRecoverable and %q", err, tc.want)
			}
			if !proc.Alive(rec.PID, rec.PIDStartTime) || !proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) {
				t.Fatal("a refused Recover touched the task")
			}
		})
	}

	// Gone without a status: killed with its supervisor.
	if err := d.Cleanup(ctxT(t), rec); err != nil {
		t.Fatal(err)
	}
	reapZombie(rec.SupervisorPID)
	_ = os.Remove(filepath.Join(task.AllocDir, statusName(task.TaskName)))
	if h, err := d.Recover(ctxT(t), rec); !errors.Is(err, driver.ErrNotRecoverable) {
		if h != nil {
			_ = h.Destroy(context.Background())
		}
		t.Fatalf("Recover of a task gone without status: %v", err)
	}
}

// A supervisor killed from outside leaves the task without anyone to
// record its exit: Wait says so, and Destroy still removes everything.
func TestSupervisorKilled(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, "", sh("sleep 1000"))
			h := start(t, d, task)
			st := h.State()
			if err := proc.KillIfSame(st.SupervisorPID, st.SupervisorStartTime, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			res := wait(t, h)
			if res.Err == nil || !strings.Contains(res.Err.Error(), "without recording the task's exit") {
				t.Fatalf("result %+v, want an error", res)
			}
			if err := h.Destroy(ctxT(t)); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if proc.Alive(st.PID, st.PIDStartTime) {
				t.Fatal("task alive after Destroy")
			}
		})
	}
}

// Leftovers finds this data dir's task cgroups and supervisors without a
// record, with their allocation; RemoveLeftover kills them.
func TestLeftovers(t *testing.T) {
	requireRoot(t)
	d := NewExec(Options{StoreID: testStore})
	task := newTask(t, "", sh("sleep 1000"))
	rec := startForgotten(t, d, task)
	ls, err := d.Leftovers(ctxT(t), testStore)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, l := range ls {
		if l.AllocID != task.AllocID {
			continue
		}
		kinds[l.Kind] = true
		if l.Task != task.TaskName {
			t.Errorf("leftover %+v: task %q, want %q", l, l.Task, task.TaskName)
		}
	}
	if rec.CgroupPath != "" && !kinds[KindCgroup] || !kinds[KindSupervisor] {
		t.Fatalf("leftovers %+v lack the task's cgroup or supervisor", ls)
	}
	if other, err := d.Leftovers(ctxT(t), testStore+"x"); err != nil || len(other) != 0 {
		t.Fatalf("another data dir's driver lists %+v (%v)", other, err)
	}
	for _, l := range ls {
		if l.AllocID == task.AllocID {
			if err := d.RemoveLeftover(ctxT(t), l); err != nil {
				t.Fatalf("RemoveLeftover(%+v): %v", l, err)
			}
		}
	}
	waitFor(t, "the task and its supervisor to be gone", func() bool {
		return !proc.Alive(rec.PID, rec.PIDStartTime) && !proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime)
	})
	reapZombie(rec.SupervisorPID)
}

// Issue 10 row 3: a running task costs berth no OS thread (its exit is
// seen through its supervisor's pidfd on the poller). Before, each task
// kept a thread blocked in waitid: 200 tasks were 200+ threads.
func TestNoThreadPerTask(t *testing.T) {
	requireRoot(t)
	const n = 200
	d := NewRawExec(Options{StoreID: testStore})
	var hs []driver.Handle
	t.Cleanup(func() {
		for _, h := range hs {
			_ = h.Destroy(context.Background())
		}
	})
	for i := 0; i < n; i++ {
		h, err := d.Start(ctxT(t), newTask(t, "", map[string]any{"command": "/bin/sleep", "args": []any{"1000"}}))
		if err != nil {
			t.Fatalf("Start #%d: %v", i, err)
		}
		hs = append(hs, h)
	}
	ts, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) > 40 {
		t.Fatalf("%d tasks running, this process has %d OS threads", n, len(ts))
	}
	t.Logf("%d tasks running: %d OS threads", n, len(ts))
}

// Find adopts a task an earlier berth started and did not record (killed
// between Start and recording the handle): a running one is supervised
// from its supervisor's own record (same PID, the job's kill signal on
// Stop), one that ended is re-attached with its real exit; one whose
// supervisor was killed (the task ran on, its exit unknowable) is removed
// and reported as driver.ErrExitUnknown. Nothing of the task is run twice
// or left behind.
func TestFindAdoptsUnrecorded(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name   string
		script string
		// prepare brings the forgotten task to the state Find meets.
		prepare func(t *testing.T, task *driver.Task, rec store.TaskHandle)
		// check gets Find's answer.
		check func(t *testing.T, rec store.TaskHandle, h driver.Handle, removed []string, err error)
	}{
		{
			name:   "running",
			script: `trap "echo got USR1; exit 6" USR1; echo up; while :; do sleep 0.05; done`,
			prepare: func(t *testing.T, task *driver.Task, _ store.TaskHandle) {
				waitFor(t, "the trap set", func() bool { return strings.Contains(readLog(t, task, "stdout"), "up") })
			},
			check: func(t *testing.T, rec store.TaskHandle, h driver.Handle, removed []string, err error) {
				if err != nil || h == nil || len(removed) != 0 {
					t.Fatalf("Find: handle found %t, removed %v, err %v; want the running task adopted", h != nil, removed, err)
				}
				if got := h.State(); got.PID != rec.PID || got.PIDStartTime != rec.PIDStartTime || got.SupervisorPID != rec.SupervisorPID ||
					got.CgroupPath != rec.CgroupPath || got.StatusPath != rec.StatusPath || got.KillSignal != int(syscall.SIGUSR1) {
					t.Fatalf("adopted state %+v, Start's was %+v (kill signal USR1)", got, rec)
				}
				if err := h.Stop(ctxT(t), 10*time.Second); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				if res := wait(t, h); res.ExitCode != 6 || res.Err != nil {
					t.Fatalf("result %+v, want exit 6 from the USR1 trap (the job's kill signal)", res)
				}
			},
		},
		{
			name:   "exited",
			script: `echo done; exit 7`,
			prepare: func(t *testing.T, _ *driver.Task, rec store.TaskHandle) {
				waitFor(t, "the supervisor to exit", func() bool { return !proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) })
				reapZombie(rec.SupervisorPID)
			},
			check: func(t *testing.T, rec store.TaskHandle, h driver.Handle, removed []string, err error) {
				if err != nil || h == nil {
					t.Fatalf("Find: handle found %t, removed %v, err %v; want the ended task re-attached", h != nil, removed, err)
				}
				if res := wait(t, h); res.ExitCode != 7 || res.Err != nil {
					t.Fatalf("result %+v, want exit 7 read from the status file", res)
				}
			},
		},
		{
			name:   "supervisor-killed",
			script: `sleep 1000`,
			prepare: func(t *testing.T, _ *driver.Task, rec store.TaskHandle) {
				if rec.CgroupPath == "" {
					t.Skip("no task cgroup on this host: a task whose supervisor died is found by its cgroup only")
				}
				if err := proc.KillIfSame(rec.SupervisorPID, rec.SupervisorStartTime, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the supervisor to die", func() bool { return !proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) })
				reapZombie(rec.SupervisorPID)
			},
			check: func(t *testing.T, rec store.TaskHandle, h driver.Handle, removed []string, err error) {
				if h != nil || !errors.Is(err, driver.ErrExitUnknown) || len(removed) != 1 {
					t.Fatalf("Find: handle found %t, removed %v, err %v; want the cgroup removed and ErrExitUnknown", h != nil, removed, err)
				}
				if proc.Alive(rec.PID, rec.PIDStartTime) {
					t.Fatal("the task runs on after Find removed its cgroup")
				}
			},
		},
	}
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.name, func(t *testing.T) {
				task := newTask(t, "", sh(tc.script))
				task.KillSignal = syscall.SIGUSR1
				rec := startForgotten(t, d, task)
				if tc.prepare != nil {
					tc.prepare(t, task, rec)
				}
				fresh := newDriver(d.Name(), d.isolate, Options{StoreID: testStore})
				h, removed, err := fresh.Find(ctxT(t), driver.FindRequest{AllocID: task.AllocID, Task: task.TaskName, AllocDir: task.AllocDir, KillSignal: syscall.SIGUSR1})
				tc.check(t, rec, h, removed, err)
				if h != nil {
					if err := h.Destroy(ctxT(t)); err != nil {
						t.Fatalf("Destroy: %v", err)
					}
				}
				if proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) || proc.Alive(rec.PID, rec.PIDStartTime) {
					t.Fatal("supervisor or task alive at the end")
				}
				// A second look finds nothing to run twice.
				h2, removed2, err2 := fresh.Find(ctxT(t), driver.FindRequest{AllocID: task.AllocID, Task: task.TaskName, Since: time.Now()})
				if h2 != nil || len(removed2) != 0 || err2 != nil {
					t.Fatalf("second Find: handle found %t, removed %v, err %v; want nothing", h2 != nil, removed2, err2)
				}
			})
		}
	}
}

// A process that only looks like a supervisor (its command line can be
// forged by any task, with a memfd of its own on descriptor 3) is not
// trusted with adoption: it must be root's by its real user and run the
// supervisor binary.
func TestAdoptRefusesForgedSupervisor(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	for _, tc := range []struct {
		name string
		uid  uint32
		want string
	}{
		{"a task's process", 65534, "not root"},
		{"root, another binary", 0, "not the supervisor binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := osexec.Command("/bin/sleep", "30")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: tc.uid}}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			st, err := proc.ReadStat(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			pd, err := openProc(cmd.Process.Pid, st.StartTime)
			if err != nil {
				t.Fatal(err)
			}
			defer pd.close()
			if err := d.isSupervisor(pd); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("isSupervisor = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
