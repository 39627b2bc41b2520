package attach_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

type env struct {
	m     *attach.Manager
	net   *testenv.Network
	store *store.Store
}

// newEnv makes a Manager over a fresh store and a test network, with the
// given plugin dirs first in the path.
func newEnv(t *testing.T, spec testenv.NetworkSpec, pluginDirs []string, to cni.Timeouts) *env {
	return newEnvTB(t, spec, pluginDirs, to)
}

func newEnvTB(t testing.TB, spec testenv.NetworkSpec, pluginDirs []string, to cni.Timeouts) *env {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, pluginDirs[len(pluginDirs)-1], "bridge", "host-local")
	n := testenv.NewNetwork(t, spec)
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	testenv.Must(t, err)
	t.Cleanup(func() { st.Close() })
	m := attach.New(attach.Options{
		Netns:   netns.NewManager(""),
		CNI:     cni.NewClient(cni.Options{PluginPath: pluginDirs, Timeouts: to, Rules: hostclean.Rules{}}),
		ConfDir: n.ConfDir,
		Store:   st,
		LockDir: t.TempDir(),
	})
	return &env{m: m, net: n, store: st}
}

// id returns a unique attachment ID whose namespace and attachment are
// torn down at the end of the test whatever happened.
func (e *env) id(t *testing.T) string {
	id := "btatt-" + testenv.RandSuffix(8)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.m.Teardown(ctx, id); err != nil && !errors.Is(err, attach.ErrNotOwned) {
			t.Errorf("cleanup teardown %s: %v", id, err)
		}
		_, _ = netns.RemovePath(ctx, "/run/netns/"+id)
	})
	return id
}

func full(subnet string) testenv.NetworkSpec {
	return testenv.NetworkSpec{Subnet: subnet, Portmap: true, Firewall: true, Loopback: true}
}

func assertGone(t *testing.T, e *env, id string) {
	t.Helper()
	if _, err := os.Stat("/run/netns/" + id); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s still exists (stat: %v)", id, err)
	}
	if _, err := e.store.GetAttachment(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("record of %s still in the store (err %v)", id, err)
	}
	if _, err := os.Stat(filepath.Join("/var/lib/cni/results", e.net.Name+"-"+id+"-eth0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("libcni cache entry of %s still exists", id)
	}
	leases, _ := filepath.Glob(filepath.Join("/var/lib/cni/networks", e.net.Name, "10.*"))
	for _, l := range leases {
		b, _ := os.ReadFile(l)
		if strings.HasPrefix(string(b), id) {
			t.Errorf("lease %s of %s still exists", l, id)
		}
	}
	out, _ := exec.Command("iptables-save").Output()
	if strings.Contains(string(out), `id: \"`+id+`\"`) {
		t.Errorf("iptables rules of %s remain", id)
	}
}

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		spec    testenv.NetworkSpec
		plugins []string
		ports   bool
		// checkSkip is set when CHECK cannot work with these plugins.
		checkSkip bool
	}{
		{name: "reference full chain", spec: full("10.199.10.0/24"), plugins: []string{testenv.ReferencePlugins}, ports: true},
		{name: "reference bridge only", spec: testenv.NetworkSpec{Subnet: "10.199.11.0/24"}, plugins: []string{testenv.ReferencePlugins}},
		{name: "debian full chain spec 1.0.0", spec: testenv.NetworkSpec{Subnet: "10.199.12.0/24", CNIVersion: "1.0.0", Portmap: true, Firewall: true, Loopback: true}, plugins: []string{testenv.DebianPlugins}},
		{name: "spec 0.3.1 cannot CHECK", spec: testenv.NetworkSpec{Subnet: "10.199.13.0/24", CNIVersion: "0.3.1"}, plugins: []string{testenv.ReferencePlugins}, checkSkip: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.spec, tc.plugins, cni.Timeouts{})
			ctx := testenv.Context(t, 2*time.Minute)
			id := e.id(t)
			req := attach.Request{ID: id, Network: e.net.Name}
			if tc.ports {
				req.CapabilityArgs = map[string]any{"portMappings": []map[string]any{{"hostPort": 28000 + int(time.Now().UnixNano()%1000), "containerPort": 8080, "protocol": "tcp"}}}
			}
			st, err := e.m.Setup(ctx, req)
			if err != nil {
				t.Fatalf("setup: %v", err)
			}
			if !st.Created || len(st.IPv4) != 1 || st.Interface != "eth0" {
				t.Fatalf("unexpected status %+v", st)
			}
			_, subnet, _ := net.ParseCIDR(tc.spec.Subnet)
			ip, _, _ := net.ParseCIDR(st.IPv4[0])
			if !subnet.Contains(ip) {
				t.Errorf("address %s not in %s", st.IPv4[0], tc.spec.Subnet)
			}
			out := testenv.Run(t, "ip", "-n", id, "-o", "addr", "show", "dev", "eth0")
			if !strings.Contains(out, st.IPv4[0]) {
				t.Errorf("eth0 in %s lacks %s: %s", id, st.IPv4[0], out)
			}

			// Setup again: the existing attachment is checked, not recreated.
			again, err := e.m.Setup(ctx, req)
			if err != nil {
				t.Fatalf("second setup: %v", err)
			}
			if again.Created || again.Healed != "" {
				t.Errorf("second setup recreated: %+v", again)
			}
			if tc.checkSkip != (again.CheckSkipped != "") {
				t.Errorf("check skipped = %q, want skipped %v", again.CheckSkipped, tc.checkSkip)
			}
			if _, err := e.m.Check(ctx, id); err != nil {
				t.Errorf("check: %v", err)
			}

			if _, err := e.m.Teardown(ctx, id); err != nil {
				t.Fatalf("teardown: %v", err)
			}
			assertGone(t, e, id)
			rep, err := e.m.Teardown(ctx, id)
			if err != nil || !rep.Nothing {
				t.Errorf("second teardown: %+v, %v", rep, err)
			}
		})
	}
}

