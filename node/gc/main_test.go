package gc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

// berthBinary is the berth binary TestMain builds for the crash tests.
var berthBinary testenv.Berth

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithBerth(m, &berthBinary))
}

// full is a network with the whole plugin chain, named with this
// package's prefix.
func full(subnet string) testenv.NetworkSpec {
	return testenv.NetworkSpec{Name: "btgc-net-" + testenv.RandSuffix(6), Subnet: subnet, Portmap: true, Firewall: true, Loopback: true}
}

// env is one test's network and berth directories. Cache and lock dirs
// are private, so that gc sees the test's attachments only, never those
// of other test binaries.
type env struct {
	net      *testenv.Network
	dataDir  string
	cacheDir string
	lockDir  string
	plugins  []string
	ids      []string
}

func newEnv(t *testing.T, spec testenv.NetworkSpec) *env {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	n := testenv.NewNetwork(t, spec)
	e := &env{net: n, dataDir: t.TempDir(), cacheDir: t.TempDir(), lockDir: t.TempDir(), plugins: []string{testenv.ReferencePlugins}}
	// Registered after NewNetwork's cleanup, so it runs before it.
	t.Cleanup(func() { e.scrub(t) })
	return e
}

// id returns a unique attachment ID that scrub removes whatever happened.
func (e *env) id() string {
	id := "btgc-" + testenv.RandSuffix(8)
	e.ids = append(e.ids, id)
	return id
}

// scrub removes by force what a failed test may have left, so that one
// failure does not leak into the leak check of the whole binary.
func (e *env) scrub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if st, err := store.Open(ctx, e.dataDir, store.Options{}); err == nil {
		m := e.manager(st, 0, 0)
		if _, err := gc.Run(ctx, gc.Options{Attach: m, Store: st, LockDir: e.lockDir, IgnoreBackoff: true}); err != nil {
			t.Logf("scrub gc: %v", err)
		}
		st.Close()
	}
	for _, id := range e.ids {
		_, _ = netns.RemovePath(ctx, "/run/netns/"+id)
		_, _ = hostclean.RemoveAttachmentRules(ctx, e.net.Name, id)
	}
	prefix := subnetPrefix(e.net.Subnet)
	_, _ = hostclean.RemoveRulesMatching(ctx, func(line string) bool {
		return strings.HasPrefix(line, "-A CNI-FORWARD") && strings.Contains(line, prefix)
	})
}

// subnetPrefix is "10.199.50." for "10.199.50.0/24".
func subnetPrefix(subnet string) string {
	return subnet[:strings.LastIndex(subnet, ".")+1]
}

func (e *env) cniClient() *cni.Client {
	return cni.NewClient(cni.Options{PluginPath: e.plugins, CacheDir: e.cacheDir, Rules: hostclean.Rules{}})
}

func (e *env) manager(st attach.Store, ownerPID int, ownerStart uint64) *attach.Manager {
	return attach.New(attach.Options{
		Netns:          netns.NewManager(""),
		CNI:            e.cniClient(),
		ConfDir:        e.net.ConfDir,
		Store:          st,
		LockDir:        e.lockDir,
		OwnerPID:       ownerPID,
		OwnerStartTime: ownerStart,
	})
}

