package logfile

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// OpenLog opens the task log dir/name for reading. It is the one way
// berth reads a task's log: the API (alloc logs, follow), Follow's walk
// along the rotation, and the status page all come here, so that none of
// them serves a file the task planted. On top of OpenBeneath's rule (no
// symlink followed, a regular file with one link, directly in dir) the
// file must be owned by the user berth's log writers create it as: they
// (the task supervisor, the podman log copier) are started by berth as
// its own user, so that is this process's effective uid. Anything else
// is ErrUnsafe.
func OpenLog(dir, name string) (*os.File, error) {
	f, err := OpenBeneath(dir, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		f.Close()
		uid := -1
		if ok {
			uid = int(st.Uid)
		}
		return nil, fmt.Errorf("open %s: owned by uid %d, not by the log writer (uid %d): %w", f.Name(), uid, os.Geteuid(), ErrUnsafe)
	}
	return f, nil
}

// ReadTail returns the last max bytes of the task log dir/name, opened by
// OpenLog.
func ReadTail(dir, name string, max int64) ([]byte, error) {
	f, err := OpenLog(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	off, err := TailBytes(f, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return io.ReadAll(io.LimitReader(f, max))
}
