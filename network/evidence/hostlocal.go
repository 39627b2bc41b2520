package evidence

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// The host-local IPAM plugin keeps one file per address in a directory per
// network, named by the address and holding "<container ID>\r\n<ifname>"
// (older versions: the ID alone), beside its "lock" and
// "last_reserved_ip.N" files.

// HostLocalDir is host-local's default data dir; a network's leases are
// in <dir>/<network name>.
const HostLocalDir = "/var/lib/cni/networks"

// HostLocal is what berth needs of a network's host-local configuration.
type HostLocal struct {
	// Dirs are the lease directories (one per distinct dataDir).
	Dirs []string
	// Subnets are every range's subnet.
	Subnets []*net.IPNet
}

// HostLocalFromPlugins reads the host-local IPAM configuration out of a
// network's plugin configurations (raw JSON, as in a conflist's
// "plugins"). Plugins without host-local IPAM add nothing.
func HostLocalFromPlugins(network string, plugins [][]byte) HostLocal {
	var c HostLocal
	seen := map[string]bool{}
	for _, b := range plugins {
		var p struct {
			IPAM struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
				Subnet  string `json:"subnet"`
				Ranges  [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		}
		if json.Unmarshal(b, &p) != nil || p.IPAM.Type != "host-local" {
			continue
		}
		base := p.IPAM.DataDir
		if base == "" {
			base = HostLocalDir
		}
		if d := filepath.Join(base, network); !seen[d] {
			seen[d] = true
			c.Dirs = append(c.Dirs, d)
		}
		subnets := []string{p.IPAM.Subnet}
		for _, set := range p.IPAM.Ranges {
			for _, r := range set {
				subnets = append(subnets, r.Subnet)
			}
		}
		for _, s := range subnets {
			if _, n, err := net.ParseCIDR(s); err == nil {
				c.Subnets = append(c.Subnets, n)
			}
		}
	}
	return c
}

// Contains reports whether ip is in one of the subnets, and which.
func (c HostLocal) Contains(ip net.IP) (*net.IPNet, bool) {
	for _, n := range c.Subnets {
		if n.Contains(ip) {
			return n, true
		}
	}
	return nil, false
}

// Lease is one reservation.
type Lease struct {
	Path   string
	Dir    string
	IP     net.IP
	ID     string
	IfName string
}

// ReadLeases reads a network's lease directory; a missing one has no
// leases. Files that are not leases (lock, last_reserved_ip.N) are
// skipped, and so is a lease released while it is read.
func ReadLeases(dir string) ([]Lease, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read host-local dir %s: %w", dir, err)
	}
	var out []Lease
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		ip := leaseIP(de.Name())
		if ip == nil {
			continue
		}
		p := filepath.Join(dir, de.Name())
		id, ifname, err := ReadLease(p)
		if err != nil || id == "" {
			continue
		}
		out = append(out, Lease{Path: p, Dir: dir, IP: ip, ID: id, IfName: ifname})
	}
	return out, nil
}

// ReadAllLeases reads the lease directory of every network under base
// (host-local's data dir, HostLocalDir by default).
func ReadAllLeases(base string) ([]Lease, error) {
	des, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read host-local data dir %s: %w", base, err)
	}
	var out []Lease
	var errs []error
	for _, de := range des {
		if !de.IsDir() {
			continue
		}
		ls, err := ReadLeases(filepath.Join(base, de.Name()))
		errs = append(errs, err)
		out = append(out, ls...)
	}
	return out, errors.Join(errs...)
}

// leaseIP is the address a lease file is named by, or nil.
func leaseIP(name string) net.IP {
	// host-local writes IPv6 addresses with ':'; some tools escape it as '_'.
	return net.ParseIP(strings.ReplaceAll(name, "_", ":"))
}

// ReadLease reads the holder of one lease file.
func ReadLease(path string) (id, ifname string, err error) {
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
