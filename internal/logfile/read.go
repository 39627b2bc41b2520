package logfile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// OpenLog opens the task log file dir/name for reading. It is the one way
// berth reads a task's log: the API (alloc logs, follow), Follow's walk
// along the rotation, and the status page all come here, for every
// rotated file, so that none of them serves a file the task planted. On
// top of OpenBeneath's rule (no symlink followed, a regular file with one
// link, directly in dir) the file must be owned by the user berth's log
// writers create it as: they (the task supervisor, the podman log
// copier) are started by berth as its own user, so that is this
// process's effective uid. Anything else is ErrUnsafe.
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

// Indexes returns, ascending, the N of every dir/name.N: the files a
// Rotator keeps, oldest first. A missing dir is os.ErrNotExist.
func Indexes(dir, name string) ([]int, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return indexesOf(names, name), nil
}

// A Position is a place in a rotated log: byte Offset of file
// <name>.<Index>.
type Position struct {
	Index  int
	Offset int64
}

// Start returns where reading the log dir/name (its files name.N) begins:
// the start of its oldest file, or, with tailBytes or tailLines > 0, of
// its last bytes or lines, across files. Every file from there on is
// opened by OpenLog first, so that a planted one is ErrUnsafe here,
// before anything is served. No file at all is os.ErrNotExist.
func Start(dir, name string, tailBytes int64, tailLines int) (Position, error) {
	idx, err := Indexes(dir, name)
	if err != nil {
		return Position{}, err
	}
	if len(idx) == 0 {
		return Position{}, fmt.Errorf("log %s: %w", name, os.ErrNotExist)
	}
	pos := Position{Index: idx[0]}
	bytesLeft, linesLeft := tailBytes, tailLines
	skipLast := true // a final newline ends the last line; it starts none
	for i := len(idx) - 1; i >= 0; i-- {
		f, err := OpenLog(dir, name+"."+strconv.Itoa(idx[i]))
		if err != nil {
			return Position{}, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return Position{}, err
		}
		size := fi.Size()
		switch {
		case tailBytes > 0 && size >= bytesLeft:
			f.Close()
			return Position{idx[i], size - bytesLeft}, nil
		case tailBytes > 0:
			bytesLeft -= size
		case tailLines > 0:
			off, seen, err := linesBack(f, size, linesLeft, skipLast)
			if err != nil {
				f.Close()
				return Position{}, err
			}
			if seen == linesLeft {
				f.Close()
				return Position{idx[i], off}, nil
			}
			linesLeft -= seen
			if size > 0 {
				skipLast = false
			}
		}
		f.Close()
	}
	return pos, nil
}

// From returns where reading the log dir/name begins offset bytes after
// the start of its oldest file, across files (Nomad's origin "start");
// past the end is the end of the newest file. Each file is opened by
// OpenLog, as in Start.
func From(dir, name string, offset int64) (Position, error) {
	idx, err := Indexes(dir, name)
	if err != nil {
		return Position{}, err
	}
	if len(idx) == 0 {
		return Position{}, fmt.Errorf("log %s: %w", name, os.ErrNotExist)
	}
	left := offset
	for i, n := range idx {
		f, err := OpenLog(dir, name+"."+strconv.Itoa(n))
		if err != nil {
			return Position{}, err
		}
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			return Position{}, err
		}
		if left <= fi.Size() || i == len(idx)-1 {
			return Position{n, min(left, fi.Size())}, nil
		}
		left -= fi.Size()
	}
	return Position{Index: idx[0]}, nil
}

// linesBack looks in f (size bytes) for the start of its last n lines,
// reading backwards. It returns that offset and n when found, else how
// many line starts it saw (the file's start then begins a line counted by
// the caller's next file back).
func linesBack(f *os.File, size int64, n int, skipLast bool) (int64, int, error) {
	const block = 32 << 10
	buf := make([]byte, block)
	pos := size
	seen := 0
	for pos > 0 {
		sz := int64(block)
		if pos < sz {
			sz = pos
		}
		pos -= sz
		b := buf[:sz]
		if _, err := f.ReadAt(b, pos); err != nil && err != io.EOF {
			return 0, 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				continue
			}
			if skipLast && pos+int64(i) == size-1 {
				continue
			}
			seen++
			if seen == n {
				return pos + int64(i) + 1, n, nil
			}
		}
	}
	return 0, seen, nil
}

// ReadTail returns the last max bytes of the log dir/name, across its
// rotated files, each opened by OpenLog.
func ReadTail(ctx context.Context, dir, name string, max int64) ([]byte, error) {
	pos, err := Start(dir, name, max, 0)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := Follow(ctx, dir, name, pos, &buf, FollowOptions{}); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if int64(len(b)) > max {
		// Written to since Start: still only the end.
		b = b[int64(len(b))-max:]
	}
	return b, nil
}
