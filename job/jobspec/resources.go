package jobspec

import (
	"fmt"
	"sort"
)

// Kinds of what a job asks of a node beyond its attributes (Missing).
const (
	PlaceHostVolume = "host_volume"
	PlaceCSIVolume  = "csi_volume"
	PlacePortMap    = "portmap"
)

// NodeResources is what this node offers a job beyond its attributes:
// the host volumes of its configuration, and CNI networks that can map
// ports or not.
type NodeResources struct {
	// HostVolumes are the names of the node's host volumes (client {
	// host_volume "name" { ... } }).
	HostVolumes map[string]bool
	// PortMap is nil when CNI network name maps ports (its conflist has
	// the portmap plugin), else why not and what to add. A network that
	// does not load is not its to report (ParseOptions.Network is);
	// nil PortMap skips the check.
	PortMap func(network string) error
}

// Missing lists, in file order, what the job asks of this node that the
// node does not offer: host volumes it does not configure, CSI volumes
// (berth has no CSI plugins), ports in a CNI network that cannot map
// them. run and plan refuse the first (as an unmet constraint); validate
// warns of each: the file is a valid Nomad job.
func (j *Job) Missing(r NodeResources) []*PlacementError {
	var out []*PlacementError
	for _, g := range j.Groups {
		gw := fmt.Sprintf("group %q", g.Name)
		out = append(out, g.missingVolumes(r, gw)...)
		if pe := g.Network.missingPortMap(r, gw); pe != nil {
			out = append(out, pe)
		}
	}
	return out
}

func (g *Group) missingVolumes(r NodeResources, gw string) []*PlacementError {
	var out []*PlacementError
	for _, v := range g.Volumes {
		where := fmt.Sprintf("volume %q in %s", v.Name, gw)
		switch {
		case v.Type == VolumeCSI:
			out = append(out, &PlacementError{Kind: PlaceCSIVolume, What: fmt.Sprintf("CSI volume %q", v.Source), Where: where, Pos: v.Pos,
				Node: "berth has no CSI plugins and cannot mount it: use type = \"host\" with a host volume of the node's configuration"})
		default:
			for _, src := range v.Sources(g.Count) {
				if r.HostVolumes[src] {
					continue
				}
				out = append(out, &PlacementError{Kind: PlaceHostVolume, What: fmt.Sprintf("host volume %q", src), Where: where, Pos: v.Pos,
					Node: fmt.Sprintf("this node has no host volume %q: add client { host_volume %q { path = \"/path/on/host\" } } to the agent's file, or give berth run --client-host-volume '%s=/path/on/host'",
						src, src, src)})
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Pos.before(out[b].Pos) })
	return out
}

// missingPortMap: a port of a CNI network is published by the network's
// portmap plugin; without it Nomad maps nothing, silently.
func (n *Network) missingPortMap(r NodeResources, gw string) *PlacementError {
	if n.CNI == "" || len(n.Ports) == 0 || r.PortMap == nil {
		return nil
	}
	err := r.PortMap(n.CNI)
	if err == nil {
		return nil
	}
	p := n.Ports[0]
	return &PlacementError{Kind: PlacePortMap, What: fmt.Sprintf("port %q", p.Label), Where: "network block in " + gw, Pos: p.Pos,
		Node: fmt.Sprintf("network mode %q cannot map ports: %v", n.Mode, err)}
}

func (p Pos) before(q Pos) bool {
	if p.Line != q.Line {
		return p.Line < q.Line
	}
	return p.Column < q.Column
}
