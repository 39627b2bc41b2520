package runner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/store"
)

// testHostIP is the host address the plans advertise here (Options.HostIP):
// a documentation address, never dialled, so that nothing passes by
// falling back to DefaultHostIP.
const testHostIP = "192.0.2.7"

func TestPlanNetwork(t *testing.T) {
	bridge := BridgeConfig{Network: "br-test"}
	tests := []struct {
		mode       string
		kind       netKind
		network    string
		namespaced bool
	}{
		{"", netHost, "", false},
		{jobspec.NetworkHost, netHost, "", false},
		{jobspec.NetworkBridge, netBridge, "br-test", true},
		{jobspec.NetworkNone, netNone, noneNetworkName, true},
		{"cni/mynet", netCNI, "mynet", true},
		// Refused by the parser; no network named, no namespace.
		{"cni/", netHost, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			p := planNetwork(jobspec.Network{Mode: tc.mode}, bridge, testHostIP)
			if p.kind != tc.kind || p.network != tc.network || p.namespaced() != tc.namespaced {
				t.Errorf("plan = kind %d network %q namespaced %v, want kind %d network %q namespaced %v",
					p.kind, p.network, p.namespaced(), tc.kind, tc.network, tc.namespaced)
			}
			if p.mode != tc.mode {
				t.Errorf("mode recorded as %q, want %q as written", p.mode, tc.mode)
			}
		})
	}
	if p := planNetwork(jobspec.Network{Mode: jobspec.NetworkBridge}, BridgeConfig{}, testHostIP); p.network != DefaultBridge().Network {
		t.Errorf("bridge with no name attaches to %q, want the default %q", p.network, DefaultBridge().Network)
	}
}

func TestNetPlanPorts(t *testing.T) {
	spec := []jobspec.Port{
		{Label: "http", Static: 8080, To: 80},
		{Label: "same", Static: 9090, To: -1},
		{Label: "dyn", To: 0},
	}
	tests := []struct {
		mode string
		// wantTo is the container port of http: `to` in a namespace, the
		// host port on the host network.
		wantTo int
	}{
		{jobspec.NetworkHost, 8080},
		{jobspec.NetworkBridge, 80},
		{"cni/x", 80},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			p := planNetwork(jobspec.Network{Mode: tc.mode, Ports: spec}, DefaultBridge(), testHostIP)
			if err := p.pickPorts(); err != nil {
				t.Fatal(err)
			}
			if len(p.ports) != 3 {
				t.Fatalf("ports = %+v, want 3", p.ports)
			}
			if got := p.ports[0]; got.HostPort != 8080 || got.ContainerPort != tc.wantTo {
				t.Errorf("http = %+v, want host 8080 to %d", got, tc.wantTo)
			}
			if got := p.ports[1]; got.HostPort != 9090 || got.ContainerPort != 9090 {
				t.Errorf("same = %+v, want 9090 to 9090", got)
			}
			if got := p.ports[2]; got.HostPort < 20000 || got.HostPort >= 32000 || got.ContainerPort != got.HostPort {
				t.Errorf("dyn = %+v, want a dynamic host port mapped to itself", got)
			}
			if pm := p.portMappings(); len(pm) != 6 {
				t.Errorf("portMappings = %v, want tcp and udp of 3 ports", pm)
			}
		})
	}
}

