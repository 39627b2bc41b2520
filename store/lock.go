package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth/berth/internal/flock"
)

// OwnerLockFile is held exclusively by the one process that owns a data dir
// for its lifetime: the agent, which resumes jobs and reconciles at start,
// and so must be alone. Other berth processes share the store freely.
const OwnerLockFile = "agent.lock"

// LockedError says who holds a data dir where exclusive use was needed.
// It matches ErrLocked with errors.Is.
type LockedError struct {
	Dir      string
	LockPath string
	// What is being refused, e.g. "berth agent".
	What string
	// PID is the holder (from the lock file or /proc/locks); 0 if unknown.
	PID int
	// Command is the holder's /proc/<pid>/comm, if it could be read.
	Command string
}

func (e *LockedError) Error() string {
	what := e.What
	if what == "" {
		what = "another process"
	}
	if e.PID == 0 {
		return fmt.Sprintf("data dir %s is in use by %s (lock %s, holder pid unknown): stop it or pass --data-dir", e.Dir, what, e.LockPath)
	}
	who := e.Command
	if who == "" {
		who = "berth"
	}
	return fmt.Sprintf("data dir %s is in use by %s (%s, pid %d, lock %s): stop it or pass --data-dir", e.Dir, what, who, e.PID, e.LockPath)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

func lockedError(dir, path, what string) error {
	e := &LockedError{Dir: dir, LockPath: path, What: what}
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			e.PID = pid
		}
	}
	if e.PID == 0 {
		if pids := flock.Holders(path); len(pids) > 0 {
			e.PID = pids[0]
		}
	}
	if e.PID > 0 {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", e.PID)); err == nil {
			e.Command = strings.TrimSpace(string(comm))
		}
	}
	return e
}

// OwnerLock is a held OwnerLockFile.
type OwnerLock struct{ l *flock.Lock }

// LockOwner makes this process the owner of dataDir (see OwnerLockFile),
// or fails with a LockedError naming the owner. what names this process in
// that error for others ("berth agent").
func LockOwner(dataDir, what string) (*OwnerLock, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, OwnerLockFile)
	l, err := flock.TryAcquire(path, flock.Options{Exclusive: true})
	if errors.Is(err, flock.ErrWouldBlock) {
		return nil, lockedError(dataDir, path, what)
	}
	if err != nil {
		return nil, err
	}
	// The PID is only for the message another process prints; it is not
	// what excludes (the flock is), so a failed write is not fatal.
	if err := l.File().Truncate(0); err == nil {
		_, _ = l.File().WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &OwnerLock{l: l}, nil
}

// Release clears the PID (so a stale one is never shown) and drops the
// lock. The file itself stays: removing it would let two processes lock two
// different inodes under the same name.
func (o *OwnerLock) Release() {
	if o == nil || o.l == nil {
		return
	}
	_ = o.l.File().Truncate(0)
	o.l.Unlock()
	o.l = nil
}

// OwnerPID is the process that holds dataDir's owner lock, or 0. It only
// reads /proc/locks, so asking never gets in an owner's way.
func OwnerPID(dataDir string) int {
	if pids := flock.Holders(filepath.Join(dataDir, OwnerLockFile)); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// MoveAside renames a damaged db file to <path>.corrupt (or .corrupt.N if
// that exists) and returns the new name. It refuses (ErrLocked) while any
// berth has the store open, so that it never pulls the store from under
// one.
func MoveAside(path string) (string, error) {
	dir := filepath.Dir(path)
	usersPath := filepath.Join(dir, UsersLockFile)
	users, err := flock.TryAcquire(usersPath, flock.Options{Exclusive: true})
	if errors.Is(err, flock.ErrWouldBlock) {
		return "", fmt.Errorf("move %s aside: %w", path, lockedError(dir, usersPath, "a berth process with the store open"))
	}
	if err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	defer users.Unlock()

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
