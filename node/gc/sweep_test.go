package gc

import (
	"context"
	"net"
	"testing"

	"github.com/berth/berth/network/evidence"
)

// TestRuleOfAndStaleRules covers step 5's choice of rules, without iptables.
func TestRuleOfAndStaleRules(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("10.199.117.0/24")
	nw := &network{name: "n", subnets: []*net.IPNet{subnet}, leaseDirs: []string{t.TempDir()}, berths: true}
	mark := func(network, id string) string {
		return `-A POSTROUTING -s 10.199.117.9/32 -m comment --comment "` + evidence.Marker(network, id) + `" -j CNI-x`
	}
	rules := []evidence.Rule{
		{Table: "nat", Chain: "POSTROUTING", Line: mark("n", "known")},
		{Table: "nat", Chain: "POSTROUTING", Line: mark("n", "unknown")},
		{Table: "nat", Chain: "POSTROUTING", Line: mark("n", "reclaimed")},
		{Table: "nat", Chain: "POSTROUTING", Line: mark("other", "unknown")},
		{Table: "filter", Chain: "CNI-FORWARD", Line: "-A CNI-FORWARD -s 10.199.117.7/32 -j ACCEPT"},
		{Table: "filter", Chain: "CNI-FORWARD", Line: "-A CNI-FORWARD -s 10.199.118.7/32 -j ACCEPT"},
	}
	wantOf := []bool{true, true, true, false, true, false}
	for i, rl := range rules {
		if got := ruleOf(rl, nw); got != wantOf[i] {
			t.Errorf("ruleOf(%q) = %v, want %v", rl.Line, got, wantOf[i])
		}
	}

	r := &run{handled: map[string]bool{handledKey("n", "reclaimed"): true}}
	st := &netState{nw: nw, host: &hostView{nets: map[string]*network{"n": nw}}, known: map[string]bool{"known": true}}
	s := r.findStaleRules(context.Background(), st, rules)
	if len(s.byID) != 1 || len(s.byID["unknown"]) != 1 || len(s.firewall) != 1 {
		t.Fatalf("stale rules: %v, firewall %v", s.byID, s.firewall)
	}
	items := s.items("n")
	if len(items) != 2 || items[0].ID != "unknown" || items[0].Path != "nat/POSTROUTING" || items[1].ID != "10.199.117.7" {
		t.Errorf("items %+v", items)
	}
	match := s.match("n")
	for i, want := range []bool{false, true, false, false, true, false} {
		if got := match(rules[i].Line); got != want {
			t.Errorf("match(%q) = %v, want %v", rules[i].Line, got, want)
		}
	}
}
