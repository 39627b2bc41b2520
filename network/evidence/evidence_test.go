package evidence

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/berth/berth/internal/proc"
)

func cacheJSON(id, network, ifname, netns string, args ...string) string {
	var kv []string
	for i := 0; i+1 < len(args); i += 2 {
		kv = append(kv, `["`+args[i]+`","`+args[i+1]+`"]`)
	}
	return `{"kind":"cniCacheV1","containerId":"` + id + `","ifName":"` + ifname + `","networkName":"` + network +
		`","netns":"` + netns + `","cniArgs":[` + strings.Join(kv, ",") + `]}`
}

func TestParseCacheEntryAndOwned(t *testing.T) {
	const mine, theirs = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
	cases := []struct {
		name    string
		in      string
		ok      bool
		storeID string
		want    Ownership
	}{
		{"berth, this store", cacheJSON("a", "n", "eth0", "/run/netns/a", "IgnoreUnknown", "1", ArgID, "a", ArgStore, mine), true, mine, Mine},
		{"berth, other store", cacheJSON("a", "n", "eth0", "/run/netns/a", ArgID, "a", ArgStore, theirs), true, mine, OtherBerth},
		{"berth, no store marker (older berth)", cacheJSON("a", "n", "eth0", "", ArgID, "a"), true, mine, Mine},
		{"berth, asker knows no store", cacheJSON("a", "n", "eth0", "", ArgID, "a", ArgStore, theirs), true, "", Mine},
		{"other runtime", cacheJSON("a", "n", "eth0", "/var/run/netns/cni-1", "K8S_POD_NAME", "x"), true, mine, Foreign},
		{"other runtime, no args", `{"kind":"cniCacheV1","containerId":"a","ifName":"eth0","networkName":"n"}`, true, mine, Foreign},
		{"empty BERTH_ID", cacheJSON("a", "n", "eth0", "", ArgID, ""), true, mine, Foreign},
		{"BERTH_ID of another container", cacheJSON("a", "n", "eth0", "", ArgID, "b", ArgStore, mine), true, mine, Foreign},
		{"other kind", `{"kind":"x","containerId":"a","ifName":"eth0","networkName":"n"}`, false, mine, Foreign},
		{"no network", `{"kind":"cniCacheV1","containerId":"a","ifName":"eth0"}`, false, mine, Foreign},
		{"no ifname", `{"kind":"cniCacheV1","containerId":"a","networkName":"n"}`, false, mine, Foreign},
		{"no container", `{"kind":"cniCacheV1","ifName":"eth0","networkName":"n"}`, false, mine, Foreign},
		{"not json", `garbage`, false, mine, Foreign},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := ParseCacheEntry([]byte(tc.in))
			if ok != tc.ok {
				t.Fatalf("ParseCacheEntry ok = %v, want %v (%+v)", ok, tc.ok, e)
			}
			if got := Owned(e, tc.storeID); got != tc.want {
				t.Errorf("Owned = %v, want %v (%+v)", got, tc.want, e)
			}
		})
	}
}

func TestMarkArgs(t *testing.T) {
	in := map[string]string{"K": "v", ArgID: "forged"}
	out := MarkArgs(in, "id1", "store1")
	if !reflect.DeepEqual(out, map[string]string{"K": "v", ArgID: "id1", ArgStore: "store1"}) {
		t.Errorf("MarkArgs = %v", out)
	}
	if in[ArgID] != "forged" {
		t.Errorf("MarkArgs changed its argument: %v", in)
	}
	if out := MarkArgs(nil, "id1", ""); len(out) != 1 || out[ArgID] != "id1" {
		t.Errorf("MarkArgs without store = %v", out)
	}
	// What MarkArgs writes is what Owned recognises.
	e := CacheEntry{ContainerID: "id1", Args: MarkArgs(nil, "id1", "s")}
	if Owned(e, "s") != Mine || Owned(e, "t") != OtherBerth {
		t.Errorf("Owned of a marked entry: %v / %v", Owned(e, "s"), Owned(e, "t"))
	}
}

