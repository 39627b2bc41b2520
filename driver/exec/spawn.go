package exec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth/berth/driver"
	"github.com/berth/berth/driver/exec/supervisor"
	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/pidfd"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/netns"
	"golang.org/x/sys/unix"
)

// SupervisorEnv names the supervisor binary for processes that cannot be
// told through Options (tests, a berth run from a build directory).
const SupervisorEnv = supervisor.PathEnv

// ErrNoSupervisor is returned when the berth-supervisor binary is not found.
var ErrNoSupervisor = supervisor.ErrNotFound

// supervisorPath finds the supervisor binary once (supervisor.Find).
func (d *Driver) supervisorPath() (string, error) {
	d.findOnce.Do(func() {
		d.supervisor, d.findErr = supervisor.Find(d.supervisor)
	})
	return d.supervisor, d.findErr
}

// specMemfdName names the task spec's memfd, which its supervisor keeps
// open on descriptor 3 (/proc/<pid>/fd/3 reads "/memfd:<name> (deleted)").
const specMemfdName = "berth-task-spec"

// readyTimeout bounds how long a supervisor may take to say whether the
// task started: a chroot of bind mounts and an exec.
const readyTimeout = 30 * time.Second

// launch starts the supervisor in the task's network namespace and waits
// for its answer: the task runs (its PID and start time) or why not.
func (d *Driver) launch(ctx context.Context, t *driver.Task, spec *supervisor.Spec, cg *cgroup.Set) (*handle, error) {
	bin, err := d.supervisorPath()
	if err != nil {
		return nil, err
	}
	memfd, err := unix.MemfdCreate(specMemfdName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for the task spec: %w", err)
	}
	specFile := os.NewFile(uintptr(memfd), "task-spec")
	defer specFile.Close()
	if _, err := specFile.Write(spec.Marshal()); err != nil {
		return nil, fmt.Errorf("write the task spec: %w", err)
	}
	// The supervisor keeps it open for the task's life: it is the record
	// `alloc exec` takes the task's identity from, sealed so that nothing
	// can change it.
	if _, err := unix.FcntlInt(specFile.Fd(), unix.F_ADD_SEALS,
		unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		return nil, fmt.Errorf("seal the task spec: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		readyW.Close()
		return nil, err
	}
	defer devnull.Close()
	stderr := devnull
	if spec.LogDir != "" {
		// The supervisor's own complaints (a status it could not write),
		// beside the task's logs.
		if f, err := os.OpenFile(filepath.Join(spec.LogDir, "."+t.TaskName+".supervisor.log"),
			os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err == nil {
			defer f.Close()
			stderr = f
		}
	}

	args := supervisor.Args(bin, d.storeID, t.AllocID, t.TaskName)
	args[0] = supervisor.Binary
	var pid int
	fork := func() error {
		var ferr error
		pid, ferr = syscall.ForkExec(bin, args, &syscall.ProcAttr{
			// GOMAXPROCS=1: one P, hence the fewest threads and the
			// smallest runtime for a process that mostly sleeps in poll.
			Env:   []string{"GOMAXPROCS=1", "GOGC=50"},
			Files: []uintptr{devnull.Fd(), devnull.Fd(), stderr.Fd(), specFile.Fd(), readyW.Fd()},
			// A session of its own: Ctrl-C at a `berth run` terminal, or
			// a signal to berth's group, does not reach it.
			Sys: &syscall.SysProcAttr{Setsid: true},
		})
		return ferr
	}
	// fork inherits the namespace of the calling thread: starting from a
	// thread moved into the group's namespace is enough.
	if t.NetnsPath == "" {
		err = fork()
	} else {
		err = netns.WithPath(t.NetnsPath, fork)
		if errors.Is(err, netns.ErrRestore) && pid > 0 {
			// The supervisor did start in the right namespace, but from a
			// thread berth can no longer vouch for: such a start counts
			// as failed.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
	readyW.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	// Our unreaped child: its PID names it until this process reaps it.
	sup, err := pidfd.Open(pid, nil)
	if err != nil || sup == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return nil, fmt.Errorf("watch supervisor pid %d: %w", pid, err)
	}
	supStart, _ := proc.StartTime(pid)

	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > readyTimeout {
		deadline = time.Now().Add(readyTimeout)
	}
	_ = readyR.SetReadDeadline(deadline)
	line, rerr := bufio.NewReader(readyR).ReadString('\n')
	var taskPID int
	var taskStart uint64
	if rerr == nil {
		taskPID, taskStart, rerr = supervisor.ParseReady(line)
	} else if line == "" {
		rerr = fmt.Errorf("supervisor pid %d gave no answer: %w", pid, rerr)
	}
	if rerr != nil {
		// The supervisor exits by itself after refusing; one that does
		// not answer in time is killed.
		_, _ = sup.WaitOrKill(context.WithoutCancel(ctx), 5*time.Second)
		ws, _ := sup.Reap()
		sup.Close()
		if ws.Signaled() || (ws.Exited() && ws.ExitStatus() > 1) {
			rerr = fmt.Errorf("%w (supervisor %s)", rerr, describeWait(ws))
		}
		return nil, rerr
	}
	h := &handle{
		drv: d, id: t.AllocID + "/" + t.TaskName, allocID: t.AllocID, task: t.TaskName,
		sup: sup, supPID: pid, supStart: supStart, ourChild: true,
		pid: taskPID, startTime: taskStart, startedAt: time.Now(), cg: cg,
		statusPath: filepath.Join(spec.StatusDir, spec.StatusName),
		killSignal: t.KillSignal,
		done:       make(chan struct{}),
	}
	h.taskProc, _ = pidfd.Open(taskPID, func(pid int) bool {
		st, err := proc.ReadStat(pid)
		return err == nil && st.StartTime == taskStart
	})
	go h.watch()
	return h, nil
}

func describeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// readStatus reads a task's exit status file.
func readStatus(path string) (*supervisor.Status, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return supervisor.ParseStatus(b)
}

// stopSupervisor waits a little for a supervisor whose task was killed to
// finish by itself, then kills it; only the recorded process is touched.
func stopSupervisor(ctx context.Context, pid int, start uint64) error {
	p, err := pidfd.Open(pid, func(pid int) bool { return proc.Alive(pid, start) })
	if err != nil || p == nil {
		return err
	}
	defer p.Close()
	if _, err := p.WaitOrKill(ctx, 5*time.Second); err != nil {
		return fmt.Errorf("supervisor pid %d: %w", pid, err)
	}
	_, _ = p.Reap()
	return nil
}
