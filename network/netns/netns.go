// Package netns creates, removes and inspects pinned network namespaces:
// namespaces kept alive by a bind mount of their nsfs inode onto a file in a
// directory (by default /run/netns, the `ip netns` convention).
//
// Nothing here keeps a file descriptor on a pinned path beyond the
// operation that needs it: an fd left open makes a plain unmount fail with
// EBUSY, which is exactly how Nomad leaked namespaces.
package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/network/evidence"
)

// DefaultDir is where `ip netns` keeps its namespaces; pinning ours there
// lets operators use `ip netns exec` on them.
const DefaultDir = "/run/netns"

// MaxNameLen bounds a namespace name; it is a file name, and names end up in
// logs, labels and interface-independent identifiers.
const MaxNameLen = 128

var (
	// ErrInvalidName is returned for a name that is not a plain file name.
	ErrInvalidName = errors.New("invalid network namespace name")
	// ErrExists is returned by Create when the name is taken.
	ErrExists = errors.New("network namespace already exists")
	// ErrNotNetns: RemovePath was asked to remove something that is
	// neither a pinned namespace nor an empty mount point (a path a
	// damaged record or a foreign cache entry named).
	ErrNotNetns = errors.New("not a network namespace pin")
)

// ValidateName accepts names made of letters, digits, '-', '_' and '.',
// that are not "." or "..", and at most MaxNameLen long.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %q is %d characters long, at most %d are allowed", ErrInvalidName, name, len(name), MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is not a file name", ErrInvalidName, name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return fmt.Errorf("%w: %q contains %q; use letters, digits, '-', '_' and '.'", ErrInvalidName, name, r)
		}
	}
	return nil
}

// Manager pins namespaces in one directory.
type Manager struct {
	dir string

	mu       sync.Mutex
	dirReady bool
}

// NewManager returns a Manager for dir (DefaultDir when empty).
func NewManager(dir string) *Manager {
	if dir == "" {
		dir = DefaultDir
	}
	return &Manager{dir: filepath.Clean(dir)}
}

// Dir is the directory the namespaces are pinned in.
func (m *Manager) Dir() string { return m.dir }

// Path is where the namespace called name is (or would be) pinned.
func (m *Manager) Path(name string) string { return filepath.Join(m.dir, name) }

// Exists reports whether name is pinned (a mounted nsfs file, not merely an
// empty mount point left by a crash).
func (m *Manager) Exists(name string) bool {
	ok, _ := IsPinned(m.Path(name))
	return ok
}

// IsPinned is the function IsPinned, as a method so that a Manager
// satisfies its users' interfaces (attach.Namespaces).
func (m *Manager) IsPinned(path string) (bool, error) { return IsPinned(path) }

// RemovePath is the function RemovePath, as a method for the same reason.
// path need not be in the Manager's directory (a namespace libcni's cache
// names elsewhere).
func (m *Manager) RemovePath(ctx context.Context, path string) (*RemoveReport, error) {
	return RemovePath(ctx, path)
}

// IsPinned reports whether path is a mounted network namespace.
func IsPinned(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Type == unix.NSFS_MAGIC, nil
}

// Create makes a new network namespace and pins it at <dir>/<name>. On any
// failure nothing is left: neither the mount nor the mount point.
func (m *Manager) Create(ctx context.Context, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := m.prepareDir(); err != nil {
		return "", err
	}
	path := m.Path(name)
	// O_EXCL: two creators of one name must not share (and later both
	// remove) one namespace.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("create netns %s: %w", path, ErrExists)
		}
		return "", fmt.Errorf("create netns mount point %s: %w", path, err)
	}
	f.Close()

	if err := pin(path); err != nil {
		return "", errors.Join(fmt.Errorf("create netns %s: %w", path, err), unpin(path))
	}
	return path, nil
}

// unpin undoes a pin that failed half-way: the mount, if it was made
// (EINVAL: it was not), and the mount point.
func unpin(path string) error {
	var errs []error
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("unmount netns %s: %w", path, err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove netns mount point %s: %w", path, err))
	}
	return errors.Join(errs...)
}

// pin unshares a new network namespace and bind-mounts it onto path.
func pin(path string) error {
	return withNew(func(self string) error {
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", self, err)
		}
		return nil
	})
}

// Probe checks that this process can create network namespaces: it
// unshares one and returns, leaving nothing (for `berth doctor`).
func Probe() error {
	return withNew(func(string) error { return nil })
}

// prepareDir makes the namespace directory a shared mount point, as
// iproute2 does, so that mounts made in it propagate to (and unmounts from)
// other mount namespaces. Concurrent preparers (another berth, `ip netns`,
// podman) are serialised with a flock on the directory itself: a racing
// pair could otherwise stack two bind mounts on it.
func (m *Manager) prepareDir() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirReady {
		return nil
	}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("create netns dir %s: %w", m.dir, err)
	}
	fd, err := unix.Open(m.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns dir %s: %w", m.dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock netns dir %s: %w", m.dir, err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)

	mounted, shared, err := mountState(m.dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(m.dir, m.dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount netns dir %s onto itself: %w", m.dir, err)
		}
	}
	if !shared {
		if err := unix.Mount("", m.dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("make netns dir %s a shared mount: %w", m.dir, err)
		}
	}
	m.dirReady = true
	return nil
}

