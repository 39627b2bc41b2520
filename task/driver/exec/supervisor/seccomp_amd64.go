package supervisor

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// foreignNrs is the x32 ABI's bit (__X32_SYSCALL_BIT).
	foreignNrs = 0x40000000
)

// archDenied are amd64's calls that arm64 does not have.
var archDenied = []uintptr{
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_USTAT,
	unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
}
