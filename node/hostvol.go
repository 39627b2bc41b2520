package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth/berth/job/runner"
)

// HostVolume is one of the client's host_volume blocks, as Nomad's: a
// host directory a job's `volume "x" { type = "host" source = "<name>" }`
// mounts into its tasks. ReadOnly makes every mount of it read-only.
type HostVolume struct {
	Name     string `hcl:"name,label"`
	Path     string `hcl:"path"`
	ReadOnly bool   `hcl:"read_only,optional"`
}

// hostVolumes is the --client-host-volume flag: NAME=PATH or
// NAME=PATH:ro, repeatable (each use adds one volume).
type hostVolumes []*HostVolume

func (l *hostVolumes) String() string {
	var s []string
	for _, v := range *l {
		e := v.Name + "=" + v.Path
		if v.ReadOnly {
			e += ":ro"
		}
		s = append(s, e)
	}
	return strings.Join(s, ",")
}

func (l *hostVolumes) Set(s string) error {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("%q is not NAME=PATH or NAME=PATH:ro", s)
	}
	v := &HostVolume{Name: name, Path: path}
	if p, ok := strings.CutSuffix(path, ":ro"); ok {
		v.Path, v.ReadOnly = p, true
	}
	*l = append(*l, v)
	return nil
}

func (l *hostVolumes) Type() string { return "NAME=PATH[:ro]" }

func (c *Config) checkHostVolumes(p *Problems) {
	seen := map[string]bool{}
	for _, v := range c.clientSettings().HostVolumes {
		switch {
		case v.Name == "":
			p.Add("client.host_volume", "%q has no name", v.Path)
		case seen[v.Name]:
			p.Add("client.host_volume", "%q is configured twice", v.Name)
		case !filepath.IsAbs(v.Path):
			p.Add("client.host_volume", "%q: path %q must be absolute", v.Name, v.Path)
		default:
			// As Nomad's client, which fails to start on a missing path.
			if _, err := os.Stat(v.Path); err != nil {
				p.Add("client.host_volume", "%q: path %s: %v", v.Name, v.Path, err)
			}
		}
		seen[v.Name] = true
	}
}

// RunnerHostVolumes are the host volumes as the runner mounts them.
func (c *Config) RunnerHostVolumes() map[string]runner.HostVolume {
	out := map[string]runner.HostVolume{}
	for _, v := range c.clientSettings().HostVolumes {
		out[v.Name] = runner.HostVolume{Path: v.Path, ReadOnly: v.ReadOnly}
	}
	return out
}

// hostVolumeNames are the names jobs may ask for.
func (c *Config) hostVolumeNames() map[string]bool {
	out := map[string]bool{}
	for _, v := range c.clientSettings().HostVolumes {
		out[v.Name] = true
	}
	return out
}
