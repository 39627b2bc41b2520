package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockedError says who owns a data dir. It matches ErrLocked with errors.Is.
type LockedError struct {
	Dir      string
	LockPath string
	// PID is the holder as written in the lock file; 0 if it had not
	// written it yet (or the file could not be read).
	PID int
	// Command is the holder's /proc/<pid>/comm, if it could be read.
	Command string
}

func (e *LockedError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("data dir %s is in use by another process (lock %s, holder pid unknown): stop it or pass --data-dir", e.Dir, e.LockPath)
	}
	who := e.Command
	if who == "" {
		who = "berth"
	}
	return fmt.Sprintf("data dir %s is in use by %s (pid %d, lock %s): stop it or pass --data-dir", e.Dir, who, e.PID, e.LockPath)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// dirLock is an exclusive flock on <dir>/berth.lock. flock belongs to the
// open file description, so a second open of the file, even in this
// process, conflicts; and the kernel drops it when the holder dies, so a
// crashed berth never leaves a stale lock.
type dirLock struct {
	f *os.File
}

func acquireDirLock(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := flockNB(f); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, lockedError(dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The PID is only for the message another process prints; it is not
	// what excludes (the flock is), so a failed write is not fatal.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func lockedError(dir, path string) error {
	e := &LockedError{Dir: dir, LockPath: path}
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			e.PID = pid
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
				e.Command = strings.TrimSpace(string(comm))
			}
		}
	}
	return e
}

// release clears the PID (so a stale one is never shown) and drops the
// lock. The file itself stays: removing it would let two processes lock two
// different inodes under the same name.
func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close()
	l.f = nil
}

// MoveAside renames a damaged db file to <path>.corrupt (or .corrupt.N if
// that exists) and returns the new name. It takes the data dir's lock first
// so that it can never pull the store from under a running berth.
func MoveAside(path string) (string, error) {
	dir := filepath.Dir(path)
	lock, err := acquireDirLock(dir)
	if err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	defer lock.release()

	if _, err := os.Lstat(path); err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	for i := 0; i < 1000; i++ {
		dst := path + ".corrupt"
		if i > 0 {
			dst += "." + strconv.Itoa(i)
		}
		// link(2) fails if dst exists, unlike rename(2), so an older
		// corrupt copy kept for inspection is never overwritten.
		err := os.Link(path, dst)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("move %s aside to %s: %w", path, dst, err)
		}
		if err := os.Remove(path); err != nil {
			return "", fmt.Errorf("move %s aside: remove original after linking %s: %w", path, dst, err)
		}
		if err := syncDir(dir); err != nil {
			return "", fmt.Errorf("move %s aside to %s: %w", path, dst, err)
		}
		return dst, nil
	}
	return "", fmt.Errorf("move %s aside: too many %s.corrupt* files, clean some up", path, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
