package nomad_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// Scenario 1: a periodic every-second raw_exec job in a cni/<net> network
// leaks namespaces (Nomad 1.6.5's EBUSY unmount); a long-running service
// in the same network runs beside it. `berth gc --nomad` reclaims every
// leaked namespace and spares the service: still running, its namespace,
// address and lease intact.
func TestGCReclaimsPeriodicLeaksSparesService(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	net, confs := network("10.199.150.0/24")
	a := nomadtest.Start(t, nomadtest.Options{Networks: confs})
	a.Run(t, nomadtest.ServiceJob("svc", "cni/"+net))
	svc := waitRunning(t, a, "svc")
	svcIP := ipOf(t, svc.ID)

	a.Run(t, nomadtest.PeriodicJob("tick", "cni/"+net))
	leaks(t, a, "tick", 3, 90*time.Second)
	leaked := settle(t, a, "tick")
	t.Logf("%d leaked namespaces of %d allocations", len(leaked), len(a.JobAllocs(t, "tick/")))

	// berth doctor --nomad sees the client agent.
	out, errs, code := berth(t, append([]string{"doctor", "--nomad", "--nomad-address", a.Addr, "--nomad-data-dir", a.DataDir}, dirs(t)...)...)
	for _, want := range []string{"OK     nomad: " + a.Addr + " is Nomad 1.6.5, the client agent of this node", "not terminal", "event stream answers"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor --nomad (exit %d) does not say %q:\n%s\n%s", code, want, out, errs)
		}
	}
	// The human report names every leaked allocation and its status.
	out, errs, code = berth(t, append([]string{"gc", "--nomad", "--dry-run", "--nomad-address", a.Addr, "--nomad-data-dir", a.DataDir, "--nomad-grace-period", "24h"}, dirs(t)...)...)
	if code != 0 {
		t.Fatalf("gc --nomad --dry-run: exit %d\n%s", code, errs)
	}
	t.Logf("berth gc --nomad --dry-run:\n%s", out)
	for _, id := range leaked {
		if !strings.Contains(out, id) {
			t.Errorf("dry run output lacks %s", id)
		}
	}

	// A dry run reports them all and changes nothing.
	rep, errs, code := gcNomad(t, a, "--dry-run", "--nomad-grace-period", "24h")
	if code != 0 {
		t.Fatalf("gc --nomad --dry-run: exit %d\n%s", code, errs)
	}
	found := map[string]bool{}
	for _, it := range rep.Found {
		found[it.ID] = true
		if it.Owner != "nomad" || it.Status != "complete" || !strings.Contains(it.Reason, "is complete") {
			t.Errorf("item without Nomad's evidence: %+v", it)
		}
	}
	for _, id := range leaked {
		if !found[id] {
			t.Errorf("dry run does not report leaked namespace %s", id)
		}
		if !pinned(id) {
			t.Errorf("dry run removed %s", id)
		}
	}
	if found[svc.ID] {
		t.Errorf("dry run would reclaim the running service %s", svc.ID)
	}

	rep, errs, code = gcNomad(t, a, "--nomad-grace-period", "24h")
	if code != 0 {
		t.Fatalf("gc --nomad: exit %d\n%s", code, errs)
	}
	done := reclaimedNetns(rep)
	for _, id := range leaked {
		if pinned(id) {
			t.Errorf("leaked namespace %s is still there", id)
		}
		if !done[id] {
			t.Errorf("report does not list %s as reclaimed", id)
		}
	}
	if done[svc.ID] {
		t.Fatalf("reclaimed the running service's namespace")
	}
	assertSpared(t, a, svc, svcIP, net)
}

// assertSpared checks that a running allocation is untouched: running,
// namespace pinned with its address, lease and cache entry in place.
func assertSpared(t *testing.T, a *nomadtest.Agent, svc nomadtest.Alloc, ip, net string) {
	t.Helper()
	for _, al := range a.Allocs(t) {
		if al.ID == svc.ID && al.ClientStatus != "running" {
			t.Errorf("service allocation is %s", al.ClientStatus)
		}
	}
	if !pinned(svc.ID) {
		t.Fatalf("service namespace is gone")
	}
	if got := ipOf(t, svc.ID); got != ip {
		t.Errorf("service address %s, was %s", got, ip)
	}
	addr := strings.Split(ip, "/")[0]
	if _, err := os.Stat(filepath.Join(evidence.HostLocalDir, net, addr)); err != nil {
		t.Errorf("service lease: %v", err)
	}
	if !cached(t, svc.ID) {
		t.Errorf("service's libcni cache entry is gone")
	}
}

