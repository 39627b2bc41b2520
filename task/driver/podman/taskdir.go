package podman

import (
	"path/filepath"

	"github.com/berth/berth/task/driver"
)

// mount is one entry of libpod's SpecGenerator mounts (an OCI mount).
type mount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

// Where Nomad's podman driver mounts the task's directories: what
// NOMAD_ALLOC_DIR, NOMAD_TASK_DIR and NOMAD_SECRETS_DIR say inside.
const (
	ContainerAllocDir   = "/alloc"
	ContainerTaskDir    = "/local"
	ContainerSecretsDir = "/secrets"
)

// taskDirMounts binds the allocation's shared dir and the task's local and
// secrets dirs into the container, as Nomad's podman driver does; none
// when the task has no allocation dir.
func taskDirMounts(t *driver.Task) []mount {
	if t.AllocDir == "" {
		return nil
	}
	td := driver.TaskDir(t.AllocDir, t.TaskName)
	bind := func(src, dst string) mount {
		return mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "rw"}}
	}
	return []mount{
		bind(driver.SharedDir(t.AllocDir), ContainerAllocDir),
		bind(filepath.Join(td, "local"), ContainerTaskDir),
		bind(filepath.Join(td, "secrets"), ContainerSecretsDir),
	}
}

// TaskPaths implements driver.PathMapper: the task's directories are
// mounted where Nomad's podman driver mounts them.
func (d *Driver) TaskPaths() driver.TaskPaths {
	return driver.TaskPaths{AllocDir: ContainerAllocDir, TaskDir: ContainerTaskDir, SecretsDir: ContainerSecretsDir}
}

// volumeMounts are the task's host volumes as bind mounts, as Nomad's
// podman driver mounts a volume_mount: propagation_mode private is
// rprivate, host-to-task rslave, bidirectional rshared.
func volumeMounts(t *driver.Task) []mount {
	var out []mount
	for _, m := range t.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, mount{Destination: m.Dest, Type: "bind", Source: m.Source, Options: []string{"rbind", mode, propagation(m.Propagation)}})
	}
	return out
}

func propagation(p driver.Propagation) string {
	switch p {
	case driver.PropagationHostToTask:
		return "rslave"
	case driver.PropagationBidirectional:
		return "rshared"
	default:
		return "rprivate"
	}
}
