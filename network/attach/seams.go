package attach

import (
	"context"

	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
)

// The host-changing parts of an attachment, each the subset of its
// package that attach calls: the real ones by default (New), fakes in
// the unit tests of the state machine's ordering, which then need no
// root and leave the host alone.

// Namespaces pins and removes network namespaces; *netns.Manager is the
// real one.
type Namespaces interface {
	// Dir is the directory namespaces are pinned in: the only one attach
	// enters or removes a namespace in.
	Dir() string
	// Path is where the namespace of id is (or would be) pinned.
	Path(id string) string
	// IsPinned reports whether path is a mounted network namespace.
	IsPinned(path string) (bool, error)
	// Create makes and pins the namespace of id, leaving nothing on
	// failure; netns.ErrExists when something is already at its path.
	Create(ctx context.Context, id string) (string, error)
	// RemovePath unmounts and unlinks the namespace at path; gone is
	// success.
	RemovePath(ctx context.Context, path string) (*netns.RemoveReport, error)
	// List returns the entries of the namespace directory.
	List(ctx context.Context) ([]netns.Entry, error)
}

// CNI runs the plugin chain of a network; *cni.Client is the real one.
type CNI interface {
	Add(ctx context.Context, net *cni.Network, a *cni.Attachment) (*cni.Result, error)
	Check(ctx context.Context, net *cni.Network, a *cni.Attachment) error
	// Del releases an attachment; net may be nil when only the network's
	// name is known (a record rebuilt from the cache).
	Del(ctx context.Context, net *cni.Network, netName string, a *cni.Attachment) error
	// CachedResult is libcni's cached ADD result of a, or nil.
	CachedResult(net *cni.Network, a *cni.Attachment) (*cni.Result, error)
	// CacheDir is libcni's cache directory, read through evidence.ReadCache.
	CacheDir() string
}

// HostCleaner removes what a network's plugins leave on the host by
// design (bridge, host-local directory, shared iptables chains) when
// nothing uses it; hostclean.Host is the real one.
type HostCleaner interface {
	// RemoveBridgeIfUnused reports the bridge's ports: 0 when it deleted
	// it, more when it kept it, -1 when there was none.
	// A dry run (hostclean.Plan) changes nothing and says what would go.
	RemoveBridgeIfUnused(ctx context.Context, name string, p hostclean.Plan) (int, error)
	RemoveHostLocalDirIfEmpty(ctx context.Context, network string, p hostclean.Plan) (bool, error)
	TidySharedChains(ctx context.Context, p hostclean.Plan) ([]string, error)
}

var (
	_ Namespaces  = (*netns.Manager)(nil)
	_ CNI         = (*cni.Client)(nil)
	_ HostCleaner = hostclean.Host{}
)
