package exec

import (
	"context"
	"syscall"

	"github.com/berth/berth/driver"
)

var _ driver.Signaler = (*handle)(nil)

// Signal sends sig to the task's process group and cgroup, as Stop's
// first signal, without waiting for anything.
func (h *handle) Signal(_ context.Context, sig syscall.Signal) error {
	if h.exited() {
		return nil
	}
	return h.signal(sig)
}
