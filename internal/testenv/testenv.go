// Package testenv gives berth's integration tests what they share: a root
// check, unique names, throw-away CNI networks on test subnets, and a leak
// check of the host around a whole test binary.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireRoot skips t unless it runs as root (CI always does).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veths and iptables rules (CI runs as root)")
	}
}

// RandSuffix returns n random hex characters.
func RandSuffix(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)[:n]
}

// PluginDirs are the plugin dirs of berth's own v1.10.0 build and of
// Debian's package, for tests that run against one of them.
const (
	ReferencePlugins = "/opt/berth/cni/bin"
	DebianPlugins    = "/usr/lib/cni"
)

// RequirePlugins skips unless dir holds the plugins.
func RequirePlugins(t testing.TB, dir string, plugins ...string) {
	t.Helper()
	for _, p := range plugins {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Skipf("plugin %s missing in %s: run scripts/setup.sh", p, dir)
		}
	}
}

// NetworkSpec describes a test network.
type NetworkSpec struct {
	// Name of the network; a unique one is made when empty.
	Name string
	// Subnet, e.g. "10.199.12.0/24"; must be inside 10.199.0.0/16.
	Subnet string
	// CNIVersion defaults to 1.1.0.
	CNIVersion string
	// Portmap and Firewall add those plugins after bridge; Loopback adds
	// loopback last.
	Portmap, Firewall, Loopback bool
	// Extra plugins appended at the end (raw JSON objects).
	Extra []map[string]any
}

// Network is a test network written into its own config dir.
type Network struct {
	Name    string
	Bridge  string
	Subnet  string
	ConfDir string
	File    string
}

// NewNetwork writes a bridge+host-local conflist (plus the plugins spec
// asks for) into a temporary config dir, and registers a cleanup that
// removes what the bridge plugin leaves by design: the bridge itself and
// the network's host-local directory. Everything per-attachment must have
// been removed by the code under test; the leak check says if not.
func NewNetwork(t testing.TB, spec NetworkSpec) *Network {
	t.Helper()
	if !strings.HasPrefix(spec.Subnet, "10.199.") {
		t.Fatalf("test subnet %q must be inside 10.199.0.0/16", spec.Subnet)
	}
	suffix := RandSuffix(6)
	n := &Network{Name: spec.Name, Subnet: spec.Subnet, Bridge: "btbr" + suffix}
	if n.Name == "" {
		n.Name = "btnet-" + suffix
	}
	if spec.CNIVersion == "" {
		spec.CNIVersion = "1.1.0"
	}
	plugins := []map[string]any{{
		"type":        "bridge",
		"bridge":      n.Bridge,
		"isGateway":   true,
		"ipMasq":      true,
		"hairpinMode": true,
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": [][]map[string]any{{{"subnet": spec.Subnet}}},
			"routes": []map[string]any{{"dst": "0.0.0.0/0"}},
		},
	}}
	if spec.Portmap {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}, "snat": true})
	}
	if spec.Firewall {
		plugins = append(plugins, map[string]any{"type": "firewall", "backend": "iptables"})
	}
	if spec.Loopback {
		plugins = append(plugins, map[string]any{"type": "loopback"})
	}
	plugins = append(plugins, spec.Extra...)
	b, err := json.MarshalIndent(map[string]any{"cniVersion": spec.CNIVersion, "name": n.Name, "plugins": plugins}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	n.ConfDir = t.TempDir()
	n.File = filepath.Join(n.ConfDir, n.Name+".conflist")
	if err := os.WriteFile(n.File, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveNetworkLeftovers(n.Name, n.Bridge) })
	return n
}

// RemoveNetworkLeftovers deletes what a bridge network keeps after its
// last attachment is gone: the bridge and the host-local directory.
func RemoveNetworkLeftovers(name, bridge string) {
	// Either may be gone already (the code under test removed it); the
	// leak check reports what stays.
	_ = exec.Command("ip", "link", "del", bridge).Run()
	_ = os.RemoveAll(filepath.Join("/var/lib/cni/networks", name))
}

// Context returns a context that ends with the test (or after d).
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Run runs a command and fails the test with its output on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Must is for test set-up steps that cannot fail.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
