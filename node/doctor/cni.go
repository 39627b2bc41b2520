package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berth/berth/network/cni"
)

// DebianPluginDir is where Debian's containernetworking-plugins package
// installs its plugins.
const DebianPluginDir = "/usr/lib/cni"

// PortmapCheckWarning is the known breakage of Debian 12's portmap 1.1.1.
const PortmapCheckWarning = "CHECK will fail on every attachment with port mappings (containernetworking/plugins#819)"

// PortmapFix tells how to get a portmap whose CHECK works.
const PortmapFix = "put the reference plugins first in --cni-path (scripts/setup.sh builds them into " + cni.BerthPluginDir + ")"

// pluginInfo is what the plugin path says about one plugin type.
type pluginInfo struct {
	path      string
	supported []string
	err       error
}

// pluginProber asks each plugin type once per doctor run.
type pluginProber struct {
	c     *cni.Client
	cache map[string]*pluginInfo
}

func (p *pluginProber) probe(ctx context.Context, typ string) *pluginInfo {
	if pi, ok := p.cache[typ]; ok {
		return pi
	}
	pi := &pluginInfo{}
	p.cache[typ] = pi
	pi.path, pi.err = p.c.FindPlugin(typ)
	if pi.err != nil {
		return pi
	}
	v, err := p.c.PluginVersions(ctx, typ)
	if err != nil {
		pi.err = err
		return pi
	}
	pi.supported = v.SupportedVersions()
	return pi
}

// CheckCNI checks every configuration in confDir: it parses; each plugin
// it names (IPAM included) is in c's plugin path and supports the
// configuration's cniVersion (asked with VERSION); whether CHECK and GC
// can be used; and known-broken plugin builds.
func CheckCNI(ctx context.Context, confDir string, c *cni.Client) []Check {
	files, err := cni.ReadConfigDir(ctx, confDir)
	if err != nil {
		ck := Check{Name: "cni/config-dir", Status: StatusWarn, Message: err.Error(),
			Fix: fmt.Sprintf("create %s with a network configuration (scripts/setup.sh installs the examples) or pass --cni-config-dir; only bridge-mode jobs work without one", confDir)}
		if !errors.Is(err, os.ErrNotExist) {
			ck.Status = StatusFail
			ck.Fix = fmt.Sprintf("make %s readable by berth", confDir)
		}
		return []Check{ck}
	}
	out := []Check{{Name: "cni/config-dir", Status: StatusOK,
		Message: fmt.Sprintf("%s: %d configuration file(s); plugin path %s", confDir, len(files), strings.Join(c.PluginPath(), ":"))}}
	if len(files) == 0 {
		out[0].Status = StatusWarn
		out[0].Message = fmt.Sprintf("%s has no .conflist, .conf or .json files", confDir)
		out[0].Fix = "scripts/setup.sh installs example networks; only bridge-mode jobs work without one"
		return out
	}
	p := &pluginProber{c: c, cache: map[string]*pluginInfo{}}
	seen := map[string]string{}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return append(out, Check{Name: "cni", Status: StatusSkip, Message: err.Error()})
		}
		if f.Err != nil {
			out = append(out, Check{Name: "cni/" + filepath.Base(f.Path), Status: StatusFail, Message: f.Err.Error(),
				Fix: fmt.Sprintf("fix the JSON of %s or move it out of %s", f.Path, confDir)})
			continue
		}
		n := f.Network
		if first, dup := seen[n.Name()]; dup {
			out = append(out, Check{Name: "cni/" + n.Name(), Status: StatusWarn,
				Message: fmt.Sprintf("%s defines network %q again; %s comes first and wins, this one is ignored", f.Path, n.Name(), first),
				Fix:     fmt.Sprintf("rename the network in %s or remove the file", f.Path)})
			continue
		}
		seen[n.Name()] = f.Path
		out = append(out, checkNetwork(ctx, p, n)...)
	}
	return out
}

