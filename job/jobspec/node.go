package jobspec

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// AttrHostIP is Nomad's attribute of the node's advertised address
// (its network fingerprint's): the host address of NOMAD_IP_<label>.
const AttrHostIP = "attr.unique.network.ip-address"

// LocalNode describes this machine with Nomad's attribute names, for
// constraints: attr.unique.hostname, attr.kernel.name ("linux"),
// attr.kernel.version, attr.kernel.arch, attr.cpu.arch (Go's GOARCH, as
// Nomad), attr.cpu.numcores, attr.os.name and attr.os.version (from
// /etc/os-release), node.unique.name (the hostname), node.unique.id (the
// machine ID), node.datacenter ("dc1"), node.region ("global") and
// node.class (""). The node adds attr.unique.network.ip-address
// (AttrHostIP), the address it advertises. Attributes it cannot read are left out, so constraints
// on them fail as "not set" instead of matching a made-up value.
func LocalNode() NodeAttrs {
	n := NodeAttrs{
		"attr.cpu.arch":     runtime.GOARCH,
		"attr.cpu.numcores": strconv.Itoa(runtime.NumCPU()),
		"node.datacenter":   "dc1",
		"node.region":       "global",
		"node.class":        "",
	}
	if host, err := os.Hostname(); err == nil {
		n["attr.unique.hostname"] = host
		n["node.unique.name"] = host
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		n["attr.kernel.name"] = strings.ToLower(unix.ByteSliceToString(u.Sysname[:]))
		n["attr.kernel.version"] = unix.ByteSliceToString(u.Release[:])
		n["attr.kernel.arch"] = unix.ByteSliceToString(u.Machine[:])
	}
	if id, err := os.ReadFile("/etc/machine-id"); err == nil {
		if s := strings.TrimSpace(string(id)); s != "" {
			n["node.unique.id"] = s
		}
	}
	if rel, err := os.ReadFile("/etc/os-release"); err == nil {
		for k, v := range parseOSRelease(rel) {
			switch k {
			case "ID":
				n["attr.os.name"] = v
			case "VERSION_ID":
				n["attr.os.version"] = v
			}
		}
	}
	return n
}

func parseOSRelease(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else {
			v = strings.Trim(v, `'"`)
		}
		out[k] = v
	}
	return out
}
