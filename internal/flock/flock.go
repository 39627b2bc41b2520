// Package flock is berth's one way of taking a cross-process lock: an
// flock(2) on a file. The kernel drops it when its holder dies, so a
// killed berth never leaves a stale lock, and it belongs to the open file
// description, so two acquisitions in one process exclude each other just
// as two processes do.
package flock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrWouldBlock: TryLock found the lock held.
var ErrWouldBlock = errors.New("lock is held")

// Lock is a held lock. Unlock releases it; calling it again is a no-op.
type Lock struct {
	f         *os.File
	path      string
	transient bool
}

// Options say how to take a lock.
type Options struct {
	// Exclusive takes the lock for writing; otherwise it is shared.
	Exclusive bool
	// Transient removes the lock file on Unlock, for locks keyed by
	// something unbounded (an attachment ID) whose files would otherwise
	// pile up. A transient lock must always be taken exclusively.
	Transient bool
}

// Acquire waits until path can be locked, or ctx ends. Waiting polls with
// a backoff from 50 µs to 5 ms instead of blocking in flock(2): a blocked
// flock cannot be interrupted, and would hold an OS thread for as long as
// the holder keeps the lock. berth's locks are held for a transaction or a
// plugin call, so the polling costs little.
func Acquire(ctx context.Context, path string, o Options) (*Lock, error) {
	wait := 50 * time.Microsecond
	for {
		l, err := TryAcquire(path, o)
		if !errors.Is(err, ErrWouldBlock) {
			return l, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock %s%s: %w", path, describeHolder(path), context.Cause(ctx))
		case <-t.C:
		}
		if wait < 5*time.Millisecond {
			wait *= 2
		}
	}
}

// TryAcquire locks path if it is free, or returns ErrWouldBlock.
func TryAcquire(path string, o Options) (*Lock, error) {
	if o.Transient && !o.Exclusive {
		return nil, fmt.Errorf("lock %s: a transient lock must be exclusive", path)
	}
	how := unix.LOCK_SH
	if o.Exclusive {
		how = unix.LOCK_EX
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
		if errors.Is(err, os.ErrNotExist) {
			if merr := os.MkdirAll(filepath.Dir(path), 0o700); merr != nil {
				return nil, fmt.Errorf("lock %s: %w", path, merr)
			}
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := flockRetry(int(f.Fd()), how|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, ErrWouldBlock
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if o.Transient && !samePath(f, path) {
			// The holder before us removed the file after we opened it:
			// we locked a name nobody else can find. Start again.
			f.Close()
			continue
		}
		return &Lock{f: f, path: path, transient: o.Transient}, nil
	}
}

// samePath says whether f is still the file at path.
func samePath(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		return false
	}
	if err := unix.Stat(path, &b); err != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// File is the open lock file, for a holder that writes who it is into it.
func (l *Lock) File() *os.File { return l.f }

// Unlock releases the lock. A transient lock's file is removed first,
// while it is still held, so that nobody can lock the name in between.
func (l *Lock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	if l.transient {
		// Left behind, the file is only a name: the next holder locks
		// it as it would a new one.
		_ = os.Remove(l.path)
	}
	// Closing releases the flock whatever it returns; nothing was written.
	_ = l.f.Close()
	l.f = nil
}

// Holders lists the PIDs holding an flock on path, from /proc/locks.
func Holders(path string) []int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer f.Close()
	// Entries name the file as major:minor:inode, the device in hex.
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; waiters
		// read "1: -> FLOCK ..." and are skipped.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// describeHolder names who holds path, for an error message.
func describeHolder(path string) string {
	pids := Holders(path)
	if len(pids) == 0 {
		return ""
	}
	var who []string
	for _, pid := range pids {
		s := "pid " + strconv.Itoa(pid)
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
			s += " (" + strings.TrimSpace(string(comm)) + ")"
		}
		who = append(who, s)
	}
	return " (held by " + strings.Join(who, ", ") + ")"
}