func TestDelTwice(t *testing.T) {
	e := newEnv(t, full("10.199.14.0/24"), []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, time.Minute)
	id := e.id(t)
	if _, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); err != nil {
		t.Fatal(err)
	}
	n, err := cni.LoadNetwork(ctx, e.net.ConfDir, e.net.Name)
	testenv.Must(t, err)
	a := &cni.Attachment{ContainerID: id, NetNS: "/run/netns/" + id, Args: map[string]string{"BERTH_ID": id}}
	for i := 0; i < 2; i++ {
		if err := e.m.CNI().Del(ctx, n, "", a); err != nil {
			t.Fatalf("DEL #%d: %v", i+1, err)
		}
	}
	if _, err := e.m.Teardown(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, e, id)
}

// startHolder runs a process that keeps the namespace busy or alive, and
// kills it at the end of the test.
func startHolder(t *testing.T, how, id string) *exec.Cmd {
	t.Helper()
	var cmd *exec.Cmd
	switch how {
	case "fd":
		f, err := os.Open("/run/netns/" + id)
		testenv.Must(t, err)
		cmd = exec.Command("sleep", "300")
		cmd.Stdin = f
		testenv.Must(t, cmd.Start())
		f.Close()
	case "member":
		cmd = exec.Command("ip", "netns", "exec", id, "sleep", "300")
		testenv.Must(t, cmd.Start())
		// Wait until it is inside.
		for i := 0; i < 100; i++ {
			h, _ := netns.Holders(context.Background(), "/run/netns/"+id)
			if len(h) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestTeardownWithHolder(t *testing.T) {
	for i, how := range []string{"fd", "member"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, full(fmt.Sprintf("10.199.%d.0/24", 15+i)), []string{testenv.ReferencePlugins}, cni.Timeouts{})
			ctx := testenv.Context(t, time.Minute)
			id := e.id(t)
			if _, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); err != nil {
				t.Fatal(err)
			}
			cmd := startHolder(t, how, id)
			rep, err := e.m.Teardown(ctx, id)
			if err != nil {
				t.Fatalf("teardown with a holder: %v", err)
			}
			found := false
			for _, h := range rep.Holders {
				if strings.HasPrefix(h, fmt.Sprintf("pid %d ", cmd.Process.Pid)) {
					found = true
				}
			}
			// An fd makes a plain unmount fail: that must be reported with
			// its PID. A member does not block the unmount.
			if how == "fd" && (!rep.Busy || !found) {
				t.Errorf("holder pid %d not reported: %+v", cmd.Process.Pid, rep)
			}
			assertGone(t, e, id)
		})
	}
}

