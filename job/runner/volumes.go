package runner

import (
	"errors"
	"fmt"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/task/driver"
)

// HostVolume is a host directory of the node's configuration that jobs
// may mount; ReadOnly makes every mount of it read-only.
type HostVolume struct {
	Path     string
	ReadOnly bool
}

// ErrNoHostVolume is matched (errors.Is) by the error of a task whose
// volume names a host volume the node does not have (run refuses such a
// job before; the node's configuration may have changed since).
var ErrNoHostVolume = errors.New("host volume not configured on this node")

// mounts are task t's volume_mounts, for allocation index of group g, as
// host paths: read-only when the node's host volume, the group's volume
// or the mount says so, as Nomad; a per_alloc volume is the node's volume
// named "<source>[<index>]".
func (r *Runner) mounts(g *jobspec.Group, t *jobspec.Task, index int) ([]driver.Mount, error) {
	var out []driver.Mount
	for _, vm := range t.VolumeMounts {
		v := g.Volumes[vm.Volume]
		if v == nil {
			return nil, fmt.Errorf("%s: task %q mounts volume %q, which group %q does not declare", vm.Pos, t.Name, vm.Volume, g.Name)
		}
		if v.Type != jobspec.VolumeHost {
			return nil, fmt.Errorf("%s: task %q mounts %s volume %q: berth mounts host volumes only", vm.Pos, t.Name, v.Type, v.Name)
		}
		src := v.SourceFor(index)
		hv, ok := r.o.HostVolumes[src]
		if !ok {
			return nil, fmt.Errorf("%s: task %q: %w: %q (volume %q)", vm.Pos, t.Name, ErrNoHostVolume, src, v.Name)
		}
		out = append(out, driver.Mount{Source: hv.Path, Dest: vm.Destination, ReadOnly: hv.ReadOnly || v.ReadOnly || vm.ReadOnly,
			Propagation: driver.Propagation(vm.PropagationMode)})
	}
	return out, nil
}
