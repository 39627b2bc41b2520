package podman

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"sort"
	"strings"
	"syscall"

	"github.com/berth/berth/task/driver"
)

var (
	_ driver.Signaler = (*handle)(nil)
	_ driver.Execer   = (*handle)(nil)
)

// Signal implements driver.Signaler: podman delivers sig to the
// container's main process.
func (h *handle) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := h.d.c.kill(ctx, h.id, int(sig)); err != nil {
		return fmt.Errorf("podman: signal container %s (task %s/%s): %w", h.name, h.allocID, h.task, err)
	}
	return nil
}

// Exec implements driver.Execer with `podman exec`, which enters every
// namespace of the container and takes its user, as Nomad's podman driver
// does. It runs with the containers.conf of berth's podman service, so it
// sees the same containers.
func (h *handle) Exec(ctx context.Context, req *driver.ExecRequest) (int, error) {
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: no command", driver.ErrExecSetup)
	}
	args := []string{"exec"}
	if req.TTY {
		args = append(args, "--tty")
	}
	if req.Stdin != nil {
		args = append(args, "--interactive")
	}
	args = append(args, execEnvArgs(req.Env)...)
	args = append(args, h.id)
	args = append(args, req.Cmd...)
	cmd := osexec.Command(h.d.bin, args...)
	cmd.Env = append(withoutEnv(os.Environ(), "CONTAINERS_CONF"), "CONTAINERS_CONF="+h.d.confPath)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	if req.TTY {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("%w: podman exec in container %s: %w", driver.ErrExecSetup, h.name, err)
	}
	// Wait reports how the command ended; a kill that fails found it
	// ended already.
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	err := cmd.Wait()
	var ee *osexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return -1, fmt.Errorf("podman exec in container %s: %w", h.name, err)
}

// execEnvArgs are podman exec's --env flags for the request's variables,
// sorted, without the loader's (driver.LoaderVar).
func execEnvArgs(env map[string]string) []string {
	keys := make([]string, 0, len(env))
	for k := range env {
		if k != "" && !strings.Contains(k, "=") && !driver.LoaderVar(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var args []string
	for _, k := range keys {
		args = append(args, "--env", k+"="+env[k])
	}
	return args
}
