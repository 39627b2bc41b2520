package gc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
)

// Owner is a runtime other than berth (Nomad) whose attachments share the
// host, and that can say which of them are still in use. gc asks it only
// about what berth's own evidence does not explain: a namespace, a libcni
// cache entry without berth's markers, a lease or a marked rule of an ID
// berth has no record of. An owner widens what gc may reclaim to what it
// claims and says is dead; what it does not claim is judged as without it.
type Owner interface {
	// Name names the owner in reports ("nomad").
	Name() string
	// Networks are the CNI networks the owner attaches to, by name, with
	// their configuration when it is known (nil otherwise). gc visits them
	// for the owner's cache entries, leases and rules, never sends them
	// the GC verb (it cannot know the owner's attachments in flight) and
	// never tidies them (their bridge and chains are the owner's).
	Networks() map[string]*cni.Network
	// Judge gives the owner's verdict on one thing gc found.
	Judge(ctx context.Context, c Claim) Verdict
}

// Prefetcher is an Owner that answers faster when told beforehand which
// IDs it will be asked about (step 7 asks about every namespace of the
// netns dir, thousands on a host Nomad leaked on for long).
type Prefetcher interface {
	Prefetch(ctx context.Context, ids []string)
}

// Claim is one thing gc asks an owner about.
type Claim struct {
	// Kind is KindNetns, KindCNICache, KindLease or KindIptables.
	Kind string
	// ID is the container ID (cache entries, leases, rules) or the
	// namespace's name (namespaces).
	ID      string
	Network string
	Path    string
	// Since is when the evidence was made (a namespace's pin, a lease or
	// cache file's modification); zero when the host does not tell.
	Since time.Time
}

// Verdict is an owner's answer. The zero value means "not mine".
type Verdict struct {
	// Owned: the thing is the owner's to judge; when false, gc judges it
	// as if the owner were not there.
	Owned bool
	// Live: the owner uses it; it is kept, and not reported.
	Live bool
	// Dead: the owner no longer uses it and it may be reclaimed. gc still
	// keeps a namespace some process lives in. Neither Live nor Dead: kept
	// and reported with Reason (too young to judge, a teardown of the
	// owner's own in flight).
	Dead bool
	// Status is the owner's state of it, for the report ("complete",
	// "running", "unknown to Nomad").
	Status string
	// Reason is the evidence, for the report.
	Reason string
	// Rule names the owner's rule that decided (Item.Rule): which evidence
	// made it dead, or why it is kept.
	Rule string
	// Netns is where the owner pinned the namespace of the attachment
	// ("" if it has none): libcni caches written by older libcni record no
	// namespace, and DEL must run while it still exists.
	Netns string
	// Err: the owner could not tell (its API failed). The thing is kept
	// and the run reports the error.
	Err error
}

// ownerNet is a network of an owner's.
type ownerNet struct {
	owner Owner
	conf  *cni.Network
}

// askOwner asks the network's owner (or, for a namespace, every owner)
// about c, filling in the age of the evidence. It returns the owner that
// claimed it, if any.
func (r *run) askOwner(ctx context.Context, nw *network, c Claim) (Owner, Verdict) {
	owners := r.o.Owners
	if nw != nil {
		if nw.owner == nil {
			return nil, Verdict{}
		}
		owners = []Owner{nw.owner}
	}
	for _, o := range owners {
		v := o.Judge(ctx, c)
		if v.Owned {
			return o, v
		}
	}
	return nil, Verdict{}
}

// fileSince is a file's modification time, zero when it cannot be read.
func fileSince(path string) time.Time {
	if path == "" {
		return time.Time{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// ownerItem is the report item for something an owner judged.
func ownerItem(kind, id, network, path string, o Owner, v Verdict, since time.Time, now time.Time) Item {
	it := Item{Kind: kind, ID: id, Network: network, Path: path, Owner: o.Name(), Status: v.Status, Reason: v.Reason, Rule: v.Rule}
	if !since.IsZero() {
		it.Age = now.Sub(since).Round(time.Second).String()
	}
	return it
}

// members returns the processes living in the namespace pinned at path,
// from one /proc pass per run (netns.Members). ok is false when /proc
// could not be read: the caller must then keep the namespace.
func (r *run) members(ctx context.Context, path string) (hs []netns.Holder, ok bool) {
	if r.memberIdx == nil {
		idx, err := netns.Members(ctx)
		if err != nil {
			r.errorf("list the processes in each namespace: %w (namespaces of owners are kept)", err)
			return nil, false
		}
		r.memberIdx = idx
	}
	ino, err := netns.Inode(path)
	if err != nil {
		return nil, true // not pinned: nobody lives in it
	}
	return r.memberIdx[ino], true
}

// holdersText is a short list of processes for a report.
func holdersText(hs []netns.Holder) string {
	parts := make([]string, 0, len(hs))
	for i, h := range hs {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(hs)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("pid %d (%s)", h.PID, h.Comm))
	}
	return strings.Join(parts, ", ")
}

// keepBusy reports whether an owner's dead namespace must stay because a
// process still lives in it, and reports it as kept.
func (r *run) keepBusy(ctx context.Context, it Item, path string) bool {
	if path == "" || !pinned(path) {
		return false
	}
	hs, ok := r.members(ctx, path)
	if !ok {
		it.Reason += "; the processes in the namespace could not be listed: kept"
		r.kept(it)
		return true
	}
	if len(hs) == 0 {
		return false
	}
	it.Holders = holdersText(hs)
	it.Reason += fmt.Sprintf("; but %d process(es) still live in its namespace: kept", len(hs))
	r.kept(it)
	return true
}

// only reports whether the run may look at id (Options.IDs).
func (r *run) only(id string) bool {
	return len(r.ids) == 0 || r.ids[id]
}

// inNetnsDir reports whether path is in the netns dir gc manages, also
// when one of the two is spelled through a symlink (/var/run/netns is
// /run/netns on most hosts).
func (r *run) inNetnsDir(path string) bool {
	return sameDir(filepath.Dir(path), r.netns.Dir())
}

// netnsKey names a namespace path the same however its directory is
// spelled (/var/run/netns/x and /run/netns/x).
func netnsKey(path string) string {
	dir := filepath.Dir(path)
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	return filepath.Join(dir, filepath.Base(path))
}

func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// markedByBerth reports whether a cache entry carries berth's markers
// (this berth's or another's): such an entry is never an owner's.
func markedByBerth(e evidence.CacheEntry) bool {
	return e.Args[evidence.ArgID] != "" || e.Args[evidence.ArgStore] != ""
}
