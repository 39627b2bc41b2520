package attach_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

// fakes stand in for the store, the namespaces, the plugins and the host
// cleaner: they change nothing on the host and need no root. Every call
// that changes something is written to one journal, so that a test can
// assert the order of the steps across all of them.
type fakes struct {
	mu  sync.Mutex
	ops []string
	// fail holds errors to return from the next calls of an op, in turn.
	fail map[string][]error
	// before runs just before an op is attempted (to cancel a context).
	before map[string]func()

	recs map[string]store.Attachment
	// corrupt records do not decode (store.ErrCorrupt) until deleted.
	corrupt map[string]bool
	pinned  map[string]bool
	// cacheDir stands for libcni's cache dir; the tests write entries in
	// libcni's format into it (cacheEntry).
	cacheDir string
	// ports is what RemoveBridgeIfUnused reports.
	ports int
}

const fakeNetnsDir = "/fake/netns"

func newFakes() *fakes {
	return &fakes{fail: map[string][]error{}, before: map[string]func(){}, recs: map[string]store.Attachment{}, corrupt: map[string]bool{}, pinned: map[string]bool{}}
}

// manager is an attach.Manager over f, its locks and cache in
// temporary dirs.
func (f *fakes) manager(t *testing.T) *attach.Manager {
	f.cacheDir = t.TempDir()
	m := attach.New(attach.Options{
		Netns: (*fakeNetns)(f), CNI: (*fakeCNI)(f), Host: (*fakeHost)(f), Store: (*fakeStore)(f),
		Logger:  slog.New(slog.DiscardHandler),
		LockDir: t.TempDir(), OwnerPID: 4242, OwnerStartTime: 17,
	})
	attach.SetHostLockDir(m, t.TempDir())
	return m
}

// failNext makes the next call of op fail with err (after earlier queued
// failures of op).
func (f *fakes) failNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = append(f.fail[op], err)
}

// do journals op and says how it ends: the context's error when it has
// ended (written "op (ctx done)"), a queued failure ("op !"), or nil.
// The caller holds f.mu.
func (f *fakes) do(ctx context.Context, op string) error {
	if fn := f.before[op]; fn != nil {
		f.mu.Unlock()
		fn()
		f.mu.Lock()
	}
	if err := ctx.Err(); err != nil {
		f.ops = append(f.ops, op+" (ctx done)")
		return err
	}
	if q := f.fail[op]; len(q) > 0 {
		f.fail[op] = q[1:]
		if q[0] != nil {
			f.ops = append(f.ops, op+" !")
			return q[0]
		}
	}
	f.ops = append(f.ops, op)
	return nil
}

// take returns the journal so far and empties it.
func (f *fakes) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// cacheEntry writes a libcni cache entry for testID on network with the
// given CNI_ARGS, as libcni does after an ADD.
func (f *fakes) cacheEntry(t *testing.T, network string, args map[string]string) {
	t.Helper()
	var cniArgs [][2]string
	for k, v := range args {
		cniArgs = append(cniArgs, [2]string{k, v})
	}
	b, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": testID, "networkName": network, "ifName": "eth0",
		"netns": filepath.Join(fakeNetnsDir, testID), "cniArgs": cniArgs,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.cacheDir, "results")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, network+"-"+testID+"-eth0"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f *fakes) record(id string) (store.Attachment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[id]
	return r, ok
}

func (f *fakes) isPinned(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pinned[filepath.Join(fakeNetnsDir, id)]
}

// pin and unpin change the namespaces behind berth's back.
func (f *fakes) pin(id string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pinned[filepath.Join(fakeNetnsDir, id)] = on
}

type fakeStore fakes

func (s *fakeStore) f() *fakes { return (*fakes)(s) }

func (s *fakeStore) ID() string { return "fake-store" }

func (s *fakeStore) PutAttachment(ctx context.Context, a *store.Attachment) error {
	f := s.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.do(ctx, "put "+string(a.Phase)); err != nil {
		return err
	}
	f.recs[a.ID] = *a
	return nil
}

func (s *fakeStore) GetAttachment(ctx context.Context, id string) (*store.Attachment, error) {
	f := s.f()
	f.mu.Lock()
	corrupt := f.corrupt[id]
	f.mu.Unlock()
	if corrupt {
		return nil, fmt.Errorf("attachment %s: %w", id, store.ErrCorrupt)
	}
	r, ok := f.record(id)
	if !ok {
		return nil, fmt.Errorf("attachment %s: %w", id, store.ErrNotFound)
	}
	return &r, nil
}

