package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/inherited"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/internal/proc"
	"golang.org/x/sys/unix"
)

// The file descriptors the driver hands the supervisor, and the
// supervisor hands the task's init.
const (
	specFD  = 3 // the spec (a memfd), read from offset 0
	replyFD = 4 // supervisor: the ready line to the driver; init: an exec error to the supervisor
)

// Main is the supervisor binary's main: "run" supervises a task, "init" is
// the task's first process, which sets it up and execs it.
func Main(args []string) int {
	if len(args) >= 2 {
		// Each is handed exactly its descriptors (see the FD
		// constants); anything else open is berth's inheritance.
		// Close fails only when /proc/self/fd cannot be listed; what
		// stays open then is still kept from the task and the command
		// (init and enter mark everything from fd 3 close-on-exec).
		switch args[1] {
		case "run":
			_ = inherited.Close(replyFD + 1)
			return run(args)
		case "init":
			_ = inherited.Close(replyFD + 1)
			return initMain()
		case "enter":
			_ = inherited.Close(enterRootFD + 1)
			return enterMain()
		}
	}
	fmt.Fprintf(os.Stderr, "%s is started by berth's raw_exec and exec drivers, one per task; it is not run by hand\n", Binary)
	return 2
}

// supervisor is one run of `berth-supervisor run`.
type supervisor struct {
	spec   *Spec
	reply  *os.File
	status Status
	cg     *cgroup.Set
}

func run(args []string) int {
	s := &supervisor{reply: os.NewFile(replyFD, "reply")}
	spec, err := readSpec()
	if err != nil {
		return s.refuse(err)
	}
	s.spec = spec
	if !IsSupervisorOf(cmdlineOf(args), spec.StoreID, spec.AllocID, spec.Task) {
		return s.refuse(fmt.Errorf("command line %q does not match the spec's task %s/%s of store %s", args, spec.AllocID, spec.Task, spec.StoreID))
	}
	s.status = Status{StoreID: spec.StoreID, AllocID: spec.AllocID, Task: spec.Task, SupervisorPID: os.Getpid()}
	if st, err := proc.StartTime(os.Getpid()); err == nil {
		s.status.SupervisorStart = st
	}
	s.cg = spec.Cgroup
	return s.supervise()
}

func cmdlineOf(args []string) []byte {
	var b []byte
	for _, a := range args {
		b = append(b, a...)
		b = append(b, 0)
	}
	return b
}

// readSpec reads fd 3 from its start, leaving it open: the supervisor
// hands the same fd to the task's init.
func readSpec() (*Spec, error) {
	var b []byte
	buf := make([]byte, 64<<10)
	var err error
	for off := int64(0); ; {
		n, rerr := unix.Pread(specFD, buf, off)
		if errors.Is(rerr, unix.EINTR) {
			continue
		}
		if n > 0 {
			b = append(b, buf[:n]...)
			off += int64(n)
		}
		if rerr != nil || n == 0 {
			err = rerr
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read the task spec: %w", err)
	}
	return ParseSpec(b)
}

// refuse tells the driver why the task did not start.
func (s *supervisor) refuse(err error) int {
	if _, werr := s.reply.WriteString("err " + strconv.Quote(err.Error()) + "\n"); werr != nil {
		// The driver gone: the reason still reaches the supervisor's log.
		fmt.Fprintf(os.Stderr, "%s: task not started: %v (the driver was not told: %v)\n", Binary, err, werr)
	}
	s.reply.Close()
	return 1
}

// logMode is Nomad's for a log file: the task reads its logs in
// $NOMAD_ALLOC_DIR/logs (the allocation dir keeps others out).
const logMode = 0o644

// logSink is one output stream of the task: the read end of its pipe and
// the rotating file it goes to.
type logSink struct {
	fd  int // -1 once at EOF
	out io.Writer
	err error
}

func (s *supervisor) openLogs() (sinks []*logSink, childOut, childErr int, err error) {
	sp := s.spec
	childOut, childErr = -1, -1
	if sp.LogDir == "" {
		return nil, -1, -1, nil
	}
	var closers []func()
	fail := func(err error) ([]*logSink, int, int, error) {
		for _, c := range closers {
			c()
		}
		return nil, -1, -1, err
	}
	ends := [2]int{}
	for i, name := range []string{sp.Stdout, sp.Stderr} {
		rot, err := logfile.NewRotator(sp.LogDir, name, sp.LogMaxFiles, sp.LogMaxSize, logMode)
		if err != nil {
			return fail(fmt.Errorf("open log: %w", err))
		}
		closers = append(closers, func() { rot.Close() })
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fail(fmt.Errorf("pipe for %s: %w", name, err))
		}
		closers = append(closers, func() { unix.Close(p[0]); unix.Close(p[1]) })
		sinks = append(sinks, &logSink{fd: p[0], out: rot})
		ends[i] = p[1]
	}
	return sinks, ends[0], ends[1], nil
}