func TestReadCache(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "results")
	if err := os.Mkdir(res, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"n2-c1-eth0":      cacheJSON("c1", "n2", "eth0", "/run/netns/c1", ArgID, "c1"),
		"n1-c1-eth0":      cacheJSON("c1", "n1", "eth0", "/run/netns/c1", ArgID, "c1"),
		"n1-c10-eth0":     cacheJSON("c10", "n1", "eth0", "", ArgID, "c10"),
		"n1-other-eth0":   cacheJSON("other", "n1", "eth0", ""),
		"n1-c1-eth1.tmp":  "not json",
		"n1-x-c1-y-eth0":  cacheJSON("x-c1-y", "n1", "eth0", ""),
		"renamed-by-hand": cacheJSON("c1", "n3", "eth0", ""),
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(res, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(res, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := func(es []CacheEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Network+"/"+e.ContainerID+" "+filepath.Base(e.File))
		}
		return out
	}

	all, err := ReadCache(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"n1/c1 n1-c1-eth0", "n1/c10 n1-c10-eth0", "n1/other n1-other-eth0", "n1/x-c1-y n1-x-c1-y-eth0", "n2/c1 n2-c1-eth0", "n3/c1 renamed-by-hand"}
	if got := keys(all); !reflect.DeepEqual(got, want) {
		t.Errorf("ReadCache all = %v, want %v", got, want)
	}
	// One container: by libcni's file name and then by content, as
	// libcni's GetCachedAttachments.
	one, err := ReadCache(ctx, dir, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(one), []string{"n1/c1 n1-c1-eth0", "n2/c1 n2-c1-eth0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ReadCache c1 = %v, want %v", got, want)
	}
	if es, err := ReadCache(ctx, filepath.Join(dir, "missing"), ""); err != nil || es != nil {
		t.Errorf("missing cache: %v %v", es, err)
	}
}

func TestParseMarker(t *testing.T) {
	cases := []struct {
		line, network, id string
		ok                bool
	}{
		{`-A POSTROUTING -s 10.199.69.2/32 -m comment --comment "name: \"btgc-x\" id: \"btgc-x1\"" -j CNI-abfa5fc1fa7a76585d12738c`, "btgc-x", "btgc-x1", true},
		{`-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"net\" id: \"c1\"" -m multiport --dports 28999 -j CNI-DN-abf`, "net", "c1", true},
		{`-A CNI-abfa5fc1fa7a76585d12738c -d 10.199.69.0/24 -m comment --comment "name: \"n\" id: \"c\"" -j ACCEPT`, "n", "c", true},
		{`-A CNI-FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-ADMIN`, "", "", false},
		{`-A POSTROUTING -m comment --comment "id: \"c1\"" -j MASQUERADE`, "", "", false},
		{`-A POSTROUTING -m comment --comment "name: \"\" id: \"c1\"" -j MASQUERADE`, "", "", false},
		{``, "", "", false},
	}
	for _, tc := range cases {
		n, id, ok := ParseMarker(tc.line)
		if n != tc.network || id != tc.id || ok != tc.ok {
			t.Errorf("ParseMarker(%q) = %q, %q, %v", tc.line, n, id, ok)
		}
	}
	// Marker writes what ParseMarker reads.
	line := `-A POSTROUTING -m comment --comment "` + Marker("net-1", "id-1") + `" -j CNI-x`
	if n, id, ok := ParseMarker(line); !ok || n != "net-1" || id != "id-1" {
		t.Errorf("ParseMarker(Marker) = %q %q %v", n, id, ok)
	}
	if got := Marker("n", "i"); got != `name: \"n\" id: \"i\"` {
		t.Errorf("Marker = %s", got)
	}
}

func TestFirewallIP(t *testing.T) {
	cases := []struct {
		line string
		ip   string
	}{
		{"-A CNI-FORWARD -d 10.199.69.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", "10.199.69.2"},
		{"-A CNI-FORWARD -s 10.199.69.2/32 -j ACCEPT", "10.199.69.2"},
		{"-A CNI-FORWARD -s fd00::2/128 -j ACCEPT", "fd00::2"},
		{"-A CNI-FORWARD -s 10.199.69.0/24 -j ACCEPT", ""},
		{"-A CNI-FORWARD -s 10.199.69.2/32 -j DROP", ""},
		{"-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN", ""},
		{"-A FORWARD -s 10.199.69.2/32 -j ACCEPT", ""},
	}
	for _, tc := range cases {
		ip, ok := FirewallIP(tc.line)
		got := ""
		if ok {
			got = ip.String()
		}
		if got != tc.ip {
			t.Errorf("FirewallIP(%q) = %q, want %q", tc.line, got, tc.ip)
		}
	}
}

