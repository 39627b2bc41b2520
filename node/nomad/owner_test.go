package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/metrics"
	"github.com/berth/berth/node/nomad/nomadtest"
)

const (
	nodeID    = "11111111-2222-3333-4444-555555555555"
	running   = "aaaaaaaa-0000-0000-0000-000000000001"
	complete  = "aaaaaaaa-0000-0000-0000-000000000002"
	elsewhere = "aaaaaaaa-0000-0000-0000-000000000003"
	purged    = "aaaaaaaa-0000-0000-0000-000000000004"
	broken    = "aaaaaaaa-0000-0000-0000-000000000005"
	// noDir is unknown to Nomad and has no alloc dir.
	noDir = "aaaaaaaa-0000-0000-0000-000000000006"
)

// fakeAPI is a Nomad client agent for unit tests: this node runs
// `running` and had `complete`; `elsewhere` is on another node; `broken`
// makes Nomad fail; anything else is unknown (404).
type fakeAPI struct {
	dir     string
	lookups atomic.Int32
	end     time.Time // when `complete` turned terminal
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Nomad-Index", "42")
	alloc := func(id, node, status string, mod time.Time) map[string]any {
		return map[string]any{"ID": id, "NodeID": node, "JobID": "j", "TaskGroup": "g", "Namespace": "default",
			"ClientStatus": status, "DesiredStatus": "run", "ModifyIndex": 10, "ModifyTime": mod.UnixNano()}
	}
	switch p := r.URL.Path; {
	case p == "/v1/agent/self":
		_ = json.NewEncoder(w).Encode(map[string]any{
			"config": map[string]any{"DataDir": f.dir, "Version": map[string]any{"Version": "1.6.5"},
				"Client": map[string]any{"Enabled": true, "CNIConfigDir": filepath.Join(f.dir, "cni"), "BridgeNetworkName": "br0", "BridgeNetworkSubnet": "10.199.158.0/24"}},
			"member": map[string]any{"Name": "n.global"},
			"stats":  map[string]any{"client": map[string]any{"node_id": nodeID}},
		})
	case p == "/v1/node/"+nodeID+"/allocations":
		_ = json.NewEncoder(w).Encode([]any{alloc(running, nodeID, "running", f.end), alloc(complete, nodeID, "complete", f.end)})
	case strings.HasPrefix(p, "/v1/allocation/"):
		f.lookups.Add(1)
		switch id := strings.TrimPrefix(p, "/v1/allocation/"); id {
		case elsewhere:
			_ = json.NewEncoder(w).Encode(alloc(id, "other-node", "failed", f.end))
		case broken:
			http.Error(w, "rpc error: no cluster leader", http.StatusInternalServerError)
		default:
			http.Error(w, "alloc not found", http.StatusNotFound)
		}
	default:
		http.NotFound(w, r)
	}
}

// newTestOwner connects to a fake client agent whose host state this
// process holds (nomadtest.FakeClientState): the allocations of the test
// have alloc dirs, but for noDir.
func newTestOwner(t *testing.T, now *time.Time, cfg ...Config) (*Owner, *fakeAPI) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the client state must be root's: run as root")
	}
	f := &fakeAPI{end: now.Add(-10 * time.Minute)}
	f.dir = nomadtest.FakeClientState(t, nodeID, running, complete, elsewhere, purged, broken)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c := Config{Address: srv.URL, DataDir: f.dir}
	for _, o := range cfg {
		c = c.Over(o)
	}
	s, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	ow, err := Connect(context.Background(), s, nil, OwnerOptions{Now: func() time.Time { return *now }, NetnsDir: "/run/netns"})
	if err != nil {
		t.Fatal(err)
	}
	return ow, f
}

