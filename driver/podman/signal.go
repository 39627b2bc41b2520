package podman

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"syscall"

	"github.com/berth/berth/driver"
	"golang.org/x/sys/unix"
)

var _ driver.Signaler = (*handle)(nil)

// Signal sends sig to the container's main process (podman kill).
func (h *handle) Signal(ctx context.Context, sig syscall.Signal) error {
	q := url.Values{}
	q.Set("signal", unix.SignalName(sig))
	// 409: the container is not running any more; nothing to signal.
	if _, err := h.d.c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(h.id)+"/kill", q, nil, nil, http.StatusConflict); err != nil {
		return fmt.Errorf("podman: signal %s to container %s: %w", unix.SignalName(sig), h.name, err)
	}
	return nil
}
