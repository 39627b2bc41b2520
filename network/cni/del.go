package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
)

// del runs DEL for the whole chain. The plain libcni path needs the cached
// result and every plugin binary. Without a cached result (an ADD that
// failed half-way, a crash before libcni wrote the cache) plugins that
// key their state on the result's addresses, such as the firewall plugin,
// would silently leave their rules: so a result is rebuilt from the
// namespace or from host-local's leases and handed to each plugin. A
// plugin whose binary is gone cannot clean up anything; it is skipped,
// with a warning, rather than blocking the rest of the teardown forever.
func (c *Client) del(ctx context.Context, net *Network, rt *libcni.RuntimeConf) error {
	var missing []string
	for _, p := range net.List.Plugins {
		if _, err := c.FindPlugin(p.Network.Type); err != nil {
			missing = append(missing, p.Network.Type)
		}
	}
	cached, _ := c.cni.GetNetworkListCachedResult(net.List, rt)
	if len(missing) == 0 && cached != nil {
		return c.cni.DelNetworkList(ctx, net.List, rt)
	}
	if len(missing) > 0 {
		c.log.Warn("CNI DEL skips plugins whose binaries are missing; whatever they made cannot be removed by them",
			"network", net.Name(), "id", rt.ContainerID, "missing", missing, "path", strings.Join(c.path, ":"))
	}
	prev := cached
	if prev == nil {
		prev = c.rebuildResult(net, rt)
	}
	inject := map[string]any{"name": net.Name(), "cniVersion": net.Version()}
	if prev != nil {
		inject["prevResult"] = prev
	}
	var errs []error
	for i := len(net.List.Plugins) - 1; i >= 0; i-- {
		p := net.List.Plugins[i]
		if contains(missing, p.Network.Type) {
			continue
		}
		conf, err := libcni.InjectConf(p, inject)
		if err != nil {
			return fmt.Errorf("plugin %s: build DEL config: %w", p.Network.Type, err)
		}
		if err := c.cni.DelNetwork(ctx, conf, rt); err != nil {
			errs = append(errs, fmt.Errorf("plugin type=%q failed (delete): %w", p.Network.Type, err))
		}
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// rebuildResult makes a result for DEL from what the attachment left:
// the addresses of its interface in the namespace, or, with the namespace
// gone, host-local's leases for the container. nil when neither exists.
func (c *Client) rebuildResult(net *Network, rt *libcni.RuntimeConf) types.Result {
	var ips []*types100.IPConfig
	itf := &types100.Interface{Name: rt.IfName, Sandbox: rt.NetNS}
	if rt.NetNS != "" {
		if addrs, mac, err := linkAddrs(rt.NetNS, rt.IfName); err == nil {
			itf.Mac = mac
			for _, a := range addrs {
				ips = append(ips, &types100.IPConfig{Address: *a, Interface: types100.Int(0)})
			}
		}
	}
	if len(ips) == 0 {
		for _, a := range leasedAddrs(net, rt.ContainerID, rt.IfName) {
			ips = append(ips, &types100.IPConfig{Address: *a, Interface: types100.Int(0)})
		}
	}
	if len(ips) == 0 {
		return nil
	}
	r := &types100.Result{CNIVersion: types100.ImplementedSpecVersion, Interfaces: []*types100.Interface{itf}, IPs: ips}
	out, err := r.GetAsVersion(net.Version())
	if err != nil {
		return nil
	}
	return out
}

// linkAddrs reads the global addresses of ifname inside the namespace at
// path. netlink's package functions open a socket per request on the
// calling thread, hence in the namespace.
func linkAddrs(path, ifname string) (out []*net.IPNet, mac string, err error) {
	err = netns.WithPath(path, func() error {
		link, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if a.IP.IsGlobalUnicast() {
				out = append(out, a.IPNet)
			}
		}
		mac = link.Attrs().HardwareAddr.String()
		return nil
	})
	return out, mac, err
}

// leasedAddrs finds host-local leases of the container in the network's
// host-local data dirs.
func leasedAddrs(nw *Network, containerID, ifname string) []*net.IPNet {
	var confs [][]byte
	for _, p := range nw.List.Plugins {
		confs = append(confs, p.Bytes)
	}
	hl := evidence.HostLocalFromPlugins(nw.Name(), confs)
	var out []*net.IPNet
	for _, dir := range hl.Dirs {
		leases, _ := evidence.ReadLeases(dir)
		for _, l := range leases {
			subnet, ok := hl.Contains(l.IP)
			if ok && l.ID == containerID && (l.IfName == "" || l.IfName == ifname) {
				out = append(out, &net.IPNet{IP: l.IP, Mask: subnet.Mask})
			}
		}
	}
	return out
}
