package gc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

// This file is the sweep, steps 3 to 7 of Run. Steps 3 to 6 run network
// by network under the network's exclusive lock, in this order, over one
// netState each:
//
//	3 sweepCache   libcni cache entries nothing owns, and their namespaces
//	4 sweepLeases  host-local leases of container IDs nobody knows
//	5 sweepRules   CNI iptables rules of unknown IDs and unleased addresses
//	6 sendGC       the CNI GC verb with every attachment that stays
//
// Each step adds to the state what the next needs: an ID a step keeps
// (known, valid) stays for the later steps, an ID it reclaims (r.handled)
// is not reported again by them. Step 7 (sweepNetns) then removes the
// namespaces with a foreign prefix, or that an owner says are dead, that
// none of them reclaimed.
//
// An Owner is asked wherever berth's own evidence leaves an ID unknown:
// what it claims it judges (live: kept; dead: reclaimed once no process
// lives in its namespace), what it does not claim is judged as before in
// berth's networks and left alone in the owner's.

func pinned(path string) bool {
	if path == "" {
		return false
	}
	ok, _ := netns.IsPinned(path)
	return ok
}

func (r *run) cacheDir() string { return r.o.CNI.CacheDir() }

func (r *run) foreignPrefix(name string) (string, bool) {
	for _, p := range r.o.ForeignPrefixes {
		if strings.HasPrefix(name, p) {
			return p, true
		}
	}
	return "", false
}

func (r *run) foreignNetwork(name string) bool {
	for _, n := range r.o.ForeignNetworks {
		if n == name {
			return true
		}
	}
	return false
}

// readCache reads libcni's cache (the entries of Options.IDs only, when set).
func (r *run) readCache(ctx context.Context) ([]evidence.CacheEntry, error) {
	if len(r.ids) == 1 {
		for id := range r.ids {
			return evidence.ReadCache(ctx, r.cacheDir(), id)
		}
	}
	all, err := evidence.ReadCache(ctx, r.cacheDir(), "")
	if r.ids == nil {
		return all, err
	}
	var out []evidence.CacheEntry
	for _, e := range all {
		if r.ids[e.ContainerID] {
			out = append(out, e)
		}
	}
	return out, err
}

// markHandled notes that this run reclaims (or, in a dry run, would) the
// attachment of id to network, so that later steps do not report it again.
func (r *run) markHandled(network, id string) {
	r.handled[handledKey(network, id)] = true
}

// ours says whether a cache entry is this berth's: entries another berth
// (another data dir) made are treated like another runtime's, not ours to
// sweep.
func (r *run) ours(e evidence.CacheEntry) bool {
	return evidence.Owned(e, r.storeID) == evidence.Mine
}

// checkReboot reads the store and the cache for detectReboot.
func (r *run) checkReboot(ctx context.Context) {
	var recs []*store.Attachment
	if r.o.Store != nil {
		var err error
		if recs, err = r.o.Store.ListAttachments(ctx); err != nil {
			return // replay reports it
		}
	}
	cache, err := r.readCache(ctx)
	if err != nil {
		return // sweep reports it
	}
	r.detectReboot(recs, cache)
}

// detectReboot notices that every namespace berth's attachments expect is
// gone, which is what a reboot looks like: /run is empty while the store,
// the libcni cache and host-local's leases (on disk) remain.
func (r *run) detectReboot(recs []*store.Attachment, cache []evidence.CacheEntry) {
	expect, found := 0, 0
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.Phase == store.PhaseIntent || rec.Phase == store.PhaseTearingDown {
			continue
		}
		seen[rec.ID] = true
		expect++
		if pinned(rec.NetnsPath) {
			found++
		}
	}
	for _, e := range cache {
		if !r.ours(e) || e.NetNS == "" || seen[e.ContainerID] {
			continue
		}
		expect++
		if pinned(e.NetNS) {
			found++
		}
	}
	if expect > 0 && found == 0 {
		r.rep.Reboot = true
		r.log.Warn("none of the namespaces berth's attachments expect exists: the host rebooted or the netns dir was wiped; reclaiming their leases, cache entries and rules", "attachments", expect)
	}
}

// hostView is what the sweep reads before it locks any network: enough
// to choose the networks to visit. Each network's steps decide on a fresh
// read taken under its lock.
type hostView struct {
	recs  []*store.Attachment
	cache []evidence.CacheEntry
	rules []evidence.Rule
	// nets are berth's networks, by name.
	nets map[string]*network
}

