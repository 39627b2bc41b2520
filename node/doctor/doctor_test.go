package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver/docker"
	"github.com/berth/berth/task/driver/podman"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

// prefix names everything the tests create on the host.
const prefix = "btdoc"

func ctxFor(t *testing.T) context.Context { return testenv.Context(t, 2*time.Minute) }

// conflist is a network configuration as JSON. The subnet is never
// used: no test here runs ADD.
func conflist(name, version string, plugins ...map[string]any) []byte {
	b, err := json.MarshalIndent(map[string]any{"cniVersion": version, "name": name, "plugins": plugins}, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

func bridgePlugin() map[string]any {
	return map[string]any{
		"type": "bridge", "bridge": prefix + "br0", "isGateway": true, "ipMasq": true,
		"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]any{{{"subnet": "10.199.250.0/24"}}}},
	}
}

func portmapPlugin() map[string]any {
	return map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}, "snat": true}
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// oldPlugin writes a plugin that, like a pre-0.4 build, answers VERSION
// with 0.3.1 only.
func oldPlugin(t *testing.T, dir, name string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, name), []byte(`#!/bin/sh
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{"cniVersion":"0.3.1","supportedVersions":["0.3.1"]}'
  exit 0
fi
echo '{"code":4,"msg":"not implemented in this test plugin"}'
exit 1
`), 0o755)
}

// byName indexes checks by name, failing on duplicates.
func byName(t *testing.T, cs []Check) map[string]Check {
	t.Helper()
	out := map[string]Check{}
	for _, c := range cs {
		if _, dup := out[c.Name]; dup {
			t.Errorf("duplicate check name %q", c.Name)
		}
		out[c.Name] = c
	}
	return out
}

