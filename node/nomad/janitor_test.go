package nomad_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad"
	"github.com/berth/berth/node/nomad/nomadtest"
	"github.com/berth/berth/store"
)

// janitorDirs makes the janitor's data and run dirs, removed after the
// agent (and with it the janitor) is gone: call it before nomadtest.Start.
func janitorDirs(t *testing.T) (data, run string) {
	t.Helper()
	base, err := os.MkdirTemp("", "btjan-")
	testenv.Must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	return filepath.Join(base, "data"), filepath.Join(base, "run")
}

// submitJanitor runs examples/nomad/berth-janitor.nomad.hcl on a.
func submitJanitor(t *testing.T, a *nomadtest.Agent, data, run string) {
	t.Helper()
	bin := berthBinary.Path(t)
	src, err := os.ReadFile("../../examples/nomad/berth-janitor.nomad.hcl")
	testenv.Must(t, err)
	a.Run(t, string(src),
		"berth="+bin, "nomad_addr="+a.Addr, "nomad_data_dir="+a.DataDir, "data_dir="+data, "run_dir="+run,
		"cni_path="+testenv.ReferencePlugins, "grace_period=24h", "gc_interval=1m")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(run, "berth.sock")); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, _ := a.Nomad("job", "status", "berth-janitor")
	t.Fatalf("the janitor's socket did not appear within 60 s:\n%s\n%s", out, tail(a.Log(), 30))
}