// supervise starts the task, tells the driver, watches it to its end and
// records how it ended.
func (s *supervisor) supervise() int {
	sinks, outW, errW, err := s.openLogs()
	if err != nil {
		return s.refuse(err)
	}
	pid, pidfd, err := s.startInit(outW, errW)
	if err != nil {
		return s.refuse(err)
	}
	s.announce(pid)
	s.copyUntilExit(sinks, pidfd)
	errs := s.stopTask(pid)
	s.drain(sinks)
	ws, err := reap(pid)
	if err != nil {
		errs = append(errs, err)
	}
	s.recordExit(ws)
	errs = append(errs, s.release(sinks)...)
	if err := errors.Join(errs...); err != nil {
		s.status.Error = err.Error()
	}
	if err := writeStatus(s.spec.StatusDir, s.spec.StatusName, s.status.Marshal()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: task %s/%s exited with %d but its status could not be recorded: %v\n", Binary, s.spec.AllocID, s.spec.Task, s.status.ExitCode, err)
		return 1
	}
	return 0
}

// cloneFlags are the namespaces the task's init is cloned into.
func (sp *Spec) cloneFlags() uintptr {
	var flags uintptr
	if sp.Root != "" {
		flags |= unix.CLONE_NEWNS
	}
	if sp.NewPIDNS {
		flags |= unix.CLONE_NEWPID
	}
	if sp.NewIPCNS {
		flags |= unix.CLONE_NEWIPC
	}
	return flags
}

// startInit starts the task's init with stdout and stderr on outW and
// errW (the log pipes' write ends, closed here; -1: /dev/null) and waits
// until it has exec'd the task or failed: the task's PID and a pidfd of
// it, or why it did not start.
func (s *supervisor) startInit(outW, errW int) (pid, pidfd int, err error) {
	closeOut := func() {
		if outW >= 0 {
			unix.Close(outW)
			unix.Close(errW)
		}
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		closeOut()
		return 0, -1, err
	}
	defer devnull.Close()
	out, errOut := uintptr(outW), uintptr(errW)
	if outW < 0 {
		out, errOut = devnull.Fd(), devnull.Fd()
	}
	var ep [2]int
	if err := unix.Pipe2(ep[:], unix.O_CLOEXEC); err != nil {
		closeOut()
		return 0, -1, fmt.Errorf("pipe: %w", err)
	}
	pidfd = -1
	// /proc/self/exe, not the path: it runs this very binary even after
	// an upgrade replaced the file. The init reads the same spec (fd 3)
	// and reports a failed setup or exec on fd 4, which the exec closes.
	pid, err = syscall.ForkExec("/proc/self/exe", []string{Binary, "init"}, &syscall.ProcAttr{
		Env:   []string{"GOMAXPROCS=1"},
		Files: []uintptr{devnull.Fd(), out, errOut, specFD, uintptr(ep[1])},
		Sys: &syscall.SysProcAttr{
			// A session of its own: the task's process group is its PID,
			// and no terminal of berth's reaches it.
			Setsid:     true,
			Cloneflags: s.spec.cloneFlags(),
			PidFD:      &pidfd,
		},
	})
	unix.Close(ep[1])
	closeOut()
	defer unix.Close(ep[0])
	if err != nil {
		return 0, -1, fmt.Errorf("start the task's init: %w", err)
	}
	if msg := readAll(ep[0]); msg != "" {
		unix.Close(pidfd)
		// The init exits 127 right after writing; the error reaping it
		// could add is not the task's, whose start failed for msg.
		_, _ = reap(pid)
		return 0, -1, errors.New(msg)
	}
	return pid, pidfd, nil
}

// announce records that the task runs and tells the driver its PID.
func (s *supervisor) announce(pid int) {
	s.status.PID = pid
	s.status.StartedAt = time.Now()
	if st, err := proc.StartTime(pid); err == nil {
		s.status.PIDStart = st
	}
	if _, err := s.reply.WriteString(readyLine(pid, s.status.PIDStart)); err != nil {
		// The driver gone (berth restarting): it adopts the task from
		// /proc and the status file, so the task goes on.
		fmt.Fprintf(os.Stderr, "%s: task %s/%s runs as pid %d, but the driver was not told: %v\n", Binary, s.spec.AllocID, s.spec.Task, pid, err)
	}
	s.reply.Close()
}

