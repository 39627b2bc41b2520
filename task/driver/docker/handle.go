package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// handle is one started (or re-attached) container.
type handle struct {
	d       *Driver
	id      string
	name    string
	allocID string
	task    string
	logs    *logCopier // nil when the task has no LogDir

	mu     sync.Mutex
	result *driver.ExitResult
}

var (
	_ driver.Signaler = (*handle)(nil)
	_ driver.Execer   = (*handle)(nil)
)

// State implements driver.Handle.
func (h *handle) State() store.TaskHandle {
	return store.TaskHandle{Driver: Name, ContainerID: h.id, ContainerName: h.name, AllocID: h.allocID, Task: h.task}
}

// Wait implements driver.Handle: Docker's wait (condition not-running)
// blocks until the container exits, then one inspect reads how.
func (h *handle) Wait(ctx context.Context) (*driver.ExitResult, error) {
	h.mu.Lock()
	if r := h.result; r != nil {
		h.mu.Unlock()
		return r, nil
	}
	h.mu.Unlock()
	res, err := h.exitResult(ctx)
	if err != nil {
		return nil, err
	}
	if h.logs != nil {
		if err := h.logs.stop(); err != nil {
			h.d.log.Warn("copying task output", "container", h.name, "err", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.result == nil {
		h.result = res
	}
	return h.result, nil
}

func (h *handle) exitResult(ctx context.Context) (*driver.ExitResult, error) {
	err := h.d.c.wait(ctx, h.id)
	var st *inspectResult
	if err == nil {
		st, err = h.d.c.inspect(ctx, h.id)
	}
	if errors.Is(err, ErrNotFound) {
		return &driver.ExitResult{ExitCode: -1, Err: fmt.Errorf("docker: container %s (%s) vanished: %w", h.name, h.id, err)}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("docker: waiting for container %s: %w", h.name, ctx.Err())
		}
		return nil, fmt.Errorf("docker: waiting for container %s: %w", h.name, err)
	}
	return &driver.ExitResult{
		ExitCode:   st.State.ExitCode,
		OOMKilled:  st.State.OOMKilled,
		StartedAt:  st.State.StartedAt,
		FinishedAt: st.State.FinishedAt,
	}, nil
}

// Stop implements driver.Handle: Docker sends the stop signal (the job's
// kill_signal, set at create) and SIGKILL after timeout, rounded up to
// whole seconds. Stopped or gone already is not an error.
func (h *handle) Stop(ctx context.Context, timeout time.Duration) error {
	err := h.d.c.stop(ctx, h.id, timeout)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("docker: stopping container %s: %w", h.name, err)
	}
	return nil
}

// Destroy implements driver.Handle: the container is killed, its output
// copied to the end (Docker removes its log with it), then it is removed,
// and with the allocation's last task container the pause container.
func (h *handle) Destroy(ctx context.Context) error { return h.destroy(ctx, true, false) }

// destroy: drain kills the container and waits for it before the last
// copy of its output; locked says the caller (a failed Start) holds the
// allocation's lock already.
func (h *handle) destroy(ctx context.Context, drain, locked bool) error {
	if h.logs != nil && drain {
		if err := h.d.c.kill(ctx, h.id, int(syscall.SIGKILL)); err == nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_ = h.d.c.wait(wctx, h.id)
			cancel()
		}
	}
	if h.logs != nil {
		if err := h.logs.stop(); err != nil {
			h.d.log.Warn("copying task output", "container", h.name, "err", err)
		}
	}
	if !locked {
		unlock := h.d.lockAlloc(h.allocID)
		defer unlock()
	}
	if err := h.d.removeContainer(ctx, h.id); err != nil {
		return fmt.Errorf("docker: destroy: %w", err)
	}
	if err := driver.RemoveFiles(h.d.copyStatePath(h.name)); err != nil {
		return fmt.Errorf("docker: destroy: container %s: %w", h.name, err)
	}
	if h.allocID != "" {
		if err := h.d.releasePauseErr(ctx, h.allocID); err != nil {
			return fmt.Errorf("docker: destroy: pause container of alloc %s: %w", h.allocID, err)
		}
	}
	return nil
}

// Signal implements driver.Signaler.
func (h *handle) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := h.d.c.kill(ctx, h.id, int(sig)); err != nil {
		return fmt.Errorf("docker: signal container %s (task %s/%s): %w", h.name, h.allocID, h.task, err)
	}
	return nil
}

// Exec implements driver.Execer with `docker exec`, which enters every
// namespace of the container and takes its user, as Nomad's docker
// driver's exec does.
func (h *handle) Exec(ctx context.Context, req *driver.ExecRequest) (int, error) {
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: no command", driver.ErrExecSetup)
	}
	args := []string{"-H", "unix://" + h.d.socket, "exec"}
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
	cmd.Env = withoutEnv(os.Environ(), "DOCKER_HOST")
	// Docker 20.10 exits 126 for a command it cannot find too; its
	// message, which the CLI prints on stdout, tells the two apart (127,
	// as a shell and podman say). So without a terminal stdout goes
	// through a copy that keeps its start; on a terminal it is the
	// terminal itself (the CLI sizes the task's from it) and a missing
	// command stays 126. stderr is copied likewise.
	errTail := &headBuffer{max: 4096}
	cmd.Stdin, cmd.Stdout = req.Stdin, req.Stdout
	switch {
	case req.TTY:
	case req.Stdout == nil:
		// Not /dev/null, which os/exec would give: the CLI fails to write
		// there ("write /dev/stdout: invalid argument").
		cmd.Stdout = errTail
	default:
		cmd.Stdout = io.MultiWriter(req.Stdout, errTail)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("%w: docker exec in container %s: %w", driver.ErrExecSetup, h.name, err)
	}
	cmd.Stderr = pw
	if req.TTY {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		var w io.Writer = errTail
		if req.Stderr != nil {
			w = io.MultiWriter(req.Stderr, errTail)
		}
		_, _ = io.Copy(w, pr)
	}()
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		<-copied
		return -1, fmt.Errorf("%w: docker exec in container %s: %w", driver.ErrExecSetup, h.name, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	err = cmd.Wait()
	<-copied
	pr.Close()
	var ee *osexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		code := ee.ExitCode()
		if msg := errTail.String(); code == 126 && strings.Contains(msg, "OCI runtime exec failed") &&
			(strings.Contains(msg, "executable file not found") || strings.Contains(msg, "no such file or directory")) {
			code = 127
		}
		return code, nil
	}
	return -1, fmt.Errorf("docker exec in container %s: %w", h.name, err)
}

// headBuffer keeps the first max bytes written to it (by the stdout and
// stderr copies at once).
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.max - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}

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

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return out
}
