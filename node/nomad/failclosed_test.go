package nomad_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// fakeNomad answers as a Nomad client agent would, with failures where
// the test asks for them.
type fakeNomad struct {
	nodeID string
	// stateDir is the data dir it reports: the host state this test
	// process holds (nomadtest.FakeClientState), so that it passes for
	// the node's client.
	stateDir string
	// fail maps a path prefix to the status it answers with.
	fail map[string]int
	// lie: every allocation asked about is complete, on this node. Set
	// while the server runs (anything on 127.0.0.1 may call it, e.g. a
	// retry aimed at an earlier test's port), so atomic.
	lie atomic.Bool
}

// newFakeNomad serves a fake client agent on 127.0.0.1; allocs get alloc
// dirs in its data dir.
func newFakeNomad(t *testing.T, fail map[string]int, allocs ...string) (*fakeNomad, string) {
	t.Helper()
	f := &fakeNomad{nodeID: runner.NewAllocID(), fail: fail}
	f.stateDir = nomadtest.FakeClientState(t, f.nodeID, allocs...)
	return f, serveFake(t, f)
}

// serveFake serves f on 127.0.0.1 until the test ends and returns its
// address.
func serveFake(t *testing.T, f *fakeNomad) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	srv := httptest.NewUnstartedServer(f)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for p, code := range f.fail {
		if strings.HasPrefix(r.URL.Path, p) {
			http.Error(w, "Permission denied", code)
			return
		}
	}
	w.Header().Set("X-Nomad-Index", "7")
	switch {
	case r.URL.Path == "/v1/agent/self":
		_ = json.NewEncoder(w).Encode(map[string]any{
			"config": map[string]any{"DataDir": f.stateDir, "Version": map[string]any{"Version": "1.6.5"},
				"Client": map[string]any{"Enabled": true, "CNIConfigDir": filepath.Join(f.stateDir, "cni")}},
			"member": map[string]any{"Name": "fake.global"},
			"stats":  map[string]any{"client": map[string]any{"node_id": f.nodeID}},
		})
	case r.URL.Path == "/v1/node/"+f.nodeID+"/allocations":
		_, _ = w.Write([]byte("[]"))
	case f.lie.Load() && strings.HasPrefix(r.URL.Path, "/v1/allocation/"):
		_ = json.NewEncoder(w).Encode(map[string]any{"ID": strings.TrimPrefix(r.URL.Path, "/v1/allocation/"), "NodeID": f.nodeID,
			"JobID": "lie", "TaskGroup": "g", "Namespace": "default", "ClientStatus": "complete", "DesiredStatus": "run",
			"ModifyIndex": 9, "ModifyTime": time.Now().Add(-time.Hour).UnixNano()})
	default:
		http.NotFound(w, r)
	}
}

// plantNamespaces pins n namespaces named like allocations, removed at
// the end of the test.
func plantNamespaces(t *testing.T, n int) []string {
	t.Helper()
	m := netns.NewManager(netns.DefaultDir)
	var ids []string
	for i := 0; i < n; i++ {
		id := runner.NewAllocID()
		_, err := m.Create(context.Background(), id)
		testenv.Must(t, err)
		ids = append(ids, id)
		t.Cleanup(func() { _, _ = netns.RemovePath(context.Background(), m.Path(id)) })
	}
	return ids
}