func dump(cs []Check) string {
	var sb strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&sb, "  %s %s: %s", c.Status, c.Name, c.Message)
		if c.Fix != "" {
			fmt.Fprintf(&sb, " [fix: %s]", c.Fix)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

type want struct {
	name     string
	status   Status
	contains string
}

func expect(t *testing.T, cs []Check, wants []want) {
	t.Helper()
	m := byName(t, cs)
	for _, w := range wants {
		c, ok := m[w.name]
		if !ok {
			t.Errorf("no check %q in:\n%s", w.name, dump(cs))
			continue
		}
		if c.Status != w.status {
			t.Errorf("check %q: status %s, want %s:\n%s", w.name, c.Status, w.status, dump(cs))
		}
		if w.contains != "" && !strings.Contains(c.Message+" "+c.Fix, w.contains) {
			t.Errorf("check %q: %q does not mention %q", w.name, c.Message+" [fix: "+c.Fix+"]", w.contains)
		}
		if (c.Status == StatusWarn || c.Status == StatusFail) && c.Fix == "" {
			t.Errorf("check %q is %s without a fix", w.name, c.Status)
		}
	}
}

func TestCheckCNI(t *testing.T) {
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap")
	suffix := testenv.RandSuffix(6)
	missing := prefix + "-missing-" + suffix
	old := prefix + "-old-" + suffix
	tests := []struct {
		name   string
		files  map[string][]byte
		noDir  bool
		debian bool
		want   []want
	}{
		{
			name:  "clean bridge and host-local on the reference plugins",
			files: map[string][]byte{"10-ok.conflist": conflist("ok", "1.1.0", bridgePlugin())},
			want: []want{
				{"cni/config-dir", StatusOK, ""},
				{"cni/ok/plugins", StatusOK, testenv.ReferencePlugins + "/host-local"},
				{"cni/ok/check", StatusOK, ""},
				{"cni/ok/gc", StatusOK, "GC supported"},
			},
		},
		{
			name:  "plugin missing from the plugin path",
			files: map[string][]byte{"10-nope.conflist": conflist("nope", "1.1.0", bridgePlugin(), map[string]any{"type": missing})},
			want:  []want{{"cni/nope/plugins", StatusFail, `plugin "` + missing + `" not found`}},
		},
		{
			name:  "cniVersion no plugin supports",
			files: map[string][]byte{"10-future.conflist": conflist("future", "9.9.9", bridgePlugin())},
			want:  []want{{"cni/future/plugins", StatusFail, "not the network's cniVersion 9.9.9"}},
		},
		{
			name:  "plugin answering VERSION with 0.3.1 only",
			files: map[string][]byte{"10-old.conflist": conflist("oldnet", "1.0.0", map[string]any{"type": old})},
			want:  []want{{"cni/oldnet/plugins", StatusFail, "supports spec versions 0.3.1, not the network's cniVersion 1.0.0"}},
		},
		{
			name:  "file that does not parse",
			files: map[string][]byte{"10-bad.conflist": []byte(`{"cniVersion": "1.1.0", "name": "bad", "plugins": [`)},
			want:  []want{{"cni/10-bad.conflist", StatusFail, "10-bad.conflist"}},
		},
		{
			name:  "cniVersion too old for CHECK",
			files: map[string][]byte{"10-v3.conflist": conflist("v3", "0.3.1", bridgePlugin())},
			want: []want{
				{"cni/v3/plugins", StatusOK, ""},
				{"cni/v3/check", StatusWarn, "0.4.0"},
				{"cni/v3/gc", StatusOK, "GC needs 1.1.0"},
			},
		},
		{
			name: "same network twice",
			files: map[string][]byte{
				"10-a.conflist": conflist("twice", "1.1.0", bridgePlugin()),
				"20-b.conflist": conflist("twice", "1.1.0", bridgePlugin()),
			},
			want: []want{{"cni/twice", StatusWarn, "20-b.conflist defines network \"twice\" again"}},
		},
		{
			name:   "Debian's portmap with port mappings",
			debian: true,
			files:  map[string][]byte{"10-deb.conflist": conflist("deb", "1.0.0", bridgePlugin(), portmapPlugin())},
			want: []want{
				{"cni/deb/plugins", StatusOK, DebianPluginDir + "/portmap"},
				{"cni/deb/portmap", StatusWarn, "containernetworking/plugins#819"},
			},
		},
		{
			name:  "reference portmap with port mappings",
			files: map[string][]byte{"10-ref.conflist": conflist("ref", "1.1.0", bridgePlugin(), portmapPlugin())},
			want:  []want{{"cni/ref/portmap", StatusOK, ""}},
		},
		{
			name:  "no config dir",
			noDir: true,
			want:  []want{{"cni/config-dir", StatusWarn, "no such file"}},
		},
		{
			name:  "empty config dir",
			files: map[string][]byte{},
			want:  []want{{"cni/config-dir", StatusWarn, "no .conflist"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plugins := t.TempDir()
			oldPlugin(t, plugins, old)
			path := []string{plugins, testenv.ReferencePlugins}
			if tc.debian {
				testenv.RequirePlugins(t, DebianPluginDir, "bridge", "host-local", "portmap")
				path = []string{DebianPluginDir}
			}
			conf := filepath.Join(t.TempDir(), "net.d")
			if !tc.noDir {
				if err := os.Mkdir(conf, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, b := range tc.files {
				writeFile(t, filepath.Join(conf, name), b, 0o644)
			}
			cs := CheckCNI(ctxFor(t), conf, cni.NewClient(cni.Options{PluginPath: path, CacheDir: t.TempDir()}))
			expect(t, cs, tc.want)
		})
	}
}

func TestKnownBrokenPortmap(t *testing.T) {
	tests := []struct {
		path      string
		supported []string
		want      bool
	}{
		{"/usr/lib/cni/portmap", []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"}, true},
		{"/usr/lib/cni/portmap", []string{"1.1.0"}, true},
		{"/opt/cni/bin/portmap", []string{"0.3.1", "0.4.0", "1.0.0"}, true},
		{"/opt/berth/cni/bin/portmap", []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}, false},
		{"/opt/cni/bin/portmap", []string{"0.3.1", "0.4.0"}, false},
	}
	for _, tc := range tests {
		if got := KnownBrokenPortmap(tc.path, tc.supported); got != tc.want {
			t.Errorf("KnownBrokenPortmap(%s, %v) = %v, want %v", tc.path, tc.supported, got, tc.want)
		}
	}
}

func TestCheckNetnsDirMountinfo(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "net ns")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	esc := strings.ReplaceAll(dir, " ", `\040`)
	root := "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
	line := func(id int, opt string) string {
		return fmt.Sprintf("%d 22 254:0 %s %s rw,relatime %s - ext4 /dev/vda rw\n", id, esc, esc, opt)
	}
	tests := []struct {
		name      string
		dir       string
		mountinfo string
		status    Status
		contains  string
	}{
		{"missing dir", filepath.Join(base, "nope"), root, StatusOK, "does not exist yet"},
		{"not a mount point", dir, root, StatusOK, "not a mount point"},
		{"one shared mount", dir, root + line(30, "shared:7"), StatusOK, "one shared mount"},
		{"one private mount", dir, root + line(30, ""), StatusWarn, "mount --make-shared"},
		{"two stacked mounts", dir, root + line(30, "shared:7") + line(31, "shared:8"), StatusFail, "umount " + dir + "` 1 time"},
		{"three stacked mounts", dir, root + line(30, "shared:7") + line(31, "shared:8") + line(32, "shared:9"), StatusFail, "3 mounts are stacked"},
		{"private on top of shared", dir, root + line(30, "shared:7") + line(31, "master:7"), StatusFail, "2 mounts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mi := filepath.Join(t.TempDir(), "mountinfo")
			writeFile(t, mi, []byte(tc.mountinfo), 0o644)
			c := CheckNetnsDir(tc.dir, mi)
			if c.Status != tc.status || !strings.Contains(c.Message+" "+c.Fix, tc.contains) {
				t.Errorf("got %s %q [fix %q], want %s mentioning %q", c.Status, c.Message, c.Fix, tc.status, tc.contains)
			}
		})
	}

	t.Run("unreadable mountinfo", func(t *testing.T) {
		c := CheckNetnsDir(dir, filepath.Join(base, "no-mountinfo"))
		if c.Status != StatusFail {
			t.Errorf("got %s %q, want fail", c.Status, c.Message)
		}
	})
}

func TestCheckNetnsDirStackedMounts(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), prefix+"-netns-"+testenv.RandSuffix(6))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered after TempDir, so it runs before TempDir's removal.
	mounts := 0
	t.Cleanup(func() {
		for ; mounts > 0; mounts-- {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	})
	for i := 0; i < 2; i++ {
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount %s: %v", dir, err)
		}
		mounts++
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
	c := CheckNetnsDir(dir, "/proc/self/mountinfo")
	if c.Status != StatusFail || !strings.Contains(c.Message, "2 mounts are stacked") || !strings.Contains(c.Fix, "umount "+dir) {
		t.Errorf("stacked: got %s %q [fix %q]", c.Status, c.Message, c.Fix)
	}

	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatalf("unmount the top mount of %s: %v", dir, err)
	}
	mounts--
	c = CheckNetnsDir(dir, "/proc/self/mountinfo")
	if c.Status == StatusFail {
		t.Errorf("one mount left: got %s %q", c.Status, c.Message)
	}
}

