package attach

import (
	"context"

	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

// NetEntry is one namespace of the netns dir, or one pending teardown
// whose namespace is already gone, joined with berth's record of it.
type NetEntry struct {
	Name      string         `json:"name"`
	Path      string         `json:"path"`
	Pinned    bool           `json:"pinned"`
	Berth     bool           `json:"berth"`
	Network   string         `json:"network,omitempty"`
	Phase     store.Phase    `json:"phase,omitempty"`
	IPv4      []string       `json:"ipv4,omitempty"`
	AllocID   string         `json:"alloc_id,omitempty"`
	LastError string         `json:"last_error,omitempty"`
	Holders   []netns.Holder `json:"holders"`
}

// ListNamespaces joins the namespace directory with berth's records. It
// never returns nil on success, so that JSON shows an empty list.
func ListNamespaces(ctx context.Context, m *Manager) ([]NetEntry, error) {
	entries, err := m.o.Netns.List(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*store.Attachment{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	out := []NetEntry{}
	add := func(e NetEntry, r *store.Attachment) {
		if r != nil {
			e.Berth, e.Network, e.Phase, e.AllocID, e.LastError = true, r.Network, r.Phase, r.AllocID, r.LastError
			if res, err := cni.ParseResult(r.Result, r.IfName); err == nil {
				e.IPv4 = res.Status.IPv4
			}
		}
		if e.Pinned {
			e.Holders, _ = netns.Holders(ctx, e.Path)
		}
		if e.Holders == nil {
			e.Holders = []netns.Holder{}
		}
		out = append(out, e)
	}
	for _, e := range entries {
		r := byID[e.Name]
		delete(byID, e.Name)
		add(NetEntry{Name: e.Name, Path: e.Path, Pinned: e.Pinned}, r)
	}
	// Records whose namespace is gone: pending teardowns.
	for _, r := range recs {
		if _, ok := byID[r.ID]; ok {
			add(NetEntry{Name: r.ID, Path: r.NetnsPath}, r)
		}
	}
	return out, nil
}
