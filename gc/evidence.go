package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/berth/berth/cni"
	"github.com/berth/berth/internal/hostlocal"
)

// This file reads the host's evidence: libcni's cache, host-local's
// leases and the CNI iptables rules. Nothing here changes the host.

// berthArg is the CNI_ARGS key attach.Manager puts on every attachment;
// a cache entry carrying it is berth's.
const berthArg = "BERTH_ID"

// cacheEntry is one file of libcni's results cache.
type cacheEntry struct {
	File        string
	ContainerID string
	Network     string
	IfName      string
	NetNS       string
	// Berth is set when the entry's CNI_ARGS carry BERTH_ID.
	Berth bool
	// Store is the entry's BERTH_STORE: which berth (data dir) made it.
	Store string
}

// cacheFile is the part of libcni's cachedInfo (libcni/api.go) gc reads.
type cacheFile struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	NetNS       string      `json:"netns"`
	CniArgs     [][2]string `json:"cniArgs"`
}

// readCache reads every entry of <cacheDir>/results. Files that are not
// libcni cache entries are skipped, as libcni itself does.
func readCache(cacheDir string) ([]cacheEntry, error) {
	dir := filepath.Join(cacheDir, "results")
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read CNI cache %s: %w", dir, err)
	}
	var out []cacheEntry
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		p := filepath.Join(dir, de.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue // removed while we read
		}
		e, ok := parseCacheEntry(b)
		if !ok {
			continue
		}
		e.File = p
		out = append(out, e)
	}
	return out, nil
}

func parseCacheEntry(b []byte) (cacheEntry, bool) {
	var f cacheFile
	if json.Unmarshal(b, &f) != nil || f.Kind != "cniCacheV1" || f.ContainerID == "" || f.NetworkName == "" || f.IfName == "" {
		return cacheEntry{}, false
	}
	e := cacheEntry{ContainerID: f.ContainerID, Network: f.NetworkName, IfName: f.IfName, NetNS: f.NetNS}
	for _, kv := range f.CniArgs {
		if kv[0] == berthArg && kv[1] != "" {
			e.Berth = true
		}
		if kv[0] == "BERTH_STORE" {
			e.Store = kv[1]
		}
	}
	return e, true
}

// network is one of berth's networks as gc sees it.
type network struct {
	name string
	// conf is the configuration to DEL unknown leases and send GC with:
	// the config dir's, else a record's, else nil.
	conf *cni.Network
	// leaseDirs are host-local's directories for this network.
	leaseDirs []string
	subnets   []*net.IPNet
}

// hostLocal reads where the network's host-local IPAM keeps leases and
// which subnets it hands out.
func hostLocal(conf *cni.Network) (dirs []string, subnets []*net.IPNet) {
	var plugins [][]byte
	for _, p := range conf.List.Plugins {
		plugins = append(plugins, p.Bytes)
	}
	c := hostlocal.FromPlugins(conf.Name(), plugins)
	return c.Dirs, c.Subnets
}

// iptRule is one "-A" line of iptables-save or ip6tables-save.
type iptRule struct {
	Tool  string
	Table string
	Line  string
}

// readIptables lists the rules that mention CNI, from both families.
func readIptables(ctx context.Context) ([]iptRule, error) {
	var out []iptRule
	var errs []error
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		b, err := exec.CommandContext(ctx, tool).Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tool, err))
			continue
		}
		table := ""
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, "-A ") && strings.Contains(line, "CNI"):
				out = append(out, iptRule{Tool: tool, Table: table, Line: line})
			}
		}
	}
	return out, errors.Join(errs...)
}

// markerRe matches the comment the bridge (ipMasq) and portmap plugins put
// on one attachment's rules, as iptables-save quotes it:
// name: \"<network>\" id: \"<container ID>\".
var markerRe = regexp.MustCompile(`name: \\"([^"\\]+)\\" id: \\"([^"\\]+)\\"`)

// parseMarker returns the network and container ID a rule is marked with.
func parseMarker(line string) (network, id string, ok bool) {
	m := markerRe.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// firewallRe matches the two per-address rules the firewall plugin's
// iptables backend puts in CNI-FORWARD; they carry no marker, only the
// address.
var firewallRe = regexp.MustCompile(`^-A CNI-FORWARD -[ds] ([0-9A-Fa-f.:]+)/(?:32|128) .*-j ACCEPT$`)

func parseFirewallIP(line string) (net.IP, bool) {
	m := firewallRe.FindStringSubmatch(line)
	if m == nil {
		return nil, false
	}
	ip := net.ParseIP(m[1])
	return ip, ip != nil
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
