package gc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/berth/berth/attach"
	"github.com/berth/berth/cni"
	"github.com/berth/berth/evidence"
	"github.com/berth/berth/hostclean"
	"github.com/berth/berth/netns"
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
// is not reported again by them. Step 7 (sweepForeignNetns) then removes
// the namespaces with a foreign prefix that none of them reclaimed.

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

// readCache reads libcni's cache.
func (r *run) readCache(ctx context.Context) ([]evidence.CacheEntry, error) {
	return evidence.ReadCache(ctx, r.cacheDir(), "")
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
	r.sweepForeignNetns(ctx, v.recs)
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

// networks are berth's networks: those of its records, of its cache
// entries, of its config dir, and those the caller named.
func (r *run) networks(confs map[string]*cni.Network, v *hostView) map[string]*network {
	names := map[string]bool{}
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
	delete(names, "")
	nets := make(map[string]*network, len(names))
	for name := range names {
		nets[name] = r.resolve(name, confs, v.recs)
	}
	return nets
}

// resolve finds a network's configuration: the config dir's, or the one
// a record kept.
func (r *run) resolve(name string, confs map[string]*cni.Network, recs []*store.Attachment) *network {
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
		reason := r.cacheVerdict(st, e)
		if reason == "" {
			st.keep(e.ContainerID, e.IfName)
			continue
		}
		r.reclaimCacheEntry(ctx, st, e, reason)
	}
}

// cacheVerdict says why a cache entry is garbage, or "" when it stays
// (reporting it as kept when it looks suspicious).
func (r *run) cacheVerdict(st *netState, e evidence.CacheEntry) string {
	pfx, isPfx := r.foreignPrefix(filepath.Base(e.NetNS))
	switch {
	case st.known[e.ContainerID]:
	case r.ours(e) && r.o.Store == nil && pinned(e.NetNS):
		r.kept(Item{Kind: KindNetns, ID: e.ContainerID, Network: st.nw.name, Path: e.NetNS, Reason: "berth's store is unreadable and the namespace still exists: it may be in use"})
	case r.ours(e):
		return "libcni cache entry carries BERTH_ID but berth has no record of it"
	case r.foreignNetwork(st.nw.name):
		return "attachment of foreign network " + st.nw.name + " (--foreign-network) that berth has no record of"
	case isPfx && filepath.Dir(e.NetNS) == r.netns.Dir():
		return "attachment of a namespace with foreign prefix " + pfx + " (--foreign-prefix)"
	}
	return ""
}

func (r *run) reclaimCacheEntry(ctx context.Context, st *netState, e evidence.CacheEntry, reason string) {
	nw := st.nw
	it := Item{Kind: KindCNICache, ID: e.ContainerID, Network: nw.name, Path: e.File, Reason: reason}
	if pinned(e.NetNS) {
		it.Kind, it.Path = KindNetns, e.NetNS
		it.Reason += "; its namespace still exists"
	} else if e.NetNS != "" {
		it.Reason += "; its namespace is gone"
	}
	r.found(it)
	r.handled[handledKey(nw.name, e.ContainerID)] = true
	if r.o.DryRun {
		return
	}
	if err := r.delCached(ctx, nw, e); err != nil {
		r.fail(it, err)
		// Keep it out of GC: libcni would DEL it without removing
		// the namespace, and the namespace would then be nobody's.
		st.keep(e.ContainerID, e.IfName)
		return
	}
	r.reclaimed(it)
	r.touch(nw.name, nw.conf)
}

// delCached DELs an attachment known from libcni's cache (the cached
// configuration is used), then removes what DEL cannot: the bridge's
// masquerade rules when the namespace is gone, and the namespace.
func (r *run) delCached(ctx context.Context, nw *network, e evidence.CacheEntry) error {
	// A cache entry is only a file: a namespace it names outside the
	// netns dir (/proc/1/ns/net, say) is never entered for DEL, where the
	// plugins would delete that namespace's interfaces, nor removed.
	inDir := e.NetNS != "" && filepath.Dir(filepath.Clean(e.NetNS)) == r.netns.Dir()
	att := &cni.Attachment{ContainerID: e.ContainerID, IfName: e.IfName}
	if inDir && pinned(e.NetNS) {
		att.NetNS = e.NetNS
	}
	// Without the namespace, Del also removes the attachment's marked rules.
	if err := r.o.CNI.Del(ctx, nw.conf, nw.name, att); err != nil {
		return err
	}
	if !inDir {
		if e.NetNS != "" {
			r.log.Warn("cache entry names a namespace outside the netns dir: neither entered nor removed", "netns", e.NetNS, "id", e.ContainerID)
		}
		return nil
	}
	rr, err := netns.RemovePath(ctx, e.NetNS)
	if err != nil {
		return err
	}
	if rr != nil && rr.Busy {
		hs := make([]string, 0, len(rr.Holders))
		for _, h := range rr.Holders {
			hs = append(hs, h.String())
		}
		r.log.Warn("orphan namespace was busy; detached it", "netns", e.NetNS, "holders", hs)
	}
	return nil
}

// sweepLeases is step 4: release the leases of container IDs that neither
// the store nor the cache knows.
func (r *run) sweepLeases(ctx context.Context, st *netState) {
	unknown := r.unknownLeases(st)
	for _, id := range sortedKeys(unknown) {
		r.reclaimLeases(ctx, st.nw, id, unknown[id])
	}
}

