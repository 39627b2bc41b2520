// Package inherited deals with the file descriptors a berth process
// inherited without close-on-exec (a service manager's, a shell's 10 and
// 251): Go's fork passes every such descriptor on, whatever
// ProcAttr.Files or exec.Cmd.ExtraFiles say, to CNI plugins, the podman
// service, task supervisors and so to tasks. berth marks them
// close-on-exec as it starts; the supervisor closes them too, and the
// task and a command run in it get nothing but stdin, stdout and stderr.
package inherited

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Close closes every descriptor from first on that is not
// close-on-exec. The Go runtime's own (epoll, its pipes) are all
// close-on-exec, so only inherited ones go.
func Close(first int) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list open descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < first {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			// Gone (the directory's own descriptor) or the runtime's.
			continue
		}
		unix.Close(fd)
	}
	return nil
}

// CloseOnExec marks every descriptor from first on close-on-exec: an
// exec keeps only those below.
func CloseOnExec(first int) error {
	err := unix.CloseRange(uint(first), math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("close_range: %w", err)
	}
	// Kernels before 5.11.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list open descriptors: %w", err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
	return nil
}