// pluginTypes lists the chain's plugin types and their IPAM plugins, in
// order, without repeats.
func pluginTypes(n *cni.Network) []string {
	var out []string
	for _, pc := range n.List.Plugins {
		if pc.Network == nil {
			continue
		}
		for _, t := range []string{pc.Network.Type, pc.Network.IPAM.Type} {
			if t != "" && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

func checkNetwork(ctx context.Context, p *pluginProber, n *cni.Network) []Check {
	prefix := "cni/" + n.Name()
	var out []Check

	plugins := Check{Name: prefix + "/plugins"}
	var problems, fixes, okList, tooOld []string
	for _, typ := range pluginTypes(n) {
		pi := p.probe(ctx, typ)
		switch {
		case pi.err != nil && pi.path == "":
			problems = append(problems, fmt.Sprintf("plugin %q not found in %s", typ, strings.Join(p.c.PluginPath(), ":")))
			fixes = append(fixes, fmt.Sprintf("install %q into a --cni-path directory (scripts/setup.sh builds the reference plugins into %s) or correct \"type\" in %s", typ, cni.BerthPluginDir, n.File))
		case pi.err != nil:
			problems = append(problems, fmt.Sprintf("plugin %s does not answer VERSION: %v", pi.path, pi.err))
			fixes = append(fixes, fmt.Sprintf("replace %s with a working build (scripts/setup.sh builds the reference plugins into %s)", pi.path, cni.BerthPluginDir))
		case !slices.Contains(pi.supported, n.Version()):
			problems = append(problems, fmt.Sprintf("plugin %s supports spec versions %s, not the network's cniVersion %s", pi.path, strings.Join(pi.supported, ", "), n.Version()))
			tooOld = append(tooOld, typ)
		default:
			okList = append(okList, pi.path)
		}
	}
	if len(tooOld) > 0 {
		fixes = append(fixes, fmt.Sprintf("use builds of %s that support cniVersion %s (put %s first in --cni-path; its plugins support up to 1.1.0) or set cniVersion in %s to a version they all support",
			strings.Join(tooOld, ", "), n.Version(), cni.BerthPluginDir, n.File))
	}
	if len(problems) > 0 {
		plugins.Status = StatusFail
		plugins.Message = fmt.Sprintf("network %q (%s): %s", n.Name(), n.File, strings.Join(problems, "; "))
		plugins.Fix = strings.Join(fixes, "; ")
	} else {
		plugins.Status = StatusOK
		plugins.Message = fmt.Sprintf("network %q (cniVersion %s): %s", n.Name(), n.Version(), strings.Join(okList, ", "))
	}
	out = append(out, plugins)

	checkErr := n.CheckSupport()
	ck := Check{Name: prefix + "/check", Status: StatusOK, Message: fmt.Sprintf("CHECK supported (cniVersion %s)", n.Version())}
	if checkErr != nil {
		ck.Status = StatusWarn
		ck.Message = checkErr.Error() + ": berth cannot verify an existing namespace before reusing it"
		ck.Fix = fmt.Sprintf("set cniVersion to 0.4.0 or later (1.1.0 with the reference plugins) and drop disableCheck in %s", n.File)
	}
	out = append(out, ck)

	gc := Check{Name: prefix + "/gc", Status: StatusOK}
	if err := n.GCSupport(); err != nil {
		gc.Message = err.Error() + "; berth gc still DELs cached attachments it does not know, but plugins get no GC verb"
	} else {
		gc.Message = fmt.Sprintf("GC supported (cniVersion %s; of the reference plugins only host-local acts on it)", n.Version())
	}
	out = append(out, gc)

	if checkErr == nil {
		for _, pc := range n.List.Plugins {
			if pc.Network == nil || pc.Network.Type != "portmap" || !pc.Network.Capabilities["portMappings"] {
				continue
			}
			pi := p.probe(ctx, "portmap")
			if pi.err != nil {
				break // reported with the plugins
			}
			pm := Check{Name: prefix + "/portmap", Status: StatusOK, Message: fmt.Sprintf("portmap %s supports %s", pi.path, strings.Join(pi.supported, ", "))}
			if KnownBrokenPortmap(pi.path, pi.supported) {
				pm.Status = StatusWarn
				pm.Message = fmt.Sprintf("network %q uses %s: %s", n.Name(), pi.path, PortmapCheckWarning)
				pm.Fix = PortmapFix
			}
			out = append(out, pm)
			break
		}
	}
	return out
}

// KnownBrokenPortmap recognises the portmap build whose CHECK fails on
// every healthy IPv4 attachment with port mappings: Debian's package, or
// (installed elsewhere) a build that answers VERSION with spec versions up
// to 1.0.0 and without 1.1.0, as plugins before the fix do.
func KnownBrokenPortmap(path string, supported []string) bool {
	if filepath.Dir(path) == DebianPluginDir {
		return true
	}
	return slices.Contains(supported, "1.0.0") && !slices.Contains(supported, "1.1.0")
}
