package nomad_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/nomad/nomadtest"
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
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	src, err := os.ReadFile("../examples/nomad/berth-janitor.nomad.hcl")
	testenv.Must(t, err)
	a.Run(t, string(src),
		"berth="+berthBin, "nomad_addr="+a.Addr, "data_dir="+data, "run_dir="+run,
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

	if n := metric(t, run, `berth_nomad_reclaimed_total{kind="netns"}`); n < float64(len(before)) {
		t.Errorf("berth_nomad_reclaimed_total{kind=\"netns\"} = %v, want at least %d", n, len(before))
	}
	if v := metric(t, run, "berth_nomad_connected"); v != 1 {
		t.Errorf("berth_nomad_connected = %v", v)
	}
	t.Logf("%d allocations of the periodic job, %v namespaces reclaimed by the janitor", len(all), metric(t, run, `berth_nomad_reclaimed_total{kind="netns"}`))
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
