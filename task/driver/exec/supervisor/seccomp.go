package supervisor

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The exec driver's default seccomp filter: what container runtimes deny
// by default (docker's default profile is the model of what to deny),
// written as a denylist in classic BPF by this file, with no library: a
// filter is a few dozen instructions, and libseccomp would need cgo and a
// C library on every node, which the supervisor binary (static, ~2 MB)
// must not. A denied call fails with EPERM; clone3, whose flags a filter
// cannot read (they are behind a pointer), fails with ENOSYS, so that
// libc falls back to clone, whose flags it can. A call of another ABI
// than the native one (x32, i386 on amd64) fails with EPERM.

// nsFlags are the namespace flags that clone and unshare may not carry: a
// task may not make namespaces (a user namespace first of all, which
// would make it root in it and open the kernel's code of all the others).
// CLONE_NEWTIME is unshare's only: in clone's flags its bit is the exit
// signal.
const (
	nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareFlags = nsFlags | unix.CLONE_NEWTIME
)

// deniedSyscalls are refused whatever their arguments (with the
// architecture's own in archDenied): mounts and the new mount API,
// namespaces joined, kernel modules, kexec and reboot, BPF and perf, the
// kernel keyring, tracing and reading other processes, file handles
// (open_by_handle_at walks past a chroot), the clock, swap, accounting,
// quotas, userfaultfd and the kernel log.
var deniedSyscalls = []uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOUNT_SETATTR,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_SETNS,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_NFSSERVCTL, unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_USERFAULTFD, unix.SYS_SYSLOG,
}

// bpf assembles a program with forward jumps to named labels.
type bpf struct {
	prog []unix.SockFilter
	// fixups[i] names the labels instruction i jumps to when true and
	// when false ("" : the next instruction).
	fixups map[int][2]string
	labels map[string]int
}

func (b *bpf) stmt(code uint16, k uint32) {
	b.prog = append(b.prog, unix.SockFilter{Code: code, K: k})
}

// jump is "if A <op> k goto t else goto f" ("": next instruction).
func (b *bpf) jump(op uint16, k uint32, t, f string) {
	if b.fixups == nil {
		b.fixups = map[int][2]string{}
	}
	b.fixups[len(b.prog)] = [2]string{t, f}
	b.stmt(unix.BPF_JMP|op|unix.BPF_K, k)
}

func (b *bpf) label(name string) {
	if b.labels == nil {
		b.labels = map[string]int{}
	}
	b.labels[name] = len(b.prog)
}

func (b *bpf) assemble() ([]unix.SockFilter, error) {
	for i, to := range b.fixups {
		for j, name := range to {
			if name == "" {
				continue
			}
			at, ok := b.labels[name]
			off := at - i - 1
			if !ok || off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp filter: jump from %d to %q (%d) out of range", i, name, at)
			}
			if j == 0 {
				b.prog[i].Jt = uint8(off)
			} else {
				b.prog[i].Jf = uint8(off)
			}
		}
	}
	return b.prog, nil
}

// Offsets in struct seccomp_data: the call's number, its ABI, and the low
// 32 bits of its first argument (little-endian architectures only: see
// the build-tagged files).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
)

func retErrno(errno unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(errno)&0xffff }

// seccompFilter is the default filter for this architecture.
func seccompFilter() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, errors.New("seccomp filter: not written for this architecture (the exec driver's seccomp setting must be off)")
	}
	var b bpf
	ld := uint16(unix.BPF_LD | unix.BPF_W | unix.BPF_ABS)
	ret := uint16(unix.BPF_RET | unix.BPF_K)
	b.stmt(ld, offArch)
	b.jump(unix.BPF_JEQ, auditArch, "native", "")
	b.stmt(ret, retErrno(unix.EPERM))
	b.label("native")
	b.stmt(ld, offNr)
	if foreignNrs != 0 {
		// x32 calls carry the native ABI with this bit set.
		b.jump(unix.BPF_JSET, foreignNrs, "deny", "")
	}
	for _, nr := range append(append([]uintptr{}, deniedSyscalls...), archDenied...) {
		b.jump(unix.BPF_JEQ, uint32(nr), "deny", "")
	}
	b.jump(unix.BPF_JEQ, unix.SYS_CLONE3, "enosys", "")
	b.jump(unix.BPF_JEQ, unix.SYS_CLONE, "clone", "")
	b.jump(unix.BPF_JEQ, unix.SYS_UNSHARE, "unshare", "")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	b.label("clone")
	b.stmt(ld, offArg0)
	b.jump(unix.BPF_JSET, nsFlags, "deny", "allow")
	b.label("unshare")
	b.stmt(ld, offArg0)
	b.jump(unix.BPF_JSET, unshareFlags, "deny", "allow")
	b.label("allow")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	b.label("deny")
	b.stmt(ret, retErrno(unix.EPERM))
	b.label("enosys")
	b.stmt(ret, retErrno(unix.ENOSYS))
	return b.assemble()
}

// installSeccomp installs the default filter on this thread, which an
// execve passes on to the task. Without no_new_privs the thread needs
// CAP_SYS_ADMIN, which the supervisor's processes have until they take
// the task's user.
func installSeccomp() error {
	prog, err := seccompFilter()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// Raw: this thread only (no TSYNC), like the rest of creds.apply.
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("install the seccomp filter: %w", e)
	}
	return nil
}