// unknownLeases reads the network's lease dirs: leases of known IDs join
// the valid set, the others are returned by holder.
func (r *run) unknownLeases(st *netState) map[string][]evidence.Lease {
	nw := st.nw
	unknown := map[string][]evidence.Lease{}
	for _, d := range nw.leaseDirs {
		ls, err := evidence.ReadLeases(d)
		if err != nil {
			r.errorf("network %q: %w", nw.name, err)
			st.gcOK = false
			continue
		}
		for _, l := range ls {
			switch {
			case st.known[l.ID]:
				st.valid.add(l.ID, l.IfName)
			case r.handled[handledKey(nw.name, l.ID)]:
				// Reclaimed in step 3 (or would be): its DEL releases it.
			case r.o.Store == nil && r.netns.Exists(l.ID):
				r.kept(Item{Kind: KindLease, ID: l.ID, Network: nw.name, Path: l.Path, Reason: "berth's store is unreadable and a namespace of that name exists: it may be in use"})
				st.known[l.ID] = true
			default:
				unknown[l.ID] = append(unknown[l.ID], l)
			}
		}
	}
	return unknown
}

func (r *run) reclaimLeases(ctx context.Context, nw *network, id string, ls []evidence.Lease) {
	var items []Item
	for _, l := range ls {
		it := Item{Kind: KindLease, ID: id, Network: nw.name, Path: l.Path, Reason: fmt.Sprintf("lease of %s for container ID %q, which neither berth's store nor libcni's cache knows", l.IP, id)}
		r.found(it)
		items = append(items, it)
	}
	r.handled[handledKey(nw.name, id)] = true
	if r.o.DryRun {
		return
	}
	if err := r.releaseLeases(ctx, nw, id, ls); err != nil {
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
// configuration, so that every plugin (host-local, firewall, portmap)
// releases what it holds for it, then removes any lease file DEL left,
// under host-local's own lock.
func (r *run) releaseLeases(ctx context.Context, nw *network, id string, ls []evidence.Lease) error {
	ifname := ls[0].IfName
	if ifname == "" {
		ifname = "eth0"
	}
	if nw.conf != nil {
		// No namespace: Del also removes the holder's marked rules.
		if err := r.o.CNI.Del(ctx, nw.conf, nw.name, &cni.Attachment{ContainerID: id, IfName: ifname}); err != nil {
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
	stale := r.findStaleRules(st, rules)
	if len(stale.byID) == 0 && len(stale.firewall) == 0 {
		return
	}
	items := stale.items(st.nw.name)
	for _, it := range items {
		r.found(it)
	}
	for id := range stale.byID {
		r.handled[handledKey(st.nw.name, id)] = true
	}
	if r.o.DryRun {
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

func (r *run) findStaleRules(st *netState, rules []evidence.Rule) staleRules {
	nw := st.nw
	s := staleRules{byID: map[string][]evidence.Rule{}, firewall: map[string]Item{}}
	for _, rl := range rules {
		if n, id, ok := evidence.ParseMarker(rl.Line); ok && n == nw.name {
			if !st.known[id] && !r.handled[handledKey(nw.name, id)] {
				s.byID[id] = append(s.byID[id], rl)
			}
			continue
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

// items are the report items: one per unknown ID (naming its chains),
// then one per firewall rule.
func (s staleRules) items(network string) []Item {
	var items []Item
	for _, id := range sortedKeys(s.byID) {
		chains := map[string]bool{}
		for _, rl := range s.byID[id] {
			chains[rl.Table+"/"+rl.Chain] = true
		}
		items = append(items, Item{Kind: KindIptables, ID: id, Network: network, Path: strings.Join(sortedKeys(chains), ","),
			Reason: fmt.Sprintf("%d CNI rules carry the marker of network %q and ID %q, which neither berth's store nor libcni's cache knows", len(s.byID[id]), network, id)})
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
	if nw.conf == nil {
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
	if r.o.DryRun {
		return
	}
	it := Item{Kind: KindCNIGC, Network: nw.name, Reason: fmt.Sprintf("CNI GC sent with %d valid attachments", len(st.valid.list))}
	if err := r.o.CNI.GC(ctx, nw.conf, st.valid.list); err != nil {
		r.fail(it, err)
		return
	}
	r.reclaimed(it)
}

// sweepForeignNetns is step 7: remove namespaces whose name carries a
// foreign prefix the caller named and that berth has no record of. Those
// with a cache entry were DELed and removed in their network's step 3.
func (r *run) sweepForeignNetns(ctx context.Context, recs []*store.Attachment) {
	if len(r.o.ForeignPrefixes) == 0 {
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
	for _, e := range entries {
		pfx, ok := r.foreignPrefix(e.Name)
		if !ok || ours[e.Path] {
			continue
		}
		it := Item{Kind: KindNetns, ID: e.Name, Path: e.Path, Reason: "name starts with foreign prefix " + pfx + " (--foreign-prefix) and berth has no record of it"}
		r.found(it)
		if r.o.DryRun {
			continue
		}
		if _, err := netns.RemovePath(ctx, e.Path); err != nil {
			r.fail(it, err)
			continue
		}
		r.reclaimed(it)
	}
}
