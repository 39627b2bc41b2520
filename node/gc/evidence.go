package gc

import (
	"context"
	"net"
	"sort"

	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
)

// This file is what gc makes of the host's evidence (package evidence
// reads it). Nothing here changes the host.

// network is one of berth's networks as gc sees it.
type network struct {
	name string
	// conf is the configuration to DEL unknown leases and send GC with:
	// the config dir's, else a record's, else nil.
	conf *cni.Network
	// leaseDirs are host-local's directories for this network.
	leaseDirs []string
	subnets   []*net.IPNet
	// berths: berth uses the network (its config dir, records, cache
	// entries, or the caller named it), so IDs nobody knows in it are
	// berth's leftovers. owner: the Owner that uses it, which judges the
	// IDs it claims; IDs it does not claim are left alone unless berths.
	berths bool
	owner  Owner
}

// hostLocal reads where the network's host-local IPAM keeps leases and
// which subnets it hands out.
func hostLocal(conf *cni.Network) (dirs []string, subnets []*net.IPNet) {
	var plugins [][]byte
	for _, p := range conf.List.Plugins {
		plugins = append(plugins, p.Bytes)
	}
	c := evidence.HostLocalFromPlugins(conf.Name(), plugins)
	return c.Dirs, c.Subnets
}

// readRules takes a snapshot of the CNI rules of both families.
func readRules(ctx context.Context) ([]evidence.Rule, error) {
	sets, err := evidence.ReadRulesets(ctx)
	return evidence.CNIRules(sets), err
}

// ruleOf reports whether a CNI rule is one of the network's: marked with
// its name, or a firewall rule for an address of its subnets.
func ruleOf(rl evidence.Rule, nw *network) bool {
	if n, _, ok := evidence.ParseMarker(rl.Line); ok && n == nw.name {
		return true
	}
	ip, ok := evidence.FirewallIP(rl.Line)
	return ok && inSubnets(ip, nw.subnets)
}

func inSubnets(ip net.IP, subnets []*net.IPNet) bool {
	for _, s := range subnets {
		if s.Contains(ip) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