func TestOwnerJudge(t *testing.T) {
	// After the "client" (this process) started: an allocation that
	// turned terminal before would be one it never tears down.
	now := time.Now().Add(time.Hour).Truncate(time.Second)
	ow, f := newTestOwner(t, &now)
	if ow.Node().BridgeName != "br0" || ow.Networks()[BridgeNetwork] == nil {
		t.Fatalf("node %+v, networks %v", ow.Node(), ow.Networks())
	}
	ns := func(id string) gc.Claim {
		return gc.Claim{Kind: gc.KindNetns, ID: id, Path: "/run/netns/" + id, Since: now.Add(-2 * time.Hour)}
	}
	for _, tc := range []struct {
		name       string
		claim      gc.Claim
		owned      bool
		live, dead bool
		err        bool
		reason     string
	}{
		{"not an allocation ID", gc.Claim{Kind: gc.KindNetns, ID: "btgc-x", Path: "/run/netns/btgc-x"}, false, false, false, false, ""},
		{"namespace elsewhere", gc.Claim{Kind: gc.KindNetns, ID: running, Path: "/tmp/" + running}, false, false, false, false, ""},
		{"running", ns(running), true, true, false, false, "is running"},
		{"complete", ns(complete), true, false, true, false, "is complete since 10m0s; Nomad's CNI DEL is done"},
		{"unknown, no host evidence", ns(noDir), false, false, false, false, ""},
		{"complete, lease", gc.Claim{Kind: gc.KindLease, ID: complete, Network: "n"}, true, false, true, false, "is complete"},
		{"another node's, failed", ns(elsewhere), true, false, true, false, "of node other-node is failed"},
		{"unknown, old", ns(purged), true, false, true, false, "past the grace period of 1h0m0s"},
		{"unknown, young", gc.Claim{Kind: gc.KindNetns, ID: purged, Path: "/run/netns/" + purged, Since: now.Add(-5 * time.Minute)}, true, false, false, false, "within the grace period"},
		{"unknown, undated", gc.Claim{Kind: gc.KindIptables, ID: purged, Network: "n"}, true, false, false, false, "it was first seen 0s ago"},
		{"Nomad fails", ns(broken), true, false, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := ow.Judge(context.Background(), tc.claim)
			if v.Owned != tc.owned || v.Live != tc.live || v.Dead != tc.dead || (v.Err != nil) != tc.err {
				t.Fatalf("verdict %+v", v)
			}
			if !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("reason %q lacks %q", v.Reason, tc.reason)
			}
			if tc.owned && v.Netns != "/run/netns/"+tc.claim.ID {
				t.Errorf("netns %q", v.Netns)
			}
			if tc.owned && tc.claim.Kind == gc.KindNetns && !tc.live && !tc.err && !strings.HasSuffix(v.Rule, ":"+EvidenceAllocDir) {
				t.Errorf("rule %q does not name the alloc dir", v.Rule)
			}
		})
	}

	// After a failure no other lookup is tried until the next Refresh.
	n := f.lookups.Load()
	if v := ow.Judge(context.Background(), gc.Claim{Kind: gc.KindLease, ID: "aaaaaaaa-0000-0000-0000-000000000009", Network: "n"}); v.Err == nil || f.lookups.Load() != n {
		t.Errorf("lookup after a failure: %+v (%d calls, were %d)", v, f.lookups.Load(), n)
	}
	if _, err := ow.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := ow.Judge(context.Background(), gc.Claim{Kind: gc.KindLease, ID: "aaaaaaaa-0000-0000-0000-000000000009", Network: "n", Since: now.Add(-2 * time.Hour)}); v.Err != nil || !v.Dead || v.Rule != RuleUnknownPastGrace+":"+EvidenceLease {
		t.Errorf("after Refresh: %+v", v)
	}

	// Undated evidence ages from when it was first seen.
	now = now.Add(2 * time.Hour)
	if v := ow.Judge(context.Background(), gc.Claim{Kind: gc.KindIptables, ID: purged, Network: "n"}); !v.Dead {
		t.Errorf("undated, seen 2 h ago: %+v", v)
	}

	// A libcni cache entry of a terminal allocation is left to Nomad's
	// own teardown while its client lives and holds the allocation, up to
	// the deadline.
	fresh := &Alloc{ID: complete, NodeID: nodeID, ClientStatus: "complete", ModifyIndex: 20, ModifyTime: now.Add(-5 * time.Second).UnixNano()}
	ow.Update(fresh)
	cache := gc.Claim{Kind: gc.KindCNICache, ID: complete, Network: "n"}
	if v := ow.Judge(context.Background(), cache); v.Dead || v.Live || !strings.Contains(v.Reason, "Nomad's own teardown") || v.Rule != RuleAwaitingTeardown+":"+EvidenceCNICache {
		t.Errorf("cache entry 5 s after terminal: %+v", v)
	}
	if v := ow.Judge(context.Background(), ns(complete)); !v.Dead || v.Rule != RuleTeardownFailed+":"+EvidenceAllocDir {
		t.Errorf("namespace 5 s after terminal: %+v", v)
	}
	// Older news does not win.
	ow.Update(&Alloc{ID: complete, NodeID: nodeID, ClientStatus: "running", ModifyIndex: 5})
	now = now.Add(2 * time.Minute)
	if v := ow.Judge(context.Background(), cache); v.Dead {
		t.Errorf("cache entry 2 min after terminal, client alive: %+v", v)
	}
	now = now.Add(DefaultTeardownWait)
	if v := ow.Judge(context.Background(), cache); !v.Dead || v.Rule != RuleTeardownDeadline+":"+EvidenceCNICache {
		t.Errorf("cache entry past the deadline: %+v", v)
	}
	now = now.Add(-DefaultTeardownWait)
	// The client is done with it (its alloc dir is gone).
	if err := os.Remove(filepath.Join(f.dir, "alloc", complete)); err != nil {
		t.Fatal(err)
	}
	if v := ow.Judge(context.Background(), cache); !v.Dead || v.Rule != RuleClientReleased+":"+EvidenceCNICache {
		t.Errorf("cache entry after the client released the allocation: %+v", v)
	}
	// A client that started after the allocation turned terminal never
	// tears it down; nor one that is gone (its process no longer runs).
	ow.Update(&Alloc{ID: complete, NodeID: nodeID, ClientStatus: "complete", ModifyIndex: 30, ModifyTime: ow.Host().Started.Add(-time.Minute).UnixNano()})
	if v := ow.Judge(context.Background(), cache); !v.Dead || v.Rule != RuleClientRestarted+":"+EvidenceCNICache {
		t.Errorf("cache entry of an allocation terminal before its client started: %+v", v)
	}
	gone := *ow.host
	gone.startTicks++ // its PID is another process's now
	ow.host = &gone
	if v := ow.Judge(context.Background(), cache); !v.Dead || v.Rule != RuleClientGone+":"+EvidenceCNICache || !strings.Contains(v.Reason, "the client was killed") {
		t.Errorf("cache entry, client gone: %+v", v)
	}
	// Without host evidence a namespace is not Nomad's, unless the
	// operator opted in.
	if v := ow.Judge(context.Background(), ns(complete)); v.Owned {
		t.Errorf("namespace without alloc dir: %+v", v)
	}
	opt, _ := newTestOwner(t, &now, Config{ReclaimWithoutEvidence: true})
	if v := opt.Judge(context.Background(), ns(noDir)); !v.Dead || v.Rule != RuleUnknownPastGrace+":"+EvidenceOptIn {
		t.Errorf("opted in: %+v", v)
	}
}

