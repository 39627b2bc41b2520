package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	napi "github.com/hashicorp/nomad/api"
	"golang.org/x/sys/unix"

	"github.com/berth/berth/node/nomadapi"
)

// The allocation's directory as Nomad's alloc fs shows it: "/" is
// <data_dir>/alloc/<id>, with alloc/ and a directory per task. A task
// writes there, so nothing it planted may take a read elsewhere: every
// path is resolved by openat2 beneath the directory, following no
// symlink and crossing no mount (a task's secrets/ is a tmpfs, a host
// volume a bind mount), and a task's secrets are refused by name as
// Nomad refuses them.

// errPathEscapes is Nomad's refusal of a path that leaves the directory.
//
//lint:ignore ST1005 Nomad's words, which its users know
var errPathEscapes = errors.New("Path escapes the alloc directory")

// AllocFS opens the allocation's directory.
func (b nomadBackend) AllocFS(ctx context.Context, id string) (nomadapi.AllocDir, error) {
	a := b.a
	al, err := a.findAlloc(ctx, id)
	if err != nil {
		return nil, toNomadErr(err)
	}
	dir := filepath.Join(a.cfg.AllocDir(), al.ID)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, &nomadErr{fmt.Errorf("allocation %s: its directory is gone (retired with the allocation)", al.ID), nomadapi.ErrNotFound}
	}
	if err != nil {
		return nil, fmt.Errorf("allocation %s: open its directory: %w", al.ID, err)
	}
	d := &allocFS{fd: fd, allocID: al.ID}
	for _, t := range al.Tasks {
		d.tasks = append(d.tasks, t.Name)
	}
	return d, nil
}

type allocFS struct {
	fd      int // the alloc dir, O_PATH
	allocID string
	tasks   []string
}

func (d *allocFS) Close() error { return unix.Close(d.fd) }

// rel is p relative to the alloc dir, checked: no "..", not a task's
// secrets.
func (d *allocFS) rel(p string) (string, error) {
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", &nomadErr{fmt.Errorf("%w: %q", errPathEscapes, p), nomadapi.ErrBadRequest}
		}
	}
	r := strings.TrimPrefix(path.Clean("/"+p), "/")
	if r == "" {
		return ".", nil
	}
	if parts := strings.SplitN(r, "/", 3); len(parts) >= 2 && parts[1] == "secrets" && slices.Contains(d.tasks, parts[0]) {
		//lint:ignore ST1005 Nomad's words, which its users know
		return "", &nomadErr{fmt.Errorf("Reading secret file prohibited: %s", p), nomadapi.ErrBadRequest}
	}
	return r, nil
}

// open opens p beneath the alloc dir with flags.
func (d *allocFS) open(p string, flags int) (*os.File, error) {
	r, err := d.rel(p)
	if err != nil {
		return nil, err
	}
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if flags&unix.O_PATH == 0 {
		// A FIFO's open must not block; openat2 takes no other flag
		// with O_PATH.
		flags |= unix.O_NONBLOCK | unix.O_NOCTTY
	}
	how := &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	fd, err := unix.Openat2(d.fd, r, how)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return nil, &nomadErr{fmt.Errorf("allocation %s: %s: no such file or directory", d.allocID, p), nomadapi.ErrNotFound}
	case errors.Is(err, unix.ELOOP):
		return nil, &nomadErr{fmt.Errorf("allocation %s: %s: is or goes through a symbolic link, which is not followed", d.allocID, p), nomadapi.ErrBadRequest}
	case errors.Is(err, unix.EXDEV):
		return nil, &nomadErr{fmt.Errorf("allocation %s: %s: crosses a mount point (secrets, a volume), which is not served", d.allocID, p), nomadapi.ErrBadRequest}
	case err != nil:
		return nil, fmt.Errorf("allocation %s: open %s: %w", d.allocID, p, err)
	}
	return os.NewFile(uintptr(fd), path.Join("/", r)), nil
}

func (d *allocFS) Stat(p string) (*napi.AllocFileInfo, error) {
	f, err := d.open(p, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("allocation %s: stat %s: %w", d.allocID, p, err)
	}
	return fileInfo(path.Base(f.Name()), fi.Mode(), fi.Size(), fi.ModTime()), nil
}

func (d *allocFS) List(p string) ([]*napi.AllocFileInfo, error) {
	f, err := d.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("allocation %s: list %s: %w", d.allocID, p, err)
	}
	slices.Sort(names)
	out := make([]*napi.AllocFileInfo, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(int(f.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			// Removed since the listing.
			continue
		}
		out = append(out, fileInfo(n, fileMode(st.Mode), st.Size, time.Unix(st.Mtim.Unix())))
	}
	return out, nil
}

func (d *allocFS) Open(p string) (io.ReadSeekCloser, error) {
	f, err := d.open(p, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("allocation %s: stat %s: %w", d.allocID, p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &nomadErr{fmt.Errorf("allocation %s: %s is %s, not a file: use ls or stat", d.allocID, p, fi.Mode().Type()), nomadapi.ErrBadRequest}
	}
	// Back to blocking reads (O_NONBLOCK kept a FIFO's open from
	// blocking; a regular file ignores it anyway).
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func fileInfo(name string, mode os.FileMode, size int64, mtime time.Time) *napi.AllocFileInfo {
	return &napi.AllocFileInfo{Name: name, IsDir: mode.IsDir(), Size: size, FileMode: mode.String(), ModTime: mtime}
}

// fileMode is st_mode as Go's os.FileMode (as os.Lstat makes it).
func fileMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= os.ModeDir
	case unix.S_IFLNK:
		mode |= os.ModeSymlink
	case unix.S_IFIFO:
		mode |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= os.ModeSocket
	case unix.S_IFCHR:
		mode |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		mode |= os.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}
