package nomad_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad"
	"github.com/berth/berth/node/nomad/nomadtest"
	"github.com/berth/berth/store"
)

// syncBuffer is a log sink read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runJanitor runs the continuous janitor (nomad.Run, as `berth agent`
// with a nomad block runs it) against agent a until the test ends; cfg's
// address and data dir are a's. It returns the janitor's log.
func runJanitor(tb testing.TB, a *nomadtest.Agent, cfg nomad.Config, pluginDir string, m nomad.Metrics) *syncBuffer {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, tb.TempDir(), store.Options{})
	testenv.Must(tb, err)
	mgr := attach.New(attach.Options{
		Netns: netns.NewManager(""), ConfDir: tb.TempDir(), Store: st, LockDir: tb.TempDir(),
		CNI: cni.NewClient(cni.Options{PluginPath: []string{pluginDir}, Rules: hostclean.Rules{}}),
	})
	cfg.Address, cfg.DataDir = a.Addr, a.DataDir
	s, err := cfg.Check()
	testenv.Must(tb, err)
	logs := &syncBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = nomad.Run(ctx, nomad.RunOptions{Settings: s, GC: gc.Options{Attach: mgr, Store: st, LockDir: tb.TempDir()},
			Interval: 5 * time.Minute, Metrics: m, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
		st.Close()
		if tb.Failed() {
			tb.Logf("janitor log:\n%s", tail(logs.String(), 60))
		}
	})
	return logs
}

// unmountFailure is one "failed to unmount NS" of Nomad's log.
type unmountFailure struct {
	alloc string
	at    time.Time
	busy  bool
	line  string
}

var (
	unmountLine = regexp.MustCompile(`(?m)^\s*(\S+) \[ERROR\].*failed to unmount NS: at \S*?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})[^\n]*`)
	// nomadTime is hclog's time format.
	nomadTime = "2006-01-02T15:04:05.000Z0700"
)

// unmountFailures reads Nomad's failed unmounts from its log: EBUSY is
// its own leak (the seed), anything else (ENOENT, EINVAL) means someone
// went before Nomad's teardown: berth, when the janitor runs.
func unmountFailures(log string) []unmountFailure {
	var out []unmountFailure
	for _, m := range unmountLine.FindAllStringSubmatch(log, -1) {
		at, _ := time.Parse(nomadTime, m[1])
		out = append(out, unmountFailure{alloc: m[2], at: at, busy: strings.Contains(m[0], "device or resource busy"), line: m[0]})
	}
	return out
}

// Issue 25: with the janitor following a busy node (the seed's periodic
// every-second job), Nomad logs no error berth caused (every failed
// unmount is its own EBUSY: berth never went before its teardown), and
// every namespace Nomad leaked is gone, by the rule teardown-failed.
func TestJanitor2NoNomadErrors(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	want := envInt("NOMAD_TEST_ALLOCS", 15)
	net, confs := network("10.199.216.0/24")
	a := nomadtest.Start(t, nomadtest.Options{Networks: confs})
	rec := &recorder{reclaimed: map[string]int{}, rules: map[string]int{}}
	runJanitor(t, a, nomad.Config{GracePeriod: "24h"}, testenv.ReferencePlugins, rec)
	a.Run(t, nomadtest.PeriodicJob("tick", "cni/"+net))
	// Nomad's EBUSY comes and goes with its Go GC's pace (a busy agent
	// finalizes its leaked namespace handles before it unmounts): hold
	// every other namespace of the job open, as its leaked handle does,
	// so that Nomad's unmount fails for those as in the seed.
	holdNamespaces(t, a, "tick/")
	// Enough allocations, and among them leaks of Nomad's.
	waitFor2(t, 5*time.Minute, fmt.Sprintf("%d terminal allocations of the periodic job, one of them leaked", want), func() bool {
		n := 0
		for _, al := range a.JobAllocs(t, "tick/") {
			if al.Terminal() {
				n++
			}
		}
		busy := 0
		for _, f := range unmountFailures(a.Log()) {
			if f.busy {
				busy++
			}
		}
		return n >= want && busy >= 1
	})
	settle(t, a, "tick")
	allocs := a.JobAllocs(t, "tick/")
	waitFor2(t, 2*time.Minute, "every namespace of the job gone", func() bool {
		for _, al := range allocs {
			if pinned(al.ID) || cached(t, al.ID) {
				return false
			}
		}
		return true
	})
	fails := unmountFailures(a.Log())
	busy := 0
	for _, f := range fails {
		if !f.busy {
			t.Errorf("Nomad error berth caused: %s", f.line)
			continue
		}
		busy++
	}
	byRule := rec.rule("netns teardown-failed:alloc-dir", busy)
	if busy == 0 || byRule < busy {
		t.Errorf("%d EBUSY leaks, %d namespaces reclaimed by rule teardown-failed:alloc-dir (rules %v)", busy, byRule, rec.rules)
	}
	t.Logf("%d allocations, %d EBUSY leaks of Nomad's, all reclaimed; reclaimed by rule: %v", len(allocs), busy, rec.rules)
}