func (s *fakeStore) DeleteAttachment(ctx context.Context, id string) error {
	f := s.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.do(ctx, "delete record"); err != nil {
		return err
	}
	delete(f.recs, id)
	delete(f.corrupt, id)
	return nil
}

func (s *fakeStore) ListAttachments(ctx context.Context) ([]*store.Attachment, error) {
	f := s.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*store.Attachment
	for _, r := range f.recs {
		out = append(out, &r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

type fakeNetns fakes

func (n *fakeNetns) f() *fakes { return (*fakes)(n) }

func (n *fakeNetns) Dir() string { return fakeNetnsDir }

func (n *fakeNetns) Path(id string) string { return filepath.Join(fakeNetnsDir, id) }

func (n *fakeNetns) IsPinned(path string) (bool, error) {
	f := n.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pinned[path], nil
}

func (n *fakeNetns) Create(ctx context.Context, id string) (string, error) {
	f := n.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	path := n.Path(id)
	if err := f.do(ctx, "create"); err != nil {
		return "", err
	}
	if f.pinned[path] {
		return "", fmt.Errorf("create netns %s: %w", path, netns.ErrExists)
	}
	f.pinned[path] = true
	return path, nil
}

func (n *fakeNetns) RemovePath(ctx context.Context, path string) (*netns.RemoveReport, error) {
	f := n.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	rep := &netns.RemoveReport{Path: path, Existed: f.pinned[path]}
	if err := f.do(ctx, "remove"); err != nil {
		return rep, err
	}
	delete(f.pinned, path)
	return rep, nil
}

func (n *fakeNetns) List(ctx context.Context) ([]netns.Entry, error) {
	f := n.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netns.Entry
	for p, on := range f.pinned {
		if on {
			out = append(out, netns.Entry{Name: filepath.Base(p), Path: p, Pinned: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

type fakeCNI fakes

func (c *fakeCNI) f() *fakes { return (*fakes)(c) }

func (c *fakeCNI) Add(ctx context.Context, nw *cni.Network, a *cni.Attachment) (*cni.Result, error) {
	f := c.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.pinned[a.NetNS] {
		f.ops = append(f.ops, "add without netns")
		return nil, fmt.Errorf("fake ADD: no namespace at %q", a.NetNS)
	}
	if err := f.do(ctx, "add"); err != nil {
		return nil, err
	}
	_, ipn, _ := net.ParseCIDR("10.199.107.0/24")
	ipn.IP = net.ParseIP("10.199.107.2").To4()
	idx := 0
	r := &types100.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: a.IfName, Sandbox: a.NetNS}},
		IPs:        []*types100.IPConfig{{Interface: &idx, Address: *ipn}},
	}
	return cni.NewResult(r, a.IfName)
}

func (c *fakeCNI) Check(ctx context.Context, nw *cni.Network, a *cni.Attachment) error {
	f := c.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.do(ctx, "check")
}

// Del journals "del" inside a pinned namespace, "del without netns" when
// berth sent none, and "del on a missing netns" when berth named one that
// is gone (which the ordering must never do).
func (c *fakeCNI) Del(ctx context.Context, nw *cni.Network, netName string, a *cni.Attachment) error {
	f := c.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	op := "del"
	switch {
	case a.NetNS == "":
		op = "del without netns"
	case !f.pinned[a.NetNS]:
		op = "del on a missing netns"
	}
	return f.do(ctx, op)
}

func (c *fakeCNI) CachedResult(nw *cni.Network, a *cni.Attachment) (*cni.Result, error) {
	return nil, nil
}

func (c *fakeCNI) CacheDir() string { return c.f().cacheDir }

type fakeHost fakes

func (h *fakeHost) f() *fakes { return (*fakes)(h) }

func (h *fakeHost) RemoveBridgeIfUnused(ctx context.Context, name string, _ hostclean.Plan) (int, error) {
	f := h.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.do(ctx, "remove bridge "+name); err != nil {
		return -1, err
	}
	return f.ports, nil
}

func (h *fakeHost) RemoveHostLocalDirIfEmpty(ctx context.Context, network string, _ hostclean.Plan) (bool, error) {
	f := h.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	return true, f.do(ctx, "remove host-local dir "+network)
}

func (h *fakeHost) TidySharedChains(ctx context.Context, _ hostclean.Plan) ([]string, error) {
	f := h.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	return nil, f.do(ctx, "tidy shared chains")
}