// Scenario 3: when Nomad cannot be reached, or answers with an error,
// `berth gc --nomad` exits 1, says why, and touches nothing.
func TestGCNomadUnreachableTouchesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	ids := plantNamespaces(t, 3)
	only := []string{"--nomad-grace-period", "0s"}
	for _, id := range ids {
		only = append(only, "--only", id)
	}
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	closed := "http://" + l.Addr().String()
	l.Close()
	fSelf, selfDenied := newFakeNomad(t, map[string]int{"/v1/agent/self": http.StatusForbidden}, ids...)
	fList, listFails := newFakeNomad(t, map[string]int{"/v1/node/": http.StatusInternalServerError}, ids...)
	fLookup, lookupFails := newFakeNomad(t, map[string]int{"/v1/allocation/": http.StatusInternalServerError}, ids...)

	for _, tc := range []struct {
		name, addr, dataDir string
		want                []string
	}{
		{"connection refused", closed, fSelf.stateDir, []string{"connection refused", "nothing was reclaimed"}},
		{"agent self forbidden", selfDenied, fSelf.stateDir, []string{"403", "nothing was reclaimed"}},
		{"node allocations fail", listFails, fList.stateDir, []string{"500", "nothing was reclaimed"}},
		{"allocation lookups fail", lookupFails, fLookup.stateDir, []string{"could not tell whether it is in use", "500"}},
		{"not a local client", "", "", []string{"this host's Nomad state in data dir", "says nothing of it", "nothing was reclaimed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, dataDir := tc.addr, tc.dataDir
			if addr == "" {
				f, u := newFakeNomad(t, nil, ids...)
				testenv.Must(t, os.Remove(filepath.Join(f.stateDir, "client", "client-id")))
				addr, dataDir = u, f.stateDir
			}
			args := append([]string{"gc", "--nomad", "--nomad-address", addr, "--nomad-data-dir", dataDir}, dirs(t)...)
			out, errs, code := berth(t, append(args, only...)...)
			if code != 1 {
				t.Errorf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out+errs, w) {
					t.Errorf("output does not say %q:\nstdout:\n%s\nstderr:\n%s", w, out, errs)
				}
			}
			for _, id := range ids {
				if !pinned(id) {
					t.Fatalf("namespace %s was removed", id)
				}
			}
		})
	}
}

// berth doctor --nomad fails, with the fix, when Nomad cannot be reached;
// the --nomad-* flags are refused without --nomad.
func TestDoctorNomadUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	closed := "http://" + l.Addr().String()
	l.Close()
	out, _, code := berth(t, append([]string{"doctor", "--nomad", "--nomad-address", closed}, dirs(t)...)...)
	if code != 1 || !strings.Contains(out, "FAIL   nomad: ") || !strings.Contains(out, "fix: point --nomad-address or NOMAD_ADDR") {
		t.Errorf("doctor --nomad against a closed port: exit %d\n%s", code, out)
	}
	for _, cmd := range []string{"gc", "doctor"} {
		_, errs, code := berth(t, cmd, "--nomad-address", closed)
		if code != 1 || !strings.Contains(errs, "--nomad-address is given without --nomad") {
			t.Errorf("%s --nomad-address without --nomad: exit %d %s", cmd, code, errs)
		}
	}
}

// A fake Nomad that answers 404 for every allocation: the planted
// namespaces, which have alloc dirs in its data dir, are unknown to it,
// and go once past the grace period. (The benchmark of one pass over many
// such namespaces is BenchmarkGCPass.)
func TestGCNomadUnknownPastGrace(t *testing.T) {
	testenv.RequireRoot(t)
	ids := plantNamespaces(t, 4)
	f, addr := newFakeNomad(t, nil, ids...)
	args := append([]string{"gc", "--nomad", "--json", "--nomad-address", addr, "--nomad-data-dir", f.stateDir}, dirs(t)...)
	for _, id := range ids {
		args = append(args, "--only", id)
	}
	_, errs, code := berth(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, id := range ids {
		if !pinned(id) {
			t.Fatalf("%s reclaimed within the grace period", id)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	out, errs, code := berth(t, append(args, "--nomad-grace-period", "1s")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, id := range ids {
		if pinned(id) {
			t.Errorf("%s not reclaimed past the grace period:\n%s", id, out)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("Nomad does not know allocation %s", ids[0])) || !strings.Contains(out, `"rule": "unknown-past-grace:alloc-dir"`) {
		t.Errorf("report without the evidence:\n%s", out)
	}
}
