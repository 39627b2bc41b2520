package supervisor

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The filter assembles (every jump within reach), checks the ABI first,
// and ends in its three returns.
func TestSecSeccompFilter(t *testing.T) {
	prog, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	if prog[0].K != offArch || prog[1].K != auditArch {
		t.Fatalf("the filter does not check the ABI first: %+v", prog[:2])
	}
	n := len(prog)
	if prog[n-1].K != retErrno(unix.ENOSYS) || prog[n-2].K != retErrno(unix.EPERM) || prog[n-3].K != unix.SECCOMP_RET_ALLOW {
		t.Fatalf("the filter's returns: %+v", prog[n-3:])
	}
	denied := map[uint32]bool{}
	for _, ins := range prog {
		if ins.Code == unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K {
			denied[ins.K] = true
		}
	}
	for _, nr := range []uintptr{unix.SYS_MOUNT, unix.SYS_SETNS, unix.SYS_KEYCTL, unix.SYS_BPF, unix.SYS_PTRACE, unix.SYS_KEXEC_LOAD, unix.SYS_UNSHARE, unix.SYS_CLONE, unix.SYS_CLONE3} {
		if !denied[uint32(nr)] {
			t.Errorf("the filter does not look at syscall %d", nr)
		}
	}
}

// What a task and an enter take: the capabilities asked, within what the
// supervisor has; none asked (raw_exec) changes nothing.
func TestSecCredentials(t *testing.T) {
	have, err := permitted()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   Credentials
		keep uint64
	}{
		{"raw_exec as nobody", Credentials{SetUser: true, UID: 65534, GID: 65534}, 0},
		{"exec as nobody, no caps", Credentials{SetUser: true, UID: 65534, GID: 65534, SetCaps: true}, 0},
		{"exec with net_bind_service", Credentials{SetUser: true, UID: 65534, SetCaps: true, Caps: []int{10, 99, -1}, Seccomp: true}, 1 << 10 & have},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.in.creds()
			if err != nil {
				t.Fatal(err)
			}
			if c.keep != tc.keep || c.setCaps != tc.in.SetCaps || (c.setCaps && c.bounding != c.keep) {
				t.Fatalf("creds %+v, want keep %x", c, tc.keep)
			}
			if c.setUser != tc.in.SetUser || c.uid != tc.in.UID || c.seccomp != tc.in.Seccomp {
				t.Fatalf("creds %+v from %+v", c, tc.in)
			}
		})
	}
}