func (e *env) openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), e.dataDir, store.Options{})
	testenv.Must(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func (e *env) options(st *store.Store, m *attach.Manager) gc.Options {
	return gc.Options{Attach: m, Store: st, LockDir: e.lockDir}
}

func (e *env) flags(dataDir string) []string {
	return []string{
		"--data-dir", dataDir,
		"--cni-config-dir", e.net.ConfDir,
		"--cni-cache-dir", e.cacheDir,
		"--cni-path", strings.Join(e.plugins, ":"),
		"--lock-dir", e.lockDir,
		"--log-level", "debug",
	}
}

type result struct {
	stdout, stderr string
	status         syscall.WaitStatus
}

// berth runs the binary with the env's flags; point arms a crash point.
func (e *env) berth(t *testing.T, dataDir, point string, args ...string) result {
	t.Helper()
	bin := berthBinary.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(e.flags(dataDir), args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, fault.Env+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if point != "" {
		cmd.Env = append(cmd.Env, fault.Env+"="+point)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("berth %s: %v", strings.Join(args, " "), err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), status: cmd.ProcessState.Sys().(syscall.WaitStatus)}
}

// mustBerth runs berth and fails the test unless it exits 0.
func (e *env) mustBerth(t *testing.T, args ...string) result {
	t.Helper()
	r := e.berth(t, e.dataDir, "", args...)
	if !r.status.Exited() || r.status.ExitStatus() != 0 {
		t.Fatalf("berth %s: status %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.status, r.stdout, r.stderr)
	}
	return r
}

// gcJSON runs `berth gc --json` (plus args) and decodes its report.
func (e *env) gcJSON(t *testing.T, dataDir string, args ...string) (*gc.Report, result) {
	t.Helper()
	r := e.berth(t, dataDir, "", append([]string{"gc", "--json"}, args...)...)
	rep := new(gc.Report)
	if err := json.Unmarshal([]byte(r.stdout), rep); err != nil {
		t.Fatalf("berth gc --json: %v (status %v)\nstdout: %s\nstderr: %s", err, r.status, r.stdout, r.stderr)
	}
	return rep, r
}

func has(items []gc.Item, kind, id string) bool {
	for _, it := range items {
		if it.Kind == kind && it.ID == id {
			return true
		}
	}
	return false
}

// downThenGC runs `berth net down` of each ID, checks that the network's
// bridge stays (what CNI keeps for every attachment is left for the next
// one, as every CNI runtime does), then runs `berth gc`, which tidies it.
func (e *env) downThenGC(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		e.mustBerth(t, "net", "down", id)
	}
	if err := exec.Command("ip", "link", "show", e.net.Bridge).Run(); err != nil {
		t.Errorf("net down removed the network's bridge %s", e.net.Bridge)
	}
	e.mustBerth(t, "gc")
}

// assertCleanOf checks that nothing of the attachments is left: record,
// namespace, cache entry, lease, rules.
func (e *env) assertCleanOf(t *testing.T, ids ...string) {
	t.Helper()
	ctx := context.Background()
	if st, err := store.Open(ctx, e.dataDir, store.Options{}); err == nil {
		for _, id := range ids {
			if _, err := st.GetAttachment(ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("record of %s still in the store (err %v)", id, err)
			}
		}
		st.Close()
	} else {
		t.Errorf("open store: %v", err)
	}
	cached, _ := filepath.Glob(filepath.Join(e.cacheDir, "results", "*"))
	leases, _ := filepath.Glob(filepath.Join(evidence.HostLocalDir, e.net.Name, "*"))
	ipt, _ := exec.Command("iptables-save").Output()
	for _, id := range ids {
		if _, err := os.Stat("/run/netns/" + id); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns %s still exists (stat: %v)", id, err)
		}
		for _, c := range cached {
			if strings.Contains(filepath.Base(c), "-"+id+"-") {
				t.Errorf("libcni cache entry %s remains", c)
			}
		}
		for _, l := range leases {
			if b, _ := os.ReadFile(l); strings.HasPrefix(string(b), id) {
				t.Errorf("lease %s of %s remains", l, id)
			}
		}
		if strings.Contains(string(ipt), `id: \"`+id+`\"`) {
			t.Errorf("iptables rules of %s remain", id)
		}
	}
}

// assertClean checks that nothing of the attachments is left, and that the
// network is tidied away (bridge, host-local dir) as before the test.
func (e *env) assertClean(t *testing.T, ids ...string) {
	t.Helper()
	e.assertCleanOf(t, ids...)
	ipt, _ := exec.Command("iptables-save").Output()
	for _, line := range strings.Split(string(ipt), "\n") {
		if strings.HasPrefix(line, "-A CNI-FORWARD") && strings.Contains(line, subnetPrefix(e.net.Subnet)) {
			t.Errorf("firewall rule of the test network remains: %s", line)
		}
	}
	if err := exec.Command("ip", "link", "show", e.net.Bridge).Run(); err == nil {
		out, _ := exec.Command("ip", "-o", "link", "show", "master", e.net.Bridge).Output()
		t.Errorf("bridge %s still exists; ports: %q", e.net.Bridge, out)
	}
	if _, err := os.Stat(filepath.Join(evidence.HostLocalDir, e.net.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host-local dir of %s remains (stat: %v)", e.net.Name, err)
	}
}
