// Package beneath makes directories and writes files beneath a directory
// held open, one component at a time and never through a symbolic link.
//
// berth writes as root into directories a task can change (templates and
// the dispatch payload into local/, artifacts anywhere in its dirs). A
// check of the path followed by a write by name leaves a window in which
// the task swaps a directory for a link to a host path; resolving every
// step from an open descriptor with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) closes it.
package beneath

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLink: the path goes through a symbolic link, or leads out.
var ErrLink = errors.New("goes through a symbolic link or out of its directory")

// Dir is a directory held open.
type Dir struct {
	fd   int
	path string
}

// Open opens the directory at p, which must not itself be a link.
func Open(p string) (*Dir, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return &Dir{fd: fd, path: p}, nil
}

// FromFD is the directory open as fd (O_PATH is enough), named name in
// errors; Close closes fd.
func FromFD(fd int, name string) *Dir { return &Dir{fd: fd, path: name} }

// FD is the directory's descriptor, for the *at calls this package does
// not wrap; it stays the Dir's.
func (d *Dir) FD() int { return d.fd }

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Rel is p relative to the directory, cleaned; an error if p is outside.
func (d *Dir) Rel(p string) (string, error) {
	rel, err := filepath.Rel(d.path, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is outside %s", p, d.path)
	}
	return rel, nil
}

// OpenDir opens rel (relative, "." for the directory itself) as an
// O_PATH descriptor, the caller closes it.
func (d *Dir) OpenDir(rel string) (int, error) {
	fd, err := unix.Openat2(d.fd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, fmt.Errorf("%s: %w", filepath.Join(d.path, rel), ErrLink)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: filepath.Join(d.path, rel), Err: err}
	}
	return fd, nil
}

// MkdirAll makes rel and its missing parents with mode (less the umask);
// made, if not nil, is called with each directory it made.
func (d *Dir) MkdirAll(rel string, mode os.FileMode, made func(rel string) error) error {
	rel = path.Clean(rel)
	if rel == "." {
		return nil
	}
	cur := "."
	for _, c := range strings.Split(rel, "/") {
		pfd, err := d.OpenDir(cur)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, c, uint32(mode.Perm()))
		unix.Close(pfd)
		cur = path.Join(cur, c)
		switch {
		case err == nil:
			if made != nil {
				if err := made(cur); err != nil {
					return err
				}
			}
		case errors.Is(err, unix.EEXIST):
		default:
			return &os.PathError{Op: "mkdir", Path: filepath.Join(d.path, cur), Err: err}
		}
	}
	fd, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// Owner is a file's owner; -1 leaves one unchanged.
type Owner struct{ UID, GID int }

// Keep leaves the owner root's (the writer's).
var Keep = Owner{-1, -1}

// ReplaceFile writes data to rel at once: a new file, made with
// O_EXCL|O_NOFOLLOW beside it, given mode and owner, renamed over rel. A
// reader never sees half of it, a link or hard link planted at rel is
// replaced, not written through. Its parent directory must exist.
func (d *Dir) ReplaceFile(rel string, data []byte, mode os.FileMode, own Owner) error {
	dir, base := path.Split(path.Clean(rel))
	pfd, err := d.OpenDir(path.Clean("./" + dir))
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	full := filepath.Join(d.path, rel)
	var st unix.Stat_t
	if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%s is a directory", full)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := "." + base + ".tmp-" + hex.EncodeToString(suffix[:])
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return &os.PathError{Op: "create", Path: filepath.Join(d.path, dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if err == nil && (own.UID >= 0 || own.GID >= 0) {
		err = f.Chown(own.UID, own.GID)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = unix.Renameat(pfd, tmp, pfd, base); err != nil {
			err = &os.PathError{Op: "rename", Path: full, Err: err}
		}
	}
	if err != nil {
		_ = unix.Unlinkat(pfd, tmp, 0)
		return fmt.Errorf("write %s: %w", full, err)
	}
	return nil
}

// ChownDir gives the directory rel to uid:gid.
func (d *Dir) ChownDir(rel string, uid, gid int) error {
	fd, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return &os.PathError{Op: "chown", Path: filepath.Join(d.path, rel), Err: err}
	}
	return nil
}
