package parity_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// The network case's host ports and CNI networks by system: the two run
// side by side, so they differ; normaliseNetwork maps them back to one
// shape.
var (
	networkPortBase = map[string]int{"nomad": 19400, "berth": 19500}
	// cniSubnet is the subnet of the case's cni/<name> network.
	cniSubnet = map[string]string{"nomad": "10.199.194.0/24", "berth": "10.199.195.0/24"}
	// bridgeSubnet is the subnet of the system's bridge mode.
	bridgeSubnet = map[string]string{"nomad": nomadSubnet, "berth": berthSubnet}
)

// networkVars are the network case's variables on system; host_netns is
// this test's namespace (the host's), where the probe connects from too.
func networkVars(system string) []string {
	return []string{
		fmt.Sprintf("port_base=%d", networkPortBase[system]),
		"cni_network=" + cniNetwork(system),
		fmt.Sprintf("host_netns=/proc/%d/ns/net", os.Getpid()),
	}
}

func cniNetwork(system string) string { return "parity-net-" + system }

// cniNetworks is the system's CNI config dir content: the network case's
// bridge+portmap network (nomadtest.Conflist), on a bridge removed when t
// ends.
func cniNetworks(t *testing.T, system string) map[string][]byte {
	name, bridge := cniNetwork(system), "btpn"+system[:1]+testenv.RandSuffix(4)
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(name, bridge) })
	return map[string][]byte{name: nomadtest.Conflist(name, bridge, cniSubnet[system])}
}

var (
	ipv4RE = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	portRE = regexp.MustCompile(`\b\d{4,5}\b`)
)

// normaliseNetwork gives addresses and ports their shape: an address of
// the allocation's subnet (cni or bridge) is alloc-ip (its first one
// gateway-ip), one of the host's interfaces host-ip (loopback stays
// 127.0.0.1: it is not reachable from another namespace); a port of the
// job file is <base+N>, a dynamic one <host-port-LABEL> after the label
// whose NOMAD_HOST_PORT it is.
func normaliseNetwork(system string, f facts) facts {
	var subnets []netip.Prefix
	for _, s := range []string{cniSubnet[system], bridgeSubnet[system]} {
		subnets = append(subnets, netip.MustParsePrefix(s))
	}
	host := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				host[ipn.IP.String()] = true
			}
		}
	}
	ip := func(s string) string {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return s
		}
		for _, p := range subnets {
			if p.Contains(a) {
				if a == p.Masked().Addr().Next() {
					return "gateway-ip"
				}
				return "alloc-ip"
			}
		}
		if host[s] {
			return "host-ip"
		}
		return s
	}
	base := networkPortBase[system]
	dynamic := map[string]string{}
	for k, v := range f {
		if l, ok := strings.CutPrefix(k, "env.NOMAD_HOST_PORT_"); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 20000 && n < 32000 {
				dynamic[v] = "<host-port-" + l + ">"
			}
		}
	}
	port := func(s string) string {
		if d, ok := dynamic[s]; ok {
			return d
		}
		if n, _ := strconv.Atoi(s); n >= base && n < base+100 {
			return fmt.Sprintf("<base+%d>", n-base)
		}
		return s
	}
	out := make(facts, len(f))
	for k, v := range f {
		v = ipv4RE.ReplaceAllStringFunc(v, ip)
		out[k] = portRE.ReplaceAllStringFunc(v, port)
	}
	return out
}