// stopTask kills what is left of the task once its main process has
// exited: its process group, and everything in its cgroup.
func (s *supervisor) stopTask(pid int) []error {
	var errs []error
	// The task's leader is a zombie now: its process group ID stays
	// reserved until it is reaped, so the group can be killed safely.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		errs = append(errs, fmt.Errorf("kill the task's process group %d: %w", pid, err))
	}
	if s.cg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.cg.KillAll(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := waitEmpty(ctx, s.cg); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// reap waits for the task's main process.
func reap(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return ws, fmt.Errorf("reap task pid %d: %w", pid, err)
		}
		return ws, nil
	}
}

// recordExit records how the task's main process ended.
func (s *supervisor) recordExit(ws syscall.WaitStatus) {
	s.status.FinishedAt = time.Now()
	switch {
	case ws.Signaled():
		s.status.Signal = int(ws.Signal())
		// The shell's convention, as Nomad reports it.
		s.status.ExitCode = 128 + s.status.Signal
	default:
		s.status.ExitCode = ws.ExitStatus()
	}
	if s.cg != nil && s.status.Signal == int(syscall.SIGKILL) {
		s.status.OOMKilled = s.cg.OOMKilled()
	}
}

// release removes the task's cgroup and closes its logs.
func (s *supervisor) release(sinks []*logSink) []error {
	var errs []error
	if s.cg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.cg.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	for _, sk := range sinks {
		if sk.err != nil {
			errs = append(errs, sk.err)
		}
		if c, ok := sk.out.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close log: %w", err))
			}
		}
	}
	return errs
}

// copyUntilExit copies the task's output into its logs until the task's
// main process exits.
func (s *supervisor) copyUntilExit(sinks []*logSink, pidfd int) {
	buf := make([]byte, 32<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for _, sk := range sinks {
			fds = append(fds, unix.PollFd{Fd: int32(sk.fd), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// Should not happen; fall back to reading blocking in turn.
			time.Sleep(10 * time.Millisecond)
		}
		for i, sk := range sinks {
			if sk.fd >= 0 && fds[i+1].Revents != 0 {
				sk.pump(buf)
			}
		}
		if fds[0].Revents != 0 {
			unix.Close(pidfd)
			return
		}
	}
}

// pump moves one read of the pipe to the log; EOF closes the pipe.
func (sk *logSink) pump(buf []byte) {
	n, err := unix.Read(sk.fd, buf)
	if n > 0 {
		if _, werr := sk.out.Write(buf[:n]); werr != nil && sk.err == nil {
			sk.err = fmt.Errorf("write log: %w", werr)
		}
	}
	if n == 0 || (err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN)) {
		unix.Close(sk.fd)
		sk.fd = -1
	}
}

// drain copies what is left in the pipes once everything in the task's
// cgroup is dead, up to EOF. A writer that escaped (no cgroup on this
// host, a child in a session of its own) could hold a pipe open forever:
// after a quiet half second the rest is abandoned.
func (s *supervisor) drain(sinks []*logSink) {
	buf := make([]byte, 32<<10)
	for {
		var fds []unix.PollFd
		var open []*logSink
		for _, sk := range sinks {
			if sk.fd >= 0 {
				fds = append(fds, unix.PollFd{Fd: int32(sk.fd), Events: unix.POLLIN})
				open = append(open, sk)
			}
		}
		if len(fds) == 0 {
			return
		}
		n, err := unix.Poll(fds, 500)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 {
			for _, sk := range open {
				unix.Close(sk.fd)
				sk.fd = -1
			}
			return
		}
		for i, sk := range open {
			if fds[i].Revents != 0 {
				sk.pump(buf)
			}
		}
	}
}

// waitEmpty kills what is in cg until nothing is; when time runs out, the
// last kill's error (if any) says why.
func waitEmpty(ctx context.Context, cg *cgroup.Set) error {
	var killErr error
	for {
		pids, err := cg.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("cgroup %s still holds pids %v: %w", cg.Rel, pids, ctx.Err()), killErr)
		case <-time.After(5 * time.Millisecond):
		}
		killErr = cg.KillAll(ctx)
	}
}

func readAll(fd int) string {
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			out = append(out, buf[:n]...)
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 {
			return string(out)
		}
	}
}

// writeStatus writes the status beside the logs: a temporary file,
// synced, renamed over the name, so that a reader sees the old file or the
// whole new one.
func writeStatus(dir, name string, b []byte) error {
	tmp := "." + name + ".tmp"
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	// A leftover of a supervisor that died mid-write; none is usual
	// (ENOENT), and one that cannot be removed fails the O_EXCL below.
	_ = unix.Unlinkat(dfd, tmp, 0)
	f, err := logfile.OpenBeneath(dir, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		werr = fmt.Errorf("write %s: %w", filepath.Join(dir, tmp), werr)
		if err := unix.Unlinkat(dfd, tmp, 0); err != nil {
			werr = errors.Join(werr, fmt.Errorf("remove %s: %w", filepath.Join(dir, tmp), err))
		}
		return werr
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return fmt.Errorf("rename %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}
