package podman

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berth/berth/internal/pidfd"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// specGenerator is the part of libpod's SpecGenerator berth sets.
type specGenerator struct {
	Name             string            `json:"name"`
	Image            string            `json:"image"`
	Command          []string          `json:"command,omitempty"`
	Entrypoint       []string          `json:"entrypoint,omitempty"`
	WorkDir          string            `json:"work_dir,omitempty"`
	Hostname         string            `json:"hostname,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	Netns            namespace         `json:"netns"`
	LogConfiguration *logConfig        `json:"log_configuration,omitempty"`
	ConmonPidFile    string            `json:"conmon_pid_file,omitempty"`
	Rlimits          []rlimit          `json:"r_limits,omitempty"`
	StopTimeout      uint              `json:"stop_timeout,omitempty"`
	StopSignal       int               `json:"stop_signal,omitempty"`
	Mounts           []mount           `json:"mounts,omitempty"`
	User             string            `json:"user,omitempty"`
	Privileged       bool              `json:"privileged,omitempty"`

	// From the task's config block (spec.go).
	ReadOnlyFilesystem bool              `json:"read_only_filesystem,omitempty"`
	CapAdd             []string          `json:"cap_add,omitempty"`
	CapDrop            []string          `json:"cap_drop,omitempty"`
	NoNewPrivileges    bool              `json:"no_new_privileges,omitempty"`
	SeccompProfilePath string            `json:"seccomp_profile_path,omitempty"`
	ApparmorProfile    string            `json:"apparmor_profile,omitempty"`
	SelinuxOpts        []string          `json:"selinux_opts,omitempty"`
	Mask               []string          `json:"mask,omitempty"`
	Unmask             []string          `json:"unmask,omitempty"`
	Annotations        map[string]string `json:"annotations,omitempty"`
	Userns             *namespace        `json:"userns,omitempty"`
	Devices            []device          `json:"devices,omitempty"`
	Init               bool              `json:"init,omitempty"`
	InitPath           string            `json:"init_path,omitempty"`
	Terminal           bool              `json:"terminal,omitempty"`
	Sysctl             map[string]string `json:"sysctl,omitempty"`
	ShmSize            *int64            `json:"shm_size,omitempty"`
	OOMScoreAdj        *int              `json:"oom_score_adj,omitempty"`
	ResourceLimits     *resources        `json:"resource_limits,omitempty"`
	DNSServers         []string          `json:"dns_server,omitempty"`
	HostAdd            []string          `json:"hostadd,omitempty"`
}

// device is an OCI LinuxDevice as libpod takes it from a client: the
// whole "host[:container[:permissions]]" in path.
type device struct {
	Path string `json:"path"`
}

// resources is the part of an OCI LinuxResources berth sets.
type resources struct {
	Memory *memoryResources `json:"memory,omitempty"`
	Pids   *pidsResources   `json:"pids,omitempty"`
}

type memoryResources struct {
	Limit       *int64  `json:"limit,omitempty"`
	Reservation *int64  `json:"reservation,omitempty"`
	Swap        *int64  `json:"swap,omitempty"`
	Swappiness  *uint64 `json:"swappiness,omitempty"`
}

type pidsResources struct {
	Limit int64 `json:"limit"`
}

type namespace struct {
	NSMode string `json:"nsmode"`
	Value  string `json:"value,omitempty"`
}

type logConfig struct {
	Driver string `json:"driver"`
	Path   string `json:"path,omitempty"`
}

// rlimit.Type is podman's short name ("nofile"); podman adds "RLIMIT_".
type rlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

// handle is one started container.
type handle struct {
	d       *Driver
	id      string
	name    string
	allocID string
	task    string
	rawLog  string
	pidFile string
	logs    *logCopier     // nil when the task has no LogDir
	conmon  *pidfd.Process // nil when conmon could not be watched

	mu     sync.Mutex
	result *driver.ExitResult
}

// State implements driver.Handle.
func (h *handle) State() store.TaskHandle {
	return store.TaskHandle{Driver: Name, ContainerID: h.id, ContainerName: h.name, AllocID: h.allocID, Task: h.task}
}

// Wait implements driver.Handle. The exit is seen through conmon's pidfd
// (conmon exits once podman recorded the exit), so a waiting task costs no
// polling; then one inspect reads the exit code and OOM flag.
func (h *handle) Wait(ctx context.Context) (*driver.ExitResult, error) {
	h.mu.Lock()
	if r := h.result; r != nil {
		h.mu.Unlock()
		return r, nil
	}
	h.mu.Unlock()

	if h.conmon != nil {
		if err := h.conmon.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("podman: waiting for container %s: %w", h.name, ctx.Err())
			}
			// The pidfd is unusable; podman can still tell.
			h.d.log.Warn("watching conmon failed, polling podman", "container", h.name, "err", err)
		}
	}
	res, err := h.exitResult(ctx)
	if err != nil {
		return nil, err
	}
	// conmon wrote everything before it recorded the exit.
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
	st, err := h.d.c.inspect(ctx, h.id)
	if err == nil && !isExited(st.State.Status) {
		// conmon is not watched, or podman has not finished recording the
		// exit: let podman wait, then look again.
		interval := h.d.waitInterval
		if h.conmon != nil && h.conmon.Exited() {
			interval = 10 * time.Millisecond
		}
		if _, err = h.d.c.wait(ctx, h.id, interval); err == nil {
			st, err = h.d.c.inspect(ctx, h.id)
		}
	}
	if errors.Is(err, ErrNotFound) {
		// Removed behind berth's back: the task is gone, how it ended is not known.
		return &driver.ExitResult{ExitCode: -1, Err: fmt.Errorf("podman: container %s (%s) vanished: %w", h.name, h.id, err)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("podman: waiting for container %s: %w", h.name, err)
	}
	return &driver.ExitResult{
		ExitCode:   st.State.ExitCode,
		OOMKilled:  st.State.OOMKilled,
		StartedAt:  st.State.StartedAt,
		FinishedAt: st.State.FinishedAt,
	}, nil
}

func isExited(status string) bool {
	return status == "exited" || status == "stopped"
}

// Stop implements driver.Handle: podman sends the stop signal (SIGTERM) and
// SIGKILL after timeout, rounded up to whole seconds. A container that is
// already stopped or gone is not an error.
func (h *handle) Stop(ctx context.Context, timeout time.Duration) error {
	err := h.d.c.stop(ctx, h.id, timeout)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("podman: stopping container %s: %w", h.name, err)
	}
	return nil
}

// Destroy implements driver.Handle. It returns only once podman no longer
// knows the container and its conmon has exited; the rest of the output is
// copied to the task's log files before they are closed.
func (h *handle) Destroy(ctx context.Context) error {
	if err := h.d.removeContainer(ctx, h.id, h.name, h.conmon); err != nil {
		return fmt.Errorf("podman: destroy: %w", err)
	}
	if h.logs != nil {
		if err := h.logs.stop(); err != nil {
			h.d.log.Warn("copying task output", "container", h.name, "err", err)
		}
	}
	h.conmon.Close()
	if err := driver.RemoveFiles(h.rawLog, h.pidFile, h.d.copyStatePath(h.name)); err != nil {
		return fmt.Errorf("podman: destroy: container %s: %w", h.name, err)
	}
	return nil
}
