package netns

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrRestore marks a failure to move a thread back into the network
// namespace it came from. The thread is then discarded, never reused; what
// fn did in the namespace (a process it started, a mount it made) stands,
// and the caller decides whether to keep it.
var ErrRestore = errors.New("return thread to its original network namespace")

// WithPath runs fn inside the network namespace pinned at path: on a
// locked OS thread of a fresh goroutine that enters the namespace, runs fn,
// and goes back. Everything fn does on that thread (sockets it opens,
// processes it forks) belongs to the namespace; other goroutines do not
// follow it.
//
// This is the pattern of containernetworking/plugins pkg/ns
// (WithNetNSPath), written here because berth needs two things that
// package does not give: a failed return is reported (wrapping ErrRestore)
// rather than only logged by the thread's death, and the same care covers
// unsharing a new namespace (Create, Probe). No file descriptor outlives
// the call: a leaked one would pin the namespace and make its unmount fail
// with EBUSY.
func WithPath(path string, fn func() error) error {
	return onLockedThread(func() error {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open network namespace %s: %w", path, err)
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter network namespace %s: %w", path, err)
		}
		return nil
	}, func(string) error { return fn() })
}

// withNew runs fn in a new network namespace, unshared by a locked OS
// thread; fn gets the thread's /proc path of it (to bind-mount it). The
// namespace lives on only if fn pins it.
func withNew(fn func(self string) error) error {
	return onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
		}
		return nil
	}, fn)
}

// onLockedThread runs enter then fn on a locked OS thread of a new
// goroutine, and moves the thread back to its original namespace. enter
// must leave the thread where it was when it fails.
//
// If moving back fails the goroutine exits still locked, so the runtime
// terminates the thread instead of handing it, in the wrong namespace, to
// other goroutines. A fresh goroutine is used so that this never happens to
// the caller's thread: exiting locked on the process's main thread wedges
// it instead, and the whole process then appears to live in the namespace
// (/proc/<pid>/ns/net is the main thread's) and keeps it alive.
func onLockedThread(enter func() error, fn func(self string) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The result is sent only after runLocked has closed its fd: a caller that
		// counts its fds (or unmounts the namespace) right after the call
		// must not see the thread's handle on its original namespace.
		restored, err := runLocked(enter, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// runLocked is the body of onLockedThread on its locked thread; restored
// is false when the thread could not go back and must die locked.
func runLocked(enter func() error, fn func(self string) error) (restored bool, err error) {
	self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	// Raw fds rather than *os.File: nothing here may depend on a finalizer.
	orig, err := unix.Open(self, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("open current netns %s: %w", self, err)
	}
	defer unix.Close(orig)
	if err := enter(); err != nil {
		return true, err
	}
	ferr := fn(self)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		if ferr != nil {
			return false, fmt.Errorf("%w: %w (before that: %w)", ErrRestore, err, ferr)
		}
		return false, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	return true, ferr
}