func TestHolders(t *testing.T) {
	e := newEnv(t, testenv.NetworkSpec{Subnet: "10.199.17.0/24"}, []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, time.Minute)
	id := e.id(t)
	if _, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); err != nil {
		t.Fatal(err)
	}
	fd := startHolder(t, "fd", id)
	member := startHolder(t, "member", id)
	hs, err := netns.Holders(ctx, "/run/netns/"+id)
	testenv.Must(t, err)
	kinds := map[int]map[netns.HolderKind]bool{}
	for _, h := range hs {
		if kinds[h.PID] == nil {
			kinds[h.PID] = map[netns.HolderKind]bool{}
		}
		kinds[h.PID][h.Kind] = true
	}
	if !kinds[fd.Process.Pid][netns.HolderFD] {
		t.Errorf("fd holder %d not found in %v", fd.Process.Pid, hs)
	}
	if !kinds[member.Process.Pid][netns.HolderMember] {
		t.Errorf("member %d not found in %v", member.Process.Pid, hs)
	}
}

func TestCheckFailureHeals(t *testing.T) {
	breaks := []struct {
		name string
		cmds [][]string
	}{
		{"delete eth0", [][]string{{"link", "del", "eth0"}}},
		{"change address", [][]string{{"addr", "flush", "dev", "eth0"}, {"addr", "add", "10.199.18.250/24", "dev", "eth0"}}},
		{"delete default route", [][]string{{"route", "del", "default"}}},
	}
	e := newEnv(t, full("10.199.18.0/24"), []string{testenv.ReferencePlugins}, cni.Timeouts{})
	for _, b := range breaks {
		t.Run(b.name, func(t *testing.T) {
			ctx := testenv.Context(t, 2*time.Minute)
			id := e.id(t)
			req := attach.Request{ID: id, Network: e.net.Name}
			if _, err := e.m.Setup(ctx, req); err != nil {
				t.Fatal(err)
			}
			for _, c := range b.cmds {
				testenv.Run(t, "ip", append([]string{"-n", id}, c...)...)
			}
			if _, err := e.m.Check(ctx, id); !errors.Is(err, attach.ErrCheckFailed) {
				t.Fatalf("check of broken netns: %v, want ErrCheckFailed", err)
			}
			st, err := e.m.Setup(ctx, req)
			if err != nil {
				t.Fatalf("setup did not heal: %v", err)
			}
			if st.Healed == "" || !st.Created {
				t.Errorf("status does not say it healed: %+v", st)
			}
			if _, err := e.m.Check(ctx, id); err != nil {
				t.Errorf("check after heal: %v", err)
			}
			if _, err := e.m.Teardown(ctx, id); err != nil {
				t.Fatal(err)
			}
			assertGone(t, e, id)
		})
	}
}

// writePlugin writes a shell CNI plugin into a new dir.
func writePlugin(t *testing.T, name, script string) string {
	dir := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755))
	return dir
}

func TestFailedAddLeavesNothing(t *testing.T) {
	failing := writePlugin(t, "btfail", `
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{"cniVersion":"1.1.0","code":11,"msg":"btfail refuses to add"}'
  exit 1
fi
cat >/dev/null
exit 0
`)
	hanging := writePlugin(t, "bthang", `
if [ "$CNI_COMMAND" = ADD ]; then exec sleep 300; fi
cat >/dev/null
exit 0
`)
	cases := []struct {
		name    string
		plugin  string
		dir     string
		subnet  string
		to      cni.Timeouts
		wantErr error
	}{
		{name: "missing plugin", plugin: "btmissing", dir: failing, subnet: "10.199.19.0/24"},
		{name: "failing plugin", plugin: "btfail", dir: failing, subnet: "10.199.20.0/24"},
		{name: "hanging plugin", plugin: "bthang", dir: hanging, subnet: "10.199.21.0/24", to: cni.Timeouts{Add: 2 * time.Second}, wantErr: cni.ErrTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := full(tc.subnet)
			spec.Extra = []map[string]any{{"type": tc.plugin}}
			e := newEnv(t, spec, []string{tc.dir, testenv.ReferencePlugins}, tc.to)
			ctx := testenv.Context(t, time.Minute)
			id := e.id(t)
			_, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name})
			if err == nil {
				t.Fatal("setup succeeded with a failing plugin")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v does not wrap %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.plugin) || !strings.Contains(err.Error(), id) {
				t.Errorf("error does not name the plugin and ID: %v", err)
			}
			assertGone(t, e, id)
		})
	}
}