func TestNetPlanAddresses(t *testing.T) {
	p := planNetwork(jobspec.Network{Mode: jobspec.NetworkBridge, DNS: &jobspec.DNS{Servers: []string{"10.199.46.53"}}}, DefaultBridge(), testHostIP)
	p.ports = []portPlan{{Label: "http", HostPort: 8080, ContainerPort: 80}}
	st := &attach.Status{Network: "berth", NetnsPath: "/run/netns/x"}
	st.IPv4 = []string{"10.199.46.2/24"}
	ns := p.attached(st)
	if ns.Mode != jobspec.NetworkBridge || ns.Network != "berth" || ns.DNS == nil || ns.DNS.Servers[0] != "10.199.46.53" {
		t.Errorf("record = %+v", ns)
	}
	vars := map[string]string{}
	p.portVars(vars)
	want := map[string]string{
		"NOMAD_IP_http": testHostIP, "NOMAD_ALLOC_IP_http": "10.199.46.2",
		"NOMAD_PORT_http": "80", "NOMAD_ALLOC_PORT_http": "80", "NOMAD_HOST_PORT_http": "8080",
		"NOMAD_HOST_IP_http": testHostIP, "NOMAD_ADDR_http": testHostIP + ":8080", "NOMAD_ALLOC_ADDR_http": "10.199.46.2:80",
		"NOMAD_HOST_ADDR_http": testHostIP + ":8080",
	}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
	if len(vars) != len(want) {
		t.Errorf("vars = %v, want %d of them", vars, len(want))
	}
	sn := p.serviceNet("/run/netns/x")
	if sn.AllocIP != "10.199.46.2" || sn.NetnsPath != "/run/netns/x" || len(sn.Ports) != 1 || sn.Mode != jobspec.NetworkBridge {
		t.Errorf("serviceNet = %+v", sn)
	}
	// address_mode "host" services and the record: the advertised address.
	if sn.HostIP != testHostIP {
		t.Errorf("serviceNet's host address = %q, want %q", sn.HostIP, testHostIP)
	}
	if rp := p.recordPorts(); len(rp) != 1 || rp[0].HostIP != testHostIP {
		t.Errorf("recorded ports = %+v, want on %s", rp, testHostIP)
	}

	// Re-adopted: the record's ports and addresses, not new ones, also
	// when this runner advertises another host address.
	r := planNetwork(jobspec.Network{Mode: jobspec.NetworkBridge}, DefaultBridge(), DefaultHostIP)
	r.restore(&store.NetworkStatus{Ports: p.recordPorts(), IPv4: []string{"10.199.46.2/24"}})
	if r.allocIP != "10.199.46.2" || len(r.ports) != 1 || r.ports[0] != p.ports[0] || r.hostIP != testHostIP {
		t.Errorf("restored = %+v at %s, host %s, want %+v at 10.199.46.2, host %s", r.ports, r.allocIP, r.hostIP, p.ports, testHostIP)
	}
	r = planNetwork(jobspec.Network{}, DefaultBridge(), testHostIP)
	r.restore(&store.NetworkStatus{})
	if r.allocIP != testHostIP || r.ports != nil {
		t.Errorf("restored from a host record = %+v at %s", r.ports, r.allocIP)
	}
}

// TestNetworkModeReadOnce: the group's network mode is resolved in
// netplan.go; no other code of runner, agent or ui names the modes or
// compares against them (it reads the plan, or the allocation's record
// the plan wrote).
func TestNetworkModeReadOnce(t *testing.T) {
	modeConsts := map[string]bool{"NetworkHost": true, "NetworkNone": true, "NetworkBridge": true, "NetworkCNIPrefix": true}
	isModeLit := func(e ast.Expr) bool {
		l, ok := e.(*ast.BasicLit)
		if !ok || l.Kind != token.STRING {
			return false
		}
		s, err := strconv.Unquote(l.Value)
		return err == nil && (s == "host" || s == "none" || s == "bridge" || strings.HasPrefix(s, "cni/"))
	}
	// A read of a group network block's mode: <x>.Network.Mode.
	isModeRead := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok || s.Sel.Name != "Mode" {
			return false
		}
		x, ok := s.X.(*ast.SelectorExpr)
		return ok && x.Sel.Name == "Network"
	}
	var checked int
	for _, dir := range []string{".", "../../node/agent", "../../node/ui"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") || (dir == "." && filepath.Base(path) == "netplan.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			bad := func(n ast.Node, what string) {
				t.Errorf("%s: %s: the network mode is read only by the network plan (runner/netplan.go)", fset.Position(n.Pos()), what)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && id.Name == "jobspec" && modeConsts[n.Sel.Name] {
						bad(n, "names jobspec."+n.Sel.Name)
					}
					if dir == "." && isModeRead(n) {
						bad(n, "reads the group's network mode")
					}
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) && (isModeLit(n.X) || isModeLit(n.Y)) {
						bad(n, "compares against a network mode")
					}
				case *ast.CaseClause:
					for _, e := range n.List {
						if isModeLit(e) {
							bad(e, "switches on a network mode")
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && strings.Contains(sel.Sel.Name, "Prefix") {
						for _, arg := range n.Args {
							if isModeLit(arg) {
								bad(arg, "matches a network mode's prefix")
							}
						}
					}
				}
				return true
			})
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d files: the packages were not found", checked)
	}
}