// sweep is steps 3 to 7: steps 3 to 6 network by network, then step 7.
func (r *run) sweep(ctx context.Context) {
	v, ok := r.readHost(ctx)
	if !ok {
		return
	}
	for _, name := range sortedKeys(v.nets) {
		if ctx.Err() != nil {
			return
		}
		nw := v.nets[name]
		if !hasState(nw, v) {
			continue
		}
		r.sweepNetwork(ctx, nw, v)
	}
	r.sweepNetns(ctx, v.recs)
}

// readHost reads the store, the cache and the rules, and resolves berth's
// networks. Without the store's records nothing can be judged.
func (r *run) readHost(ctx context.Context) (*hostView, bool) {
	confs := r.confDirNetworks(ctx)
	v := &hostView{}
	var err error
	if v.cache, err = r.readCache(ctx); err != nil {
		r.errorf("%w", err)
	}
	if r.o.Store != nil {
		if v.recs, err = r.o.Store.ListAttachments(ctx); err != nil {
			r.errorf("read attachments: %w", err)
			return nil, false
		}
	}
	if v.rules, err = readRules(ctx); err != nil {
		r.errorf("read iptables rules: %w", err)
	}
	v.nets = r.networks(confs, v)
	return v, true
}

// networks are the networks to sweep: berth's (those of its records, of
// its cache entries, of its config dir, and those the caller named; none
// with OwnersOnly) and the owners'.
func (r *run) networks(confs map[string]*cni.Network, v *hostView) map[string]*network {
	names := map[string]bool{}
	if !r.o.OwnersOnly {
		for n := range confs {
			names[n] = true
		}
		for _, rec := range v.recs {
			names[rec.Network] = true
		}
		for _, e := range v.cache {
			_, pfx := r.foreignPrefix(filepath.Base(e.NetNS))
			if r.ours(e) || pfx {
				names[e.Network] = true
			}
		}
		for _, n := range r.o.ForeignNetworks {
			names[n] = true
		}
	}
	delete(names, "")
	nets := make(map[string]*network, len(names)+len(r.ownerNets))
	for name := range names {
		nets[name] = r.resolve(name, confs, v.recs, nil)
		nets[name].berths = true
	}
	for name, on := range r.ownerNets {
		nw := nets[name]
		if nw == nil {
			nw = r.resolve(name, confs, v.recs, on.conf)
			nets[name] = nw
		}
		nw.owner = on.owner
	}
	return nets
}

// resolve finds a network's configuration: the config dir's, the one a
// record kept, or the owner's (fallback).
func (r *run) resolve(name string, confs map[string]*cni.Network, recs []*store.Attachment, fallback *cni.Network) *network {
	nw := &network{name: name, conf: confs[name]}
	if nw.conf == nil {
		for _, rec := range recs {
			if rec.Network != name || len(rec.ConfList) == 0 {
				continue
			}
			if c, err := cni.ParseNetwork(rec.ConfList, "record of "+rec.ID); err == nil {
				nw.conf = c
				break
			}
		}
	}
	if nw.conf == nil {
		nw.conf = fallback
	}
	if nw.conf != nil {
		nw.leaseDirs, nw.subnets = hostLocal(nw.conf)
	} else {
		// Known only from the cache: host-local's default place.
		nw.leaseDirs = []string{filepath.Join(evidence.HostLocalDir, name)}
	}
	return nw
}

