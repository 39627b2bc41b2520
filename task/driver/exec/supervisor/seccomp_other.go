//go:build !amd64 && !arm64

package supervisor

// Other architectures: no filter (seccompFilter refuses), so an exec task
// that asks for one does not start.
const (
	auditArch  = 0
	foreignNrs = 0
)

var archDenied []uintptr
