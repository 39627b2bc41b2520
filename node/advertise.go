package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/berth/berth/job/runner"
)

// hostRoute is one IPv4 route of the main table, as advertiseAddr needs it.
type hostRoute struct {
	Default bool // 0.0.0.0/0
	Link    string
	Metric  int
}

// hostNetwork reads the host's routes and addresses: the seam that lets
// the choice of advertiseAddr be tested without root (netlinkHost is the
// real one).
type hostNetwork interface {
	// IPv4Routes are the main table's IPv4 routes.
	IPv4Routes(ctx context.Context) ([]hostRoute, error)
	// IPv4Addrs are the IPv4 addresses of the interface link, in the
	// kernel's order; errNoInterface when there is no such interface.
	IPv4Addrs(ctx context.Context, link string) ([]netip.Addr, error)
}

var errNoInterface = errors.New("no such interface")

// advertiseAddr is the host address the node advertises (Nomad's
// fingerprinted network address, attr.unique.network.ip-address): the
// first IPv4 address of iface (global ones first, then loopback; never
// link-local), or, with iface "", of the interface of the IPv4 default
// route (lowest metric). Without a default route, or when its interface
// has no usable IPv4 address, it is runner.DefaultHostIP and why says
// why, for the log. A named interface that does not exist or has no
// usable IPv4 address is an ErrInvalidConfig naming client.network_interface.
func advertiseAddr(ctx context.Context, h hostNetwork, iface string) (ip, why string, err error) {
	if iface != "" {
		addrs, err := h.IPv4Addrs(ctx, iface)
		if err != nil {
			return "", "", fmt.Errorf("%w: %s %q: %w", ErrInvalidConfig, SettingName("client.network_interface"), iface, err)
		}
		a, ok := pickAddr(addrs)
		if !ok {
			return "", "", fmt.Errorf("%w: %s %q: the interface has no IPv4 address", ErrInvalidConfig, SettingName("client.network_interface"), iface)
		}
		return a.String(), "", nil
	}
	routes, err := h.IPv4Routes(ctx)
	if err != nil {
		return "", "", fmt.Errorf("read the IPv4 routes for the advertised address (or set %s): %w", SettingName("client.network_interface"), err)
	}
	var defaults []hostRoute
	for _, r := range routes {
		if r.Default && r.Link != "" {
			defaults = append(defaults, r)
		}
	}
	if len(defaults) == 0 {
		return runner.DefaultHostIP, "the host has no IPv4 default route", nil
	}
	sort.SliceStable(defaults, func(i, j int) bool { return defaults[i].Metric < defaults[j].Metric })
	link := defaults[0].Link
	addrs, err := h.IPv4Addrs(ctx, link)
	if err != nil {
		return "", "", fmt.Errorf("read the addresses of %s, the default route's interface (or set %s): %w", link, SettingName("client.network_interface"), err)
	}
	a, ok := pickAddr(addrs)
	if !ok || a.IsLoopback() {
		return runner.DefaultHostIP, fmt.Sprintf("%s, the interface of the IPv4 default route, has no global IPv4 address", link), nil
	}
	return a.String(), "", nil
}

// pickAddr is the first global unicast IPv4 address of addrs, else the
// first loopback one.
func pickAddr(addrs []netip.Addr) (netip.Addr, bool) {
	for _, want := range []func(netip.Addr) bool{netip.Addr.IsGlobalUnicast, netip.Addr.IsLoopback} {
		for _, a := range addrs {
			if a.Is4() && want(a) {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// netlinkHost is hostNetwork over rtnetlink. netlink's calls take no
// context: a cancelled ctx stops before the next call.
type netlinkHost struct{}

func (netlinkHost) IPv4Routes(ctx context.Context) ([]hostRoute, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list IPv4 routes: %w", err)
	}
	var out []hostRoute
	for _, r := range rs {
		idx := r.LinkIndex
		if idx == 0 && len(r.MultiPath) > 0 {
			idx = r.MultiPath[0].LinkIndex
		}
		hr := hostRoute{Default: r.Dst == nil || (r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)), Metric: r.Priority}
		if l, err := netlink.LinkByIndex(idx); err == nil {
			hr.Link = l.Attrs().Name
		}
		out = append(out, hr)
	}
	return out, nil
}

func isZeroMask(m []byte) bool {
	for _, b := range m {
		if b != 0 {
			return false
		}
	}
	return true
}

func (netlinkHost) IPv4Addrs(ctx context.Context, link string) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l, err := netlink.LinkByName(link)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, errNoInterface
		}
		return nil, fmt.Errorf("interface %s: %w", link, err)
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", link, err)
	}
	var out []netip.Addr
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
