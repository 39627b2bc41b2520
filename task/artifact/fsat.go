package artifact

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/berth/berth/internal/beneath"
	"golang.org/x/sys/unix"
)

// dest is the destination directory, handed over open: everything is
// made beneath it, never through a symbolic link, within the budget.
type dest struct {
	dir    *beneath.Dir
	budget *budget
}

// budget is what may still be written.
type budget struct {
	bytes, files int64
	l            Limits
}

func newBudget(l Limits) *budget {
	return &budget{bytes: l.DecompressionSizeLimit, files: int64(l.DecompressionFileCountLimit), l: l}
}

func (b *budget) file(name string) error {
	b.files--
	if b.files < 0 {
		return fmt.Errorf("%w: %s: more than decompression_file_count_limit (%d) files", ErrLimit, name, b.l.DecompressionFileCountLimit)
	}
	return nil
}

// writer counts what goes through it against the budget.
type limitedWriter struct {
	w    io.Writer
	b    *budget
	name string
}

func (lw *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > lw.b.bytes {
		return 0, fmt.Errorf("%w: %s: more than decompression_size_limit (%d bytes) written", ErrLimit, lw.name, lw.b.l.DecompressionSizeLimit)
	}
	n, err := lw.w.Write(p)
	lw.b.bytes -= int64(n)
	return n, err
}

// openDir opens rel (a clean relative path, "." for the root) beneath
// the destination, refusing symbolic links and anything leading out.
func (d *dest) openDir(rel string) (int, error) { return d.dir.OpenDir(rel) }

// mkdirAll makes rel and its parents beneath the destination, each
// directory made counted against the budget.
func (d *dest) mkdirAll(rel string) error {
	return d.dir.MkdirAll(rel, 0o755, d.budget.file)
}

// parent makes the parent of rel and opens it.
func (d *dest) parent(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	dir = path.Clean("./" + dir)
	if err := d.mkdirAll(dir); err != nil {
		return -1, "", err
	}
	fd, err := d.openDir(dir)
	return fd, base, err
}

// writeFile writes r to rel with mode, replacing a file there (never
// following a link).
func (d *dest) writeFile(rel string, r io.Reader, mode os.FileMode) error {
	pfd, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := d.budget.file(rel); err != nil {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%s is a directory", rel)
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	if _, err := io.Copy(&limitedWriter{w: f, b: d.budget, name: rel}, r); err != nil {
		f.Close()
		if errors.Is(err, ErrLimit) {
			return err
		}
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// symlink makes rel a symbolic link to target.
func (d *dest) symlink(rel, target string) error {
	pfd, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := d.budget.file(rel); err != nil {
		return err
	}
	_ = unix.Unlinkat(pfd, base, 0)
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return fmt.Errorf("symlink %s: %w", rel, err)
	}
	return nil
}

// link makes rel a hard link to the file old (both beneath the
// destination).
func (d *dest) link(old, rel string) error {
	ofd, obase, err := d.parent(old)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	pfd, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := d.budget.file(rel); err != nil {
		return err
	}
	_ = unix.Unlinkat(pfd, base, 0)
	if err := unix.Linkat(ofd, obase, pfd, base, 0); err != nil {
		return fmt.Errorf("link %s: %w", rel, err)
	}
	return nil
}

// chmodDir sets a directory's mode.
func (d *dest) chmodDir(rel string, mode os.FileMode) error {
	fd, err := d.openDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// An O_PATH fd cannot fchmod; the directory is reopened by its fd.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	return unix.Fchmod(rfd, uint32(mode.Perm()))
}

// entryRel is where an archive entry goes: a clean path relative to the
// destination, or an error.
func entryRel(name string) (string, error) {
	if name == "" || strings.Contains(name, "\x00") {
		return "", errorf("archive entry %q has no usable name", name)
	}
	if orig := path.Clean(strings.ReplaceAll(name, "\\", "/")); orig == ".." || strings.HasPrefix(orig, "../") || path.IsAbs(name) {
		return "", errorf("archive entry %q leads out of the destination", name)
	}
	return path.Clean("./" + strings.ReplaceAll(name, "\\", "/")), nil
}

// checkLink refuses a symbolic link at rel whose target is absolute or
// leads out of the destination.
func checkLink(rel, target string) error {
	if path.IsAbs(target) {
		return errorf("archive entry %s is a symbolic link to the absolute path %s", rel, target)
	}
	resolved := path.Join(path.Dir(rel), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return errorf("archive entry %s is a symbolic link to %s, outside the destination", rel, target)
	}
	return nil
}
