package podman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// proc watches a process that is not berth's child (conmon, or a podman
// service left by a dead berth) through a pidfd: the kernel reports its exit
// without polling, and a reused PID cannot be mistaken for it.
//
// conmon matters because podman's DELETE returns before conmon (and the
// `podman container cleanup` it runs once the task exited) are gone, and
// conmon exits only after podman recorded the exit: waiting for it both
// replaces polling the wait API and lets Destroy return only once nothing
// of the task is left.
type proc struct {
	pid  int
	f    *os.File
	gone chan struct{} // closed when the process exited or f was closed
	err  error         // set before gone is closed if f was closed first
}

// openProc returns nil when pid is not running or is not the process
// matches says it should be.
func openProc(pid int, matches func(cmdline []byte) bool) (*proc, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open of PID %d: %w", pid, err)
	}
	// With the pidfd open, /proc/<pid> is this process for as long as it
	// lives: a command line that does not match means the process died and
	// the PID was reused (or it is a zombie, which holds nothing either).
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !matches(cmdline) {
		unix.Close(fd)
		return nil, nil
	}
	// A non-blocking fd handed to os.NewFile goes to the runtime's poller,
	// so the watcher below parks without a thread or a timer.
	p := &proc{pid: pid, f: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), gone: make(chan struct{})}
	go p.watch()
	return p, nil
}

func (p *proc) watch() {
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

// openConmon finds the conmon of container id through the PID file conmon
// wrote. It returns nil when that conmon is already gone.
func openConmon(pidFile, id string) (*proc, error) {
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading conmon PID file %s: %w", pidFile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("conmon PID file %s: bad content %q", pidFile, b)
	}
	p, err := openProc(pid, func(cmdline []byte) bool { return isConmonOf(cmdline, id) })
	if err != nil {
		return nil, fmt.Errorf("conmon of container %s: %w", id, err)
	}
	return p, nil
}

// isConmonOf accepts a container ID or name: conmon gets both (-c, -n).
func isConmonOf(cmdline []byte, idOrName string) bool {
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(args) == 0 || !strings.HasSuffix(string(args[0]), "conmon") {
		return false
	}
	for i := 1; i+1 < len(args); i++ {
		switch string(args[i]) {
		case "-c", "--cid", "-n", "--name":
			if string(args[i+1]) == idOrName {
				return true
			}
		}
	}
	return false
}

// exited reports, without blocking, whether the process is gone.
func (p *proc) exited() bool {
	select {
	case <-p.gone:
		return p.err == nil
	default:
		return false
	}
}

// wait returns once the process has exited, or with ctx's error.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.gone:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for PID %d to exit: %w", p.pid, ctx.Err())
	}
}

// waitOrKill waits for the process to exit by itself for up to grace, then
// kills it and waits again until ctx ends.
func (p *proc) waitOrKill(ctx context.Context, grace time.Duration) (killed bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, grace)
	err = p.wait(wctx)
	cancel()
	if err == nil || ctx.Err() != nil || p.exited() {
		return false, err
	}
	if err := p.signal(unix.SIGKILL); err != nil {
		return true, err
	}
	return true, p.wait(ctx)
}

func (p *proc) signal(sig unix.Signal) error {
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

// close releases the pidfd; wait returns an error afterwards unless the
// process had already exited.
func (p *proc) close() {
	if p != nil {
		p.f.Close()
	}
}
