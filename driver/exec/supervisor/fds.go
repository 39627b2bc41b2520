package supervisor

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A process of berth's may have inherited descriptors without
// close-on-exec (a service manager's, a shell's 10 and 251): Go's fork
// passes every such descriptor on, whatever ProcAttr.Files says. The
// supervisor closes them as it starts, and the task and a command run in
// it get nothing but stdin, stdout and stderr.

// closeInherited closes every descriptor from first on that is not
// close-on-exec. The Go runtime's own (epoll, its pipes) are all
// close-on-exec, so only inherited ones go.
func closeInherited(first int) error {
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

// closeOnExecFrom marks every descriptor from first on close-on-exec: an
// exec keeps only those below.
func closeOnExecFrom(first int) error {
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
