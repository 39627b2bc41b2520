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

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/pidfd"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/exec/supervisor"
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
	specFile, err := sealedSpec(spec)
	if err != nil {
		return nil, err
	}
	defer specFile.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	complaints := spec.StatusDir
	if spec.LogDir == "" {
		complaints = ""
	}
	stdio, err := openSupervisorStdio(complaints, t.TaskName)
	if err != nil {
		readyW.Close()
		return nil, err
	}
	defer stdio.close()

	args := supervisor.Args(bin, d.storeID, t.AllocID, t.TaskName)
	args[0] = supervisor.Binary
	files := []uintptr{stdio.devnull.Fd(), stdio.devnull.Fd(), stdio.stderr.Fd(), specFile.Fd(), readyW.Fd()}
	pid, err := forkSupervisor(t.NetnsPath, bin, args, files)
	readyW.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	// Our unreaped child: its PID names it until this process reaps it.
	sup, err := pidfd.Open(pid, nil)
	if err != nil || sup == nil {
		return nil, errors.Join(fmt.Errorf("watch supervisor pid %d: %w", pid, err), killChild(pid))
	}
	supStart, _ := proc.StartTime(pid)

	taskPID, taskStart, err := awaitReady(ctx, readyR, pid, sup)
	if err != nil {
		return nil, err
	}
	h := &handle{
		drv: d, id: t.AllocID + "/" + t.TaskName, allocID: t.AllocID, task: t.TaskName,
		sup: sup, supPID: pid, supStart: supStart, ourChild: true,
		pid: taskPID, startTime: taskStart, startedAt: time.Now(), cg: cg,
		statusPath: filepath.Join(spec.StatusDir, spec.StatusName),
		killSignal: t.KillSignal,
		done:       make(chan struct{}),
	}
	// Without a pidfd (the task already gone, or reused) the handle
	// falls back to the supervisor's status: no error to report here.
	h.taskProc, _ = pidfd.Open(taskPID, func(pid int) bool {
		st, err := proc.ReadStat(pid)
		return err == nil && st.StartTime == taskStart
	})
	go h.watch()
	return h, nil
}

// sealedSpec is the task spec in a sealed memfd. The supervisor keeps it
// open for the task's life: it is the record `alloc exec` takes the
// task's identity from, sealed so that nothing can change it.
func sealedSpec(spec *supervisor.Spec) (*os.File, error) {
	memfd, err := unix.MemfdCreate(specMemfdName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for the task spec: %w", err)
	}
	f := os.NewFile(uintptr(memfd), "task-spec")
	if _, err := f.Write(spec.Marshal()); err != nil {
		return nil, errors.Join(fmt.Errorf("write the task spec: %w", err), f.Close())
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS,
		unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		return nil, errors.Join(fmt.Errorf("seal the task spec: %w", err), f.Close())
	}
	return f, nil
}

// supervisorStdio is what the supervisor gets as stdin, stdout (devnull)
// and stderr.
type supervisorStdio struct {
	devnull, stderr *os.File
}

// openSupervisorStdio sends the supervisor's own complaints (a status it
// could not write) to dir, beside its status file (not among the task's
// logs, which the task sees), or to /dev/null for a task without logs.
func openSupervisorStdio(dir, task string) (*supervisorStdio, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	s := &supervisorStdio{devnull: devnull, stderr: devnull}
	if dir != "" {
		// Without it the supervisor still runs: its complaints are lost.
		if f, err := os.OpenFile(filepath.Join(dir, "."+task+".supervisor.log"),
			os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err == nil {
			s.stderr = f
		}
	}
	return s, nil
}

// close closes the parent's copies, once the supervisor has its own:
// nothing was written through them, so a failure loses nothing.
func (s *supervisorStdio) close() {
	if s.stderr != s.devnull {
		s.stderr.Close()
	}
	s.devnull.Close()
}

// forkSupervisor starts the supervisor with files as its descriptors 0 to
// 4, in the network namespace at netnsPath ("" the host's).
func forkSupervisor(netnsPath, bin string, args []string, files []uintptr) (int, error) {
	var pid int
	fork := func() error {
		var err error
		pid, err = syscall.ForkExec(bin, args, &syscall.ProcAttr{
			// GOMAXPROCS=1: one P, hence the fewest threads and the
			// smallest runtime for a process that mostly sleeps in poll.
			Env:   []string{"GOMAXPROCS=1", "GOGC=50"},
			Files: files,
			// A session of its own: Ctrl-C at a `berth run` terminal, or
			// a signal to berth's group, does not reach it.
			Sys: &syscall.SysProcAttr{Setsid: true},
		})
		return err
	}
	// fork inherits the namespace of the calling thread: starting from a
	// thread moved into the group's namespace is enough.
	if netnsPath == "" {
		return pid, fork()
	}
	err := netns.WithPath(netnsPath, fork)
	if errors.Is(err, netns.ErrRestore) && pid > 0 {
		// The supervisor did start in the right namespace, but from a
		// thread berth can no longer vouch for: such a start counts as
		// failed.
		err = errors.Join(err, killChild(pid))
	}
	return pid, err
}

// killChild kills and reaps a supervisor berth forked and cannot use.
func killChild(pid int) error {
	var errs []error
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		errs = append(errs, fmt.Errorf("kill supervisor pid %d: %w", pid, err))
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		errs = append(errs, fmt.Errorf("reap supervisor pid %d: %w", pid, err))
	}
	return errors.Join(errs...)
}

// awaitReady reads the supervisor's answer on r: the task's PID and start
// time, or why it did not start. A supervisor that refused exits by
// itself; one that does not answer in time is killed.
func awaitReady(ctx context.Context, r *os.File, pid int, sup *pidfd.Process) (taskPID int, taskStart uint64, err error) {
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > readyTimeout {
		deadline = time.Now().Add(readyTimeout)
	}
	err = r.SetReadDeadline(deadline)
	if err == nil {
		var line string
		line, err = bufio.NewReader(r).ReadString('\n')
		if err == nil {
			taskPID, taskStart, err = supervisor.ParseReady(line)
		} else if line == "" {
			err = fmt.Errorf("supervisor pid %d gave no answer: %w", pid, err)
		}
	}
	if err == nil {
		return taskPID, taskStart, nil
	}
	if _, kerr := sup.WaitOrKill(context.WithoutCancel(ctx), 5*time.Second); kerr != nil {
		err = errors.Join(err, fmt.Errorf("stop supervisor pid %d: %w", pid, kerr))
	}
	ws, _ := sup.Reap()
	sup.Close()
	if ws.Signaled() || (ws.Exited() && ws.ExitStatus() > 1) {
		err = fmt.Errorf("%w (supervisor %s)", err, describeWait(ws))
	}
	return 0, 0, err
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
	// Reap fails (ECHILD) for a supervisor adopted after a restart, which
	// init reaps; for berth's own child the exit was just waited for.
	_, _ = p.Reap()
	return nil
}