// hasState says whether the network left anything on the host; one that
// did not is not locked, and gets no GC verb (host-local's GC would
// create its directory).
func hasState(nw *network, v *hostView) bool {
	for _, e := range v.cache {
		if e.Network == nw.name {
			return true
		}
	}
	for _, rec := range v.recs {
		if rec.Network == nw.name {
			return true
		}
	}
	for _, d := range nw.leaseDirs {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return anyRuleOf(v.rules, nw)
}

func anyRuleOf(rules []evidence.Rule, nw *network) bool {
	for _, rl := range rules {
		if ruleOf(rl, nw) {
			return true
		}
	}
	return false
}

// validSet collects the attachments GC must keep, without duplicates.
type validSet struct {
	seen map[types.GCAttachment]bool
	list []types.GCAttachment
}

func (v *validSet) add(id, ifname string) {
	if ifname == "" {
		ifname = "eth0"
	}
	a := types.GCAttachment{ContainerID: id, IfName: ifname}
	if v.seen == nil {
		v.seen = map[types.GCAttachment]bool{}
	}
	if !v.seen[a] {
		v.seen[a] = true
		v.list = append(v.list, a)
	}
}

// netState is one network's sweep, passed from step to step under the
// network's lock.
type netState struct {
	nw   *network
	host *hostView
	// cache is libcni's cache as read under the lock.
	cache []evidence.CacheEntry
	// known are the container IDs that stay on the network: those of the
	// store's records, and those a step kept (not berth's to reclaim, or
	// their reclaim failed). Later steps leave their leases and rules.
	known map[string]bool
	// valid is what the GC verb must keep: every attachment that stays.
	valid validSet
	// gcOK is false when valid may be incomplete (no store, a lease dir
	// unreadable): GC would then release what stays.
	gcOK bool
}

// keep marks an attachment as staying, for the later steps and GC.
func (st *netState) keep(id, ifname string) {
	st.known[id] = true
	st.valid.add(id, ifname)
}

// sweepNetwork runs steps 3 to 6 on one network under its exclusive lock:
// no ADD or DEL of the network runs meanwhile, and every ADD that ran or
// will run has its record in the store before it takes the lock.
func (r *run) sweepNetwork(ctx context.Context, nw *network, v *hostView) {
	unlock, err := attach.LockNetwork(ctx, r.o.LockDir, nw.name, true)
	if err != nil {
		r.errorf("network %q: %w", nw.name, err)
		return
	}
	defer unlock()
	st, err := r.lockedState(ctx, nw, v)
	if err != nil {
		r.errorf("network %q: %w (nothing reclaimed)", nw.name, err)
		return
	}
	r.sweepCache(ctx, st)
	r.sweepLeases(ctx, st)
	r.sweepRules(ctx, st)
	r.sendGC(ctx, st)
}

// lockedState reads, under the network's lock, the records and cache
// entries the steps judge by.
func (r *run) lockedState(ctx context.Context, nw *network, v *hostView) (*netState, error) {
	st := &netState{nw: nw, host: v, known: map[string]bool{}, gcOK: r.o.Store != nil}
	if r.o.Store != nil {
		recs, err := r.o.Store.ListAttachments(ctx)
		if err != nil {
			return nil, fmt.Errorf("read attachments: %w", err)
		}
		for _, rec := range recs {
			// An unreadable record names no network: its ID is known
			// in every one, so that nothing of it is swept as nobody's.
			if rec.Network == nw.name || rec.Phase == store.PhaseUnreadable {
				st.keep(rec.ID, rec.IfName)
			}
		}
	}
	cache, err := r.readCache(ctx)
	if err != nil {
		return nil, err
	}
	st.cache = cache
	return st, nil
}

// sweepCache is step 3: DEL the network's cache entries nothing owns and
// remove their namespaces.
func (r *run) sweepCache(ctx context.Context, st *netState) {
	for _, e := range st.cache {
		if e.Network != st.nw.name {
			continue
		}
		j := r.cacheVerdict(ctx, st, e)
		if j.reason == "" {
			st.keep(e.ContainerID, e.IfName)
			r.stay[e.ContainerID] = true
			continue
		}
		r.reclaimCacheEntry(ctx, st, e, j)
	}
}

// cacheJudgement is step 3's decision on one cache entry.
type cacheJudgement struct {
	// reason says why the entry is garbage; "" when it stays.
	reason string
	// netns is the attachment's namespace: the entry's, or where its
	// owner pinned it when the entry records none.
	netns string
	// item is the report item of an owner's verdict (owner set).
	item  Item
	owner Owner
}

// cacheVerdict judges a cache entry (reporting it as kept when it looks
// suspicious).
func (r *run) cacheVerdict(ctx context.Context, st *netState, e evidence.CacheEntry) cacheJudgement {
	j := cacheJudgement{netns: e.NetNS}
	pfx, isPfx := r.foreignPrefix(filepath.Base(e.NetNS))
	switch {
	case st.known[e.ContainerID]:
	case r.ours(e) && r.o.Store == nil && pinned(e.NetNS):
		r.kept(Item{Kind: KindNetns, ID: e.ContainerID, Network: st.nw.name, Path: e.NetNS, Reason: "berth's store is unreadable and the namespace still exists: it may be in use"})
	case r.ours(e):
		if !r.o.OwnersOnly {
			j.reason = "libcni cache entry carries BERTH_ID but berth has no record of it"
		}
	case !markedByBerth(e) && r.ownerCacheVerdict(ctx, st, e, &j):
	case r.o.OwnersOnly:
	case r.foreignNetwork(st.nw.name):
		j.reason = "attachment of foreign network " + st.nw.name + " (--foreign-network) that berth has no record of"
	case isPfx && filepath.Dir(e.NetNS) == r.netns.Dir():
		j.reason = "attachment of a namespace with foreign prefix " + pfx + " (--foreign-prefix)"
	}
	return j
}

// ownerCacheVerdict asks the network's owner about a cache entry; false
// when it does not claim it. j.reason is set when the owner says it is
// dead and no process lives in its namespace.
func (r *run) ownerCacheVerdict(ctx context.Context, st *netState, e evidence.CacheEntry, j *cacheJudgement) bool {
	since := fileSince(e.File)
	o, v := r.askOwner(ctx, st.nw, Claim{Kind: KindCNICache, ID: e.ContainerID, Network: st.nw.name, Path: e.File, Since: since})
	if o == nil {
		return false
	}
	if j.netns == "" {
		j.netns = v.Netns
	}
	it := ownerItem(KindCNICache, e.ContainerID, st.nw.name, e.File, o, v, since, r.o.Now())
	if pinned(j.netns) {
		it.Kind, it.Path = KindNetns, j.netns
	}
	switch {
	case v.Err != nil:
		r.kept(it)
		r.errorf("%s %s (network %s): %s could not tell whether it is in use: %w (kept)", it.Kind, e.ContainerID, st.nw.name, o.Name(), v.Err)
	case v.Live:
		r.log.Debug("in use by its owner", "owner", o.Name(), "id", e.ContainerID, "network", st.nw.name, "reason", v.Reason)
	case !v.Dead:
		r.kept(it)
	case r.keepBusy(ctx, it, j.netns):
	default:
		j.reason, j.item, j.owner = v.Reason, it, o
	}
	return true
}

func (r *run) reclaimCacheEntry(ctx context.Context, st *netState, e evidence.CacheEntry, j cacheJudgement) {
	nw := st.nw
	it := Item{Kind: KindCNICache, ID: e.ContainerID, Network: nw.name, Path: e.File, Reason: j.reason}
	if j.owner != nil {
		it = j.item
	}
	if pinned(j.netns) {
		it.Kind, it.Path = KindNetns, j.netns
		it.Reason += "; its namespace still exists"
		r.netnsDone[netnsKey(j.netns)] = true
	} else if j.netns != "" {
		it.Reason += "; its namespace is gone"
	}
	r.found(it)
	r.markHandled(nw.name, e.ContainerID)
	if r.o.DryRun {
		r.touch(nw.name, nw.conf)
		return
	}
	if err := r.delCached(ctx, nw, e, j.netns, j.owner != nil); err != nil {
		r.fail(it, err)
		// Keep it out of GC: libcni would DEL it without removing
		// the namespace, and the namespace would then be nobody's.
		st.keep(e.ContainerID, e.IfName)
		r.stay[e.ContainerID] = true
		return
	}
	r.reclaimed(it)
	r.touch(nw.name, nw.conf)
}

// delCached DELs an attachment known from libcni's cache (the cached
// configuration is used) with its namespace nsPath, then removes what DEL
// cannot: the bridge's masquerade rules when the namespace is gone, and
// the namespace (berth's, or an owner's).
func (r *run) delCached(ctx context.Context, nw *network, e evidence.CacheEntry, nsPath string, owners bool) error {
	// A cache entry is only a file: a namespace it names outside the
	// netns dir (/proc/1/ns/net, say) is never entered for DEL, where the
	// plugins would delete that namespace's interfaces, nor removed.
	inDir := nsPath != "" && r.inNetnsDir(filepath.Clean(nsPath))
	att := &cni.Attachment{ContainerID: e.ContainerID, IfName: e.IfName}
	if inDir && pinned(nsPath) {
		att.NetNS = nsPath
	}
	// Without the namespace, Del also removes the attachment's marked rules.
	if err := r.o.CNI.Del(ctx, nw.conf, nw.name, att); err != nil {
		return err
	}
	if !inDir {
		if nsPath != "" {
			r.log.Warn("cache entry names a namespace outside the netns dir: neither entered nor removed", "netns", nsPath, "id", e.ContainerID)
		}
		return nil
	}
	rr, err := netns.RemovePath(ctx, nsPath)
	if err != nil {
		return err
	}
	if rr != nil && rr.Busy {
		hs := make([]string, 0, len(rr.Holders))
		for _, h := range rr.Holders {
			hs = append(hs, h.String())
		}
		r.log.Warn("orphan namespace was busy; detached it", "netns", nsPath, "holders", hs)
	}
	return nil
}

// sweepLeases is step 4: release the leases of container IDs that neither
// the store nor the cache knows.
func (r *run) sweepLeases(ctx context.Context, st *netState) {
	unknown := r.unknownLeases(ctx, st)
	for _, id := range sortedKeys(unknown) {
		r.reclaimLeases(ctx, st.nw, id, unknown[id])
	}
}

// leaseHolder is the leases of one unknown container ID, and who judged
// it garbage (owner set) or not (berth's network).
type leaseHolder struct {
	leases []evidence.Lease
	owner  Owner
	item   Item
	// netns is the holder's namespace when its owner names one that
	// still exists: DEL runs in it, and step 7 removes it.
	netns string
}

// unknownLeases reads the network's lease dirs: leases of known IDs join
// the valid set, the others are returned by holder.
func (r *run) unknownLeases(ctx context.Context, st *netState) map[string]*leaseHolder {
	nw := st.nw
	unknown := map[string]*leaseHolder{}
	for _, d := range nw.leaseDirs {
		ls, err := evidence.ReadLeases(d)
		if err != nil {
			r.errorf("network %q: %w", nw.name, err)
			st.gcOK = false
			continue
		}
		for _, l := range ls {
			switch {
			case !r.only(l.ID):
				st.known[l.ID] = true
			case st.known[l.ID]:
				st.valid.add(l.ID, l.IfName)
			case r.handled[handledKey(nw.name, l.ID)]:
				// Reclaimed in step 3 (or would be): its DEL releases it.
			case unknown[l.ID] != nil:
				unknown[l.ID].leases = append(unknown[l.ID].leases, l)
			case r.o.Store == nil && r.netns.Exists(l.ID):
				r.kept(Item{Kind: KindLease, ID: l.ID, Network: nw.name, Path: l.Path, Reason: "berth's store is unreadable and a namespace of that name exists: it may be in use"})
				st.known[l.ID] = true
			case nw.owner != nil && r.ownerLeaseVerdict(ctx, st, l, unknown):
			case r.o.OwnersOnly || !nw.berths:
				// Neither berth's nor claimed by the network's owner.
				st.known[l.ID] = true
			default:
				unknown[l.ID] = &leaseHolder{leases: []evidence.Lease{l}}
			}
		}
	}
	return unknown
}

// ownerLeaseVerdict asks the network's owner about the holder of a lease;
// false when it does not claim it. A dead holder joins unknown; any other
// stays known, with its rules.
func (r *run) ownerLeaseVerdict(ctx context.Context, st *netState, l evidence.Lease, unknown map[string]*leaseHolder) bool {
	since := fileSince(l.Path)
	o, v := r.askOwner(ctx, st.nw, Claim{Kind: KindLease, ID: l.ID, Network: st.nw.name, Path: l.Path, Since: since})
	if o == nil {
		return false
	}
	it := ownerItem(KindLease, l.ID, st.nw.name, l.Path, o, v, since, r.o.Now())
	switch {
	case v.Err != nil:
		r.kept(it)
		r.errorf("lease %s (network %s): %s could not tell whether it is in use: %w (kept)", l.ID, st.nw.name, o.Name(), v.Err)
	case v.Live:
	case !v.Dead:
		r.kept(it)
	case r.keepBusy(ctx, it, v.Netns):
	default:
		h := &leaseHolder{leases: []evidence.Lease{l}, owner: o, item: it}
		if pinned(v.Netns) {
			h.netns = v.Netns
		}
		unknown[l.ID] = h
		return true
	}
	st.known[l.ID] = true
	r.stay[l.ID] = true
	return true
}

func (r *run) reclaimLeases(ctx context.Context, nw *network, id string, h *leaseHolder) {
	ls := h.leases
	var items []Item
	for _, l := range ls {
		it := Item{Kind: KindLease, ID: id, Network: nw.name, Path: l.Path, Reason: fmt.Sprintf("lease of %s for container ID %q, which neither berth's store nor libcni's cache knows", l.IP, id)}
		if h.owner != nil {
			it = h.item
			it.Path = l.Path
			it.Reason = fmt.Sprintf("lease of %s with no libcni cache entry: %s", l.IP, h.item.Reason)
		}
		r.found(it)
		items = append(items, it)
	}
	r.markHandled(nw.name, id)
	if r.o.DryRun {
		r.touch(nw.name, nw.conf)
		return
	}
	if err := r.releaseLeases(ctx, nw, id, ls, h.netns); err != nil {
		for _, it := range items {
			r.fail(it, err)
		}
		return
	}
	for _, it := range items {
		r.reclaimed(it)
	}
	r.touch(nw.name, nw.conf)
}

// releaseLeases DELs an unknown container ID through the network's
// configuration (in its namespace nsPath, when it still exists), so that
// every plugin (host-local, firewall, portmap) releases what it holds for
// it, then removes any lease file DEL left, under host-local's own lock.
func (r *run) releaseLeases(ctx context.Context, nw *network, id string, ls []evidence.Lease, nsPath string) error {
	ifname := ls[0].IfName
	if ifname == "" {
		ifname = "eth0"
	}
	if nw.conf != nil {
		// Without a namespace, Del also removes the holder's marked rules.
		if err := r.o.CNI.Del(ctx, nw.conf, nw.name, &cni.Attachment{ContainerID: id, IfName: ifname, NetNS: nsPath}); err != nil {
			r.log.Warn("DEL of an unknown lease holder failed; removing its lease files directly", "network", nw.name, "id", id, "err", err)
		}
	}
	var errs []error
	for _, l := range ls {
		if err := hostclean.RemoveLease(ctx, l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// staleRules are the network's CNI rules nothing accounts for.
type staleRules struct {
	// byID are rules marked with the network and an ID nobody knows.
	byID map[string][]evidence.Rule
	// firewall are the firewall plugin's rules for addresses no lease
	// holds, by line.
	firewall map[string]Item
	// owned are the report items of IDs the network's owner judged dead.
	owned map[string]Item
}

// sweepRules is step 5: remove the network's CNI rules whose marker names
// an ID nobody knows, and firewall rules for addresses nobody leases. The
// snapshot taken before the lock only says whether to look; the decision
// uses a fresh read taken under the network's lock.
func (r *run) sweepRules(ctx context.Context, st *netState) {
	if !anyRuleOf(st.host.rules, st.nw) {
		return
	}
	rules, err := readRules(ctx)
	if err != nil {
		r.errorf("network %q: read iptables rules: %w", st.nw.name, err)
		return
	}
	stale := r.findStaleRules(ctx, st, rules)
	if len(stale.byID) == 0 && len(stale.firewall) == 0 {
		return
	}
	items := stale.items(st.nw.name)
	for _, it := range items {
		r.found(it)
	}
	for id := range stale.byID {
		r.markHandled(st.nw.name, id)
	}
	if r.o.DryRun {
		r.touch(st.nw.name, st.nw.conf)
		return
	}
	removed, err := hostclean.RemoveRulesMatching(ctx, stale.match(st.nw.name))
	if err != nil {
		for _, it := range items {
			r.fail(it, err)
		}
		return
	}
	r.log.Debug("removed iptables rules", "network", st.nw.name, "removed", removed)
	for _, it := range items {
		r.reclaimed(it)
	}
	r.touch(st.nw.name, st.nw.conf)
}

func (r *run) findStaleRules(ctx context.Context, st *netState, rules []evidence.Rule) staleRules {
	nw := st.nw
	s := staleRules{byID: map[string][]evidence.Rule{}, firewall: map[string]Item{}, owned: map[string]Item{}}
	for _, rl := range rules {
		if n, id, ok := evidence.ParseMarker(rl.Line); ok && n == nw.name {
			if r.staleMarked(ctx, st, id, &s) {
				s.byID[id] = append(s.byID[id], rl)
			}
			continue
		}
		if r.ids != nil {
			continue // a firewall rule names no ID
		}
		ip, ok := evidence.FirewallIP(rl.Line)
		if !ok || !inSubnets(ip, nw.subnets) || leased(ip, st.host.nets) {
			continue
		}
		s.firewall[rl.Line] = Item{Kind: KindIptables, ID: ip.String(), Network: nw.name, Path: rl.Table + " CNI-FORWARD",
			Reason: fmt.Sprintf("firewall plugin rule for %s, which no lease in network %q holds: %s", ip, nw.name, rl.Line)}
	}
	return s
}

// staleMarked decides whether the rules marked with id are stale: an ID
// nobody knows in berth's network, or one the network's owner says is dead.
func (r *run) staleMarked(ctx context.Context, st *netState, id string, s *staleRules) bool {
	nw := st.nw
	switch {
	case st.known[id] || r.handled[handledKey(nw.name, id)] || !r.only(id):
		return false
	case s.byID[id] != nil:
		return true
	case nw.owner != nil:
		o, v := r.askOwner(ctx, nw, Claim{Kind: KindIptables, ID: id, Network: nw.name})
		if o == nil {
			break
		}
		it := ownerItem(KindIptables, id, nw.name, "", o, v, time.Time{}, r.o.Now())
		switch {
		case v.Err != nil:
			r.kept(it)
			r.errorf("iptables rules of %s (network %s): %s could not tell whether it is in use: %w (kept)", id, nw.name, o.Name(), v.Err)
		case v.Live:
		case !v.Dead:
			r.kept(it)
		case r.keepBusy(ctx, it, v.Netns):
		default:
			s.owned[id] = it
			return true
		}
		st.known[id] = true
		return false
	}
	if r.o.OwnersOnly || !nw.berths {
		st.known[id] = true
		return false
	}
	return true
}

// items are the report items: one per unknown ID (naming its chains),
// then one per firewall rule.
func (s staleRules) items(network string) []Item {
	var items []Item
	for _, id := range sortedKeys(s.byID) {
		chains := map[string]bool{}
		for _, rl := range s.byID[id] {
			chains[rl.Table+"/"+rl.Chain] = true
		}
		it := Item{Kind: KindIptables, ID: id, Network: network, Path: strings.Join(sortedKeys(chains), ","),
			Reason: fmt.Sprintf("%d CNI rules carry the marker of network %q and ID %q, which neither berth's store nor libcni's cache knows", len(s.byID[id]), network, id)}
		if o, ok := s.owned[id]; ok {
			it = o
			it.Path = strings.Join(sortedKeys(chains), ",")
			it.Reason = fmt.Sprintf("%d CNI rules carry its marker and no cache entry or lease is left: %s", len(s.byID[id]), o.Reason)
		}
		items = append(items, it)
	}
	for _, line := range sortedKeys(s.firewall) {
		items = append(items, s.firewall[line])
	}
	return items
}

// match selects, on a fresh read, the rules to remove: the firewall lines
// found, and any rule marked with one of the unknown IDs.
func (s staleRules) match(network string) func(line string) bool {
	markers := make([]string, 0, len(s.byID))
	for id := range s.byID {
		markers = append(markers, evidence.Marker(network, id))
	}
	return func(line string) bool {
		if _, ok := s.firewall[line]; ok {
			return true
		}
		for _, m := range markers {
			if strings.Contains(line, m) {
				return true
			}
		}
		return false
	}
}

// leased says whether any of berth's networks handing out ip holds a lease on it.
func leased(ip net.IP, nets map[string]*network) bool {
	for _, n := range nets {
		if !inSubnets(ip, n.subnets) {
			continue
		}
		for _, d := range n.leaseDirs {
			if _, err := os.Stat(filepath.Join(d, ip.String())); err == nil {
				return true
			}
		}
	}
	return false
}

// sendGC is step 6: the CNI GC verb with every attachment that stays,
// once the set is known to be complete.
func (r *run) sendGC(ctx context.Context, st *netState) {
	nw := st.nw
	if nw.conf == nil || r.ids != nil {
		return
	}
	if nw.owner != nil {
		// GC releases what is not in the valid set, and the owner's
		// attachments in flight (ADD running, no cache entry yet) cannot
		// be in it: the owner's networks never get it.
		r.log.Debug("CNI GC not sent: the network is used by another runtime", "network", nw.name, "owner", nw.owner.Name())
		return
	}
	if err := nw.conf.GCSupport(); err != nil {
		r.log.Debug("CNI GC not sent", "network", nw.name, "reason", err)
		return
	}
	if !st.gcOK {
		r.kept(Item{Kind: KindCNIGC, Network: nw.name, Reason: "GC not sent: the set of valid attachments is not known (store or lease dir unreadable)"})
		return
	}
	it := Item{Kind: KindCNIGC, Network: nw.name, Reason: fmt.Sprintf("the CNI GC verb, with the %d attachments that stay", len(st.valid.list))}
	if r.o.DryRun {
		r.row(it, StatePlanned, "")
		return
	}
	if err := r.o.CNI.GC(ctx, nw.conf, st.valid.list); err != nil {
		r.fail(it, err)
		return
	}
	r.reclaimed(it)
}

// sweepNetns is step 7: remove the namespaces berth has no record of
// whose name carries a foreign prefix the caller named, or that an owner
// claims and says are dead (and in which no process lives). Those with a
// cache entry were DELed and removed in their network's step 3; those a
// cache entry still names stay for it.
func (r *run) sweepNetns(ctx context.Context, recs []*store.Attachment) {
	if len(r.o.ForeignPrefixes) == 0 && len(r.o.Owners) == 0 {
		return
	}
	entries, err := r.netns.List(ctx)
	if err != nil {
		r.errorf("%w", err)
		return
	}
	ours := map[string]bool{}
	for _, rec := range recs {
		ours[rec.NetnsPath] = true
	}
	for _, it := range r.rep.Found {
		if it.Kind == KindNetns {
			ours[it.Path] = true
		}
	}
	named, err := r.cacheNamed(ctx)
	if err != nil {
		r.errorf("%w (namespaces of owners are kept)", err)
		if len(r.o.ForeignPrefixes) == 0 {
			return
		}
	}
	candidate := func(e netns.Entry) bool {
		return len(r.o.Owners) > 0 && named != nil && !named[e.Name] && !named[e.Path] && !r.netnsDone[netnsKey(e.Path)] && !r.stay[e.Name]
	}
	var ask []string
	for _, e := range entries {
		if _, pfx := r.foreignPrefix(e.Name); r.only(e.Name) && !ours[e.Path] && !pfx && candidate(e) {
			ask = append(ask, e.Name)
		}
	}
	for _, o := range r.o.Owners {
		if p, ok := o.(Prefetcher); ok && len(ask) > 0 {
			p.Prefetch(ctx, ask)
		}
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		if !r.only(e.Name) || ours[e.Path] {
			continue
		}
		if pfx, ok := r.foreignPrefix(e.Name); ok {
			r.removeNetns(ctx, Item{Kind: KindNetns, ID: e.Name, Path: e.Path, Reason: "name starts with foreign prefix " + pfx + " (--foreign-prefix) and berth has no record of it"})
			continue
		}
		if !candidate(e) {
			continue
		}
		o, v := r.askOwner(ctx, nil, Claim{Kind: KindNetns, ID: e.Name, Path: e.Path, Since: e.Since})
		if o == nil {
			continue
		}
		it := ownerItem(KindNetns, e.Name, "", e.Path, o, v, e.Since, r.o.Now())
		switch {
		case v.Err != nil:
			r.kept(it)
			r.errorf("namespace %s: %s could not tell whether it is in use: %w (kept)", e.Path, o.Name(), v.Err)
		case v.Live:
		case !v.Dead:
			r.kept(it)
		case r.keepBusy(ctx, it, e.Path):
		default:
			it.Reason += "; no process lives in it and no libcni cache entry names it"
			r.removeNetns(ctx, it)
		}
	}
}

// cacheNamed are the container IDs and namespace paths of the cache
// entries that stay after steps 3 to 6 (read afresh): their namespaces are
// theirs, not anyone's to sweep. Entries this run reclaimed do not count.
func (r *run) cacheNamed(ctx context.Context) (map[string]bool, error) {
	if len(r.o.Owners) == 0 {
		return map[string]bool{}, nil
	}
	cache, err := r.readCache(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range cache {
		if r.handled[handledKey(e.Network, e.ContainerID)] && !r.stay[e.ContainerID] {
			continue
		}
		out[e.ContainerID] = true
		if e.NetNS != "" {
			out[e.NetNS] = true
			if p, err := filepath.EvalSymlinks(filepath.Dir(e.NetNS)); err == nil {
				out[filepath.Join(p, filepath.Base(e.NetNS))] = true
			}
		}
	}
	return out, nil
}

func (r *run) removeNetns(ctx context.Context, it Item) {
	r.found(it)
	if r.o.DryRun {
		return
	}
	rr, err := netns.RemovePath(ctx, it.Path)
	if err != nil {
		r.fail(it, err)
		return
	}
	if rr != nil && rr.Busy {
		hs := make([]string, 0, len(rr.Holders))
		for _, h := range rr.Holders {
			hs = append(hs, h.String())
		}
		r.log.Info("namespace was busy (its owner still holds it open); detached it", "netns", it.Path, "holders", hs)
	}
	r.reclaimed(it)
}
