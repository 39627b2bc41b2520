// Package logfile opens task log files safely and rotates them.
//
// A task can write into its allocation directory, so whatever berth opens
// there by name may have been replaced behind its back: a symlink to
// /etc/shadow, a hard link to it, a FIFO that blocks the reader forever.
// berth runs as root, so following any of them would hand the task (or an
// API client) a file it must not have. OpenBeneath opens only a regular
// file with one link, directly in the given directory, following no
// symlink on the way; OpenLog, the one way task logs are read (API,
// follow, status page), also requires the log writer's owner.
package logfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is returned for a name that is a symlink, a hard link, or
// anything but a regular file, or that is not a plain file name.
var ErrUnsafe = errors.New("not a regular file of its own in the directory")

// OpenBeneath opens name in dir with flags (os.O_RDONLY, or
// os.O_WRONLY|os.O_APPEND|os.O_CREATE...). O_TRUNC is refused: it would act
// before the file is checked. dir itself must not be a symlink.
func OpenBeneath(dir, name string, flags int, perm os.FileMode) (*os.File, error) {
	path := filepath.Join(dir, name)
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("open %s: %q is not a file name: %w", path, name, ErrUnsafe)
	}
	if flags&os.O_TRUNC != 0 {
		return nil, fmt.Errorf("open %s: O_TRUNC is not allowed", path)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	return openAt(dfd, dir, name, flags, perm)
}

func openAt(dfd int, dir, name string, flags int, perm os.FileMode) (*os.File, error) {
	path := filepath.Join(dir, name)
	// O_NONBLOCK: opening a FIFO must not block; anything but a regular
	// file is refused below, where O_NONBLOCK means nothing.
	fl := flags | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	how := &unix.OpenHow{
		Flags:   uint64(fl),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	if flags&os.O_CREATE != 0 {
		// openat2 refuses a mode without O_CREAT.
		how.Mode = uint64(perm.Perm())
	}
	fd, err := unix.Openat2(dfd, name, how)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(dfd, name, fl, uint32(perm.Perm()))
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EXDEV) {
		return nil, fmt.Errorf("open %s: %w (%w)", path, ErrUnsafe, err)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: mode %#o, %d links: %w", path, st.Mode, st.Nlink, ErrUnsafe)
	}
	// Back to blocking I/O, which regular files do anyway: os.NewFile
	// then treats it as the plain file it is.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Rotator is an append-only log file that rotates as Nomad's logmon does:
// when the current file (<name>) would pass MaxSize bytes, it becomes
// <name>.1, <name>.1 becomes <name>.2 and so on, and the oldest beyond
// MaxFiles files in all is deleted. A file present at open is appended to.
type Rotator struct {
	dir, name string
	maxFiles  int
	maxSize   int64
	perm      os.FileMode

	f    *os.File
	size int64
}

// Defaults are Nomad's logs block: 10 files of 10 MB.
const (
	DefaultMaxFiles = 10
	DefaultMaxSize  = 10 << 20
)

// NewRotator opens (or creates) dir/name for appending. maxFiles < 1 and
// maxSize < 1 take Nomad's defaults.
func NewRotator(dir, name string, maxFiles int, maxSize int64, perm os.FileMode) (*Rotator, error) {
	if maxFiles < 1 {
		maxFiles = DefaultMaxFiles
	}
	if maxSize < 1 {
		maxSize = DefaultMaxSize
	}
	r := &Rotator{dir: dir, name: name, maxFiles: maxFiles, maxSize: maxSize, perm: perm}
	f, err := OpenBeneath(dir, name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r.f, r.size = f, fi.Size()
	return r, nil
}

// Write appends p, rotating first whenever the current file is full; a p
// larger than a whole file is split across files.
func (r *Rotator) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if r.size >= r.maxSize {
			if err := r.rotate(); err != nil {
				return written, err
			}
		}
		n := int64(len(p))
		if room := r.maxSize - r.size; n > room {
			n = room
		}
		m, err := r.f.Write(p[:n])
		written += m
		r.size += int64(m)
		if err != nil {
			return written, err
		}
		p = p[m:]
	}
	return written, nil
}

func (r *Rotator) rotated(i int) string { return r.name + "." + strconv.Itoa(i) }

func (r *Rotator) rotate() error {
	dfd, err := unix.Open(r.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rotate %s: open directory: %w", filepath.Join(r.dir, r.name), err)
	}
	defer unix.Close(dfd)
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("rotate %s: %w", filepath.Join(r.dir, r.name), err)
	}
	r.f = nil
	// Renames and unlinks act on names, never through a symlink.
	oldest := r.name
	if r.maxFiles > 1 {
		oldest = r.rotated(r.maxFiles - 1)
	}
	if err := unix.Unlinkat(dfd, oldest, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rotate: remove %s: %w", filepath.Join(r.dir, oldest), err)
	}
	for i := r.maxFiles - 2; i >= 1; i-- {
		if err := unix.Renameat(dfd, r.rotated(i), dfd, r.rotated(i+1)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rotate: rename %s: %w", filepath.Join(r.dir, r.rotated(i)), err)
		}
	}
	if r.maxFiles > 1 {
		if err := unix.Renameat(dfd, r.name, dfd, r.rotated(1)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rotate: rename %s: %w", filepath.Join(r.dir, r.name), err)
		}
	}
	// O_EXCL: whatever holds the name now was put there by someone else
	// since the rename; it is removed (unlink does not follow) and the
	// file made anew, once.
	var f *os.File
	for try := 0; ; try++ {
		f, err = openAt(dfd, r.dir, r.name, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, r.perm)
		if err == nil || try > 0 || !errors.Is(err, unix.EEXIST) {
			break
		}
		_ = unix.Unlinkat(dfd, r.name, 0)
	}
	if err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	r.f, r.size = f, 0
	return nil
}

// Close closes the current file.
func (r *Rotator) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
