package gc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

// failPlugin is a CNI plugin that fails DEL while its marker file exists.
const failPlugin = `#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
ADD) echo '{"cniVersion":"1.1.0"}' ;;
DEL) if [ -e "%s" ]; then echo '{"cniVersion":"1.1.0","code":999,"msg":"btgcfail: DEL refused while the marker exists"}'; exit 1; fi ;;
esac
exit 0
`

// TestFailedTeardownRetried makes DEL fail: the record stays in phase
// tearing-down with LastError and NextAttempt, gc respects the backoff,
// retries after it, and finishes once the plugin works again.
func TestFailedTeardownRetried(t *testing.T) {
	e := newEnv(t, full("10.199.59.0/24"))
	ctx := testenv.Context(t, 3*time.Minute)
	pdir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "fail-del")
	testenv.Must(t, os.WriteFile(filepath.Join(pdir, "btgcfail"), []byte(fmt.Sprintf(failPlugin, marker)), 0o755))
	e.plugins = []string{pdir, testenv.ReferencePlugins}
	prependPlugin(t, e.net.File, map[string]any{"type": "btgcfail"})

	st := e.openStore(t)
	deadPID, deadStart := deadProcess(t)
	m := e.manager(st, deadPID, deadStart)
	id := e.id()
	if _, err := m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	testenv.Must(t, os.WriteFile(marker, nil, 0o644))
	if _, err := m.Teardown(ctx, id); err == nil {
		t.Fatal("teardown succeeded although the plugin fails DEL")
	}
	rec, err := st.GetAttachment(ctx, id)
	testenv.Must(t, err)
	if rec.Phase != store.PhaseTearingDown || rec.LastError == "" || !rec.NextAttempt.After(time.Now().Add(-time.Second)) || rec.TeardownAttempts != 1 {
		t.Fatalf("failed teardown recorded as phase %s, attempts %d, error %q, next %s", rec.Phase, rec.TeardownAttempts, rec.LastError, rec.NextAttempt)
	}

	// Before NextAttempt: kept, not retried.
	o := e.options(st, m)
	o.Now = func() time.Time { return rec.NextAttempt.Add(-time.Millisecond) }
	rep, err := gc.Run(ctx, o)
	testenv.Must(t, err)
	if !has(rep.Kept, gc.KindAttachment, id) || has(rep.Found, gc.KindAttachment, id) {
		t.Errorf("gc before NextAttempt: kept %+v found %+v", rep.Kept, rep.Found)
	}

	// After it, still failing: retried, still pending, error reported.
	o.Now = func() time.Time { return rec.NextAttempt.Add(time.Second) }
	rep, err = gc.Run(ctx, o)
	testenv.Must(t, err)
	if !rep.Failed() || !has(rep.Found, gc.KindAttachment, id) || has(rep.Reclaimed, gc.KindAttachment, id) {
		t.Errorf("gc while DEL fails: found %+v reclaimed %+v errors %v", rep.Found, rep.Reclaimed, rep.Errors)
	}
	rec2, err := st.GetAttachment(ctx, id)
	testenv.Must(t, err)
	if rec2.Phase != store.PhaseTearingDown || rec2.TeardownAttempts != 2 || !rec2.NextAttempt.After(rec.NextAttempt) {
		t.Errorf("after a second failure: phase %s attempts %d next %s (first next %s)", rec2.Phase, rec2.TeardownAttempts, rec2.NextAttempt, rec.NextAttempt)
	}

	// The plugin works again: the teardown is finished.
	testenv.Must(t, os.Remove(marker))
	o.Now = func() time.Time { return rec2.NextAttempt.Add(time.Second) }
	rep, err = gc.Run(ctx, o)
	testenv.Must(t, err)
	if rep.Failed() || !has(rep.Reclaimed, gc.KindAttachment, id) {
		t.Fatalf("gc after the plugin recovered: reclaimed %+v errors %v", rep.Reclaimed, rep.Errors)
	}
	st.Close()
	e.assertClean(t, id)
}

