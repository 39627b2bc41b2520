package exec

import (
	"errors"
	"fmt"
	osexec "os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// errNetnsRestore marks a failure to put the starting thread back into its
// original namespace; the thread is then discarded, never reused.
var errNetnsRestore = errors.New("restore network namespace of starting thread")

// startInNetns starts cmd inside the network namespace pinned at netnsPath
// (the host's when empty).
//
// fork inherits the network namespace of the calling thread, so it is
// enough to move one locked OS thread into the namespace around
// cmd.Start: no helper binary, no re-exec. This is the pattern of
// containernetworking/plugins pkg/ns, with the same care: the work runs
// on a fresh goroutine, and if the thread cannot be moved back, that
// goroutine exits while still locked so the Go runtime terminates the
// thread instead of handing it, in the wrong namespace, to other
// goroutines.
//
// Both namespace file descriptors are closed before returning, whatever
// happens: a leaked fd would pin the namespace and make its unmount fail
// with EBUSY (the Nomad bug this project exists to avoid).
func startInNetns(netnsPath string, cmd *osexec.Cmd) error {
	if netnsPath == "" {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		errc <- startOnLockedThread(netnsPath, cmd)
	}()
	return <-errc
}

func startOnLockedThread(netnsPath string, cmd *osexec.Cmd) (err error) {
	runtime.LockOSThread()
	restored := true
	defer func() {
		if restored {
			runtime.UnlockOSThread()
		}
	}()

	// Raw fds rather than *os.File: nothing here may depend on a finalizer.
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open current network namespace: %w", err)
	}
	defer unix.Close(orig)

	target, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", netnsPath, err)
	}
	defer unix.Close(target)

	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace %s: %w", netnsPath, err)
	}
	startErr := cmd.Start()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		restored = false
		if startErr == nil {
			// The child did start in the right namespace; the caller owns
			// it and must still learn about the broken thread.
			return fmt.Errorf("%w after starting pid %d from %s: %w", errNetnsRestore, cmd.Process.Pid, netnsPath, err)
		}
		return fmt.Errorf("%w after failed start in %s: %w (start: %w)", errNetnsRestore, netnsPath, err, startErr)
	}
	return startErr
}
