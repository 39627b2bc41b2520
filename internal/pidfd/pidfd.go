// Package pidfd watches processes through pidfds on Go's poller: the
// kernel reports an exit without a thread parked in wait(2) or a timer, and
// a pidfd names one process for its whole life, so a PID reused after the
// process died is never mistaken for it.
//
// A pidfd opened with PIDFD_NONBLOCK and handed to os.NewFile is registered
// with the runtime's poller: a goroutine waiting for it is parked like one
// waiting for a socket, so a thousand watched processes cost a thousand
// parked goroutines and a thousand fds, and no OS thread.
package pidfd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Process is one watched process.
type Process struct {
	pid  int
	f    *os.File
	gone chan struct{} // closed when the process exited or f was closed
	err  error         // set before gone is closed if f was closed first
}

// Open returns a watcher of pid, or nil and no error when no process has
// that PID or check rejects it. check runs with the pidfd already open: if
// it finds the process it expects (start time, command line), the watcher
// follows that process and no other, even if it exits right after. A
// process that is a zombie already counts as running (its exit is then
// reported at once).
func Open(pid int, check func(pid int) bool) (*Process, error) {
	if pid <= 0 {
		return nil, nil
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open of PID %d: %w", pid, err)
	}
	if check != nil && !check(pid) {
		unix.Close(fd)
		return nil, nil
	}
	p := &Process{pid: pid, f: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), gone: make(chan struct{})}
	go p.watch()
	return p, nil
}

func (p *Process) watch() {
	defer close(p.gone)
	rc, err := p.f.SyscallConn()
	if err != nil {
		p.err = err
		return
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, 0)
		exited = n > 0
		return exited
	})
	if !exited {
		if err == nil {
			err = errors.New("pidfd watch ended without exit")
		}
		p.err = fmt.Errorf("watching PID %d: %w", p.pid, err)
	}
}

// PID is the watched process's PID.
func (p *Process) PID() int { return p.pid }

// Done is closed once the process exited (or the watcher was closed).
func (p *Process) Done() <-chan struct{} { return p.gone }

// Exited reports, without blocking, whether the process is gone.
func (p *Process) Exited() bool {
	select {
	case <-p.gone:
		return p.err == nil
	default:
		return false
	}
}

// Wait returns once the process has exited, or with ctx's error.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.gone:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for PID %d to exit: %w", p.pid, ctx.Err())
	}
}

// WaitOrKill waits for the process to exit by itself for up to grace, then
// kills it and waits again until ctx ends.
func (p *Process) WaitOrKill(ctx context.Context, grace time.Duration) (killed bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, grace)
	err = p.Wait(wctx)
	cancel()
	if err == nil || ctx.Err() != nil || p.Exited() {
		return false, err
	}
	if err := p.Signal(unix.SIGKILL); err != nil {
		return true, err
	}
	return true, p.Wait(ctx)
}

// Signal sends sig to the process; a process that is gone is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.PidfdSendSignal(int(fd), sig, nil, 0)
	}); err != nil {
		return err
	}
	if serr != nil && !errors.Is(serr, unix.ESRCH) {
		return fmt.Errorf("sending %v to PID %d: %w", sig, p.pid, serr)
	}
	return nil
}

// Reap collects the exit status of a child of this process once it has
// exited, without blocking: a child that is not reaped stays a zombie.
// waitid(P_PIDFD) reaps exactly this process, never another child that got
// its PID. It returns ECHILD for a process that is not this process's
// child (a supervisor adopted after a restart is reaped by init).
func (p *Process) Reap() (syscall.WaitStatus, error) {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info unix.Siginfo
	var werr error
	if err := rc.Control(func(fd uintptr) {
		for {
			werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
			if !errors.Is(werr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	if werr != nil {
		return 0, fmt.Errorf("reap PID %d: %w", p.pid, werr)
	}
	if info.Signo == 0 {
		return 0, fmt.Errorf("reap PID %d: still running", p.pid)
	}
	return waitStatus(&info), nil
}

// waitStatus turns waitid's siginfo into wait4's status word. For SIGCHLD
// the kernel puts si_status 24 bytes into siginfo, after si_pid and si_uid.
func waitStatus(info *unix.Siginfo) syscall.WaitStatus {
	status := *(*int32)(unsafe.Add(unsafe.Pointer(info), 24))
	const (
		cldExited = 1
		cldKilled = 2
		cldDumped = 3
	)
	switch info.Code {
	case cldExited:
		return syscall.WaitStatus(uint32(status&0xff) << 8)
	case cldKilled:
		return syscall.WaitStatus(uint32(status & 0x7f))
	case cldDumped:
		return syscall.WaitStatus(uint32(status&0x7f) | 0x80)
	}
	return 0
}

// Close releases the pidfd; Wait returns an error afterwards unless the
// process had already exited. A nil Process is fine.
func (p *Process) Close() {
	if p != nil {
		p.f.Close()
	}
}
