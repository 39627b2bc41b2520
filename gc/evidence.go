package gc

import (
	"bufio"
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
	"github.com/berth/berth/hostclean"
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

// lease is one host-local reservation: a file named by the address that
// holds the container ID and the interface name.
type lease struct {
	Path   string
	Dir    string
	IP     net.IP
	ID     string
	IfName string
}

// readLeases reads a host-local network directory; a missing one is empty.
func readLeases(dir string) ([]lease, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read host-local dir %s: %w", dir, err)
	}
	var out []lease
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		ip := parseLeaseName(de.Name())
		if ip == nil {
			continue // lock, last_reserved_ip.N
		}
		p := filepath.Join(dir, de.Name())
		id, ifname, err := readLease(p)
		if err != nil {
			continue // released while we read
		}
		out = append(out, lease{Path: p, Dir: dir, IP: ip, ID: id, IfName: ifname})
	}
	return out, nil
}

func parseLeaseName(name string) net.IP {
	// host-local writes IPv6 addresses with ':'; some tools escape it as '_'.
	return net.ParseIP(strings.ReplaceAll(name, "_", ":"))
}

// readLease returns the two lines of a lease file: "<id>\r\n<ifname>"
// (older host-local wrote the ID alone).
func readLease(path string) (id, ifname string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if sc.Scan() {
		id = strings.TrimSpace(sc.Text())
	}
	if sc.Scan() {
		ifname = strings.TrimSpace(sc.Text())
	}
	return id, ifname, sc.Err()
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
	seen := map[string]bool{}
	for _, p := range conf.List.Plugins {
		var c struct {
			IPAM struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
				Subnet  string `json:"subnet"`
				Ranges  [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		}
		if json.Unmarshal(p.Bytes, &c) != nil || c.IPAM.Type != "host-local" {
			continue
		}
		base := c.IPAM.DataDir
		if base == "" {
			base = hostclean.HostLocalDir
		}
		d := filepath.Join(base, conf.Name())
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
		ss := []string{c.IPAM.Subnet}
		for _, set := range c.IPAM.Ranges {
			for _, rg := range set {
				ss = append(ss, rg.Subnet)
			}
		}
		for _, s := range ss {
			if _, n, err := net.ParseCIDR(s); err == nil {
				subnets = append(subnets, n)
			}
		}
	}
	return dirs, subnets
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
