// Package proc reads the few facts berth needs about a process from /proc,
// and signals a process only when it is still the one berth recorded.
//
// A PID alone does not name a process: once reaped, its number can be handed
// to an unrelated process. berth therefore records a PID together with its
// start time (field 22 of /proc/<pid>/stat, in clock ticks since boot), which
// two processes sharing a PID number can never share.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	// ErrNotFound: no process has this PID (it exited and was reaped).
	ErrNotFound = errors.New("no such process")
	// ErrReused: a process has this PID, but not the one recorded (its
	// start time differs), or the recorded one is a zombie.
	ErrReused = errors.New("pid belongs to another process")
)

// Stat is the part of /proc/<pid>/stat berth uses.
type Stat struct {
	PID   int
	Comm  string
	State byte // R, S, D, Z, T, t, X, I, ...
	PPID  int
	PGRP  int
	// StartTime is in clock ticks since boot.
	StartTime uint64
}

// Zombie reports a process that exited but was not reaped yet (or is being reaped).
func (s Stat) Zombie() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

func procPath(pid int, file string) string {
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// ReadStat reads and parses /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	if pid <= 0 {
		return Stat{}, fmt.Errorf("pid %d: %w", pid, ErrNotFound)
	}
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, fmt.Errorf("pid %d: %w", pid, ErrNotFound)
		}
		return Stat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	st, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return st, nil
}

// ParseStat parses the content of a /proc/<pid>/stat file.
func ParseStat(b []byte) (Stat, error) {
	// comm is free text chosen by the process (spaces and parentheses
	// included) and is the only such field, so the fixed fields start after
	// the LAST ')'.
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("parse stat %q: no (comm)", truncate(b))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat %q: pid: %w", truncate(b), err)
	}
	// fields[0] is field 3 (state) of proc(5).
	fields := strings.Fields(string(b[closing+1:]))
	const startTimeIdx = 22 - 3
	if len(fields) <= startTimeIdx {
		return Stat{}, fmt.Errorf("parse stat %q: %d fields after comm, want > %d", truncate(b), len(fields), startTimeIdx)
	}
	st := Stat{PID: pid, Comm: string(b[open+1 : closing])}
	if len(fields[0]) != 1 {
		return Stat{}, fmt.Errorf("parse stat %q: state %q", truncate(b), fields[0])
	}
	st.State = fields[0][0]
	if st.PPID, err = strconv.Atoi(fields[1]); err != nil {
		return Stat{}, fmt.Errorf("parse stat %q: ppid: %w", truncate(b), err)
	}
	if st.PGRP, err = strconv.Atoi(fields[2]); err != nil {
		return Stat{}, fmt.Errorf("parse stat %q: pgrp: %w", truncate(b), err)
	}
	if st.StartTime, err = strconv.ParseUint(fields[startTimeIdx], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse stat %q: starttime: %w", truncate(b), err)
	}
	return st, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// StartTime returns the start time of pid in clock ticks since boot (field
// 22 of /proc/<pid>/stat).
func StartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// SelfStartTime returns the start time of the calling process.
func SelfStartTime() (uint64, error) {
	return StartTime(os.Getpid())
}

// Alive reports whether pid exists, is not a zombie, and started at
// startTime, i.e. it is still the process that was recorded.
func Alive(pid int, startTime uint64) bool {
	st, err := ReadStat(pid)
	return err == nil && !st.Zombie() && st.StartTime == startTime
}

// KillIfSame sends sig to pid only if it is still the process that started
// at startTime. It returns an error wrapping ErrNotFound if there is no such
// PID, or ErrReused if the PID now names another process or a zombie.
//
// The pidfd is opened before the start time is checked, so the signal goes
// to the process that was checked even if it exits and its PID is reused in
// between (the pidfd then refers to the dead process and the send fails
// with ESRCH instead of reaching the newcomer).
func KillIfSame(pid int, startTime uint64, sig syscall.Signal) error {
	if pid <= 0 {
		return fmt.Errorf("kill pid %d: %w", pid, ErrNotFound)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("kill pid %d: %w", pid, ErrNotFound)
	case errors.Is(err, unix.ENOSYS):
		// Kernels before 5.3: the check and the kill cannot be made atomic.
		return killCheckedRacy(pid, startTime, sig)
	case err != nil:
		return fmt.Errorf("kill pid %d: pidfd_open: %w", pid, err)
	}
	defer unix.Close(pidfd)
	if err := checkSame(pid, startTime); err != nil {
		return err
	}
	if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill pid %d: %w", pid, ErrNotFound)
		}
		return fmt.Errorf("kill pid %d with %v: %w", pid, sig, err)
	}
	return nil
}

func checkSame(pid int, startTime uint64) error {
	st, err := ReadStat(pid)
	if err != nil {
		return fmt.Errorf("kill pid %d: %w", pid, err)
	}
	if st.StartTime != startTime {
		return fmt.Errorf("kill pid %d: start time %d, recorded %d: %w", pid, st.StartTime, startTime, ErrReused)
	}
	if st.Zombie() {
		return fmt.Errorf("kill pid %d: zombie: %w", pid, ErrReused)
	}
	return nil
}

func killCheckedRacy(pid int, startTime uint64, sig syscall.Signal) error {
	if err := checkSame(pid, startTime); err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill pid %d: %w", pid, ErrNotFound)
		}
		return fmt.Errorf("kill pid %d with %v: %w", pid, sig, err)
	}
	return nil
}

// GroupMembers lists the live (non-zombie) processes whose process group is
// pgid, the leader included if it is alive. It scans /proc, so its result is
// a snapshot.
func GroupMembers(ctx context.Context, pgid int) ([]Stat, error) {
	pids, err := PIDs()
	if err != nil {
		return nil, fmt.Errorf("list process group %d: %w", pgid, err)
	}
	var out []Stat
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list process group %d: %w", pgid, err)
		}
		st, err := ReadStat(pid)
		if err != nil {
			continue // exited while we scanned
		}
		if st.PGRP == pgid && !st.Zombie() {
			out = append(out, st)
		}
	}
	return out, nil
}

// PIDs lists the processes in /proc at the time of reading.
func PIDs() ([]int, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	pids := make([]int, 0, len(des))
	for _, de := range des {
		if pid, err := strconv.Atoi(de.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
