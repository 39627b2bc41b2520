package node

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost is a hostNetwork of fixed routes and addresses (no root).
type fakeHost struct {
	routes []hostRoute
	addrs  map[string][]string
}

func (f fakeHost) IPv4Routes(context.Context) ([]hostRoute, error) { return f.routes, nil }

func (f fakeHost) IPv4Addrs(_ context.Context, link string) ([]netip.Addr, error) {
	as, ok := f.addrs[link]
	if !ok {
		return nil, errNoInterface
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// TestAdvertiseAddr: the node advertises the first global IPv4 address of
// the default route's interface (the lowest metric's), or of
// client.network_interface; 127.0.0.1 with a reason when there is no
// default route or its interface has no such address; a named interface
// that is missing or has no IPv4 address is an error naming the setting.
func TestAdvertiseAddr(t *testing.T) {
	host := fakeHost{
		routes: []hostRoute{
			{Link: "eth0", Metric: 0},
			{Default: true, Link: "eth1", Metric: 200},
			{Default: true, Link: "eth0", Metric: 100},
		},
		addrs: map[string][]string{
			"lo":    {"127.0.0.1"},
			"eth0":  {"169.254.3.4", "192.0.2.10", "192.0.2.11"},
			"eth1":  {"198.51.100.1"},
			"ipv6":  {},
			"local": {"169.254.1.1"},
		},
	}
	tests := []struct {
		name      string
		host      fakeHost
		iface     string
		want, why string
		err       string
	}{
		{name: "default route", host: host, want: "192.0.2.10"},
		{name: "named", host: host, iface: "eth1", want: "198.51.100.1"},
		{name: "loopback", host: host, iface: "lo", want: "127.0.0.1"},
		{name: "no default route", host: fakeHost{routes: host.routes[:1], addrs: host.addrs}, want: "127.0.0.1", why: "no IPv4 default route"},
		{name: "default route without IPv4", host: fakeHost{routes: []hostRoute{{Default: true, Link: "ipv6"}}, addrs: host.addrs}, want: "127.0.0.1", why: "ipv6, the interface of the IPv4 default route, has no global IPv4 address"},
		{name: "missing", host: host, iface: "nope0", err: `client.network_interface (--client-network-interface) "nope0": no such interface`},
		{name: "named without IPv4", host: host, iface: "local", err: `client.network_interface (--client-network-interface) "local": the interface has no IPv4 address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip, why, err := advertiseAddr(context.Background(), tt.host, tt.iface)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want an ErrInvalidConfig with %q", err, tt.err)
				}
				return
			}
			if err != nil || ip != tt.want || !strings.Contains(why, tt.why) || (tt.why == "") != (why == "") {
				t.Errorf("= %q, %q, %v; want %q, %q", ip, why, err, tt.want, tt.why)
			}
		})
	}
}

// TestNetworkInterfaceSetting: client.network_interface, read from the
// host over netlink, becomes the node's HostIP and its attribute
// attr.unique.network.ip-address (what ${attr.unique.network.ip-address}
// interpolates); a missing interface refuses the node. Nothing is dialled.
func TestNetworkInterfaceSetting(t *testing.T) {
	ctx := context.Background()
	if ip, _, err := advertiseAddr(ctx, netlinkHost{}, ""); err != nil || !netip.MustParseAddr(ip).Is4() {
		t.Errorf("default route's address = %q, %v", ip, err)
	}
	tests := []struct {
		iface, want, err string
	}{
		{iface: "lo", want: "127.0.0.1"},
		{iface: "berthnope0", err: `client.network_interface (--client-network-interface) "berthnope0": no such interface`},
	}
	for _, tt := range tests {
		t.Run(tt.iface, func(t *testing.T) {
			cfg := Default()
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.LockDir = filepath.Join(t.TempDir(), "lock")
			cfg.Client.NetworkInterface = tt.iface
			n, err := New(ctx, cfg, Options{})
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("New = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close(ctx) })
			if n.HostIP != tt.want || n.Attrs["attr.unique.network.ip-address"] != tt.want || n.runnerOptions().HostIP != tt.want {
				t.Errorf("HostIP %q, attribute %q, runner's %q; want %q", n.HostIP, n.Attrs["attr.unique.network.ip-address"], n.runnerOptions().HostIP, tt.want)
			}
		})
	}
}
