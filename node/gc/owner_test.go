package gc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/node/gc"
)

// fakeOwner claims the IDs it has a verdict for, in its one network.
type fakeOwner struct {
	net      *cni.Network
	verdicts map[string]gc.Verdict
	mu       sync.Mutex
	asked    map[string][]string // id -> kinds asked
}

func (f *fakeOwner) Name() string { return "fake" }
func (f *fakeOwner) Networks() map[string]*cni.Network {
	return map[string]*cni.Network{f.net.Name(): f.net}
}
func (f *fakeOwner) Judge(_ context.Context, c gc.Claim) gc.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asked == nil {
		f.asked = map[string][]string{}
	}
	f.asked[c.ID] = append(f.asked[c.ID], c.Kind)
	v, ok := f.verdicts[c.ID]
	if !ok {
		return gc.Verdict{}
	}
	v.Owned = true
	v.Netns = "/run/netns/" + c.ID
	return v
}

func find(items []gc.Item, id string) (gc.Item, bool) {
	for _, it := range items {
		if it.ID == id {
			return it, true
		}
	}
	return gc.Item{}, false
}

// An owner judges what berth's evidence does not explain, in its network
// and in the netns dir: live is kept silently, dead goes (DEL first, with
// the namespace the owner names when the cache entry records none), dead
// with a process inside is kept with the process named, undecided is kept
// with the owner's reason, an owner's error keeps it and fails the run,
// and what the owner does not claim is never touched (OwnersOnly).
func TestOwnerJudges(t *testing.T) {
	e := newEnv(t, full("10.199.154.0/24"))
	ctx := testenv.Context(t, 3*time.Minute)
	net, err := cni.LoadNetwork(ctx, e.net.ConfDir, e.net.Name)
	testenv.Must(t, err)
	attach := func(id string) {
		t.Helper()
		testenv.Run(t, "ip", "netns", "add", id)
		if _, err := e.cniClient().Add(ctx, net, &cni.Attachment{ContainerID: id, NetNS: "/run/netns/" + id, IfName: "eth0"}); err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
	}
	live, dead, busy, young, failing, bare, unclaimed, onlyLease, leaseNetns := e.id(), e.id(), e.id(), e.id(), e.id(), e.id(), e.id(), e.id(), e.id()
	for _, id := range []string{live, dead, busy, young, failing} {
		attach(id)
	}
	testenv.Run(t, "ip", "netns", "add", bare)
	testenv.Run(t, "ip", "netns", "add", unclaimed)
	testenv.Run(t, "ip", "netns", "add", leaseNetns)
	for ip, id := range map[string]string{"240": onlyLease, "241": leaseNetns} {
		leaseFile := filepath.Join(evidence.HostLocalDir, e.net.Name, subnetPrefix(e.net.Subnet)+ip)
		testenv.Must(t, os.WriteFile(leaseFile, []byte(id+"\r\neth0"), 0o644))
		t.Cleanup(func() { os.Remove(leaseFile) })
	}

	// The dead one's cache entry records no namespace, as Nomad's libcni writes it.
	entries, err := evidence.ReadCache(ctx, e.cacheDir, dead)
	testenv.Must(t, err)
	var raw map[string]any
	b, _ := os.ReadFile(entries[0].File)
	testenv.Must(t, json.Unmarshal(b, &raw))
	delete(raw, "netns")
	b, _ = json.Marshal(raw)
	testenv.Must(t, os.WriteFile(entries[0].File, b, 0o600))

	// A process lives in busy's namespace.
	sleeper := exec.Command("ip", "netns", "exec", busy, "sleep", "300")
	testenv.Must(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	waitMember(t, busy)

	owner := &fakeOwner{net: net, verdicts: map[string]gc.Verdict{
		live:       {Live: true, Status: "running", Reason: "running"},
		dead:       {Dead: true, Status: "complete", Reason: "the owner is done with it"},
		busy:       {Dead: true, Status: "complete", Reason: "the owner is done with it"},
		young:      {Status: "unknown", Reason: "too young to judge"},
		failing:    {Err: fmt.Errorf("owner's API failed"), Status: "?"},
		bare:       {Dead: true, Status: "complete", Reason: "the owner is done with it"},
		onlyLease:  {Dead: true, Status: "complete", Reason: "the owner is done with it"},
		leaseNetns: {Dead: true, Status: "complete", Reason: "the owner is done with it"},
	}}
	st := e.openStore(t)
	o := e.options(st, e.manager(st, 0, 0))
	o.Owners, o.OwnersOnly = []gc.Owner{owner}, true

	o.DryRun = true
	rep, err := gc.Run(ctx, o)
	testenv.Must(t, err)
	for _, id := range []string{dead, bare, onlyLease, leaseNetns} {
		if _, ok := find(rep.Found, id); !ok {
			t.Errorf("dry run does not report %s: %+v", id, rep.Found)
		}
	}
	if len(rep.Reclaimed) != 0 {
		t.Fatalf("dry run reclaimed %+v", rep.Reclaimed)
	}

	o.DryRun = false
	rep, err = gc.Run(ctx, o)
	testenv.Must(t, err)
	for _, id := range []string{dead, bare, onlyLease, leaseNetns} {
		it, ok := find(rep.Reclaimed, id)
		if !ok || it.Owner != "fake" || it.Status != "complete" || !strings.Contains(it.Reason, "the owner is done with it") {
			t.Errorf("%s not reclaimed with the owner's evidence: %+v (errors %v)", id, it, rep.Errors)
		}
	}
	e.assertCleanOf(t, dead, bare, onlyLease, leaseNetns)
	if !has(rep.Reclaimed, gc.KindLease, leaseNetns) || !has(rep.Reclaimed, gc.KindNetns, leaseNetns) {
		t.Errorf("lease and namespace of %s: %+v", leaseNetns, rep.Reclaimed)
	}

	if it, ok := find(rep.Kept, busy); !ok || !strings.Contains(it.Holders, "sleep") {
		t.Errorf("busy namespace not kept with its process: %+v", rep.Kept)
	}
	if it, ok := find(rep.Kept, young); !ok || it.Reason != "too young to judge" {
		t.Errorf("undecided one not kept with the owner's reason: %+v", rep.Kept)
	}
	if _, ok := find(rep.Kept, failing); !ok || !rep.Failed() || !strings.Contains(strings.Join(rep.Errors, "\n"), "owner's API failed") {
		t.Errorf("owner error: kept %+v, errors %v", rep.Kept, rep.Errors)
	}
	if _, ok := find(rep.Kept, live); ok {
		t.Errorf("a live attachment is reported: %+v", rep.Kept)
	}
	for _, it := range rep.Reclaimed {
		if it.Kind == gc.KindCNIGC || it.Kind == gc.KindBridge {
			t.Errorf("an owner's network got %s: %+v", it.Kind, it)
		}
	}
	for _, id := range []string{live, busy, young, failing, unclaimed} {
		if _, err := os.Stat("/run/netns/" + id); err != nil {
			t.Errorf("namespace %s was touched: %v", id, err)
		}
	}
	for _, id := range []string{live, busy, young, failing} {
		if es, _ := evidence.ReadCache(ctx, e.cacheDir, id); len(es) != 1 {
			t.Errorf("cache entry of %s was touched", id)
		}
	}

	// IDs narrow a run to one attachment.
	owner.verdicts[young] = gc.Verdict{Dead: true, Status: "complete", Reason: "done now"}
	owner.verdicts[live] = gc.Verdict{Dead: true, Status: "complete", Reason: "done now"}
	o.IDs = []string{young}
	rep, err = gc.Run(ctx, o)
	testenv.Must(t, err)
	if _, ok := find(rep.Reclaimed, young); !ok || len(rep.Found) != 1 {
		t.Errorf("IDs run: found %+v reclaimed %+v", rep.Found, rep.Reclaimed)
	}
	if _, err := os.Stat("/run/netns/" + live); err != nil {
		t.Errorf("IDs run touched another attachment")
	}
	e.assertCleanOf(t, young)

	// The rest, for the leak check.
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	for _, id := range []string{busy, failing} {
		owner.verdicts[id] = gc.Verdict{Dead: true, Status: "complete", Reason: "done now"}
	}
	o.IDs = nil
	rep, err = gc.Run(ctx, o)
	testenv.Must(t, err)
	if rep.Failed() {
		t.Errorf("last run: %v", rep.Errors)
	}
	e.assertCleanOf(t, live, busy, failing)
	testenv.Run(t, "ip", "netns", "del", unclaimed)
}

// waitMember waits until a process lives in the namespace.
func waitMember(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("ip", "netns", "pids", id).Output()
		if strings.TrimSpace(string(out)) != "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no process in namespace %s", id)
}
