// Package cni drives CNI plugin chains through libcni: it finds a network
// by name, runs ADD/CHECK/DEL/GC with a deadline on every call, and
// turns results into berth's status values.
package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
)

// DefaultConfDir is where CNI tools look for network configurations.
const DefaultConfDir = "/etc/cni/net.d"

// DefaultCacheDir is libcni's cache directory; sharing it with other CNI
// tools means their DEL of our attachments (and ours of theirs) finds the
// cached result.
const DefaultCacheDir = "/var/lib/cni"

// BerthPluginDir holds the reference plugins the setup script builds;
// it comes first so that a plugin fixed upstream wins over a distribution's
// older build of the same name.
const BerthPluginDir = "/opt/berth/cni/bin"

// DefaultPluginPath is searched in order for plugin binaries: berth's
// own build, the conventional dir, then Debian's package.
func DefaultPluginPath() []string {
	return []string{BerthPluginDir, "/opt/cni/bin", "/usr/lib/cni"}
}

var (
	// ErrNetworkNotFound: no configuration in the config dir has that name.
	ErrNetworkNotFound = errors.New("CNI network not found")
	// ErrCheckUnsupported: the network cannot be CHECKed (cniVersion below
	// 0.4.0, or disableCheck set).
	ErrCheckUnsupported = errors.New("CNI CHECK not supported by this network")
	// ErrGCUnsupported: the network's cniVersion is below 1.1.0 or disableGC is set.
	ErrGCUnsupported = errors.New("CNI GC not supported by this network")
	// ErrTimeout: a plugin did not answer before the call's deadline.
	ErrTimeout = errors.New("CNI plugin timed out")
)

// Network is a loaded network configuration list.
type Network struct {
	List *libcni.NetworkConfigList
	// File is where it was loaded from; empty for one built in memory or
	// taken from a cache.
	File string
}

// Name is the network's name.
func (n *Network) Name() string { return n.List.Name }

// Version is the network's cniVersion.
func (n *Network) Version() string { return n.List.CNIVersion }

// HasPlugin reports whether a plugin of type typ is in the list
// ("portmap": the network can publish ports).
func (n *Network) HasPlugin(typ string) bool {
	for _, p := range n.List.Plugins {
		if p.Network != nil && p.Network.Type == typ {
			return true
		}
	}
	return false
}

// Bytes is the configuration list as JSON, as plugins see it.
func (n *Network) Bytes() []byte { return n.List.Bytes }

// CheckSupport says whether CHECK can work, and why not.
func (n *Network) CheckSupport() error {
	ok, err := version.GreaterThanOrEqualTo(n.List.CNIVersion, "0.4.0")
	if err != nil {
		return fmt.Errorf("network %q: cniVersion %q: %w", n.Name(), n.List.CNIVersion, err)
	}
	if !ok {
		return fmt.Errorf("%w: network %q has cniVersion %s, CHECK needs 0.4.0 or later", ErrCheckUnsupported, n.Name(), n.List.CNIVersion)
	}
	if n.List.DisableCheck {
		return fmt.Errorf("%w: network %q sets disableCheck", ErrCheckUnsupported, n.Name())
	}
	return nil
}

// GCSupport says whether the GC verb can be sent, and why not.
func (n *Network) GCSupport() error {
	ok, err := version.GreaterThanOrEqualTo(n.List.CNIVersion, "1.1.0")
	if err != nil {
		return fmt.Errorf("network %q: cniVersion %q: %w", n.Name(), n.List.CNIVersion, err)
	}
	if !ok {
		return fmt.Errorf("%w: network %q has cniVersion %s, GC needs 1.1.0 or later", ErrGCUnsupported, n.Name(), n.List.CNIVersion)
	}
	if n.List.DisableGC {
		return fmt.Errorf("%w: network %q sets disableGC", ErrGCUnsupported, n.Name())
	}
	return nil
}