// prependPlugin puts a plugin first in a conflist file.
func prependPlugin(t *testing.T, file string, plugin map[string]any) {
	t.Helper()
	b, err := os.ReadFile(file)
	testenv.Must(t, err)
	var conf map[string]any
	testenv.Must(t, json.Unmarshal(b, &conf))
	conf["plugins"] = append([]any{plugin}, conf["plugins"].([]any)...)
	b, err = json.Marshal(conf)
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(file, b, 0o644))
}

// TestHandMadeLeaks leaves, by hand, a namespace known only from a
// berth-marked cache entry (its store was lost), a lease of an
// unknown container ID and a CNI chain with a rule marked for an unknown ID:
// `berth gc --dry-run` reports them and changes nothing, `berth gc`
// reclaims them.
func TestHandMadeLeaks(t *testing.T) {
	e := newEnv(t, full("10.199.60.0/24"))
	orphan := e.id()
	up := e.berth(t, e.dataDir, "", "net", "up", orphan, "--network", e.net.Name, "-p", "29511:80")
	if up.status.ExitStatus() != 0 {
		t.Fatalf("net up: %v\n%s", up.status, up.stderr)
	}
	// The store is lost (deleted, or moved aside after corruption): only
	// the cache entry, marked with this data dir's store ID, says it is ours.
	testenv.Must(t, os.Remove(filepath.Join(e.dataDir, "berth.db")))

	ghostLease, ghostRule := e.id(), e.id()
	leaseFile := filepath.Join(evidence.HostLocalDir, e.net.Name, subnetPrefix(e.net.Subnet)+"250")
	testenv.Must(t, os.WriteFile(leaseFile, []byte(ghostLease+"\r\neth0"), 0o644))
	t.Cleanup(func() { os.Remove(leaseFile) })
	chain := "CNI-btgc" + testenv.RandSuffix(8)
	comment := fmt.Sprintf("name: %q id: %q", e.net.Name, ghostRule)
	testenv.Run(t, "iptables", "-t", "nat", "-N", chain)
	t.Cleanup(func() {
		_ = exec.Command("iptables", "-t", "nat", "-D", "POSTROUTING", "-s", subnetPrefix(e.net.Subnet)+"251/32", "-m", "comment", "--comment", comment, "-j", chain).Run()
		_ = exec.Command("iptables", "-t", "nat", "-F", chain).Run()
		_ = exec.Command("iptables", "-t", "nat", "-X", chain).Run()
	})
	testenv.Run(t, "iptables", "-t", "nat", "-A", chain, "-m", "comment", "--comment", comment, "-j", "ACCEPT")
	testenv.Run(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", subnetPrefix(e.net.Subnet)+"251/32", "-m", "comment", "--comment", comment, "-j", chain)

	present := func() []string {
		var out []string
		if _, err := os.Stat("/run/netns/" + orphan); err == nil {
			out = append(out, "netns")
		}
		if _, err := os.Stat(leaseFile); err == nil {
			out = append(out, "lease")
		}
		if b, _ := exec.Command("iptables-save", "-t", "nat").Output(); strings.Contains(string(b), ":"+chain+" ") {
			out = append(out, "chain")
		}
		return out
	}
	if p := present(); len(p) != 3 {
		t.Fatalf("leaks not in place: %v", p)
	}

	dry := e.berth(t, e.dataDir, "", "gc", "--dry-run")
	if dry.status.ExitStatus() != 0 {
		t.Fatalf("gc --dry-run: %v\n%s", dry.status, dry.stderr)
	}
	for _, want := range []string{orphan, ghostLease, ghostRule, "would reclaim"} {
		if !strings.Contains(dry.stdout, want) {
			t.Errorf("gc --dry-run output lacks %q:\n%s", want, dry.stdout)
		}
	}
	rep, _ := e.gcJSON(t, e.dataDir, "--dry-run")
	for _, w := range []struct{ kind, id string }{{gc.KindNetns, orphan}, {gc.KindLease, ghostLease}, {gc.KindIptables, ghostRule}} {
		if !has(rep.Found, w.kind, w.id) {
			t.Errorf("dry run did not find %s %s: %+v", w.kind, w.id, rep.Found)
		}
	}
	if len(rep.Reclaimed) != 0 {
		t.Errorf("dry run reclaimed %+v", rep.Reclaimed)
	}
	if p := present(); len(p) != 3 {
		t.Fatalf("dry run changed the host: only %v left", p)
	}

	real := e.berth(t, e.dataDir, "", "gc")
	if real.status.ExitStatus() != 0 {
		t.Fatalf("gc: %v\n%s\n%s", real.status, real.stdout, real.stderr)
	}
	for _, want := range []string{orphan, ghostLease, ghostRule, "reclaimed"} {
		if !strings.Contains(real.stdout, want) {
			t.Errorf("gc output lacks %q:\n%s", want, real.stdout)
		}
	}
	if p := present(); len(p) != 0 {
		t.Errorf("gc left %v", p)
	}
	e.assertClean(t, orphan, ghostLease, ghostRule)
}

// TestForeign checks that what is not berth's is never touched unless the
// caller names it: a namespace by prefix, an attachment by network.
func TestForeign(t *testing.T) {
	t.Run("namespace by prefix", func(t *testing.T) {
		testenv.RequireRoot(t)
		ctx := testenv.Context(t, time.Minute)
		name := "btgc-foreign-" + testenv.RandSuffix(6)
		testenv.Run(t, "ip", "netns", "add", name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		st, err := store.Open(ctx, t.TempDir(), store.Options{})
		testenv.Must(t, err)
		t.Cleanup(func() { st.Close() })
		m := attach.New(attach.Options{CNI: cni.NewClient(cni.Options{CacheDir: t.TempDir(), Rules: hostclean.Rules{}}), ConfDir: t.TempDir(), Store: st, LockDir: t.TempDir()})
		o := gc.Options{Attach: m, Store: st, LockDir: t.TempDir()}
		exists := func() bool { _, err := os.Stat("/run/netns/" + name); return err == nil }

		rep, err := gc.Run(ctx, o)
		testenv.Must(t, err)
		if has(rep.Found, gc.KindNetns, name) || !exists() {
			t.Fatalf("gc without --foreign-prefix touched %s: %+v", name, rep.Found)
		}
		o.ForeignPrefixes = []string{"btgc-foreign-"}
		o.DryRun = true
		rep, err = gc.Run(ctx, o)
		testenv.Must(t, err)
		if !has(rep.Found, gc.KindNetns, name) || !exists() {
			t.Fatalf("dry run with the prefix: found %+v, exists %v", rep.Found, exists())
		}
		o.DryRun = false
		rep, err = gc.Run(ctx, o)
		testenv.Must(t, err)
		if !has(rep.Reclaimed, gc.KindNetns, name) || exists() {
			t.Fatalf("gc with the prefix: reclaimed %+v, exists %v, errors %v", rep.Reclaimed, exists(), rep.Errors)
		}
	})

	t.Run("attachment by network", func(t *testing.T) {
		e := newEnv(t, full("10.199.61.0/24"))
		ctx := testenv.Context(t, 2*time.Minute)
		id := e.id() // the foreign runtime's container ID and namespace name
		testenv.Run(t, "ip", "netns", "add", id)
		net, err := cni.LoadNetwork(ctx, e.net.ConfDir, e.net.Name)
		testenv.Must(t, err)
		if _, err := e.cniClient().Add(ctx, net, &cni.Attachment{ContainerID: id, NetNS: "/run/netns/" + id, IfName: "eth0"}); err != nil {
			t.Fatalf("foreign ADD: %v", err)
		}
		st := e.openStore(t)
		o := e.options(st, e.manager(st, 0, 0))
		rep, err := gc.Run(ctx, o)
		testenv.Must(t, err)
		leases, _ := filepath.Glob(filepath.Join(evidence.HostLocalDir, e.net.Name, subnetPrefix(e.net.Subnet)+"*"))
		if len(rep.Found) != 0 || len(leases) != 1 {
			t.Fatalf("gc touched another runtime's attachment: found %+v, leases %v", rep.Found, leases)
		}
		o.ForeignNetworks = []string{e.net.Name}
		rep, err = gc.Run(ctx, o)
		testenv.Must(t, err)
		if rep.Failed() || !has(rep.Reclaimed, gc.KindNetns, id) {
			t.Fatalf("gc --foreign-network: reclaimed %+v errors %v", rep.Reclaimed, rep.Errors)
		}
		st.Close()
		e.assertClean(t, id)
	})
}

// TestCorruptStore: with an unreadable store, `berth gc` says so, sweeps
// what host evidence proves dead (a lease nobody holds) and keeps what may
// be in use (a namespace berth attached, known from the cache).
func TestCorruptStore(t *testing.T) {
	e := newEnv(t, full("10.199.62.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name)
	ghost := e.id()
	leaseFile := filepath.Join(evidence.HostLocalDir, e.net.Name, subnetPrefix(e.net.Subnet)+"250")
	testenv.Must(t, os.WriteFile(leaseFile, []byte(ghost+"\r\neth0"), 0o644))
	t.Cleanup(func() { os.Remove(leaseFile) })

	corrupt := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(corrupt, store.DBFile), []byte("this is not a bbolt file, it is far too short"), 0o600))
	r := e.berth(t, corrupt, "", "gc")
	if r.status.ExitStatus() != 0 {
		t.Fatalf("gc with a corrupt store: %v\n%s\n%s", r.status, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "store unreadable") {
		t.Errorf("gc does not say the store is unreadable:\n%s", r.stdout)
	}
	if _, err := os.Stat(leaseFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease of unknown %s not released", ghost)
	}
	if _, err := os.Stat("/run/netns/" + id); err != nil {
		t.Errorf("namespace %s that may be in use was removed: %v", id, err)
	}
	e.downThenGC(t, id)
	e.assertClean(t, id, ghost)
}

// TestReplayPending: the cheap replay alone undoes a half-made setup.
func TestReplayPending(t *testing.T) {
	e := newEnv(t, full("10.199.63.0/24"))
	id := e.id()
	r := e.berth(t, e.dataDir, fault.MidChainPrefix+"portmap", "net", "up", id, "--network", e.net.Name)
	if !r.status.Signaled() {
		t.Fatalf("berth did not crash: %v\n%s", r.status, r.stderr)
	}
	ctx := testenv.Context(t, 2*time.Minute)
	st := e.openStore(t)
	rep, err := gc.ReplayPending(ctx, e.options(st, e.manager(st, 0, 0)))
	testenv.Must(t, err)
	if rep.Failed() || !has(rep.Reclaimed, gc.KindAttachment, id) {
		t.Fatalf("replay: reclaimed %+v errors %v", rep.Reclaimed, rep.Errors)
	}
	st.Close()
	e.assertClean(t, id)
}

// TestUserAttachmentKept: an attachment made by `berth net up` outlives the
// CLI that made it; gc keeps it while its namespace exists.
func TestUserAttachmentKept(t *testing.T) {
	e := newEnv(t, full("10.199.64.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name)
	rep, r := e.gcJSON(t, e.dataDir)
	if r.status.ExitStatus() != 0 || len(rep.Found) != 0 {
		t.Fatalf("gc reclaimed a user's attachment: status %v found %+v", r.status, rep.Found)
	}
	if _, err := os.Stat("/run/netns/" + id); err != nil {
		t.Fatalf("namespace %s gone: %v", id, err)
	}
	e.downThenGC(t, id)
	e.assertClean(t, id)
}

// BenchmarkRunNothingToDo measures a whole gc when the host is clean (one
// network in the config dir, no attachment).
func BenchmarkRunNothingToDo(b *testing.B) {
	testenv.RequireRoot(b)
	n := testenv.NewNetwork(b, full("10.199.65.0/24"))
	ctx := context.Background()
	st, err := store.Open(ctx, b.TempDir(), store.Options{})
	testenv.Must(b, err)
	defer st.Close()
	m := attach.New(attach.Options{CNI: cni.NewClient(cni.Options{CacheDir: b.TempDir(), Rules: hostclean.Rules{}}), ConfDir: n.ConfDir, Store: st, LockDir: b.TempDir()})
	o := gc.Options{Attach: m, Store: st, LockDir: b.TempDir()}
	b.Run("Run", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if rep, err := gc.Run(ctx, o); err != nil || len(rep.Found) > 0 {
				b.Fatal(err, rep)
			}
		}
	})
	b.Run("ReplayPending", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if rep, err := gc.ReplayPending(ctx, o); err != nil || len(rep.Found) > 0 {
				b.Fatal(err, rep)
			}
		}
	})
}

// Two berths with different data dirs share the host's libcni cache: a
// sweep by one never takes the other's live attachment for an orphan.
func TestOtherBerthsAttachmentKept(t *testing.T) {
	e := newEnv(t, full("10.199.61.0/24"))
	id := e.id()
	other := t.TempDir()
	up := e.berth(t, other, "", "net", "up", id, "--network", e.net.Name)
	if up.status.ExitStatus() != 0 {
		t.Fatalf("net up: %v\n%s", up.status, up.stderr)
	}
	t.Cleanup(func() { e.berth(t, other, "", "net", "down", id) })
	res := e.berth(t, e.dataDir, "", "gc")
	if res.status.ExitStatus() != 0 {
		t.Fatalf("gc: %v\n%s", res.status, res.stderr)
	}
	if _, err := os.Stat("/run/netns/" + id); err != nil {
		t.Fatalf("another berth's namespace was removed by this berth's gc:\n%s", res.stdout)
	}
	if down := e.berth(t, other, "", "net", "down", id); down.status.ExitStatus() != 0 {
		t.Fatalf("net down by its owner: %v\n%s", down.status, down.stderr)
	}
}

// TestCacheEntryOutsideNetnsDir: a berth-marked cache entry whose netns
// field names a path outside the netns dir (a damaged or planted file) is
// DELed without entering that path, and the path is never unlinked.
func TestCacheEntryOutsideNetnsDir(t *testing.T) {
	e := newEnv(t, full("10.199.111.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name)
	testenv.Must(t, os.Remove(filepath.Join(e.dataDir, "berth.db")))
	outside := filepath.Join(t.TempDir(), "planted")
	testenv.Must(t, os.WriteFile(outside, nil, 0o644))
	entries, _ := filepath.Glob(filepath.Join(e.cacheDir, "results", "*-"+id+"-*"))
	if len(entries) != 1 {
		t.Fatalf("cache entries of %s: %v", id, entries)
	}
	raw, err := os.ReadFile(entries[0])
	testenv.Must(t, err)
	raw = []byte(strings.ReplaceAll(string(raw), "/run/netns/"+id, outside))
	testenv.Must(t, os.WriteFile(entries[0], raw, 0o600))

	rep, r := e.gcJSON(t, e.dataDir)
	if r.status.ExitStatus() != 0 || rep.Failed() {
		t.Fatalf("gc: %v %v\n%s", r.status, rep.Errors, r.stderr)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("gc removed %s, a path outside the netns dir: %v", outside, err)
	}
	if _, err := os.Stat(entries[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cache entry was not reclaimed: %v", err)
	}
}