func TestConcurrentIDs(t *testing.T) {
	e := newEnv(t, full("10.199.22.0/24"), []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, 5*time.Minute)
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.id(t)
	}
	var wg sync.WaitGroup
	ips := make([]string, n)
	errs := make([]error, n)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name})
			if err == nil {
				ips[i] = st.IPv4[0]
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range ids {
		if errs[i] != nil {
			t.Errorf("setup %s: %v", ids[i], errs[i])
			continue
		}
		if seen[ips[i]] {
			t.Errorf("address %s handed out twice", ips[i])
		}
		seen[ips[i]] = true
	}
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.m.Teardown(ctx, id)
		}()
	}
	wg.Wait()
	for i, id := range ids {
		if errs[i] != nil {
			t.Errorf("teardown %s: %v", id, errs[i])
		}
		assertGone(t, e, id)
	}
}

func TestTeardownConcurrentWithItself(t *testing.T) {
	e := newEnv(t, full("10.199.23.0/24"), []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, time.Minute)
	id := e.id(t)
	if _, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = e.m.Teardown(ctx, id) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent teardown: %v", err)
		}
	}
	assertGone(t, e, id)
}

func TestTeardownAfterNetnsVanished(t *testing.T) {
	e := newEnv(t, full("10.199.24.0/24"), []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, time.Minute)
	id := e.id(t)
	if _, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); err != nil {
		t.Fatal(err)
	}
	// Behind berth's back, as a reboot or an operator would.
	testenv.Run(t, "ip", "netns", "del", id)
	if _, err := e.m.Teardown(ctx, id); err != nil {
		t.Fatalf("teardown without netns: %v", err)
	}
	assertGone(t, e, id)
}

func TestForeignNetnsRefused(t *testing.T) {
	e := newEnv(t, testenv.NetworkSpec{Subnet: "10.199.25.0/24"}, []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, time.Minute)
	id := "btatt-" + testenv.RandSuffix(8)
	testenv.Run(t, "ip", "netns", "add", id)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", id).Run() })
	if _, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); !errors.Is(err, attach.ErrNotOwned) {
		t.Errorf("setup on a foreign netns: %v, want ErrNotOwned", err)
	}
	if _, err := e.m.Teardown(ctx, id); !errors.Is(err, attach.ErrNotOwned) {
		t.Errorf("teardown of a foreign netns: %v, want ErrNotOwned", err)
	}
	if _, err := os.Stat("/run/netns/" + id); err != nil {
		t.Errorf("foreign netns was touched: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, testenv.NetworkSpec{Subnet: "10.199.26.0/24"}, []string{testenv.ReferencePlugins}, cni.Timeouts{})
	ctx := testenv.Context(t, time.Minute)
	cases := []struct {
		name    string
		req     attach.Request
		wantErr error
		want    string
	}{
		{"path in ID", attach.Request{ID: "../etc", Network: e.net.Name}, netns.ErrInvalidName, "../etc"},
		{"empty ID", attach.Request{ID: "", Network: e.net.Name}, netns.ErrInvalidName, "empty"},
		{"unknown network", attach.Request{ID: "btatt-" + testenv.RandSuffix(8), Network: "btnope"}, cni.ErrNetworkNotFound, e.net.Name},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.m.Setup(ctx, tc.req)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %v mentioning %q", err, tc.wantErr, tc.want)
			}
			if tc.req.ID != "" && !strings.Contains(tc.req.ID, "/") {
				if _, err := os.Stat("/run/netns/" + tc.req.ID); err == nil {
					t.Errorf("netns created for bad input")
				}
			}
		})
	}
}