// mountState reads /proc/self/mountinfo: is dir a mount point, and is its
// top-most mount shared.
func mountState(dir string) (mounted, shared bool, err error) {
	mounts, err := evidence.ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		return false, false, err
	}
	dir = filepath.Clean(dir)
	for _, mi := range mounts {
		if mi.MountPoint == dir {
			mounted = true
			// The last entry for a path is the one on top.
			shared = mi.Shared()
		}
	}
	return mounted, shared, nil
}

// RemoveReport says what a removal took.
type RemoveReport struct {
	Path string
	// Busy is true when a plain unmount was refused: something held the
	// namespace (the case that made Nomad fail). Holders says who.
	Busy    bool
	Holders []Holder
	// Retries counts unlink attempts that had to be repeated (stacked mounts).
	Retries  int
	Duration time.Duration
	// Existed is false when there was nothing to remove.
	Existed bool
}

// RemovePath unpins and deletes the namespace pinned at path. It is
// idempotent: removing a namespace that is not there succeeds.
//
// It first tries a plain unmount: success proves nobody holds the mount.
// When that is refused with EBUSY, the holders are collected for the
// report (so an operator learns who it was) and the mount is detached
// instead, which cannot be refused. The file is then unlinked, which also
// drops copies of the mount in other mount namespaces.
func RemovePath(ctx context.Context, path string) (*RemoveReport, error) {
	start := time.Now()
	rep := &RemoveReport{Path: path}
	defer func() { rep.Duration = time.Since(start) }()

	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return rep, nil
		}
		return rep, fmt.Errorf("remove netns %s: %w", path, err)
	}
	// Only a namespace pin, or the empty file a pin leaves, is ours to
	// unlink: never a symlink, a directory, or a file with content.
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return rep, fmt.Errorf("remove netns %s: %w: it is a symlink", path, ErrNotNetns)
	}
	pinned, err := IsPinned(path)
	if err != nil {
		return rep, fmt.Errorf("remove netns %s: %w", path, err)
	}
	if !pinned && (st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0) {
		return rep, fmt.Errorf("remove netns %s: %w: refusing to unlink it", path, ErrNotNetns)
	}
	rep.Existed = true

	err = unix.Unmount(path, 0)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		// Unmounted, or not a mount point (an empty mount point left behind).
	case errors.Is(err, unix.EBUSY):
		rep.Busy = true
		rep.Holders, _ = HoldersOfInode(ctx, st.Ino, path)
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return rep, fmt.Errorf("detach netns %s: %w", path, err)
		}
	default:
		return rep, fmt.Errorf("unmount netns %s: %w", path, err)
	}

	fault.PointCtx(ctx, fault.DuringRemove)
	// Unlink fails with EBUSY while another mount is still stacked on the
	// path (a racing setup); detach again and retry with a bounded backoff.
	backoff := 5 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := unix.Unlink(path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return rep, nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return rep, fmt.Errorf("remove netns mount point %s after %d retries: %w", path, rep.Retries, err)
		}
		rep.Retries++
		// Peels a stacked mount; EINVAL once none is left. The next
		// unlink's error is the one that counts.
		_ = unix.Unmount(path, unix.MNT_DETACH)
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("remove netns mount point %s: %w (last error: %v)", path, ctx.Err(), err)
		case <-time.After(backoff):
		}
		if backoff < 200*time.Millisecond {
			backoff *= 2
		}
	}
}

// Inode is the inode of the namespace pinned at path (of the file, when
// nothing is mounted on it).
func Inode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat netns %s: %w", path, err)
	}
	return st.Ino, nil
}

// Entry is one file in the namespace directory.
type Entry struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Pinned bool   `json:"pinned"`
	Inode  uint64 `json:"inode,omitempty"`
	// Since is when the namespace was pinned, as far as the host tells:
	// the modification time of its nsfs inode, set when the inode was
	// made for the first open or mount of the namespace (zero when not
	// pinned). It dates namespaces of which nothing else is known.
	Since time.Time `json:"since,omitzero"`
}

// List returns the entries of the namespace directory, sorted by name. A
// missing directory is an empty list.
func (m *Manager) List(ctx context.Context) ([]Entry, error) {
	des, err := os.ReadDir(m.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list netns dir %s: %w", m.dir, err)
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e := Entry{Name: de.Name(), Path: filepath.Join(m.dir, de.Name())}
		e.Pinned, _ = IsPinned(e.Path)
		if e.Pinned {
			var st unix.Stat_t
			if unix.Stat(e.Path, &st) == nil {
				e.Inode = st.Ino
				e.Since = time.Unix(st.Mtim.Unix())
			}
		}
		out = append(out, e)
	}
	return out, nil
}