// metric reads one series of the janitor's /metrics (0 when absent).
func metric(t *testing.T, run, series string) float64 {
	t.Helper()
	c, err := api.NewClient("unix://"+filepath.Join(run, "berth.sock"), "")
	testenv.Must(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	text, err := c.Metrics(ctx)
	testenv.Must(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// Scenario 4: the janitor job submitted to Nomad reclaims the leaks of
// scenario 1 by itself, and keeps up with new ones while the periodic job
// runs on, sparing the service.
func TestJanitorJobReclaimsLeaks(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	data, run := janitorDirs(t)
	net, confs := network("10.199.153.0/24")
	a := nomadtest.Start(t, nomadtest.Options{Networks: confs})
	a.Run(t, nomadtest.ServiceJob("svc", "cni/"+net))
	svc := waitRunning(t, a, "svc")
	svcIP := ipOf(t, svc.ID)
	a.Run(t, nomadtest.PeriodicJob("tick", "cni/"+net))
	before := leaks(t, a, "tick", 3, 90*time.Second)

	submitJanitor(t, a, data, run)
	waitGone(t, a, before, 60*time.Second)

	// New leaks while it runs are reclaimed too.
	time.Sleep(10 * time.Second)
	settle(t, a, "tick")
	var all []string
	for _, al := range a.JobAllocs(t, "tick/") {
		all = append(all, al.ID)
	}
	waitGone(t, a, all, 30*time.Second)
	assertSpared(t, a, svc, svcIP, net)

	if n := metric(t, run, `berth_nomad_reclaimed_total{kind="netns",rule="teardown-failed:alloc-dir"}`); n < float64(len(before)) {
		t.Errorf("berth_nomad_reclaimed_total{kind=\"netns\",rule=\"teardown-failed:alloc-dir\"} = %v, want at least %d", n, len(before))
	}
	if v := metric(t, run, "berth_nomad_connected"); v != 1 {
		t.Errorf("berth_nomad_connected = %v", v)
	}
	t.Logf("%d allocations of the periodic job, %v namespaces reclaimed by the janitor", len(all), metric(t, run, `berth_nomad_reclaimed_total{kind="netns",rule="teardown-failed:alloc-dir"}`))
}

func waitGone(t *testing.T, a *nomadtest.Agent, ids []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left []string
		for _, id := range ids {
			if pinned(id) {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			out, _ := a.Nomad("alloc", "logs", "-stderr", "-job", "berth-janitor")
			t.Fatalf("%d of %d namespaces still there after %s: %v\njanitor log:\n%s", len(left), len(ids), within, left, tail(out, 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// recorder is a nomad.Metrics that remembers.
type recorder struct {
	mu        sync.Mutex
	errors    int
	connected bool
	reclaimed map[string]int
	// rules counts by "<kind> <rule>" when set.
	rules map[string]int
}

func (r *recorder) NomadAPIError(string) { r.mu.Lock(); r.errors++; r.mu.Unlock() }
func (r *recorder) NomadReclaimed(kind, rule string, n int) {
	r.mu.Lock()
	r.reclaimed[kind] += n
	if r.rules != nil {
		r.rules[kind+" "+rule] += n
	}
	r.mu.Unlock()
}
func (r *recorder) NomadReclaimLatency(time.Duration) {}

// rule is how many reclaims of key ("<kind> <rule>") were counted, once at
// least want were, or after a few seconds: the janitor counts a sweep's
// reclaims when the sweep ends, a moment after the host shows them.
func (r *recorder) rule(key string, want int) int {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r.mu.Lock()
		n := r.rules[key]
		r.mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			return n
		}
	}
}
func (r *recorder) NomadConnected(up bool) { r.mu.Lock(); r.connected = up; r.mu.Unlock() }

// The continuous mode fails closed: while Nomad does not answer it
// reclaims nothing (and says so in its metrics); once Nomad answers it
// reconnects by itself and reclaims.
func TestJanitorWaitsForNomad(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "netns")
	mgr := netns.NewManager(dir)
	var ids []string
	for i := 0; i < 3; i++ {
		id := runner.NewAllocID()
		_, err := mgr.Create(context.Background(), id)
		testenv.Must(t, err)
		ids = append(ids, id)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			_, _ = netns.RemovePath(context.Background(), mgr.Path(id))
		}
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	addr := l.Addr().String()
	l.Close()

	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	testenv.Must(t, err)
	t.Cleanup(func() { st.Close() })
	m := attach.New(attach.Options{Netns: mgr, ConfDir: t.TempDir(), Store: st, LockDir: t.TempDir(),
		CNI: cni.NewClient(cni.Options{CacheDir: t.TempDir(), Rules: hostclean.Rules{}})})
	// Nomad's host state (this process holds it), with the namespaces'
	// alloc dirs: the host's evidence that they were Nomad's.
	nodeID := runner.NewAllocID()
	dataDir := nomadtest.FakeClientState(t, nodeID, ids...)
	s, err := nomad.Config{Address: "http://" + addr, GracePeriod: "0s", DataDir: dataDir}.Check()
	testenv.Must(t, err)
	rec := &recorder{reclaimed: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = nomad.Run(ctx, nomad.RunOptions{Settings: s, GC: gc.Options{Attach: m, Store: st, LockDir: t.TempDir()}, NetnsDir: dir, Metrics: rec})
	}()
	t.Cleanup(func() { cancel(); <-done })

	time.Sleep(1500 * time.Millisecond)
	rec.mu.Lock()
	errs, up := rec.errors, rec.connected
	rec.mu.Unlock()
	if errs == 0 || up {
		t.Errorf("Nomad unreachable: %d API errors counted, connected %v", errs, up)
	}
	for _, id := range ids {
		if ok, _ := netns.IsPinned(mgr.Path(id)); !ok {
			t.Fatalf("%s removed while Nomad did not answer", id)
		}
	}

	// Nomad comes up on that address: every allocation is unknown to it.
	f := &fakeNomad{nodeID: nodeID, stateDir: dataDir}
	l, err = net.Listen("tcp", addr)
	testenv.Must(t, err)
	srv := &http.Server{Handler: f}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for _, id := range ids {
			if ok, _ := netns.IsPinned(mgr.Path(id)); ok {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d namespaces left 30 s after Nomad came up", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.reclaimed[gc.KindNetns] != len(ids) {
		t.Errorf("reclaimed %v", rec.reclaimed)
	}
}