func TestCheckPrivileges(t *testing.T) {
	tests := []struct {
		name    string
		content string
		status  Status
		missing string
	}{
		{"all capabilities", "Name:\tberth\nCapEff:\t000001ffffffffff\n", StatusOK, ""},
		{"only the two needed", fmt.Sprintf("CapEff:\t%016x\n", uint64(1<<21|1<<12)), StatusOK, ""},
		{"none", "CapEff:\t0000000000000000\n", StatusFail, "CAP_SYS_ADMIN"},
		{"no CAP_NET_ADMIN", fmt.Sprintf("CapEff:\t%016x\n", uint64(1<<21)), StatusFail, "CAP_NET_ADMIN"},
		{"no CapEff line", "Name:\tberth\n", StatusFail, "no CapEff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "status")
			writeFile(t, p, []byte(tc.content), 0o644)
			c := CheckPrivileges(p)
			if c.Status != tc.status || !strings.Contains(c.Message, tc.missing) {
				t.Errorf("got %s %q, want %s mentioning %q", c.Status, c.Message, tc.status, tc.missing)
			}
		})
	}
	if c := CheckPrivileges(filepath.Join(t.TempDir(), "nope")); c.Status != StatusFail {
		t.Errorf("unreadable status: got %s", c.Status)
	}
}

func TestCheckNetnsKernel(t *testing.T) {
	testenv.RequireRoot(t)
	before, _ := os.Readlink("/proc/self/ns/net")
	if c := CheckNetnsKernel(ctxFor(t), "/proc"); c.Status != StatusOK {
		t.Errorf("got %s %q, want ok", c.Status, c.Message)
	}
	if self, _ := os.Readlink("/proc/self/ns/net"); before != "" && self != before {
		t.Errorf("the process moved from %s to %s", before, self)
	}
	if c := CheckNetnsKernel(ctxFor(t), t.TempDir()); c.Status != StatusFail || c.Fix == "" {
		t.Errorf("without ns/net: got %s %q", c.Status, c.Message)
	}
}

// fakeRunner answers commands by "name arg..." with canned results.
type fakeRunner map[string]struct {
	res CmdResult
	err error
}

func (f fakeRunner) run(_ context.Context, _ []string, name string, args ...string) (CmdResult, error) {
	key := strings.Join(append([]string{name}, args...), " ")
	r, ok := f[key]
	if !ok {
		return CmdResult{}, fmt.Errorf("%s: %w", key, exec.ErrNotFound)
	}
	return r.res, r.err
}