// ParseNetwork reads a configuration list, or a single plugin
// configuration (which is converted into a list of one), from JSON.
func ParseNetwork(b []byte, source string) (*Network, error) {
	var probe struct {
		Plugins json.RawMessage `json:"plugins"`
		Type    string          `json:"type"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("parse CNI config %s: %w", source, err)
	}
	if probe.Plugins != nil {
		l, err := libcni.NetworkConfFromBytes(b)
		if err != nil {
			return nil, fmt.Errorf("parse CNI config list %s: %w", source, err)
		}
		if l.Name == "" {
			return nil, fmt.Errorf("parse CNI config list %s: missing \"name\"", source)
		}
		return &Network{List: l, File: source}, nil
	}
	if probe.Type == "" {
		return nil, fmt.Errorf("parse CNI config %s: neither \"plugins\" (a list) nor \"type\" (a single plugin) is set", source)
	}
	c, err := libcni.NetworkPluginConfFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("parse CNI config %s: %w", source, err)
	}
	if c.Network.Name == "" {
		return nil, fmt.Errorf("parse CNI config %s: missing \"name\"", source)
	}
	// A single plugin is a list of one, as CNI tools read it.
	wrapped, err := json.Marshal(map[string]any{
		"cniVersion": c.Network.CNIVersion,
		"name":       c.Network.Name,
		"plugins":    []json.RawMessage{b},
	})
	if err != nil {
		return nil, fmt.Errorf("convert CNI config %s to a list: %w", source, err)
	}
	l, err := libcni.NetworkConfFromBytes(wrapped)
	if err != nil {
		return nil, fmt.Errorf("convert CNI config %s to a list: %w", source, err)
	}
	return &Network{List: l, File: source}, nil
}

// ConfigFile is one file of the config dir and what became of it.
type ConfigFile struct {
	Path    string   `json:"path"`
	Network *Network `json:"-"`
	Err     error    `json:"-"`
}

// ReadConfigDir loads every .conflist, .conf and .json file of dir, sorted
// by file name as CNI tools do. A file that does not parse is returned with
// its error rather than hiding the others.
func ReadConfigDir(ctx context.Context, dir string) ([]ConfigFile, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read CNI config dir %s: %w", dir, err)
	}
	var names []string
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		switch filepath.Ext(de.Name()) {
		case ".conflist", ".conf", ".json":
			names = append(names, de.Name())
		}
	}
	sort.Strings(names)
	out := make([]ConfigFile, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, n)
		cf := ConfigFile{Path: p}
		b, err := os.ReadFile(p)
		if err != nil {
			cf.Err = fmt.Errorf("read %s: %w", p, err)
		} else {
			cf.Network, cf.Err = ParseNetwork(b, p)
		}
		out = append(out, cf)
	}
	return out, nil
}

// LoadNetwork finds the network called name in dir. The first file (in
// name order) that defines it wins, as with libcni; files that fail to
// parse are named in the error when the network is not found, since one of
// them may be the one meant.
func LoadNetwork(ctx context.Context, dir, name string) (*Network, error) {
	files, err := ReadConfigDir(ctx, dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %q: config dir %s does not exist (run the setup script or pass --cni-config-dir)", ErrNetworkNotFound, name, dir)
		}
		return nil, err
	}
	var broken []string
	var known []string
	for _, f := range files {
		if f.Err != nil {
			broken = append(broken, f.Err.Error())
			continue
		}
		if f.Network.Name() == name {
			return f.Network, nil
		}
		known = append(known, f.Network.Name())
	}
	msg := fmt.Sprintf("%q in %s", name, dir)
	if len(known) > 0 {
		msg += fmt.Sprintf(" (networks there: %s)", strings.Join(known, ", "))
	} else {
		msg += " (no valid network configurations there)"
	}
	if len(broken) > 0 {
		msg += "; files that failed to parse: " + strings.Join(broken, "; ")
	}
	return nil, fmt.Errorf("%w: %s", ErrNetworkNotFound, msg)
}
