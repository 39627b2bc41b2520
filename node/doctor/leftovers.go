package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

// Finding is one leftover garbage collection would reclaim; the fields
// are those of gc's report items.
type Finding struct {
	Kind    string `json:"kind"`
	ID      string `json:"id,omitempty"`
	Network string `json:"network,omitempty"`
	Path    string `json:"path,omitempty"`
	Reason  string `json:"reason"`
}

func (f Finding) String() string {
	s := f.Kind
	if f.ID != "" {
		s += " " + f.ID
	}
	if f.Network != "" {
		s += " (network " + f.Network + ")"
	}
	if f.Path != "" {
		s += " at " + f.Path
	}
	return s + ": " + f.Reason
}

// LeakFinder lists what gc would reclaim, without reclaiming it. The CLI
// wires it to a dry run of gc.
type LeakFinder func(ctx context.Context) ([]Finding, error)

// maxListed bounds how many leftovers a check's message names.
const maxListed = 20

// CheckLeftovers reports what find finds. Leftovers are a warning, not a
// failure: some may belong to another tool sharing the directories.
func CheckLeftovers(ctx context.Context, find LeakFinder) Check {
	c := Check{Name: "leftovers"}
	if find == nil {
		c.Status, c.Message = StatusSkip, "no leak finder configured"
		return c
	}
	fs, err := find(ctx)
	if err != nil {
		switch {
		case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrNewerSchema):
			c.Status = StatusSkip
			c.Message = "berth's records cannot be read (see the store check); without them every namespace would look leaked"
			return c
		}
		c.Status = StatusWarn
		c.Message = fmt.Sprintf("could not look for leftovers: %v", err)
		c.Fix = "fix the error above (berth gc needs the same access)"
		return c
	}
	if len(fs) == 0 {
		c.Status, c.Message = StatusOK, "nothing for gc to reclaim"
		return c
	}
	lines := make([]string, 0, min(len(fs), maxListed))
	for i, f := range fs {
		if i == maxListed {
			lines = append(lines, fmt.Sprintf("... and %d more", len(fs)-maxListed))
			break
		}
		lines = append(lines, f.String())
	}
	c.Status = StatusWarn
	c.Message = fmt.Sprintf("%d leftover(s) gc would reclaim: %s", len(fs), strings.Join(lines, "; "))
	c.Fix = "berth gc (review the list first: anything here that another tool owns is not berth's to remove)"
	return c
}

// BasicLeakOptions configure BasicLeakFinder. Empty fields take the defaults.
type BasicLeakOptions struct {
	// Netns lists the pinned namespaces and OpenStore opens berth's
	// store: the node's (node.Node.Netns, node.Node.ReadStore); required.
	Netns        *netns.Manager
	OpenStore    StoreOpener
	DataDir      string // berth's store; required
	ConfDir      string // cni.DefaultConfDir: berth's networks
	HostLocalDir string // evidence.HostLocalDir
	CNICacheDir  string // cni.DefaultCacheDir
}

// BasicLeakFinder is a read-only stand-in for a gc dry run: namespaces in
// the netns dir that berth's store does not know, and host-local leases of
// berth's networks (those in the config dir or in the store) held by
// container IDs the store does not know. Namespaces and IDs that libcni
// cache entries of another runtime or of another berth (another data dir)
// name are theirs (evidence.Owned) and are not reported.
func BasicLeakFinder(o BasicLeakOptions) LeakFinder {
	if o.ConfDir == "" {
		o.ConfDir = cni.DefaultConfDir
	}
	if o.HostLocalDir == "" {
		o.HostLocalDir = evidence.HostLocalDir
	}
	if o.CNICacheDir == "" {
		o.CNICacheDir = cni.DefaultCacheDir
	}
	return func(ctx context.Context) ([]Finding, error) {
		return basicLeaks(ctx, o)
	}
}

func basicLeaks(ctx context.Context, o BasicLeakOptions) ([]Finding, error) {
	if o.DataDir == "" || o.Netns == nil || o.OpenStore == nil {
		return nil, errors.New("find leftovers: no data dir, netns manager or store opener")
	}
	recs, err := readRecords(ctx, o.DataDir, o.OpenStore)
	if err != nil {
		return nil, err
	}
	knownID := map[string]bool{}
	knownPath := map[string]bool{}
	networks := map[string]bool{}
	for _, r := range recs {
		knownID[r.ID] = true
		if r.NetnsPath != "" {
			knownPath[filepath.Clean(r.NetnsPath)] = true
		}
		if r.Network != "" {
			networks[r.Network] = true
		}
	}
	foreignID, foreignPath, err := foreignCacheEntries(ctx, o.CNICacheDir, store.IDFor(o.DataDir))
	if err != nil {
		return nil, err
	}

	var out []Finding
	entries, err := o.Netns.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if knownID[e.Name] || knownPath[filepath.Clean(e.Path)] || foreignPath[filepath.Clean(e.Path)] {
			continue
		}
		reason := "namespace not in berth's store"
		if !e.Pinned {
			reason = "empty mount point (no namespace mounted) not in berth's store"
		}
		out = append(out, Finding{Kind: "netns", ID: e.Name, Path: e.Path, Reason: reason})
	}

	if files, err := cni.ReadConfigDir(ctx, o.ConfDir); err == nil {
		for _, f := range files {
			if f.Network != nil {
				networks[f.Network.Name()] = true
			}
		}
	}
	names := make([]string, 0, len(networks))
	for n := range networks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		leases, err := evidence.ReadLeases(filepath.Join(o.HostLocalDir, n))
		if err != nil {
			return nil, err
		}
		for _, l := range leases {
			if knownID[l.ID] || foreignID[l.ID] {
				continue
			}
			out = append(out, Finding{Kind: "lease", ID: l.ID, Network: n, Path: l.Path,
				Reason: fmt.Sprintf("host-local lease of %s held by a container ID berth has no record of", filepath.Base(l.Path))})
		}
	}
	return out, nil
}

// readRecords lists the store's attachments without creating a store
// that does not exist.
func readRecords(ctx context.Context, dataDir string, open StoreOpener) ([]*store.Attachment, error) {
	if _, err := os.Stat(filepath.Join(dataDir, store.DBFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	st, err := open(ctx)
	if err != nil {
		return nil, fmt.Errorf("find leftovers: %w", err)
	}
	defer st.Close()
	recs, err := st.ListAttachments(ctx)
	if err != nil {
		return nil, fmt.Errorf("find leftovers: %w", err)
	}
	return recs, nil
}

// foreignCacheEntries reads libcni's cache for attachments that are not
// this berth's: their container IDs and namespace paths.
func foreignCacheEntries(ctx context.Context, cacheDir, storeID string) (ids, paths map[string]bool, err error) {
	entries, err := evidence.ReadCache(ctx, cacheDir, "")
	if err != nil {
		return nil, nil, err
	}
	ids, paths = map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		if evidence.Owned(e, storeID) == evidence.Mine {
			continue
		}
		ids[e.ContainerID] = true
		if e.NetNS != "" {
			paths[filepath.Clean(e.NetNS)] = true
		}
	}
	return ids, paths, nil
}
