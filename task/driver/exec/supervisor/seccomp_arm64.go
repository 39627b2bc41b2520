package supervisor

import "golang.org/x/sys/unix"

const (
	auditArch  = unix.AUDIT_ARCH_AARCH64
	foreignNrs = 0
)

var archDenied []uintptr