func ok(stdout string) struct {
	res CmdResult
	err error
} {
	return struct {
		res CmdResult
		err error
	}{res: CmdResult{Stdout: []byte(stdout)}}
}

func exit(code int, stderr string) struct {
	res CmdResult
	err error
} {
	return struct {
		res CmdResult
		err error
	}{res: CmdResult{ExitCode: code, Stderr: []byte(stderr)}}
}

func TestCheckFirewall(t *testing.T) {
	tests := []struct {
		name string
		run  fakeRunner
		want []want
	}{
		{"nf_tables", fakeRunner{
			"iptables --version":  ok("iptables v1.8.9 (nf_tables)\n"),
			"ip6tables --version": ok("ip6tables v1.8.9 (nf_tables)\n"),
		}, []want{{"firewall/iptables", StatusOK, "nf_tables"}, {"firewall/ip6tables", StatusOK, "nf_tables"}}},
		{"legacy, old version", fakeRunner{
			"iptables --version":  ok("iptables v1.6.1\n"),
			"ip6tables --version": ok("ip6tables v1.8.9 (legacy)\n"),
		}, []want{{"firewall/iptables", StatusOK, "legacy backend"}, {"firewall/ip6tables", StatusOK, "legacy"}}},
		{"missing", fakeRunner{}, []want{
			{"firewall/iptables", StatusFail, "apt-get install iptables"},
			{"firewall/ip6tables", StatusWarn, "not found"},
		}},
		{"broken", fakeRunner{
			"iptables --version":  exit(127, "error while loading shared libraries"),
			"ip6tables --version": ok("ip6tables v1.8.9 (nf_tables)\n"),
		}, []want{{"firewall/iptables", StatusFail, "shared libraries"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, CheckFirewall(ctxFor(t), tc.run.run), tc.want)
		})
	}
}

func podmanInfoJSON(runtime, manager, cgroups, events string) string {
	return fmt.Sprintf(`{"host":{"cgroupManager":%q,"cgroupVersion":%q,"eventLogger":%q,"ociRuntime":{"name":%q}},"version":{"Version":"4.3.1"}}`,
		manager, cgroups, events, runtime)
}

