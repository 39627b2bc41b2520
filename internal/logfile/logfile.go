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
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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

// Rotator is an append-only log written as Nomad's logmon writes one:
// into <name>.<N> (N from 0), a new file <name>.<N+1> once <name>.<N>
// holds MaxSize bytes, and only the newest MaxFiles files kept: older
// ones are removed. Nothing is renamed, so a reader holding a file never
// sees it change name. At open it appends to the highest-numbered file
// present (as logmon does after a restart), or starts <name>.<N+1> when
// that one is full.
//
// The directory is opened once, without following a symlink, and every
// file is opened and removed relative to it: a name planted in it (a
// symlink, a hard link) is never written through. A new file is made
// with O_CREAT|O_EXCL; whatever holds its name is removed first.
type Rotator struct {
	dir, name string
	maxFiles  int
	maxSize   int64
	perm      os.FileMode

	dfd  int // the directory, O_PATH
	idx  int
	f    *os.File
	size int64
}

// Defaults are Nomad's logs block: 10 files of 10 MB.
const (
	DefaultMaxFiles = 10
	DefaultMaxSize  = 10 << 20
)

// NewRotator opens dir/name.<N> for appending, N the highest index
// present (0 when none). maxFiles < 1 and maxSize < 1 take Nomad's
// defaults.
func NewRotator(dir, name string, maxFiles int, maxSize int64, perm os.FileMode) (*Rotator, error) {
	if maxFiles < 1 {
		maxFiles = DefaultMaxFiles
	}
	if maxSize < 1 {
		maxSize = DefaultMaxSize
	}
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("log %s: %q is not a file name: %w", filepath.Join(dir, name), name, ErrUnsafe)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("log %s: open directory %s: %w", name, dir, err)
	}
	r := &Rotator{dir: dir, name: name, maxFiles: maxFiles, maxSize: maxSize, perm: perm, dfd: dfd}
	idx, err := r.indexes()
	if err != nil {
		unix.Close(dfd)
		return nil, err
	}
	if len(idx) > 0 {
		r.idx = idx[len(idx)-1]
		f, err := openAt(dfd, dir, r.file(r.idx), os.O_WRONLY|os.O_APPEND, perm)
		switch {
		case err == nil:
			fi, serr := f.Stat()
			if serr == nil && fi.Size() < maxSize {
				r.f, r.size = f, fi.Size()
			} else {
				f.Close()
				r.idx++
			}
		case errors.Is(err, ErrUnsafe):
			// Not a file of its own (planted): create replaces it.
		default:
			r.idx++
		}
	}
	if r.f == nil {
		if err := r.create(); err != nil {
			unix.Close(dfd)
			return nil, err
		}
	}
	if err := r.purge(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Index is the index of the file being written.
func (r *Rotator) Index() int { return r.idx }

// lineScanLimit is logmon's: within this many bytes of a file's end, a
// write goes up to its last newline that fits, and the line that does
// not fit starts the next file, so that lines are not split between
// files (a line without a newline in sight, longer than what is left,
// still is).
const lineScanLimit = 32 << 10

// Write appends p, rotating whenever the current file is full or the
// next line would not fit in it, as logmon does (unlike logmon, which
// counts the bytes of a multi-part write more than once near a file's end
// and so rotates earlier, each byte is counted once).
func (r *Rotator) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if r.size >= r.maxSize {
			if err := r.rotate(); err != nil {
				return written, err
			}
		}
		n := int64(len(p))
		if room := r.maxSize - r.size; room-lineScanLimit < n {
			fit := p[:min(n, room)]
			if nl := bytes.LastIndexByte(fit, '\n'); nl >= 0 {
				n = int64(nl) + 1
			} else if r.size > 0 && (bytes.IndexByte(p, '\n') >= 0 || (n <= r.maxSize && r.maxSize >= lineScanLimit)) {
				// The next line (or the unfinished one) goes to a
				// file of its own.
				if err := r.rotate(); err != nil {
					return written, err
				}
				continue
			} else {
				n = int64(len(fit))
			}
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

func (r *Rotator) file(i int) string { return r.name + "." + strconv.Itoa(i) }

// indexes lists the directory through its fd, not its path.
func (r *Rotator) indexes() ([]int, error) {
	fd, err := unix.Openat(r.dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("log %s: list %s: %w", r.name, r.dir, err)
	}
	d := os.NewFile(uintptr(fd), r.dir)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("log %s: list %s: %w", r.name, r.dir, err)
	}
	return indexesOf(names, r.name), nil
}

// indexesOf returns, ascending, the N of every name.N in names.
func indexesOf(names []string, name string) []int {
	var out []int
	for _, n := range names {
		s, ok := strings.CutPrefix(n, name+".")
		if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
			continue
		}
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || strconv.Itoa(i) != s {
			continue
		}
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// create makes name.<idx> anew. O_EXCL: whatever holds the name was put
// there by someone else; it is removed (unlink does not follow) and the
// file made anew, once.
func (r *Rotator) create() error {
	var f *os.File
	var err error
	for try := 0; ; try++ {
		f, err = openAt(r.dfd, r.dir, r.file(r.idx), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, r.perm)
		if err == nil || try > 0 || !errors.Is(err, unix.EEXIST) {
			break
		}
		_ = unix.Unlinkat(r.dfd, r.file(r.idx), 0)
	}
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	r.f, r.size = f, 0
	return nil
}

func (r *Rotator) rotate() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("rotate %s: %w", filepath.Join(r.dir, r.file(r.idx)), err)
	}
	r.f = nil
	r.idx++
	if err := r.create(); err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	return r.purge()
}

// purge removes the files older than the newest maxFiles (by name: unlink
// acts on the name, never through a symlink).
func (r *Rotator) purge() error {
	idx, err := r.indexes()
	if err != nil {
		return err
	}
	for _, i := range idx {
		if i > r.idx-r.maxFiles {
			break
		}
		if err := unix.Unlinkat(r.dfd, r.file(i), 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("log: remove %s: %w", filepath.Join(r.dir, r.file(i)), err)
		}
	}
	return nil
}

// Close closes the current file and the directory.
func (r *Rotator) Close() error {
	if r.dfd >= 0 {
		unix.Close(r.dfd)
		r.dfd = -1
	}
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