// Scenario 5: the same with Nomad's own bridge mode (network "nomad",
// Nomad's bridge and its NOMAD-ADMIN chain).
func TestGCReclaimsBridgeModeLeaks(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	a := nomadtest.Start(t, nomadtest.Options{BridgeSubnet: "10.199.151.0/24"})
	a.Run(t, nomadtest.ServiceJob("svc", "bridge"))
	svc := waitRunning(t, a, "svc")
	svcIP := ipOf(t, svc.ID)

	a.Run(t, nomadtest.PeriodicJob("tick", "bridge"))
	leaks(t, a, "tick", 3, 90*time.Second)
	leaked := settle(t, a, "tick")
	t.Logf("%d leaked namespaces of %d allocations", len(leaked), len(a.JobAllocs(t, "tick/")))

	rep, errs, code := gcNomad(t, a, "--nomad-grace-period", "24h")
	if code != 0 {
		t.Fatalf("gc --nomad: exit %d\n%s", code, errs)
	}
	done := reclaimedNetns(rep)
	for _, id := range leaked {
		if pinned(id) || !done[id] {
			t.Errorf("leaked namespace %s: still pinned %v, reported reclaimed %v", id, pinned(id), done[id])
		}
	}
	assertSpared(t, a, svc, svcIP, "nomad")
}

// Scenario 2: allocations purged by `nomad system gc` are unknown to
// Nomad: their namespaces are reclaimed once older than the grace period,
// not before.
func TestGCReclaimsPurgedOnlyPastGracePeriod(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	net, confs := network("10.199.152.0/24")
	a := nomadtest.Start(t, nomadtest.Options{Networks: confs})
	a.Run(t, nomadtest.PeriodicJob("tick", "cni/"+net))
	leaks(t, a, "tick", 3, 90*time.Second)
	leaked := settle(t, a, "tick")
	a.StopJob(t, "tick")
	for _, al := range a.JobAllocs(t, "tick/") {
		if _, err := a.Nomad("job", "stop", "-purge", "-detach", al.JobID); err != nil {
			t.Log(err)
		}
	}
	a.SystemGC(t)
	// Every leaked allocation is unknown to Nomad now.
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range leaked {
		for {
			var v map[string]any
			err := a.Get("/v1/allocation/"+id, &v)
			if err != nil && strings.Contains(err.Error(), "404") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("allocation %s still known to Nomad after system gc: %v", id, err)
			}
			a.SystemGC(t)
			time.Sleep(time.Second)
		}
	}
	only := []string{}
	for _, id := range leaked {
		only = append(only, "--only", id)
	}

	// Nomad's client destroyed their alloc dirs when the server forgot
	// them: the host has no evidence left that they were Nomad's (but for
	// the client still holding one open), and only the operator's opt-in
	// makes them Nomad's.
	only = append(only, "--nomad-reclaim-without-evidence")
	// Within the grace period (the default, 1 h): kept, and said why.
	rep, errs, code := gcNomad(t, a, only...)
	if code != 0 {
		t.Fatalf("gc --nomad: exit %d\n%s", code, errs)
	}
	if len(rep.Found) > 0 {
		t.Fatalf("reclaimed within the grace period: %+v", rep.Found)
	}
	kept := map[string]bool{}
	for _, it := range rep.Kept {
		if it.Status == "unknown to Nomad" && strings.Contains(it.Reason, "within the grace period") && it.Age != "" {
			kept[it.ID] = true
		}
	}
	for _, id := range leaked {
		if !pinned(id) || !kept[id] {
			t.Errorf("%s within the grace period: pinned %v, reported kept %v", id, pinned(id), kept[id])
		}
	}

	// Past it: reclaimed.
	time.Sleep(3 * time.Second)
	rep, errs, code = gcNomad(t, a, append(only, "--nomad-grace-period", "3s")...)
	if code != 0 {
		t.Fatalf("gc --nomad: exit %d\n%s", code, errs)
	}
	done := reclaimedNetns(rep)
	for _, id := range leaked {
		if pinned(id) || !done[id] {
			t.Errorf("%s past the grace period: pinned %v, reported reclaimed %v", id, pinned(id), done[id])
		}
	}
	for _, it := range rep.Reclaimed {
		if !strings.Contains(it.Reason, "past the grace period of 3s") {
			t.Errorf("reclaimed without the evidence: %+v", it)
		}
	}
}