// The client's identity comes from the data dir configured for berth:
// a fake agent that names another data dir, or a node the host's state
// does not record, or state that others may write, is refused; so is an
// agent answering on a port the client process does not hold.
func TestSelfChecksHostState(t *testing.T) {
	now := time.Now()
	ow, f := newTestOwner(t, &now)
	if ow.Host().NodeID != nodeID || ow.Host().PID != os.Getpid() || !ow.Host().Alive() {
		t.Fatalf("host %+v", ow.Host())
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	connect := func(dataDir string) error {
		s, err := Config{Address: srv.URL, DataDir: dataDir}.Check()
		if err != nil {
			t.Fatal(err)
		}
		_, err = Connect(context.Background(), s, nil, OwnerOptions{})
		return err
	}
	other := nomadtest.FakeClientState(t, nodeID)
	if err := connect(other); !errors.Is(err, ErrNotClient) || !strings.Contains(err.Error(), "data_dir") {
		t.Errorf("another data dir than the agent's: %v", err)
	}
	if err := os.Chmod(filepath.Join(f.dir, "client", "client-id"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := connect(f.dir); !errors.Is(err, ErrUntrustedState) {
		t.Errorf("client-id writable by others: %v", err)
	}
	if err := os.Chmod(filepath.Join(f.dir, "client", "client-id"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := connect(f.dir); err != nil {
		t.Errorf("the same again, state root's: %v", err)
	}
}

// Prefetch looks the unknown IDs up at once; Judge then asks nothing more.
func TestOwnerPrefetch(t *testing.T) {
	now := time.Now()
	ow, f := newTestOwner(t, &now, Config{ReclaimWithoutEvidence: true})
	ids := []string{running, "not-an-id"}
	for i := 0; i < 20; i++ {
		ids = append(ids, fmt.Sprintf("bbbbbbbb-0000-0000-0000-%012d", i))
	}
	ow.Prefetch(context.Background(), ids)
	if n := f.lookups.Load(); n != 20 {
		t.Errorf("%d lookups, want 20 (the running one is listed, the other is no allocation ID)", n)
	}
	for _, id := range ids[2:] {
		if v := ow.Judge(context.Background(), gc.Claim{Kind: gc.KindNetns, ID: id, Path: "/run/netns/" + id, Since: now.Add(-2 * time.Hour)}); !v.Dead {
			t.Errorf("%s: %+v", id, v)
		}
	}
	if n := f.lookups.Load(); n != 20 {
		t.Errorf("Judge asked again: %d lookups", n)
	}
	// After a failure, nothing more is asked.
	ow.Prefetch(context.Background(), []string{broken, "cccccccc-0000-0000-0000-000000000001"})
	if v := ow.Judge(context.Background(), gc.Claim{Kind: gc.KindNetns, ID: broken, Path: "/run/netns/" + broken}); v.Err == nil {
		t.Errorf("broken: %+v", v)
	}
}

// The metric's label values are the calls made.
func TestMetricCalls(t *testing.T) {
	if !slices.Equal(metrics.NomadCalls, Calls) {
		t.Errorf("metrics.NomadCalls %v, nomad.Calls %v", metrics.NomadCalls, Calls)
	}
}

func TestConfig(t *testing.T) {
	env := map[string]string{EnvAddress: "http://10.0.0.1:4646", EnvToken: "secret", EnvNamespace: "prod", EnvRegion: "eu"}
	c := FromEnv(func(k string) string { return env[k] }).Over(Config{Address: "http://127.0.0.1:5646", GracePeriod: "2h"})
	s, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if s.Address != "http://127.0.0.1:5646" || s.Token != "secret" || s.Namespace != "prod" || s.Region != "eu" || s.Grace != 2*time.Hour {
		t.Errorf("settings %+v", s)
	}
	s, err = Config{}.Check()
	if err != nil || s.Address != DefaultAddress || s.Namespace != AllNamespaces || s.Grace != DefaultGracePeriod {
		t.Errorf("defaults %+v %v", s, err)
	}
	for _, bad := range []Config{
		{Address: "127.0.0.1:4646"},
		{Address: "ftp://x"},
		{GracePeriod: "soon"},
		{GracePeriod: "-1h"},
		{ClientCert: "/x"},
		{CACert: "/nonexistent/ca.pem"},
	} {
		if _, err := bad.Check(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