// servePing serves the libpod /_ping on a unix socket in a temp dir.
func servePing(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			fmt.Fprint(w, "OK")
			return
		}
		http.NotFound(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestCheckPodman(t *testing.T) {
	noSystemd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(noSystemd, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(noSystemd, "1/comm"), []byte("init\n"), 0o644)
	withSystemd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(withSystemd, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(withSystemd, "1/comm"), []byte("systemd\n"), 0o644)
	live := servePing(t)
	dead := filepath.Join(t.TempDir(), "none.sock")

	base := func(info string) fakeRunner {
		return fakeRunner{
			"podman --version":                    ok("podman version 4.3.1\n"),
			"podman info --format json":           ok(info),
			"podman image exists " + DefaultImage: ok(""),
		}
	}
	good := podmanInfoJSON("runc", "cgroupfs", "v1", "file")
	tests := []struct {
		name    string
		run     fakeRunner
		proc    string
		sockets []string
		want    []want
	}{
		{"configured for this host", base(good), noSystemd, []string{dead, live}, []want{
			{"podman/binary", StatusOK, "4.3.1"},
			{"podman/socket", StatusOK, live},
			{"podman/config", StatusOK, "runtime runc"},
			{"podman/image", StatusOK, DefaultImage},
		}},
		{"no socket answers", base(good), noSystemd, []string{dead}, []want{{"podman/socket", StatusOK, "starts its own"}}},
		{"crun on v1 cgroups", base(podmanInfoJSON("crun", "cgroupfs", "v1", "file")), noSystemd, nil, []want{
			{"podman/config", StatusWarn, "crun refuses v1/hybrid cgroups"},
		}},
		{"crun on v2 cgroups", base(podmanInfoJSON("crun", "cgroupfs", "v2", "file")), noSystemd, nil, []want{
			{"podman/config", StatusOK, "runtime crun"},
		}},
		{"systemd cgroup manager without systemd", base(podmanInfoJSON("runc", "systemd", "v1", "journald")), noSystemd, nil, []want{
			{"podman/config", StatusWarn, "overrides these with its own containers.conf"},
		}},
		{"systemd cgroup manager with systemd", base(podmanInfoJSON("runc", "systemd", "v2", "journald")), withSystemd, nil, []want{
			{"podman/config", StatusOK, ""},
		}},
		{"podman info fails", func() fakeRunner {
			r := base(good)
			r["podman info --format json"] = exit(125, "Error: default OCI runtime \"crun\" not found")
			return r
		}(), noSystemd, nil, []want{{"podman/config", StatusWarn, "crun"}}},
		{"image missing", func() fakeRunner {
			r := base(good)
			r["podman image exists "+DefaultImage] = exit(1, "")
			return r
		}(), noSystemd, nil, []want{{"podman/image", StatusWarn, podman.ImageBuildScript}}},
		{"no podman", fakeRunner{}, noSystemd, nil, []want{
			{"podman/binary", StatusWarn, "apt-get install podman"},
			{"podman/socket", StatusSkip, ""},
			{"podman/config", StatusSkip, ""},
			{"podman/image", StatusSkip, ""},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sockets := tc.sockets
			if sockets == nil {
				sockets = []string{dead}
			}
			cs := CheckPodman(ctxFor(t), PodmanOptions{Sockets: sockets, ProcDir: tc.proc, DataDir: t.TempDir(), Run: tc.run.run})
			expect(t, cs, tc.want)
		})
	}
}

// openAt opens the store in dir, as node.Node.ReadStore does.
func openAt(dir string) StoreOpener {
	return func(ctx context.Context) (*store.Store, error) {
		return store.Open(ctx, dir, store.Options{Logger: slog.New(slog.DiscardHandler)})
	}
}

// newStore creates a store in a temp data dir holding the attachments.
func newStore(t *testing.T, atts ...*store.Attachment) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := store.Open(ctxFor(t), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, a := range atts {
		if err := st.PutAttachment(ctxFor(t), a); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckStore(t *testing.T) {
	withRecord := newStore(t, &store.Attachment{ID: prefix + "-a1", Network: "n", Phase: store.PhaseTearingDown})
	corrupt := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(corrupt, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(corrupt, store.DBFile), []byte(strings.Repeat("not a bbolt file ", 1024)), 0o600)
	// An agent owns the data dir and has the store open: doctor reads it
	// all the same, and names the owner.
	locked := newStore(t)
	held, err := store.Open(ctxFor(t), locked, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	owner, err := store.LockOwner(locked, "berth agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Release)
	notDir := filepath.Join(t.TempDir(), "file")
	writeFile(t, notDir, nil, 0o600)

	tests := []struct {
		name     string
		dir      string
		status   Status
		contains string
	}{
		{"missing data dir", filepath.Join(t.TempDir(), "a", "b"), StatusOK, "does not exist yet"},
		{"empty data dir", t.TempDir(), StatusOK, "no store yet"},
		{"store with a pending teardown", withRecord, StatusOK, "1 attachment(s), 1 pending teardown"},
		{"store held by the agent", locked, StatusOK, fmt.Sprintf("pid %d", os.Getpid())},
		{"corrupt store", corrupt, StatusFail, "mv " + filepath.Join(corrupt, store.DBFile)},
		{"data dir is a file", notDir, StatusFail, "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := CheckStore(ctxFor(t), tc.dir, openAt(tc.dir))
			if c.Status != tc.status || !strings.Contains(c.Message+" "+c.Fix, tc.contains) {
				t.Errorf("got %s %q [fix %q], want %s mentioning %q", c.Status, c.Message, c.Fix, tc.status, tc.contains)
			}
		})
	}
	// Doctor must not leave files in the data dir, nor create a store.
	empty := t.TempDir()
	CheckStore(ctxFor(t), empty, openAt(empty))
	if des, _ := os.ReadDir(empty); len(des) != 0 {
		t.Errorf("CheckStore left %d file(s) in an empty data dir", len(des))
	}
}

// leakedNetns creates a namespace with `ip netns add` that berth's store
// knows nothing about.
func leakedNetns(t *testing.T) string {
	t.Helper()
	name := prefix + "-leak-" + testenv.RandSuffix(8)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	testenv.Run(t, "ip", "netns", "add", name)
	return name
}

func TestBasicLeakFinder(t *testing.T) {
	testenv.RequireRoot(t)
	leak := leakedNetns(t)
	leakPath := filepath.Join("/run/netns", leak)

	conf := t.TempDir()
	writeFile(t, filepath.Join(conf, "10-n.conflist"), conflist(prefix+"net", "1.1.0", bridgePlugin()), 0o644)
	hostLocal := t.TempDir()
	leases := filepath.Join(hostLocal, prefix+"net")
	if err := os.Mkdir(leases, 0o755); err != nil {
		t.Fatal(err)
	}
	unknownLease := filepath.Join(leases, "10.199.250.7")
	writeFile(t, unknownLease, []byte(prefix+"-gone\r\neth0"), 0o644)
	writeFile(t, filepath.Join(leases, "10.199.250.8"), []byte(prefix+"-known\r\neth0"), 0o644)
	writeFile(t, filepath.Join(leases, "10.199.250.9"), []byte(prefix+"-podman"), 0o644)
	writeFile(t, filepath.Join(leases, "lock"), nil, 0o644)
	writeFile(t, filepath.Join(leases, "last_reserved_ip.0"), []byte("10.199.250.9"), 0o644)

	cache := t.TempDir()
	if err := os.Mkdir(filepath.Join(cache, "results"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cache, "results", prefix+"net-"+prefix+"-podman-eth0"),
		[]byte(`{"kind":"cniCacheV1","containerId":"`+prefix+`-podman","networkName":"`+prefix+`net","ifName":"eth0","cniArgs":[["IgnoreUnknown","1"]]}`), 0o600)

	known := newStore(t, &store.Attachment{ID: prefix + "-known", Network: prefix + "net", NetnsPath: "/run/netns/" + prefix + "-known", Phase: store.PhaseReady})
	knowsLeak := newStore(t,
		&store.Attachment{ID: prefix + "-known", Network: prefix + "net", Phase: store.PhaseReady},
		&store.Attachment{ID: leak, Network: prefix + "net", NetnsPath: leakPath, Phase: store.PhaseReady})

	find := func(t *testing.T, dataDir, cacheDir string) []Finding {
		t.Helper()
		fs, err := BasicLeakFinder(BasicLeakOptions{Netns: netns.NewManager("/run/netns"), OpenStore: openAt(dataDir), DataDir: dataDir, ConfDir: conf, HostLocalDir: hostLocal, CNICacheDir: cacheDir})(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	has := func(fs []Finding, kind, id string) bool {
		for _, f := range fs {
			if f.Kind == kind && f.ID == id {
				return true
			}
		}
		return false
	}

	t.Run("store unaware of the namespace", func(t *testing.T) {
		fs := find(t, known, cache)
		if !has(fs, "netns", leak) {
			t.Errorf("leaked netns %s not found in %v", leak, fs)
		}
		if !has(fs, "lease", prefix+"-gone") {
			t.Errorf("unknown lease not found in %v", fs)
		}
		for _, id := range []string{prefix + "-known", prefix + "-podman"} {
			if has(fs, "lease", id) {
				t.Errorf("lease of %s reported: %v", id, fs)
			}
		}
		c := CheckLeftovers(ctxFor(t), BasicLeakFinder(BasicLeakOptions{Netns: netns.NewManager("/run/netns"), OpenStore: openAt(known), DataDir: known, ConfDir: conf, HostLocalDir: hostLocal, CNICacheDir: cache}))
		if c.Status != StatusWarn || !strings.Contains(c.Message, leak) || !strings.Contains(c.Message, unknownLease) || c.Fix == "" {
			t.Errorf("CheckLeftovers: got %s %q", c.Status, c.Message)
		}
	})
	t.Run("no store at all", func(t *testing.T) {
		fs := find(t, t.TempDir(), cache)
		if !has(fs, "netns", leak) || !has(fs, "lease", prefix+"-known") {
			t.Errorf("without a store everything is unknown, got %v", fs)
		}
	})
	t.Run("store knows the namespace", func(t *testing.T) {
		if fs := find(t, knowsLeak, cache); has(fs, "netns", leak) {
			t.Errorf("namespace in the store reported: %v", fs)
		}
	})
	t.Run("another runtime's cache names the namespace", func(t *testing.T) {
		other := t.TempDir()
		if err := os.Mkdir(filepath.Join(other, "results"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(other, "results", "x-"+leak+"-eth0"),
			[]byte(`{"kind":"cniCacheV1","containerId":"c1","networkName":"x","ifName":"eth0","netns":"`+leakPath+`"}`), 0o600)
		if fs := find(t, known, other); has(fs, "netns", leak) {
			t.Errorf("another runtime's namespace reported: %v", fs)
		}
	})
	t.Run("another berth's cache names the namespace", func(t *testing.T) {
		other := t.TempDir()
		if err := os.Mkdir(filepath.Join(other, "results"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(other, "results", prefix+"net-"+leak+"-eth0"),
			[]byte(`{"kind":"cniCacheV1","containerId":"`+leak+`","networkName":"`+prefix+`net","ifName":"eth0","netns":"`+leakPath+`","cniArgs":[["BERTH_ID","`+leak+`"],["BERTH_STORE","0123456789ab"]]}`), 0o600)
		if fs := find(t, known, other); has(fs, "netns", leak) {
			t.Errorf("another berth's namespace reported: %v", fs)
		}
	})
}

// TestForeignCacheEntries: what is not this berth's, by evidence.Owned.
func TestForeignCacheEntries(t *testing.T) {
	dataDir := t.TempDir()
	mine := store.IDFor(dataDir)
	cache := t.TempDir()
	if err := os.Mkdir(filepath.Join(cache, "results"), 0o755); err != nil {
		t.Fatal(err)
	}
	entry := func(id string, args string) {
		writeFile(t, filepath.Join(cache, "results", "n-"+id+"-eth0"),
			[]byte(`{"kind":"cniCacheV1","containerId":"`+id+`","networkName":"n","ifName":"eth0","netns":"/run/netns/`+id+`","cniArgs":[`+args+`]}`), 0o600)
	}
	entry("mine", `["BERTH_ID","mine"],["BERTH_STORE","`+mine+`"]`)
	entry("old-berth", `["BERTH_ID","old-berth"]`)
	entry("other-berth", `["BERTH_ID","other-berth"],["BERTH_STORE","0123456789ab"]`)
	entry("podman", `["IgnoreUnknown","1"]`)
	ids, paths, err := foreignCacheEntries(ctxFor(t), cache, mine)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"other-berth": true, "podman": true}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("foreign IDs %v, want %v", ids, want)
	}
	if len(paths) != 2 || !paths["/run/netns/podman"] || !paths["/run/netns/other-berth"] {
		t.Errorf("foreign paths %v", paths)
	}
}

func TestCheckLeftovers(t *testing.T) {
	tests := []struct {
		name   string
		find   LeakFinder
		status Status
	}{
		{"no finder", nil, StatusSkip},
		{"nothing", func(context.Context) ([]Finding, error) { return nil, nil }, StatusOK},
		{"store corrupt", func(context.Context) ([]Finding, error) {
			return nil, fmt.Errorf("find leftovers: %w", store.ErrCorrupt)
		}, StatusSkip},
		{"error", func(context.Context) ([]Finding, error) { return nil, errors.New("boom") }, StatusWarn},
		{"many", func(context.Context) ([]Finding, error) {
			var fs []Finding
			for i := 0; i < maxListed+5; i++ {
				fs = append(fs, Finding{Kind: "netns", ID: fmt.Sprint(i), Reason: "r"})
			}
			return fs, nil
		}, StatusWarn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c := CheckLeftovers(ctxFor(t), tc.find); c.Status != tc.status {
				t.Errorf("got %s %q, want %s", c.Status, c.Message, tc.status)
			}
		})
	}
}

// cleanOptions is a clean node: a valid bridge+host-local conflist on the
// reference plugins, empty temp dirs for data, netns and host-local.
func cleanOptions(t *testing.T) Options {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local")
	conf := t.TempDir()
	writeFile(t, filepath.Join(conf, "10-clean.conflist"), conflist(prefix+"clean", "1.1.0", bridgePlugin()), 0o644)
	data := filepath.Join(t.TempDir(), "data")
	netnsDir := t.TempDir()
	cache := t.TempDir()
	return Options{
		NetnsDir:  netnsDir,
		ConfDir:   conf,
		CNI:       cni.NewClient(cni.Options{PluginPath: []string{testenv.ReferencePlugins}, CacheDir: cache, Rules: hostclean.Rules{}}),
		DataDir:   data,
		OpenStore: openAt(data),
		Podman:    PodmanOptions{Sockets: []string{filepath.Join(t.TempDir(), "none.sock")}},
		Leaks:     BasicLeakFinder(BasicLeakOptions{Netns: netns.NewManager(netnsDir), OpenStore: openAt(data), DataDir: data, ConfDir: conf, HostLocalDir: t.TempDir(), CNICacheDir: cache}),
	}
}

func TestRunClean(t *testing.T) {
	o := cleanOptions(t)
	rep := Run(ctxFor(t), o)
	if rep.Failed {
		t.Fatalf("clean node failed:\n%s", dump(rep.Checks))
	}
	for _, name := range []string{"privileges", "netns/kernel", "netns/dir", "cni/" + prefix + "clean/plugins", "store", "leftovers"} {
		if cs := rep.Find(name); len(cs) != 1 || cs[0].Status != StatusOK {
			t.Errorf("check %s not ok:\n%s", name, dump(rep.Checks))
		}
	}
	n := 0
	for _, v := range rep.Summary {
		n += v
	}
	if n != len(rep.Checks) {
		t.Errorf("summary counts %d checks, report has %d", n, len(rep.Checks))
	}
	if _, err := os.Stat(o.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("doctor created the data dir %s", o.DataDir)
	}
	t.Logf("clean node:\n%s", dump(rep.Checks))
}

// TestRunFindsPlantedProblems plants one problem of each kind on an
// otherwise clean node and checks that one Run reports all of them.
func TestRunFindsPlantedProblems(t *testing.T) {
	o := cleanOptions(t)
	suffix := testenv.RandSuffix(6)
	missing := prefix + "-missing-" + suffix
	plugins := t.TempDir()
	oldPlugin(t, plugins, prefix+"-old-"+suffix)
	o.CNI = cni.NewClient(cni.Options{PluginPath: []string{plugins, testenv.ReferencePlugins}, CacheDir: t.TempDir(), Rules: hostclean.Rules{}})
	writeFile(t, filepath.Join(o.ConfDir, "20-missing.conflist"), conflist("missing", "1.1.0", bridgePlugin(), map[string]any{"type": missing}), 0o644)
	writeFile(t, filepath.Join(o.ConfDir, "30-future.conflist"), conflist("future", "9.9.9", bridgePlugin()), 0o644)
	writeFile(t, filepath.Join(o.ConfDir, "40-old.conflist"), conflist("old", "1.0.0", map[string]any{"type": prefix + "-old-" + suffix}), 0o644)
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(o.DataDir, store.DBFile), []byte(strings.Repeat("\x00garbage", 2048)), 0o600)

	// The leak: a namespace in the real netns dir that no store knows.
	leak := leakedNetns(t)
	o.NetnsDir = "/run/netns"
	leakData := t.TempDir()
	o.Leaks = BasicLeakFinder(BasicLeakOptions{Netns: netns.NewManager(o.NetnsDir), OpenStore: openAt(leakData), DataDir: leakData, ConfDir: o.ConfDir, HostLocalDir: t.TempDir(), CNICacheDir: t.TempDir()})

	rep := Run(ctxFor(t), o)
	if !rep.Failed {
		t.Errorf("planted problems did not fail the run")
	}
	expect(t, rep.Checks, []want{
		{"cni/" + prefix + "clean/plugins", StatusOK, ""},
		{"cni/missing/plugins", StatusFail, missing},
		{"cni/future/plugins", StatusFail, "9.9.9"},
		{"cni/old/plugins", StatusFail, "0.3.1"},
		{"store", StatusFail, "move the store aside"},
		{"leftovers", StatusWarn, leak},
	})
}

// The docker checks: a daemon, its API and storage, the pause image; no
// daemon is a warning that skips the rest.
func TestCheckDocker(t *testing.T) {
	good := docker.Probe{Endpoint: "unix:///x.sock", ServerVersion: "20.10.24", APIVersion: "1.41", StorageDriver: "overlay2", CgroupDriver: "cgroupfs",
		PauseImage: docker.DefaultPauseImage, PauseImagePresent: true}
	tests := []struct {
		name  string
		probe docker.Probe
		err   error
		wants []want
	}{
		{"all there", good, nil, []want{{"docker/endpoint", StatusOK, "Docker 20.10.24"}, {"docker/api", StatusOK, "API 1.41"},
			{"docker/storage", StatusOK, "overlay2"}, {"docker/pause-image", StatusOK, docker.DefaultPauseImage}}},
		{"no daemon", docker.Probe{Endpoint: "unix:///x.sock"}, errors.New("connection refused"), []want{{"docker/endpoint", StatusWarn, "no Docker daemon answers"},
			{"docker/api", StatusSkip, ""}, {"docker/pause-image", StatusSkip, ""}}},
		{"old API", docker.Probe{Endpoint: "unix:///x.sock"}, fmt.Errorf("daemon speaks 1.30: %w", docker.ErrAPIVersion), []want{{"docker/endpoint", StatusWarn, "1.30"}}},
		{"no pause image", func() docker.Probe { p := good; p.PauseImagePresent = false; return p }(), nil, []want{{"docker/pause-image", StatusWarn, "not in Docker's local storage"}}},
		{"vfs", func() docker.Probe { p := good; p.StorageDriver = "vfs"; return p }(), nil, []want{{"docker/storage", StatusWarn, "vfs"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := CheckDocker(context.Background(), DockerOptions{Probe: func(context.Context, string, string) (docker.Probe, error) { return tt.probe, tt.err }})
			expect(t, cs, tt.wants)
		})
	}
}