func TestParseSave(t *testing.T) {
	out := `# Generated by iptables-save v1.8.9 (nf_tables) on Tue Dec  1 11:51:37 2026
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
-A CNI-FORWARD -d 10.199.117.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A CNI-FORWARD -s 10.199.117.2/32 -j ACCEPT
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
:CNI-abc - [0:0]
-A POSTROUTING -s 10.199.117.2/32 -m comment --comment "name: \"n\" id: \"c\"" -j CNI-abc
-A POSTROUTING -o eth9 -j MASQUERADE
-A CNI-abc -d 10.199.117.0/24 -m comment --comment "name: \"n\" id: \"c\"" -j ACCEPT
-A
COMMIT
`
	rs := ParseSave(IPv4, []byte(out))
	if want := map[string][]string{"filter": {"INPUT", "FORWARD", "CNI-ADMIN", "CNI-FORWARD"}, "nat": {"POSTROUTING", "CNI-abc"}}; !reflect.DeepEqual(rs.Chains, want) {
		t.Errorf("chains %v, want %v", rs.Chains, want)
	}
	type pos struct {
		table, chain string
		index        int
		cni          bool
		jump         string
	}
	var got []pos
	for _, r := range rs.Rules {
		if r.Family != IPv4 {
			t.Errorf("family %q", r.Family)
		}
		got = append(got, pos{r.Table, r.Chain, r.Index, r.CNI(), r.Jump()})
	}
	want := []pos{
		{"filter", "FORWARD", 1, true, "CNI-FORWARD"},
		{"filter", "CNI-FORWARD", 1, true, "CNI-ADMIN"},
		{"filter", "CNI-FORWARD", 2, true, "ACCEPT"},
		{"filter", "CNI-FORWARD", 3, true, "ACCEPT"},
		{"nat", "POSTROUTING", 1, true, "CNI-abc"},
		{"nat", "POSTROUTING", 2, false, "MASQUERADE"},
		{"nat", "CNI-abc", 1, true, "ACCEPT"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rules\n got %v\nwant %v", got, want)
	}
	if n := len(CNIRules([]*Ruleset{rs, ParseSave(IPv6, nil)})); n != 6 {
		t.Errorf("CNIRules: %d, want 6", n)
	}
	if IPv6.SaveTool() != "ip6tables-save" {
		t.Errorf("SaveTool %q", IPv6.SaveTool())
	}
}

func TestHostLocalFromPlugins(t *testing.T) {
	c := HostLocalFromPlugins("n", [][]byte{
		[]byte(`{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.199.117.0/24"}],[{"subnet":"fd00::/64"}]]}}`),
		[]byte(`{"type":"other","ipam":{"type":"host-local","dataDir":"/x","subnet":"10.199.118.0/24"}}`),
		[]byte(`{"type":"macvlan","ipam":{"type":"dhcp"}}`),
		[]byte(`{"type":"portmap"}`),
		[]byte(`not json`),
	})
	if len(c.Dirs) != 2 || c.Dirs[0] != filepath.Join(HostLocalDir, "n") || c.Dirs[1] != "/x/n" {
		t.Errorf("dirs %v", c.Dirs)
	}
	if len(c.Subnets) != 3 {
		t.Errorf("subnets %v", c.Subnets)
	}
	if n, ok := c.Contains(leaseIP("10.199.117.7")); !ok || n.String() != "10.199.117.0/24" {
		t.Errorf("Contains: %v %v", n, ok)
	}
	if _, ok := c.Contains(leaseIP("10.199.119.7")); ok {
		t.Error("Contains an address of no subnet")
	}
}

func TestReadLeases(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "n1")
	files := map[string]string{
		"n1/10.199.117.2":       "ctr-a\r\neth0",
		"n1/10.199.117.3":       "ctr-b",
		"n1/fd00::5":            "ctr-c\r\neth1",
		"n1/fd00__6":            "ctr-d\r\neth0",
		"n1/lock":               "",
		"n1/last_reserved_ip.0": "10.199.117.3",
		"n1/10.199.117.9":       "",
		"n1/notes.txt":          "ctr-e",
		"n2/10.199.118.2":       "ctr-f\r\neth0",
		"stray-file":            "x",
	}
	for n, c := range files {
		p := filepath.Join(base, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byIP := func(ls []Lease) map[string]string {
		got := map[string]string{}
		for _, l := range ls {
			got[l.IP.String()] = l.ID + "/" + l.IfName
		}
		return got
	}
	ls, err := ReadLeases(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"10.199.117.2": "ctr-a/eth0", "10.199.117.3": "ctr-b/", "fd00::5": "ctr-c/eth1", "fd00::6": "ctr-d/eth0"}
	if got := byIP(ls); !reflect.DeepEqual(got, want) {
		t.Errorf("ReadLeases = %v, want %v", got, want)
	}
	for _, l := range ls {
		if l.Dir != dir || filepath.Dir(l.Path) != dir {
			t.Errorf("lease %+v not in %s", l, dir)
		}
	}
	all, err := ReadAllLeases(base)
	if err != nil {
		t.Fatal(err)
	}
	want["10.199.118.2"] = "ctr-f/eth0"
	if got := byIP(all); !reflect.DeepEqual(got, want) {
		t.Errorf("ReadAllLeases = %v, want %v", got, want)
	}
	if ls, err := ReadLeases(filepath.Join(base, "missing")); err != nil || ls != nil {
		t.Errorf("missing dir: %v %v", ls, err)
	}
	if ls, err := ReadAllLeases(filepath.Join(base, "missing")); err != nil || ls != nil {
		t.Errorf("missing base: %v %v", ls, err)
	}
}

func TestParseMountinfo(t *testing.T) {
	ok := []struct {
		name string
		line string
		want Mount
	}{
		{"ext4 root", "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
			Mount{ID: 22, Parent: 1, Root: "/", MountPoint: "/", Optional: "shared:1", FSType: "ext4", Source: "/dev/vda"}},
		{"escaped space, master", `36 35 98:0 /mnt1 /mnt/with\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
			Mount{ID: 36, Parent: 35, Root: "/mnt1", MountPoint: "/mnt/with space", Optional: "master:1", FSType: "ext3", Source: "/dev/root"}},
		{"pinned netns", "700 25 0:4 net:[4026532288] /run/netns/x rw shared:5 - nsfs nsfs rw",
			Mount{ID: 700, Parent: 25, Root: "net:[4026532288]", MountPoint: "/run/netns/x", Optional: "shared:5", FSType: "nsfs", Source: "nsfs"}},
		{"no optional fields", "30 22 0:25 / /run/netns rw,nosuid - tmpfs tmpfs rw",
			Mount{ID: 30, Parent: 22, Root: "/", MountPoint: "/run/netns", FSType: "tmpfs", Source: "tmpfs"}},
		{"two optional fields", `31 22 0:25 / /a\134b rw shared:7 master:3 - tmpfs none rw`,
			Mount{ID: 31, Parent: 22, Root: "/", MountPoint: `/a\b`, Optional: "shared:7 master:3", FSType: "tmpfs", Source: "none"}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := ParseMountinfo([]byte(tc.line+"\n\n"), "test")
			if err != nil || len(ms) != 1 {
				t.Fatalf("ParseMountinfo = %v, %v", ms, err)
			}
			if ms[0] != tc.want {
				t.Errorf("got %+v\nwant %+v", ms[0], tc.want)
			}
			if ms[0].Shared() != strings.Contains(tc.want.Optional, "shared:") {
				t.Errorf("Shared() = %v", ms[0].Shared())
			}
		})
	}
	bad := []struct{ name, line, msg string }{
		{"no separator", "22 1 254:0 / / rw,relatime shared:1 ext4 /dev/vda rw", "mi:2: not a mountinfo line"},
		{"no source", "22 1 254:0 / / rw - ext4", "mi:2: not a mountinfo line"},
		{"bad id", "x 1 254:0 / / rw - ext4 /dev/vda rw", "mi:2: bad mount IDs"},
		{"too short", "22 1 -", "mi:2: not a mountinfo line"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMountinfo([]byte("22 1 254:0 / / rw - ext4 /dev/vda rw\n"+tc.line+"\n"), "mi")
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err %v, want %q", err, tc.msg)
			}
		})
	}
	if _, err := ReadMountinfo(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("ReadMountinfo of a missing file: no error")
	}
}

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/t\011t\012`: "/t\tt\n", `/end\04`: `/end\04`, `/bad\999`: `/bad\999`} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProcSelf reads this process's own entries: no root needed.
func TestProcSelf(t *testing.T) {
	self := os.Getpid()
	pids, err := proc.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range pids {
		found = found || p == self
	}
	if !found {
		t.Errorf("PIDs() lacks this process %d", self)
	}
	ns, err := Namespace(self, "net")
	if err != nil || !strings.HasPrefix(ns, "net:[") {
		t.Errorf("Namespace(self, net) = %q, %v", ns, err)
	}
	f, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hasFD := false
	for _, fd := range FDs(self) {
		hasFD = hasFD || fd.Target == ns
	}
	if !hasFD {
		t.Errorf("FDs(self) lacks the fd open on %s", ns)
	}
	ms, err := Mounts(self)
	if err != nil || len(ms) == 0 {
		t.Errorf("Mounts(self) = %d mounts, %v", len(ms), err)
	}
	if Comm(self) == "" || !strings.Contains(Cmdline(self), os.Args[0]) {
		t.Errorf("Comm %q, Cmdline %q", Comm(self), Cmdline(self))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || NetnsLink(st.Ino) != ns {
		t.Errorf("NetnsLink(%d) = %q, want %q (%v)", st.Ino, NetnsLink(st.Ino), ns, err)
	}
	if len(FDs(-1)) != 0 || Comm(-1) != "" {
		t.Error("a missing process has fds or a name")
	}
}
