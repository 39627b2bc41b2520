package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// creds is who a task's process becomes right before execve: the task
// itself (init) and a command run in it (enter) take it the same way, so
// the two cannot drift apart.
type creds struct {
	// setUser: become uid/gid with groups; otherwise stay root.
	setUser  bool
	uid, gid int
	groups   []int
	// setCaps: the bounding set becomes bounding, and the effective,
	// permitted and inheritable sets keep (a subset of bounding); a
	// non-root user gets keep as ambient capabilities too, the only ones
	// that survive its execve. Bit c is capability c.
	setCaps        bool
	bounding, keep uint64
	noNewPrivs     bool
	// seccomp installs the default filter, while still root: without
	// no_new_privs only CAP_SYS_ADMIN may install one.
	seccomp bool
}

// creds is how id is taken by a process of the supervisor (root): the
// capabilities it lacks itself (berth without CAP_SYS_RESOURCE) cannot be
// given and are not asked.
func (id *Credentials) creds() (creds, error) {
	c := creds{setUser: id.SetUser, uid: id.UID, gid: id.GID, groups: id.Groups, setCaps: id.SetCaps, seccomp: id.Seccomp}
	if id.SetCaps {
		have, err := permitted()
		if err != nil {
			return creds{}, err
		}
		for _, cp := range id.Caps {
			if cp >= 0 && cp < 64 && have&(1<<uint(cp)) != 0 {
				c.keep |= 1 << uint(cp)
			}
		}
		c.bounding = c.keep
	}
	return c, nil
}

// take is id taken by this thread: see creds.apply.
func (id *Credentials) take() error {
	c, err := id.creds()
	if err != nil {
		return err
	}
	return c.apply()
}

// apply takes c on this thread only: raw system calls, since Go's
// wrappers change every thread, which is pointless right before execve and
// fails with some runtimes.
func (c creds) apply() error {
	last := lastCap()
	nonRoot := c.setUser && c.uid != 0
	if c.setCaps {
		for cp := 0; cp <= last; cp++ {
			if c.bounding&(1<<uint(cp)) != 0 {
				continue
			}
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(cp), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("drop capability %d from the bounding set: %w", cp, err)
			}
		}
	}
	if c.seccomp {
		if err := installSeccomp(); err != nil {
			return err
		}
	}
	if c.setUser {
		if nonRoot && c.setCaps && c.keep != 0 {
			if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
				return fmt.Errorf("keep capabilities: %w", err)
			}
		}
		if err := setIDs(c.uid, c.gid, c.groups); err != nil {
			return err
		}
	}
	if c.setCaps {
		lo, hi := uint32(c.keep), uint32(c.keep>>32)
		data := [2]unix.CapUserData{
			{Effective: lo, Permitted: lo, Inheritable: lo},
			{Effective: hi, Permitted: hi, Inheritable: hi},
		}
		if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
		if nonRoot {
			for cp := 0; cp <= last; cp++ {
				if c.keep&(1<<uint(cp)) == 0 {
					continue
				}
				if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(cp), 0, 0); err != nil {
					return fmt.Errorf("raise ambient capability %d: %w", cp, err)
				}
			}
		}
	}
	if c.noNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	return nil
}

// setIDs sets groups, then gid, then uid: after the uid the others could
// no longer be changed.
func setIDs(uid, gid int, groups []int) error {
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var gp unsafe.Pointer
	if len(gs) > 0 {
		gp = unsafe.Pointer(&gs[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(gp), 0); e != 0 {
		return fmt.Errorf("user: setgroups %v: %w", groups, e)
	}
	g := uintptr(gid)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, g, g, g); e != 0 {
		return fmt.Errorf("user: setresgid %d: %w", gid, e)
	}
	u := uintptr(uid)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, u, u, u); e != 0 {
		return fmt.Errorf("user: setresuid %d: %w", uid, e)
	}
	return nil
}

// permitted is this process's permitted capability set.
func permitted() (uint64, error) {
	var have [2]unix.CapUserData
	if err := unix.Capget(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &have[0]); err != nil {
		return 0, fmt.Errorf("capget: %w", err)
	}
	return uint64(have[0].Permitted) | uint64(have[1].Permitted)<<32, nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 40
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 40
	}
	return n
}
