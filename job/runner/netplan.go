package runner

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/service"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/store"
)

// netKind is what a group's network mode makes of the allocation's
// network. The mode string is read in planNetwork and nowhere else
// (TestNetworkModeReadOnce): setup, the tasks' environment, services and
// re-adoption ask the plan.
type netKind int

const (
	// netHost: the host's network, no namespace (mode "host", or unset).
	netHost netKind = iota
	// netBridge: a namespace on berth's bridge (BridgeConfig).
	netBridge
	// netNone: a namespace with only loopback up.
	netNone
	// netCNI: a namespace on a network of the CNI config dir ("cni/<name>").
	netCNI
)

// noneNetworkName is the network `mode = "none"` attaches to.
const noneNetworkName = "berth-none"

// netPlan is a group's network resolved once for one allocation: what the
// mode makes, the CNI network, the ports with their host and allocation
// addresses, DNS and CNI args. The ports and address are filled in as the
// network is set up (pickPorts, attached, hostOnly) or read back from the
// record of a re-adopted allocation (restore). The zero plan is the host
// network with no ports.
type netPlan struct {
	// mode is the job file's mode as written: it is recorded on the
	// allocation and named in services' errors, never compared again.
	mode string
	kind netKind
	// network is the CNI network the namespace is attached to, "" for
	// the host network.
	network string
	// bridge is berth's bridge network, for netBridge.
	bridge BridgeConfig

	spec    []jobspec.Port
	dns     *jobspec.DNS
	cniArgs map[string]string

	// ports are the group's ports resolved to host and container ports.
	ports []portPlan
	// allocIP is the allocation's address: the namespace's first IPv4
	// address, or hostIP without a namespace.
	allocIP string
	// hostIP is the host address the ports are advertised on
	// (Options.HostIP; a re-adopted allocation's recorded one).
	hostIP string
}

// planNetwork resolves a group's network block; bridge is the runner's
// bridge network (with its defaults), hostIP the host address it
// advertises.
func planNetwork(n jobspec.Network, bridge BridgeConfig, hostIP string) netPlan {
	p := netPlan{mode: n.Mode, bridge: bridge, spec: n.Ports, dns: n.DNS, cniArgs: n.CNIArgs, hostIP: hostIP}
	switch {
	case n.Mode == jobspec.NetworkBridge:
		p.kind, p.network = netBridge, bridge.withDefaults().Network
	case n.Mode == jobspec.NetworkNone:
		p.kind, p.network = netNone, noneNetworkName
	case strings.HasPrefix(n.Mode, jobspec.NetworkCNIPrefix):
		p.kind, p.network = netCNI, strings.TrimPrefix(n.Mode, jobspec.NetworkCNIPrefix)
	}
	if p.network == "" {
		// "cni/" with no name (refused by the parser) makes no namespace,
		// as any mode naming no network.
		p.kind = netHost
	}
	return p
}

// namespaced reports whether the allocation gets a network namespace of
// its own (set up, CHECKed and torn down through attach).
func (p *netPlan) namespaced() bool { return p.kind != netHost }

// portPlan is a group's port resolved to host and container ports.
type portPlan struct {
	Label         string
	HostPort      int
	ContainerPort int
}

// pickPorts picks host ports (static, or a free dynamic one) and the port
// inside the namespace (`to`, or the host port; always the host port on
// the host network).
func (p *netPlan) pickPorts() error {
	var out []portPlan
	for _, sp := range p.spec {
		pp := portPlan{Label: sp.Label, HostPort: sp.Static}
		if pp.HostPort == 0 {
			hp, err := freePort()
			if err != nil {
				return fmt.Errorf("port %q: no free dynamic port: %w", sp.Label, err)
			}
			pp.HostPort = hp
		}
		pp.ContainerPort = sp.To
		if sp.To <= 0 || p.kind == netHost {
			pp.ContainerPort = pp.HostPort
		}
		out = append(out, pp)
	}
	p.ports = out
	return nil
}

// confList is the CNI configuration list the namespace is attached with.
func (p *netPlan) confList(ctx context.Context, r *Runner) (*cni.Network, error) {
	switch p.kind {
	case netBridge:
		return p.bridge.ConfList()
	case netNone:
		return noneNetwork()
	}
	n, err := r.network(ctx, p.network)
	if err != nil {
		return nil, fmt.Errorf("network setup: %w", err)
	}
	return n, nil
}

// noneNetwork gives `mode = "none"` a namespace with only loopback up (a
// task may talk to itself on 127.0.0.1, as in bridge and cni mode; Nomad
// 1.6.5 leaves lo down: node/parity's network case).
func noneNetwork() (*cni.Network, error) {
	return cni.ParseNetwork([]byte(`{"cniVersion":"1.1.0","name":"`+noneNetworkName+`","plugins":[{"type":"loopback"}]}`), "berth none network")
}

// request is the attach request of the allocation's namespace, without
// its configuration (confList): the job's cni args, the runtime's
// identity over them (validate warns), and the ports and DNS as
// capability args.
func (p *netPlan) request(allocID string, job *jobspec.Job, group string) attach.Request {
	req := attach.Request{
		ID:             allocID,
		AllocID:        allocID,
		Args:           map[string]string{},
		CapabilityArgs: map[string]any{},
	}
	maps.Copy(req.Args, p.cniArgs)
	maps.Copy(req.Args, map[string]string{
		"BERTH_ALLOC_ID": allocID, "BERTH_JOB_ID": job.ID, "BERTH_GROUP": group,
		// Plugins written for Nomad read these.
		"NOMAD_ALLOC_ID": allocID, "NOMAD_JOB_ID": job.ID, "NOMAD_GROUP_NAME": group,
		"NOMAD_NAMESPACE": job.Namespace, "NOMAD_REGION": job.Region,
	})
	if pm := p.portMappings(); len(pm) > 0 {
		req.CapabilityArgs["portMappings"] = pm
	}
	if d := p.dns; d != nil {
		req.CapabilityArgs["dns"] = map[string]any{"servers": d.Servers, "searches": d.Searches, "options": d.Options}
	}
	return req
}

