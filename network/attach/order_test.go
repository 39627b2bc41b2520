package attach_test

// The ordering of the attachment state machine, against fakes (fake_test.go):
// no root, nothing on the host. The root tests in attach_test.go run the
// same machine against real namespaces and plugins.

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/store"
)

var (
	errStore = errors.New("fake store failure")
	errNetns = errors.New("fake netns failure")
	errAdd   = errors.New("fake ADD failure")
	errCheck = errors.New("fake CHECK failure")
	errDel   = errors.New("fake DEL failure")
	errRm    = errors.New("fake remove failure")
)

const testID = "btunit-1"

func fakeNetwork(t *testing.T) *cni.Network {
	t.Helper()
	n, err := cni.ParseNetwork([]byte(`{"cniVersion":"1.0.0","name":"btunit","plugins":[
		{"type":"bridge","bridge":"btunit0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.199.107.0/24"}]]}}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func assertOps(t *testing.T, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps:\n got  %q\n want %q", got, want)
	}
}

// assertState checks what is left of testID: its record's phase ("" for
// none) and whether its namespace is pinned.
func assertState(t *testing.T, f *fakes, phase store.Phase, pinned bool) {
	t.Helper()
	r, ok := f.record(testID)
	switch {
	case phase == "" && ok:
		t.Errorf("record left in phase %s", r.Phase)
	case phase != "" && !ok:
		t.Errorf("no record, want one in phase %s", phase)
	case ok && r.Phase != phase:
		t.Errorf("record in phase %s, want %s", r.Phase, phase)
	}
	if f.isPinned(testID) != pinned {
		t.Errorf("namespace pinned = %v, want %v", !pinned, pinned)
	}
}

// The happy path and every exit of create: whatever failed, what was
// acquired is undone in order, and only once undone is the record gone.
func TestOrderSetup(t *testing.T) {
	made := []string{"put intent", "create", "add"}
	undone := []string{"put tearing-down", "del", "remove", "delete record"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name string
		// alloc makes the attachment an allocation's (no tearing-down
		// mark for a ready record).
		alloc   bool
		fail    map[string]error
		wantErr []error
		ops     []string
		phase   store.Phase
		pinned  bool
	}{
		{name: "ready", ops: cat(made, []string{"put ready"}), phase: store.PhaseReady, pinned: true},
		{name: "intent not recorded", fail: map[string]error{"put intent": errStore}, wantErr: []error{errStore},
			ops: []string{"put intent !"}},
		{name: "namespace not created", fail: map[string]error{"create": errNetns}, wantErr: []error{errNetns},
			ops: []string{"put intent", "create !", "delete record"}},
		{name: "ADD fails", fail: map[string]error{"add": errAdd}, wantErr: []error{errAdd},
			ops: cat([]string{"put intent", "create", "add !"}, undone)},
		{name: "ready not recorded", fail: map[string]error{"put ready": errStore}, wantErr: []error{errStore},
			ops: cat(made, []string{"put ready !"}, undone)},
		{name: "allocation's ready not recorded", alloc: true, fail: map[string]error{"put ready": errStore}, wantErr: []error{errStore},
			ops: cat(made, []string{"put ready !", "del", "remove", "delete record"})},
		// The undo failing too leaves a pending teardown, never a
		// namespace without a record.
		{name: "ADD and its DEL fail", fail: map[string]error{"add": errAdd, "del": errDel}, wantErr: []error{errAdd, errDel},
			ops:   []string{"put intent", "create", "add !", "put tearing-down", "del !", "put tearing-down"},
			phase: store.PhaseTearingDown, pinned: true},
		{name: "ADD and removal fail", fail: map[string]error{"add": errAdd, "remove": errRm}, wantErr: []error{errAdd, errRm},
			ops:   []string{"put intent", "create", "add !", "put tearing-down", "del", "remove !", "put tearing-down"},
			phase: store.PhaseTearingDown, pinned: true},
		{name: "intent not deleted", fail: map[string]error{"create": errNetns, "delete record": errStore}, wantErr: []error{errNetns, errStore},
			ops: []string{"put intent", "create !", "delete record !"}, phase: store.PhaseIntent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			for op, err := range tc.fail {
				f.failNext(op, err)
			}
			m := f.manager(t)
			req := attach.Request{ID: testID, Config: fakeNetwork(t)}
			if tc.alloc {
				req.AllocID = "alloc-1"
			}
			st, err := m.Setup(ctxT(t), req)
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not wrap %v", err, want)
				}
			}
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("setup: %v", err)
				}
				if !st.Created || st.NetnsPath != fakeNetnsDir+"/"+testID || len(st.IPv4) != 1 {
					t.Errorf("status %+v", st)
				}
			} else if err != nil && !strings.Contains(err.Error(), testID) {
				t.Errorf("error does not name the ID: %v", err)
			}
			assertOps(t, f.take(), tc.ops)
			assertState(t, f, tc.phase, tc.pinned)
			if tc.phase == store.PhaseTearingDown {
				if r, _ := f.record(testID); r.TeardownAttempts != 1 || r.LastError == "" {
					t.Errorf("pending teardown without its attempt: %+v", r)
				}
			}
		})
	}
}

// A namespace that appears under the ID during setup (another runtime
// racing berth) is not berth's: the undo deletes the intent and neither
// DELs nor removes that namespace.
func TestOrderSetupForeignNamespace(t *testing.T) {
	for _, when := range []string{"before setup", "during setup"} {
		t.Run(when, func(t *testing.T) {
			f := newFakes()
			m := f.manager(t)
			if when == "before setup" {
				f.pin(testID, true)
			} else {
				f.before["create"] = func() { f.pin(testID, true) }
			}
			_, err := m.Setup(ctxT(t), attach.Request{ID: testID, Config: fakeNetwork(t)})
			if !errors.Is(err, attach.ErrNotOwned) {
				t.Errorf("setup: %v, want ErrNotOwned", err)
			}
			for _, op := range f.take() {
				if (strings.HasPrefix(op, "del") && !strings.HasPrefix(op, "delete")) || strings.HasPrefix(op, "remove") {
					t.Errorf("touched the foreign namespace: %q", op)
				}
			}
			assertState(t, f, "", true)
		})
	}
}

// A damaged record stops Setup before it changes anything: only a
// teardown (from libcni's cache) may replace it.
func TestOrderSetupDamagedRecord(t *testing.T) {
	f := newFakes()
	m := f.manager(t)
	f.corrupt[testID] = true
	if _, err := m.Setup(ctxT(t), attach.Request{ID: testID, Config: fakeNetwork(t)}); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("setup over a damaged record: %v, want store.ErrCorrupt", err)
	}
	assertOps(t, f.take(), nil)
}

// A setup whose context ends mid-way is still undone, on a context of its
// own: no undo step sees the ended context.
func TestOrderSetupCancelledStillUndoes(t *testing.T) {
	for _, at := range []string{"add", "put ready"} {
		t.Run(at, func(t *testing.T) {
			f := newFakes()
			m := f.manager(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f.before[at] = cancel
			_, err := m.Setup(ctx, attach.Request{ID: testID, Config: fakeNetwork(t)})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("setup: %v, want context.Canceled", err)
			}
			want := []string{"put tearing-down", "del", "remove", "delete record"}
			if at == "put ready" {
				want = append([]string{"put intent", "create", "add", "put ready (ctx done)"}, want...)
			} else {
				want = append([]string{"put intent", "create", "add (ctx done)"}, want...)
			}
			assertOps(t, f.take(), want)
			assertState(t, f, "", false)
		})
	}
}

// Teardown: DEL while the namespace is pinned, then removal, then the
// record; a failed step keeps the record (tearing down, with attempts and
// backoff) and everything after the failed step.
func TestOrderTeardown(t *testing.T) {
	tests := []struct {
		name string
		// prepare sets up what Teardown finds; by default a ready
		// attachment of `berth net up`.
		prepare func(t *testing.T, f *fakes, m *attach.Manager)
		fail    map[string]error
		wantErr error
		ops     []string
		phase   store.Phase
		pinned  bool
	}{
		{name: "ready", ops: []string{"put tearing-down", "del", "remove", "delete record"}},
		{name: "allocation's, no mark", prepare: setupAlloc, ops: []string{"del", "remove", "delete record"}},
		{name: "namespace vanished", prepare: func(t *testing.T, f *fakes, m *attach.Manager) {
			setupNetUp(t, f, m)
			f.pin(testID, false)
		}, ops: []string{"put tearing-down", "del without netns", "remove", "delete record"}},
		{name: "intent without a namespace: no DEL", prepare: func(t *testing.T, f *fakes, m *attach.Manager) {
			f.recs[testID] = store.Attachment{ID: testID, NetnsPath: fakeNetnsDir + "/" + testID, Network: "btunit", Phase: store.PhaseIntent}
		}, ops: []string{"put tearing-down", "remove", "delete record"}},
		{name: "DEL fails", fail: map[string]error{"del": errDel}, wantErr: errDel,
			ops: []string{"put tearing-down", "del !", "put tearing-down"}, phase: store.PhaseTearingDown, pinned: true},
		{name: "removal fails", fail: map[string]error{"remove": errRm}, wantErr: errRm,
			ops: []string{"put tearing-down", "del", "remove !", "put tearing-down"}, phase: store.PhaseTearingDown, pinned: true},
		{name: "mark fails: nothing done", fail: map[string]error{"put tearing-down": errStore}, wantErr: errStore,
			ops: []string{"put tearing-down !"}, phase: store.PhaseReady, pinned: true},
		{name: "record not deleted", fail: map[string]error{"delete record": errStore}, wantErr: errStore,
			ops: []string{"put tearing-down", "del", "remove", "delete record !"}, phase: store.PhaseTearingDown},
		{name: "from libcni's cache", prepare: func(t *testing.T, f *fakes, m *attach.Manager) {
			f.pin(testID, true)
			f.cacheEntry(t, "btunit", map[string]string{"BERTH_ID": testID, "BERTH_STORE": "fake-store"})
		}, ops: []string{"del", "remove", "delete record"}},
		{name: "damaged record, torn down from the cache", prepare: func(t *testing.T, f *fakes, m *attach.Manager) {
			setupNetUp(t, f, m)
			f.cacheEntry(t, "btunit", map[string]string{"BERTH_ID": testID, "BERTH_STORE": "fake-store"})
			f.corrupt[testID] = true
		}, ops: []string{"del", "remove", "delete record"}},
		{name: "damaged record, nothing on the host", prepare: func(t *testing.T, f *fakes, m *attach.Manager) {
			f.corrupt[testID] = true
		}, ops: []string{"delete record"}},
		{name: "another berth's cache entry", prepare: func(t *testing.T, f *fakes, m *attach.Manager) {
			f.pin(testID, true)
			f.cacheEntry(t, "btunit", map[string]string{"BERTH_ID": testID, "BERTH_STORE": "other"})
		}, wantErr: attach.ErrNotOwned, pinned: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			m := f.manager(t)
			prepare := tc.prepare
			if prepare == nil {
				prepare = setupNetUp
			}
			prepare(t, f, m)
			f.take()
			for op, err := range tc.fail {
				f.failNext(op, err)
			}
			before := time.Now()
			_, err := m.Teardown(ctxT(t), testID)
			after := time.Now()
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("teardown: %v, want %v", err, tc.wantErr)
			}
			assertOps(t, f.take(), tc.ops)
			assertState(t, f, tc.phase, tc.pinned)
			if r, _ := f.record(testID); tc.phase == store.PhaseTearingDown && tc.fail["delete record"] == nil {
				assertRetry(t, r, 1, before, after)
			}
		})
	}
}

// A teardown that keeps failing backs off exponentially, keeps the
// namespace for DEL, and finishes once DEL works. The process tearing
// down takes the record over from the one that made it.
func TestOrderTeardownRetries(t *testing.T) {
	f := newFakes()
	m := f.manager(t)
	setupNetUp(t, f, m)
	r := f.recs[testID]
	r.OwnerPID, r.OwnerStartTime = 1111, 3
	f.recs[testID] = r
	for n := 1; n <= 3; n++ {
		f.failNext("del", errDel)
		before := time.Now()
		if _, err := m.Teardown(ctxT(t), testID); !errors.Is(err, errDel) {
			t.Fatalf("teardown #%d: %v, want the DEL failure", n, err)
		}
		r, _ := f.record(testID)
		assertRetry(t, r, n, before, time.Now())
		assertState(t, f, store.PhaseTearingDown, true)
		if r.OwnerPID != 4242 || r.OwnerStartTime != 17 {
			t.Errorf("owner %d/%d, want the tearing-down process 4242/17", r.OwnerPID, r.OwnerStartTime)
		}
	}
	f.take()
	if _, err := m.Teardown(ctxT(t), testID); err != nil {
		t.Fatalf("teardown after the failures: %v", err)
	}
	assertOps(t, f.take(), []string{"del", "remove", "delete record"})
	assertState(t, f, "", false)
}

// A teardown whose context ends during DEL still records the failure.
func TestOrderTeardownCancelledRecordsFailure(t *testing.T) {
	f := newFakes()
	m := f.manager(t)
	setupNetUp(t, f, m)
	f.take()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.before["del"] = cancel
	if _, err := m.Teardown(ctx, testID); !errors.Is(err, context.Canceled) {
		t.Errorf("teardown: %v, want context.Canceled", err)
	}
	assertOps(t, f.take(), []string{"put tearing-down", "del (ctx done)", "put tearing-down"})
	assertState(t, f, store.PhaseTearingDown, true)
}

func assertRetry(t *testing.T, r store.Attachment, attempts int, before, after time.Time) {
	t.Helper()
	b := attach.RetryBackoff(attempts)
	if r.TeardownAttempts != attempts || r.LastError == "" || r.NextAttempt.Before(before.Add(b)) || r.NextAttempt.After(after.Add(b)) {
		t.Errorf("attempts %d, last error %q, next attempt in %v; want %d attempts and the next in %v",
			r.TeardownAttempts, r.LastError, r.NextAttempt.Sub(before), attempts, b)
	}
}

func setupNetUp(t *testing.T, f *fakes, m *attach.Manager) {
	t.Helper()
	if _, err := m.Setup(ctxT(t), attach.Request{ID: testID, Config: fakeNetwork(t)}); err != nil {
		t.Fatal(err)
	}
}

func setupAlloc(t *testing.T, f *fakes, m *attach.Manager) {
	t.Helper()
	if _, err := m.Setup(ctxT(t), attach.Request{ID: testID, Config: fakeNetwork(t), AllocID: "alloc-1"}); err != nil {
		t.Fatal(err)
	}
}

// A second Setup of a ready attachment CHECKs it; a CHECK failure tears
// it down and creates it once more; if that fails too, the error carries
// both causes.
func TestOrderCheckHeal(t *testing.T) {
	heal := []string{"check !", "put tearing-down", "del", "remove", "delete record"}
	tests := []struct {
		name    string
		fail    map[string]error
		wantErr []error
		ops     []string
		healed  bool
		phase   store.Phase
		pinned  bool
	}{
		{name: "healthy", ops: []string{"check"}, phase: store.PhaseReady, pinned: true},
		{name: "healed", fail: map[string]error{"check": errCheck},
			ops:    append(heal, "put intent", "create", "add", "put ready"),
			healed: true, phase: store.PhaseReady, pinned: true},
		{name: "recreate fails", fail: map[string]error{"check": errCheck, "add": errAdd},
			wantErr: []error{attach.ErrCheckFailed, errCheck, errAdd},
			ops:     append(heal, "put intent", "create", "add !", "put tearing-down", "del", "remove", "delete record")},
		{name: "teardown before recreate fails", fail: map[string]error{"check": errCheck, "del": errDel},
			wantErr: []error{attach.ErrCheckFailed, errCheck, errDel},
			ops:     []string{"check !", "put tearing-down", "del !", "put tearing-down"},
			phase:   store.PhaseTearingDown, pinned: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			m := f.manager(t)
			setupNetUp(t, f, m)
			f.take()
			for op, err := range tc.fail {
				f.failNext(op, err)
			}
			st, err := m.Setup(ctxT(t), attach.Request{ID: testID, Config: fakeNetwork(t)})
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not wrap %v", err, want)
				}
			}
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("setup: %v", err)
				}
				if st.Created != tc.healed || (st.Healed != "") != tc.healed {
					t.Errorf("created %v, healed %q; want healed %v", st.Created, st.Healed, tc.healed)
				}
			}
			assertOps(t, f.take(), tc.ops)
			assertState(t, f, tc.phase, tc.pinned)
		})
	}
}

// Check reports a CHECK failure without healing, and a namespace gone
// behind berth's back as one.
func TestOrderCheckDoesNotHeal(t *testing.T) {
	f := newFakes()
	m := f.manager(t)
	setupNetUp(t, f, m)
	f.take()
	f.failNext("check", errCheck)
	if _, err := m.Check(ctxT(t), testID); !errors.Is(err, attach.ErrCheckFailed) || !errors.Is(err, errCheck) {
		t.Errorf("check: %v, want ErrCheckFailed wrapping the plugin's error", err)
	}
	assertOps(t, f.take(), []string{"check !"})
	assertState(t, f, store.PhaseReady, true)

	f.pin(testID, false)
	if _, err := m.Check(ctxT(t), testID); !errors.Is(err, attach.ErrCheckFailed) {
		t.Errorf("check without the namespace: %v, want ErrCheckFailed", err)
	}
	assertOps(t, f.take(), nil)
}

// Reclaim tears down only what its judge, asked under the ID's lock,
// still finds garbage.
func TestOrderReclaim(t *testing.T) {
	for _, still := range []bool{false, true} {
		f := newFakes()
		m := f.manager(t)
		setupNetUp(t, f, m)
		f.take()
		var judged store.Phase
		_, done, err := m.Reclaim(ctxT(t), testID, func(r *store.Attachment) bool { judged = r.Phase; return still })
		if err != nil || done != still || judged != store.PhaseReady {
			t.Errorf("still=%v: reclaimed %v, err %v, judged a record in phase %q", still, done, err, judged)
		}
		if still {
			assertOps(t, f.take(), []string{"put tearing-down", "del", "remove", "delete record"})
			assertState(t, f, "", false)
		} else {
			assertOps(t, f.take(), nil)
			assertState(t, f, store.PhaseReady, true)
		}
	}
}

func TestOrderTidyNetwork(t *testing.T) {
	tests := []struct {
		name     string
		attached bool
		ports    int
		ops      []string
		removed  []string
		kept     int
	}{
		{name: "idle", ops: []string{"remove bridge btunit0", "remove host-local dir btunit", "tidy shared chains"},
			removed: []string{"bridge btunit0", "host-local dir of btunit"}},
		{name: "bridge in use by another runtime", ports: 2, ops: []string{"remove bridge btunit0", "remove host-local dir btunit", "tidy shared chains"},
			removed: []string{"host-local dir of btunit"}, kept: 1},
		{name: "still attached", attached: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			f.ports = tc.ports
			m := f.manager(t)
			if tc.attached {
				setupNetUp(t, f, m)
				f.take()
			}
			rep, err := m.TidyNetwork(ctxT(t), fakeNetwork(t), hostclean.Plan{})
			if err != nil {
				t.Fatal(err)
			}
			assertOps(t, f.take(), tc.ops)
			if !reflect.DeepEqual(rep.Removed, tc.removed) || len(rep.Kept) != tc.kept || (rep.Skipped != "") != tc.attached {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

// The JSON of Timings is that of the map it replaced: the same keys, in
// the same (sorted) order, a step that did not run absent.
func TestOrderTimingsJSON(t *testing.T) {
	all := attach.Timings{Add: 1, Check: 2, Del: 3, HealTeardown: 4, Netns: 5, Record: 6, Remove: 7.5}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"add":1,"check":2,"del":3,"heal_teardown":4,"netns":5,"record":6,"remove":7.5}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	if b, _ := json.Marshal(attach.Timings{Netns: 0.25}); string(b) != `{"netns":0.25}` {
		t.Errorf("partial: %s", b)
	}
	if b, _ := json.Marshal(attach.TeardownReport{ID: "x", Nothing: true}); !strings.Contains(string(b), `"timings_ms":{}`) {
		t.Errorf("nothing to do: %s", b)
	}
}
