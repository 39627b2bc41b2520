package runner

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"

	"github.com/berth/berth/network/cni"
)

// BridgeConfig describes the network berth generates for `mode = "bridge"`,
// as Nomad's bridge mode does: loopback, bridge with host-local IPAM,
// firewall and portmap.
type BridgeConfig struct {
	// Network is the CNI network name (default "berth").
	Network string
	// Iface is the bridge interface (default "berth0").
	Iface string
	// Subnet is the IPv4 subnet handed out (default 10.199.1.0/24).
	Subnet string
}

// DefaultBridge is berth's bridge network.
func DefaultBridge() BridgeConfig {
	return BridgeConfig{Network: "berth", Iface: "berth0", Subnet: "10.199.1.0/24"}
}

func (b BridgeConfig) withDefaults() BridgeConfig {
	d := DefaultBridge()
	if b.Network == "" {
		b.Network = d.Network
	}
	if b.Iface == "" {
		b.Iface = d.Iface
	}
	if b.Subnet == "" {
		b.Subnet = d.Subnet
	}
	return b
}

// ConfList builds the configuration list.
func (b BridgeConfig) ConfList() (*cni.Network, error) {
	b = b.withDefaults()
	if _, _, err := net.ParseCIDR(b.Subnet); err != nil {
		return nil, fmt.Errorf("bridge subnet %q: %w", b.Subnet, err)
	}
	if len(b.Iface) > 15 {
		return nil, fmt.Errorf("bridge iface %q is longer than 15 characters (a Linux interface name)", b.Iface)
	}
	conf := map[string]any{
		"cniVersion": "1.1.0",
		"name":       b.Network,
		"plugins": []map[string]any{
			{
				"type": "bridge", "bridge": b.Iface, "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]any{{{"subnet": b.Subnet}}},
					"routes": []map[string]any{{"dst": "0.0.0.0/0"}},
				},
			},
			{"type": "firewall", "backend": "iptables"},
			{"type": "portmap", "capabilities": map[string]any{"portMappings": true}, "snat": true},
			{"type": "loopback"},
		},
	}
	raw, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	return cni.ParseNetwork(raw, "berth bridge network")
}

// freePort finds a port in Nomad's dynamic range that nothing listens on.
func freePort() (int, error) {
	for i := 0; i < 100; i++ {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("100 random ports in 20000-32000 were busy")
}