// portVarCases are a group's ports in each network mode, planned as for
// an allocation (a namespace's address 10.199.194.2 from attach).
func portVarCases(t *testing.T) map[string]netPlan {
	t.Helper()
	spec := []jobspec.Port{
		{Label: "stat", Static: 19401},
		{Label: "statto", Static: 19402, To: 19403},
		{Label: "dyn"},
		{Label: "dynto", To: 19404},
	}
	out := map[string]netPlan{}
	for _, mode := range []string{"cni/mynet", jobspec.NetworkBridge, jobspec.NetworkHost} {
		p := planNetwork(jobspec.Network{Mode: mode, Ports: spec}, DefaultBridge(), testHostIP)
		if p.namespaced() {
			if err := p.pickPorts(); err != nil {
				t.Fatal(err)
			}
			st := &attach.Status{Network: p.network, NetnsPath: "/run/netns/x"}
			st.IPv4 = []string{"10.199.194.2/24"}
			p.attached(st)
		} else if _, err := p.hostOnly(); err != nil {
			t.Fatal(err)
		}
		out[mode] = p
	}
	return out
}

// TestPortVarIP: NOMAD_IP_<label> is the host address the port is
// published on in every mode, as in Nomad 1.6.5 (not the namespace's).
func TestPortVarIP(t *testing.T) {
	for mode, p := range portVarCases(t) {
		vars := map[string]string{}
		p.portVars(vars)
		for _, pp := range p.ports {
			if got := vars["NOMAD_IP_"+pp.Label]; got != testHostIP {
				t.Errorf("%s: NOMAD_IP_%s = %q, want the host's %q", mode, pp.Label, got, testHostIP)
			}
			if got := vars["NOMAD_ALLOC_IP_"+pp.Label]; got != p.allocIP {
				t.Errorf("%s: NOMAD_ALLOC_IP_%s = %q, want the allocation's %q", mode, pp.Label, got, p.allocIP)
			}
		}
	}
}

// TestPortVarAddr: NOMAD_ADDR_<label> is the host address and the host
// port (static or dynamic, whatever `to` is), as NOMAD_HOST_ADDR, in
// every mode, as in Nomad 1.6.5; NOMAD_PORT_<label> stays the port the
// task listens on (`to` in a namespace).
func TestPortVarAddr(t *testing.T) {
	for mode, p := range portVarCases(t) {
		vars := map[string]string{}
		p.portVars(vars)
		for _, pp := range p.ports {
			l := pp.Label
			want := testHostIP + ":" + strconv.Itoa(pp.HostPort)
			if got := vars["NOMAD_ADDR_"+l]; got != want {
				t.Errorf("%s: NOMAD_ADDR_%s = %q, want %q", mode, l, got, want)
			}
			if got := vars["NOMAD_HOST_ADDR_"+l]; got != want {
				t.Errorf("%s: NOMAD_HOST_ADDR_%s = %q, want %q", mode, l, got, want)
			}
			listen := pp.HostPort
			if p.namespaced() && (l == "statto" || l == "dynto") {
				listen = 19403
				if l == "dynto" {
					listen = 19404
				}
			}
			if got := vars["NOMAD_PORT_"+l]; got != strconv.Itoa(listen) {
				t.Errorf("%s: NOMAD_PORT_%s = %q, want %d", mode, l, got, listen)
			}
			if got, want := vars["NOMAD_ALLOC_ADDR_"+l], p.allocIP+":"+strconv.Itoa(listen); got != want {
				t.Errorf("%s: NOMAD_ALLOC_ADDR_%s = %q, want %q", mode, l, got, want)
			}
		}
	}
}
