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

// sweep is steps 2 to 6, network by network.
func (r *run) sweep(ctx context.Context) {
	confs := r.confDirNetworks(ctx)
	cache, err := r.readCache(ctx)
	if err != nil {
		r.errorf("%w", err)
	}
	var recs []*store.Attachment
	if r.o.Store != nil {
		if recs, err = r.o.Store.ListAttachments(ctx); err != nil {
			r.errorf("read attachments: %w", err)
			return
		}
	}
	rules, err := readRules(ctx)
	if err != nil {
		r.errorf("read iptables rules: %w", err)
	}

	// berth's networks: those of its records, of its cache entries, of
	// its config dir, and those the caller named.
	names := map[string]bool{}
	for n := range confs {
		names[n] = true
	}
	for _, rec := range recs {
		names[rec.Network] = true
	}
	for _, e := range cache {
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
		nets[name] = r.resolve(name, confs, recs)
	}
	for _, name := range sortedKeys(nets) {
		if ctx.Err() != nil {
			return
		}
		nw := nets[name]
		if !hasState(nw, cache, recs, rules) {
			continue
		}
		r.sweepNetwork(ctx, nw, nets, rules)
	}
	r.sweepForeignNetns(ctx, recs)
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
func hasState(nw *network, cache []evidence.CacheEntry, recs []*store.Attachment, rules []evidence.Rule) bool {
	for _, e := range cache {
		if e.Network == nw.name {
			return true
		}
	}
	for _, rec := range recs {
		if rec.Network == nw.name {
			return true
		}
	}
	for _, d := range nw.leaseDirs {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
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

// sweepNetwork is steps 2 to 6 for one network, under its exclusive lock:
// no ADD or DEL of the network runs meanwhile, and every ADD that ran or
// will run has its record in the store before it takes the lock.
func (r *run) sweepNetwork(ctx context.Context, nw *network, nets map[string]*network, snapshot []evidence.Rule) {
	log := r.log.With("network", nw.name)
	unlock, err := attach.LockNetwork(ctx, r.o.LockDir, nw.name, true)
	if err != nil {
		r.errorf("network %q: %w", nw.name, err)
		return
	}
	defer unlock()

	known := map[string]bool{}
	var valid validSet
	if r.o.Store != nil {
		recs, err := r.o.Store.ListAttachments(ctx)
		if err != nil {
			r.errorf("network %q: read attachments: %w (nothing reclaimed)", nw.name, err)
			return
		}
		for _, rec := range recs {
			if rec.Network == nw.name {
				known[rec.ID] = true
				valid.add(rec.ID, rec.IfName)
			}
		}
	}
	cache, err := r.readCache(ctx)
	if err != nil {
		r.errorf("network %q: %w (nothing reclaimed)", nw.name, err)
		return
	}

	// Steps 2 and 3: cache entries (and their namespaces) nothing owns.
	for _, e := range cache {
		if e.Network != nw.name {
			continue
		}
		reason := ""
		pfx, isPfx := r.foreignPrefix(filepath.Base(e.NetNS))
		switch {
		case known[e.ContainerID]:
		case r.ours(e) && r.o.Store == nil && pinned(e.NetNS):
			r.kept(Item{Kind: KindNetns, ID: e.ContainerID, Network: nw.name, Path: e.NetNS, Reason: "berth's store is unreadable and the namespace still exists: it may be in use"})
		case r.ours(e):
			reason = "libcni cache entry carries BERTH_ID but berth has no record of it"
		case r.foreignNetwork(nw.name):
			reason = "attachment of foreign network " + nw.name + " (--foreign-network) that berth has no record of"
		case isPfx && filepath.Dir(e.NetNS) == r.netns.Dir():
			reason = "attachment of a namespace with foreign prefix " + pfx + " (--foreign-prefix)"
		}
		if reason == "" {
			known[e.ContainerID] = true
			valid.add(e.ContainerID, e.IfName)
			continue
		}
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
			continue
		}
		if err := r.delCached(ctx, nw, e); err != nil {
			r.fail(it, err)
			// Keep it out of GC: libcni would DEL it without removing
			// the namespace, and the namespace would then be nobody's.
			known[e.ContainerID] = true
			valid.add(e.ContainerID, e.IfName)
			continue
		}
		r.reclaimed(it)
		r.touch(nw.name, nw.conf)
	}

	// Step 5: leases of container IDs nobody knows.
	gcOK := r.o.Store != nil
	unknown := map[string][]evidence.Lease{}
	for _, d := range nw.leaseDirs {
		ls, err := evidence.ReadLeases(d)
		if err != nil {
			r.errorf("network %q: %w", nw.name, err)
			gcOK = false
			continue
		}
		for _, l := range ls {
			switch {
			case known[l.ID]:
				valid.add(l.ID, l.IfName)
			case r.handled[handledKey(nw.name, l.ID)]:
				// Reclaimed above (or would be): its DEL releases it.
			case r.o.Store == nil && r.netns.Exists(l.ID):
				r.kept(Item{Kind: KindLease, ID: l.ID, Network: nw.name, Path: l.Path, Reason: "berth's store is unreadable and a namespace of that name exists: it may be in use"})
				known[l.ID] = true
			default:
				unknown[l.ID] = append(unknown[l.ID], l)
			}
		}
	}
	for _, id := range sortedKeys(unknown) {
		ls := unknown[id]
		var items []Item
		for _, l := range ls {
			it := Item{Kind: KindLease, ID: id, Network: nw.name, Path: l.Path, Reason: fmt.Sprintf("lease of %s for container ID %q, which neither berth's store nor libcni's cache knows", l.IP, id)}
			r.found(it)
			items = append(items, it)
		}
		r.handled[handledKey(nw.name, id)] = true
		if r.o.DryRun {
			continue
		}
		if err := r.releaseLeases(ctx, nw, id, ls); err != nil {
			for _, it := range items {
				r.fail(it, err)
			}
			continue
		}
		for _, it := range items {
			r.reclaimed(it)
		}
		r.touch(nw.name, nw.conf)
	}

	// Step 6: rules of unknown IDs.
	r.sweepRules(ctx, nw, nets, snapshot, known)

	// Step 4: the GC verb, with every attachment that stays.
	if nw.conf == nil {
		return
	}
	if err := nw.conf.GCSupport(); err != nil {
		log.Debug("CNI GC not sent", "reason", err)
		return
	}
	if !gcOK {
		r.kept(Item{Kind: KindCNIGC, Network: nw.name, Reason: "GC not sent: the set of valid attachments is not known (store or lease dir unreadable)"})
		return
	}
	if r.o.DryRun {
		return
	}
	it := Item{Kind: KindCNIGC, Network: nw.name, Reason: fmt.Sprintf("CNI GC sent with %d valid attachments", len(valid.list))}
	if err := r.o.CNI.GC(ctx, nw.conf, valid.list); err != nil {
		r.fail(it, err)
		return
	}
	r.reclaimed(it)
}

// sweepRules removes the network's CNI rules whose marker names an ID
// nobody knows, and firewall rules for addresses nobody leases. The
// snapshot only says whether to look; the decision uses a fresh read
// taken under the network's lock.
func (r *run) sweepRules(ctx context.Context, nw *network, nets map[string]*network, snapshot []evidence.Rule, known map[string]bool) {
	relevant := false
	for _, rl := range snapshot {
		if ruleOf(rl, nw) {
			relevant = true
		}
	}
	if !relevant {
		return
	}
	rules, err := readRules(ctx)
	if err != nil {
		r.errorf("network %q: read iptables rules: %w", nw.name, err)
		return
	}
	byID := map[string][]evidence.Rule{}
	fw := map[string]Item{}
	for _, rl := range rules {
		if n, id, ok := evidence.ParseMarker(rl.Line); ok && n == nw.name {
			if !known[id] && !r.handled[handledKey(nw.name, id)] {
				byID[id] = append(byID[id], rl)
			}
			continue
		}
		ip, ok := evidence.FirewallIP(rl.Line)
		if !ok || !inSubnets(ip, nw.subnets) || leased(ip, nets) {
			continue
		}
		fw[rl.Line] = Item{Kind: KindIptables, ID: ip.String(), Network: nw.name, Path: rl.Table + " CNI-FORWARD",
			Reason: fmt.Sprintf("firewall plugin rule for %s, which no lease in network %q holds: %s", ip, nw.name, rl.Line)}
	}
	if len(byID) == 0 && len(fw) == 0 {
		return
	}
	var items []Item
	for _, id := range sortedKeys(byID) {
		chains := map[string]bool{}
		for _, rl := range byID[id] {
			if f := strings.Fields(rl.Line); len(f) > 1 {
				chains[rl.Table+"/"+f[1]] = true
			}
		}
		items = append(items, Item{Kind: KindIptables, ID: id, Network: nw.name, Path: strings.Join(sortedKeys(chains), ","),
			Reason: fmt.Sprintf("%d CNI rules carry the marker of network %q and ID %q, which neither berth's store nor libcni's cache knows", len(byID[id]), nw.name, id)})
	}
	for _, line := range sortedKeys(fw) {
		items = append(items, fw[line])
	}
	for _, it := range items {
		r.found(it)
	}
	for id := range byID {
		r.handled[handledKey(nw.name, id)] = true
	}
	if r.o.DryRun {
		return
	}
	markers := make([]string, 0, len(byID))
	for id := range byID {
		markers = append(markers, evidence.Marker(nw.name, id))
	}
	removed, err := hostclean.RemoveRulesMatching(ctx, func(line string) bool {
		if _, ok := fw[line]; ok {
			return true
		}
		for _, m := range markers {
			if strings.Contains(line, m) {
				return true
			}
		}
		return false
	})
	if err != nil {
		for _, it := range items {
			r.fail(it, err)
		}
		return
	}
	r.log.Debug("removed iptables rules", "network", nw.name, "removed", removed)
	for _, it := range items {
		r.reclaimed(it)
	}
	r.touch(nw.name, nw.conf)
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

// delCached DELs an attachment known from libcni's cache (the cached
// configuration is used), then removes what DEL cannot: the bridge's
// masquerade rules when the namespace is gone, and the namespace.
func (r *run) delCached(ctx context.Context, nw *network, e evidence.CacheEntry) error {
	isPinned := pinned(e.NetNS)
	att := &cni.Attachment{ContainerID: e.ContainerID, IfName: e.IfName}
	if isPinned {
		att.NetNS = e.NetNS
	}
	// Without the namespace, Del also removes the attachment's marked rules.
	if err := r.o.CNI.Del(ctx, nw.conf, nw.name, att); err != nil {
		return err
	}
	if e.NetNS == "" || strings.HasPrefix(e.NetNS, "/proc/") {
		return nil
	}
	if !r.ours(e) && filepath.Dir(e.NetNS) != r.netns.Dir() {
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

// sweepForeignNetns removes namespaces whose name carries a foreign prefix
// the caller named and that berth has no record of. Those with a cache
// entry were DELed and removed in their network's sweep.
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