// slowDelPlugins is a plugin dir with the reference plugins and
// "btslow", which passes ADD through (tuning) but, while the flag file
// exists, holds a DEL (it records its PID under pids/<container ID> and
// sleeps): a teardown in progress, for as long as the test wants.
func slowDelPlugins(t *testing.T) (dir, flag string) {
	t.Helper()
	dir = t.TempDir()
	des, err := os.ReadDir(testenv.ReferencePlugins)
	testenv.Must(t, err)
	for _, de := range des {
		testenv.Must(t, os.Symlink(filepath.Join(testenv.ReferencePlugins, de.Name()), filepath.Join(dir, de.Name())))
	}
	flag = filepath.Join(dir, "slow")
	testenv.Must(t, os.MkdirAll(filepath.Join(dir, "pids"), 0o755))
	script := fmt.Sprintf(`#!/bin/sh
if [ "$CNI_COMMAND" = DEL ] && [ -e %[1]q ]; then
	echo $$ > %[2]q/"$CNI_CONTAINERID"
	exec sleep 300
fi
exec %[3]q
`, flag, filepath.Join(dir, "pids"), filepath.Join(testenv.ReferencePlugins, "tuning"))
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "btslow"), []byte(script), 0o755))
	testenv.Must(t, os.WriteFile(flag, nil, 0o644))
	t.Cleanup(func() {
		// A DEL still held (its Nomad killed): end it by its PID.
		pids, _ := os.ReadDir(filepath.Join(dir, "pids"))
		for _, p := range pids {
			b, _ := os.ReadFile(filepath.Join(dir, "pids", p.Name()))
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && strings.Contains(evidence.Cmdline(pid), "sleep 300") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return dir, flag
}

// Issue 25: a client killed during an allocation's teardown leaves it all
// (libcni cache entry, namespace, veth, lease): no teardown will come,
// and the janitor finds that by the client's absence (no process holds
// its state any more), not by its deadline (10 min here): the leftovers
// go by rule client-gone.
func TestJanitor2KilledClient(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback", "tuning")
	plugins, flag := slowDelPlugins(t)
	name := "btj2-" + testenv.RandSuffix(6)
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.199.217.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
  {"type": "firewall", "backend": "iptables"},
  {"type": "loopback"},
  {"type": "btslow"}]}`, name, "btj2b"+testenv.RandSuffix(5))
	a := nomadtest.Start(t, nomadtest.Options{Networks: map[string][]byte{name: []byte(conf)}, CNIPath: plugins})
	rec := &recorder{reclaimed: map[string]int{}, rules: map[string]int{}}
	runJanitor(t, a, nomad.Config{GracePeriod: "24h"}, plugins, rec)
	a.Run(t, nomadtest.PeriodicJob("tick", "cni/"+name))

	// An allocation Nomad is tearing down: terminal, its DEL held.
	var id string
	waitFor2(t, 3*time.Minute, "a terminal allocation whose DEL is held", func() bool {
		des, _ := os.ReadDir(filepath.Join(plugins, "pids"))
		for _, de := range des {
			for _, al := range a.JobAllocs(t, "tick/") {
				if al.ID == de.Name() && al.Terminal() {
					id = al.ID
					return true
				}
			}
		}
		return false
	})
	// The janitor has its terminal event by now; it waits for Nomad.
	time.Sleep(2 * time.Second)
	if !pinned(id) || !cached(t, id) {
		t.Fatalf("allocation %s: pinned %v, cached %v while Nomad tears it down", id, pinned(id), cached(t, id))
	}
	a.Kill(t)
	testenv.Must(t, os.Remove(flag))
	b, _ := os.ReadFile(filepath.Join(plugins, "pids", id))
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}

	waitFor2(t, 2*time.Minute, "the killed client's leftovers reclaimed", func() bool {
		return !pinned(id) && !cached(t, id)
	})
	// Counted when the sweep ends, a moment after the namespace is gone
	// (a run here read the rules in between).
	rec.rule("netns client-gone:cni-cache", 1)
	leases, err := evidence.ReadLeases(filepath.Join(evidence.HostLocalDir, name))
	testenv.Must(t, err)
	for _, l := range leases {
		if l.ID == id {
			t.Errorf("lease %s of %s left", l.Path, id)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.rules["netns client-gone:cni-cache"] < 1 {
		t.Errorf("reclaimed by rule %v, want netns by client-gone:cni-cache", rec.rules)
	}
}

// waitFor2 polls cond until it holds, failing after within (a bound far
// beyond what it needs: not a speed target).
func waitFor2(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdNamespaces opens every other namespace of the job's allocations
// (read-only, as Nomad's leaked handle) until the test ends.
func holdNamespaces(t testing.TB, a *nomadtest.Agent, prefix string) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	held := map[string]*os.File{}
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var allocs []nomadtest.Alloc
			if err := a.Get("/v1/allocations?namespace=*", &allocs); err == nil {
				for _, al := range allocs {
					if !strings.HasPrefix(al.JobID, prefix) || seen[al.ID] {
						continue
					}
					f, err := os.Open(filepath.Join(netns.DefaultDir, al.ID))
					if err != nil {
						continue
					}
					seen[al.ID] = true
					if len(seen)%2 == 0 {
						f.Close()
						continue
					}
					mu.Lock()
					held[al.ID] = f
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, f := range held {
			f.Close()
		}
	})
}