func (p *netPlan) portMappings() []map[string]any {
	var out []map[string]any
	for _, pp := range p.ports {
		for _, proto := range []string{"tcp", "udp"} {
			out = append(out, map[string]any{"hostPort": pp.HostPort, "containerPort": pp.ContainerPort, "protocol": proto})
		}
	}
	return out
}

// attached takes the allocation's address from the namespace attach set
// up and returns the network's record: the job's DNS, or what the plugins
// answered.
func (p *netPlan) attached(st *attach.Status) *store.NetworkStatus {
	if len(st.IPv4) > 0 {
		p.allocIP, _, _ = strings.Cut(st.IPv4[0], "/")
	}
	ns := &store.NetworkStatus{Mode: p.mode, Network: st.Network, NetnsPath: st.NetnsPath, Interface: st.Interface, IPv4: st.IPv4, IPv6: st.IPv6, Gateway: st.Gateway}
	if p.dns != nil {
		ns.DNS = &store.DNS{Servers: p.dns.Servers, Searches: p.dns.Searches, Options: p.dns.Options}
	} else if len(st.DNS.Nameservers) > 0 {
		ns.DNS = &store.DNS{Servers: st.DNS.Nameservers, Searches: st.DNS.Search, Options: st.DNS.Options}
	}
	return ns
}

// hostOnly resolves the plan of an allocation on the host network (no
// namespace): its ports and address. It returns the network's record,
// also when no port could be picked.
func (p *netPlan) hostOnly() (*store.NetworkStatus, error) {
	ns := &store.NetworkStatus{Mode: p.mode}
	if err := p.pickPorts(); err != nil {
		return ns, err
	}
	p.allocIP = p.hostIP
	return ns, nil
}

// recordPorts are the ports as the allocation's record has them.
func (p *netPlan) recordPorts() []store.PortMapping {
	var out []store.PortMapping
	for _, pp := range p.ports {
		out = append(out, store.PortMapping{Label: pp.Label, HostIP: p.hostIP, HostPort: pp.HostPort, To: pp.ContainerPort})
	}
	return out
}

// restore takes the ports and address of a re-adopted allocation from
// its record, as the tasks' environment needs them.
func (p *netPlan) restore(n *store.NetworkStatus) {
	p.ports = nil
	for _, pm := range n.Ports {
		p.ports = append(p.ports, portPlan{Label: pm.Label, HostPort: pm.HostPort, ContainerPort: pm.To})
		if pm.HostIP != "" {
			// What its tasks were given, whatever this runner advertises.
			p.hostIP = pm.HostIP
		}
	}
	p.allocIP = p.hostIP
	if len(n.IPv4) > 0 {
		p.allocIP, _, _ = strings.Cut(n.IPv4[0], "/")
	}
}

// portVars adds the NOMAD_* port and address variables of every port, one
// rule each, as Nomad 1.6.5 sets them (measured by node/parity's network
// case) in every network mode:
//   - NOMAD_IP, NOMAD_ADDR and NOMAD_HOST_*: where the port is published,
//     the host address and the host port (also in cni and bridge mode,
//     where the task listens on another port in its own namespace);
//   - NOMAD_PORT and NOMAD_ALLOC_PORT: the port the task listens on, `to`
//     (the host port without one, and always on the host network, where
//     nothing maps it: Nomad gives `to` there too, which no one publishes);
//   - NOMAD_ALLOC_IP and NOMAD_ALLOC_ADDR: the allocation's address (the
//     host's without a namespace) and that port. Nomad 1.6.5 documents
//     them but sets neither for its raw_exec and exec tasks.
func (p *netPlan) portVars(vars map[string]string) {
	for _, pp := range p.ports {
		l := pp.Label
		host := net.JoinHostPort(p.hostIP, strconv.Itoa(pp.HostPort))
		vars["NOMAD_IP_"+l] = p.hostIP
		vars["NOMAD_PORT_"+l] = strconv.Itoa(pp.ContainerPort)
		vars["NOMAD_ADDR_"+l] = host
		vars["NOMAD_HOST_IP_"+l] = p.hostIP
		vars["NOMAD_HOST_PORT_"+l] = strconv.Itoa(pp.HostPort)
		vars["NOMAD_HOST_ADDR_"+l] = host
		vars["NOMAD_ALLOC_IP_"+l] = p.allocIP
		vars["NOMAD_ALLOC_PORT_"+l] = strconv.Itoa(pp.ContainerPort)
		vars["NOMAD_ALLOC_ADDR_"+l] = net.JoinHostPort(p.allocIP, strconv.Itoa(pp.ContainerPort))
	}
}

// serviceNet is what the network gives services and checks; netnsPath is
// the namespace the allocation's record has ("" for none).
func (p *netPlan) serviceNet(netnsPath string) service.AllocNet {
	n := service.AllocNet{Mode: p.mode, HostIP: p.hostIP}
	if netnsPath != "" {
		n.NetnsPath, n.AllocIP = netnsPath, p.allocIP
	}
	for _, pp := range p.ports {
		n.Ports = append(n.Ports, service.Port{Label: pp.Label, HostPort: pp.HostPort, To: pp.ContainerPort})
	}
	return n
}
