package nomad_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// ipNetnsAdd makes namespaces with `ip netns add`, named like allocations
// (as other runtimes name theirs), removed at the end of the test.
func ipNetnsAdd(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id := runner.NewAllocID()
		testenv.Run(t, "ip", "netns", "add", id)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", id).Run() })
		ids = append(ids, id)
	}
	return ids
}

// Issue 18.5: a fake Nomad that lies. Whatever it says, the janitor
// reclaims nothing the host has no evidence of: it is refused outright
// when it names a data dir other than the one configured, when the
// configured one is not root's alone, or when the client process (the
// holder of the client's state.db) does not serve its address; and when
// it does pass (it is served by the "client" process) and says every
// allocation is complete on this node, the namespaces `ip netns add`
// made are neither reclaimed nor listed as would-reclaim, while one with
// an alloc dir under the configured data dir goes, by a named rule.
func TestJanitor2FakeNomadLies(t *testing.T) {
	testenv.RequireRoot(t)
	foreign := ipNetnsAdd(t, 3)
	withDir := plantNamespaces(t, 1)[0]
	only := func(ids ...string) []string {
		var out []string
		for _, id := range ids {
			out = append(out, "--only", id)
		}
		return out
	}
	all := append(append([]string{}, foreign...), withDir)
	assertKept := func(t *testing.T, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if !pinned(id) {
				t.Fatalf("namespace %s was removed", id)
			}
		}
	}

	t.Run("refused", func(t *testing.T) {
		f, addr := newFakeNomad(t, nil)
		f.lie.Store(true)
		// A state dir the fake controls (its node ID in it): the data
		// dir configured for berth says another node.
		operator := nomadtest.FakeClientState(t, runner.NewAllocID(), all...)
		// State that is not root's alone.
		loose := nomadtest.FakeClientState(t, f.nodeID, all...)
		testenv.Must(t, os.Chmod(filepath.Join(loose, "client"), 0o777))
		// The right state, held by another process than the one
		// answering (a stand-in on a port the client does not hold).
		other := filepath.Join(t.TempDir(), "nomad")
		testenv.Must(t, os.MkdirAll(filepath.Join(other, "client"), 0o700))
		testenv.Must(t, os.WriteFile(filepath.Join(other, "client", "client-id"), []byte(f.nodeID), 0o600))
		holder := exec.Command("sh", "-c", `exec sleep 600 3<>"$0"`, filepath.Join(other, "client", "state.db"))
		testenv.Must(t, holder.Start())
		t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
		waitFor(t, "the stand-in client to hold its state", func() bool {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", holder.Process.Pid))
			return l == filepath.Join(other, "client", "state.db")
		})
		// A fake that names that state as its own.
		liar := &fakeNomad{nodeID: f.nodeID, stateDir: other}
		liar.lie.Store(true)
		standIn := serveFake(t, liar)
		for _, tc := range []struct {
			name, dataDir, want string
		}{
			{"the fake's own state dir, not the configured one", operator, "says this host is node"},
			{"the default data dir, absent", "", "/opt/nomad/data"},
			{"state writable by others", loose, "writable by others than root"},
			{"served by another process than the client", other, "does not listen on port"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				addr := addr
				if tc.dataDir == other {
					addr = standIn
				}
				args := append([]string{"gc", "--nomad", "--nomad-address", addr, "--nomad-grace-period", "0s", "--nomad-reclaim-without-evidence"}, dirs(t)...)
				if tc.dataDir != "" {
					args = append(args, "--nomad-data-dir", tc.dataDir)
				}
				out, errs, code := berth(t, append(args, only(all...)...)...)
				if code != 1 || !strings.Contains(out+errs, tc.want) || !strings.Contains(out+errs, "nothing was reclaimed") {
					t.Errorf("exit %d, want 1 and %q:\n%s%s", code, tc.want, out, errs)
				}
				assertKept(t, all...)
			})
		}
	})

	t.Run("passes and lies", func(t *testing.T) {
		f, addr := newFakeNomad(t, nil, withDir)
		f.lie.Store(true)
		base := append([]string{"gc", "--nomad", "--json", "--nomad-address", addr, "--nomad-data-dir", f.stateDir, "--nomad-grace-period", "0s"}, dirs(t)...)
		// A dry run over the whole host lists none of them.
		out, errs, code := berth(t, append(base, "--dry-run")...)
		if code != 0 {
			t.Fatalf("dry run: exit %d\n%s", code, errs)
		}
		var rep gc.Report
		testenv.Must(t, json.Unmarshal([]byte(out), &rep))
		for _, it := range append(append([]gc.Item{}, rep.Found...), rep.Kept...) {
			for _, id := range foreign {
				if it.ID == id {
					t.Errorf("dry run lists a namespace of `ip netns add`: %+v", it)
				}
			}
		}
		// The human report, by name, names the rule of each.
		out, errs, code = berth(t, append(append([]string{"gc", "--nomad", "--dry-run", "--nomad-address", addr, "--nomad-data-dir", f.stateDir}, dirs(t)...), only(all...)...)...)
		if code != 0 || strings.Contains(out, foreign[0]) || !strings.Contains(out, "[rule teardown-failed:alloc-dir]") {
			t.Errorf("dry run by name: exit %d\n%s%s", code, out, errs)
		}
		// And gc, each by name: only the one with an alloc dir goes.
		out, errs, code = berth(t, append(base, only(all...)...)...)
		if code != 0 {
			t.Fatalf("gc: exit %d\n%s%s", code, out, errs)
		}
		rep = gc.Report{}
		testenv.Must(t, json.Unmarshal([]byte(out), &rep))
		assertKept(t, foreign...)
		if pinned(withDir) {
			t.Errorf("namespace %s with an alloc dir in Nomad's data dir was kept:\n%s", withDir, out)
		}
		for _, it := range rep.Reclaimed {
			if it.ID != withDir || it.Rule != "teardown-failed:alloc-dir" {
				t.Errorf("reclaimed %+v", it)
			}
		}
		if len(rep.Reclaimed) != 1 {
			t.Errorf("reclaimed %d items, want 1:\n%s", len(rep.Reclaimed), out)
		}
	})
}

// waitFor polls cond until it holds; a minute is far beyond what it
// needs, so the test fails then.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
