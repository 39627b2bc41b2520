package nomad

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
)

// allocID is the form of Nomad's allocation IDs (a UUID, as Nomad
// prints it): the name of its namespaces and the container ID of its CNI
// attachments. Anything else is never Nomad's.
var allocID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Owner is Nomad as a gc.Owner: it judges by this node's allocations
// (NodeAllocations, kept current by Update), and asks Nomad about an ID it
// does not have. It is safe for concurrent use.
type Owner struct {
	client       *Client
	node         *Node
	nets         map[string]*cni.Network
	grace        time.Duration
	teardownWait time.Duration
	log          *slog.Logger
	now          func() time.Time
	netnsDir     string
	cacheDir     string
	// host is the client as the host knows it; anyNetns: the operator
	// opted in to namespaces without host evidence
	// (ReclaimWithoutEvidence); settle: see unmountSettle.
	host     *ClientHost
	anyNetns bool
	settle   time.Duration

	mu sync.Mutex
	// allocs are the allocations known, by ID: this node's (from the
	// last listing and later events) and those looked up by ID.
	allocs map[string]*Alloc
	// unknown are IDs Nomad answered 404 for since the last Refresh.
	unknown map[string]bool
	// firstSeen dates IDs whose evidence has no date of its own (a rule).
	firstSeen map[string]time.Time
	// failed is the first error of a lookup since the last Refresh: no
	// later lookup is tried (fail closed, and fast).
	failed error
	// ready: a listing succeeded; until then nothing is judged.
	ready bool
	// delDone dates when an allocation's libcni cache entry was first
	// seen gone (Nomad's DEL done): its unmount comes right after.
	delDone map[string]time.Time
	// clientFDs are the targets of the client process's open fds, read
	// by Prefetch (a namespace it holds open is Nomad's).
	clientFDs map[string]bool
}

// unmountSettle is how long after Nomad's DEL (its libcni cache entry
// gone) berth waits before it removes the namespace itself: Nomad
// unmounts right after its DEL returns, in the same goroutine, and must
// find its namespace there (else it logs an error berth caused).
const unmountSettle = 500 * time.Millisecond

// Rules, the first part of Verdict.Rule (the second names the evidence
// that the thing was Nomad's, see evidence).
const (
	// RuleTeardownFailed: Nomad's DEL is done (no libcni cache entry is
	// left) but the namespace is still pinned: its unmount failed (EBUSY).
	RuleTeardownFailed = "teardown-failed"
	// RuleClientReleased: the cache entry is left, and the client no
	// longer holds the allocation (its alloc dir is gone).
	RuleClientReleased = "client-released"
	// RuleClientGone and RuleClientRestarted: the cache entry is left and
	// the client that would tear it down was killed (no process holds its
	// state), or restarted after the allocation turned terminal (a client
	// never tears down what was terminal before it started).
	RuleClientGone      = "client-gone"
	RuleClientRestarted = "client-restarted"
	// RuleTeardownDeadline: the cache entry is left past the deadline.
	RuleTeardownDeadline = "teardown-deadline"
	// RuleAwaitingTeardown (kept): Nomad has yet to tear it down.
	RuleAwaitingTeardown = "awaiting-teardown"
	// RuleUnknownPastGrace: Nomad does not know the allocation, and the
	// evidence is older than the grace period; RuleWithinGrace (kept):
	// not yet.
	RuleUnknownPastGrace = "unknown-past-grace"
	RuleWithinGrace      = "within-grace"
)

// Evidence that a thing was Nomad's, the second part of Verdict.Rule.
const (
	EvidenceAllocDir = "alloc-dir"      // its alloc dir under the configured data dir
	EvidenceHeld     = "held-by-client" // the client process holds the namespace open
	EvidenceCNICache = "cni-cache"      // a libcni cache entry in one of Nomad's networks
	EvidenceLease    = "lease"          // a host-local lease in one of Nomad's networks
	EvidenceRule     = "iptables"       // a rule of one of Nomad's networks
	EvidenceOptIn    = "opt-in"         // none, but the operator opted in (reclaim_without_evidence)
)

var (
	_ gc.Owner      = (*Owner)(nil)
	_ gc.Prefetcher = (*Owner)(nil)
)

// OwnerOptions tune an Owner; zero values take the defaults.
type OwnerOptions struct {
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// NetnsDir is where Nomad pins namespaces: NetnsDir, always, for
	// Nomad 1.6; another dir only for tests and benchmarks.
	NetnsDir string
}

// NewOwner makes the owner for node, whose networks it reads from the
// node's CNI config dir (and its bridge mode). Call Refresh before use.
func NewOwner(ctx context.Context, c *Client, node *Node, o OwnerOptions) *Owner {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NetnsDir == "" {
		o.NetnsDir = NetnsDir
	}
	ow := &Owner{
		client: c, node: node, grace: c.set.Grace, teardownWait: c.set.TeardownWait,
		log: o.Logger, now: o.Now, netnsDir: o.NetnsDir, cacheDir: cni.DefaultCacheDir,
		host: node.Host, anyNetns: c.set.ReclaimWithoutEvidence, settle: unmountSettle,
		allocs: map[string]*Alloc{}, unknown: map[string]bool{}, firstSeen: map[string]time.Time{},
		delDone: map[string]time.Time{},
	}
	if ow.host == nil {
		ow.host = &ClientHost{}
	}
	ow.nets = nodeNetworks(ctx, node, o.Logger)
	return ow
}

// Connect asks the agent at s.Address who it is and lists its node's
// allocations: the owner for `berth gc --nomad`. Any error means Nomad
// cannot vouch for anything, and nothing may be reclaimed.
func Connect(ctx context.Context, s Settings, obs Observer, o OwnerOptions) (*Owner, error) {
	c, err := NewClient(s, obs)
	if err != nil {
		return nil, err
	}
	node, err := c.Self(ctx)
	if err != nil {
		return nil, err
	}
	ow := NewOwner(ctx, c, node, o)
	if _, err := ow.Refresh(ctx); err != nil {
		return nil, err
	}
	return ow, nil
}

// Node is the node the owner judges for.
func (o *Owner) Node() *Node { return o.node }

// Client is the owner's Nomad client.
func (o *Owner) Client() *Client { return o.client }

// Name implements gc.Owner.
func (o *Owner) Name() string { return "nomad" }

// Networks implements gc.Owner: the networks of the node's CNI config dir
// and its bridge network.
func (o *Owner) Networks() map[string]*cni.Network { return o.nets }

// Refresh lists the node's allocations anew, forgets earlier 404s and
// lookup errors, and returns the index of the listing (to follow events
// from). On error the previous state is kept, and a never refreshed owner
// judges nothing.
func (o *Owner) Refresh(ctx context.Context) (uint64, error) {
	allocs, idx, err := o.client.NodeAllocations(ctx, o.node.ID)
	if err != nil {
		return 0, err
	}
	m := make(map[string]*Alloc, len(allocs))
	for _, a := range allocs {
		m[a.ID] = a
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// An event newer than the listing wins.
	for id, a := range o.allocs {
		if cur, ok := m[id]; ok && a.ModifyIndex > cur.ModifyIndex {
			m[id] = a
		}
	}
	o.allocs, o.unknown, o.failed, o.ready = m, map[string]bool{}, nil, true
	for id, t := range o.firstSeen {
		if o.now().Sub(t) > 2*o.grace+time.Hour {
			delete(o.firstSeen, id)
		}
	}
	return idx, nil
}

// Update records an allocation seen in the event stream (older news than
// what is known is ignored). It returns the allocation now known.
func (o *Owner) Update(a *Alloc) *Alloc {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, ok := o.allocs[a.ID]; ok && cur.ModifyIndex > a.ModifyIndex {
		return cur
	}
	o.allocs[a.ID] = a
	delete(o.unknown, a.ID)
	return a
}

// Forget drops what is known of an allocation whose leftovers are gone.
func (o *Owner) Forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.firstSeen, id)
	delete(o.delDone, id)
}

// Terminal lists the terminal allocations of the node known now.
func (o *Owner) Terminal() []*Alloc {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*Alloc
	for _, a := range o.allocs {
		if a.Terminal() && a.NodeID == o.node.ID {
			out = append(out, a)
		}
	}
	return out
}

// Host is the client as this host knew it when the owner was made.
func (o *Owner) Host() *ClientHost { return o.host }

// Cached reports whether libcni still caches an attachment of the
// allocation (in any network): Nomad has not finished its DEL.
func (o *Owner) Cached(ctx context.Context, id string) (bool, error) {
	es, err := evidence.ReadCache(ctx, o.cacheDir, id)
	return len(es) > 0, err
}

// NoteDelDone records that the allocation's cache entry was seen gone
// (the earliest sighting counts).
func (o *Owner) NoteDelDone(id string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.delDone[id]; !ok || at.Before(t) {
		o.delDone[id] = at
	}
}

// TeardownOver says why Nomad will not tear down a terminal allocation
// whose cache entry is still there (a rule), or "" while it still may.
func (o *Owner) TeardownOver(a *Alloc) string {
	switch {
	case !o.host.Alive():
		return RuleClientGone
	case !o.host.Started.IsZero() && a.Modified().Before(o.host.Started):
		return RuleClientRestarted
	case !isDir(o.host.AllocDir(a.ID)):
		return RuleClientReleased
	case o.now().Sub(a.Modified()) >= o.teardownWait:
		return RuleTeardownDeadline
	}
	return ""
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// evidenceOfNomad is the host's evidence that the claimed thing was
// Nomad's, "" when there is none: other runtimes name namespaces by UUIDs
// too, and Nomad's answer alone proves nothing of the host.
func (o *Owner) evidenceOfNomad(c gc.Claim) string {
	switch c.Kind {
	case gc.KindCNICache:
		return EvidenceCNICache
	case gc.KindLease:
		return EvidenceLease
	case gc.KindIptables:
		return EvidenceRule
	}
	if o.host.DataDir != "" {
		if fi, err := os.Lstat(o.host.AllocDir(c.ID)); err == nil && fi.IsDir() && rootOwned(o.host.AllocDir(c.ID), fi) == nil {
			return EvidenceAllocDir
		}
	}
	if ino, err := netns.Inode(c.Path); err == nil {
		o.mu.Lock()
		held := o.clientFDs[evidence.NetnsLink(ino)]
		o.mu.Unlock()
		if held {
			return EvidenceHeld
		}
	}
	if o.anyNetns {
		return EvidenceOptIn
	}
	return ""
}

// lookup returns the allocation, nil when Nomad does not know it.
func (o *Owner) lookup(ctx context.Context, id string) (*Alloc, error) {
	o.mu.Lock()
	if !o.ready {
		o.mu.Unlock()
		return nil, errors.New("the node's allocations were never listed")
	}
	if a, ok := o.allocs[id]; ok {
		o.mu.Unlock()
		return a, nil
	}
	if o.unknown[id] {
		o.mu.Unlock()
		return nil, nil
	}
	if o.failed != nil {
		err := o.failed
		o.mu.Unlock()
		return nil, fmt.Errorf("not asked after an earlier failure: %w", err)
	}
	o.mu.Unlock()

	a, err := o.client.Allocation(ctx, id)
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case errors.Is(err, ErrUnknownAlloc):
		o.unknown[id] = true
		return nil, nil
	case err != nil:
		if o.failed == nil && ctx.Err() == nil {
			o.failed = err
		}
		return nil, err
	}
	o.allocs[id] = a
	return a, nil
}

// prefetchWorkers bound the lookups Prefetch runs at once: Nomad answers
// each in about a millisecond, mostly waiting.
const prefetchWorkers = 8

// Prefetch implements gc.Prefetcher: it looks up, several at a time, the
// IDs of the list that are allocation IDs the owner knows nothing of yet,
// so that Judge finds the answers. After the first failure no other
// lookup is started (Judge then reports the error for each).
func (o *Owner) Prefetch(ctx context.Context, ids []string) {
	fds := map[string]bool{}
	if o.host.Alive() {
		for _, fd := range evidence.FDs(o.host.PID) {
			fds[fd.Target] = true
		}
	}
	// Real time, not o.now: the settle is about Nomad's pace.
	now := time.Now()
	o.mu.Lock()
	o.clientFDs = fds
	// gc asks about namespaces that no cache entry names: for an
	// allocation, Nomad's DEL is done by now.
	for _, id := range ids {
		if _, ok := o.delDone[id]; !ok {
			o.delDone[id] = now
		}
	}
	var todo []string
	for _, id := range ids {
		if _, known := o.allocs[id]; !known && !o.unknown[id] && allocID.MatchString(id) {
			todo = append(todo, id)
		}
	}
	ready := o.ready
	o.mu.Unlock()
	if !ready || len(todo) == 0 {
		return
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < prefetchWorkers && i < len(todo); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				_, _ = o.lookup(ctx, id)
			}
		}()
	}
	for _, id := range todo {
		o.mu.Lock()
		stop := o.failed != nil
		o.mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		work <- id
	}
	close(work)
	wg.Wait()
}

// Judge implements gc.Owner. It claims the namespaces Nomad pins (in
// NetnsDir, named by an allocation ID) and, in Nomad's networks, the
// attachments whose container ID is an allocation ID, when the host has
// evidence that they were Nomad's (evidenceOfNomad: a namespace needs its
// alloc dir under the configured data dir, or the client holding it open,
// or the operator's opt-in). The verdict is the allocation's client
// status:
//
//   - pending, running, unknown (a disconnected client): live;
//   - complete, failed, lost: a libcni cache entry is Nomad's teardown to
//     come, kept until the client cannot do it any more (TeardownOver);
//     a namespace no cache entry names is one Nomad's DEL is done with and
//     failed to unmount: dead once the DEL is unmountSettle old;
//   - not known to Nomad (garbage-collected): dead once the evidence is
//     older than the grace period; undated evidence is dated from when
//     this owner first saw it;
//   - Nomad could not be asked: an error, so gc keeps it.
//
// Verdict.Rule names the rule and the evidence: "<rule>:<evidence>".
func (o *Owner) Judge(ctx context.Context, c gc.Claim) gc.Verdict {
	if !allocID.MatchString(c.ID) {
		return gc.Verdict{}
	}
	if c.Kind == gc.KindNetns && !sameDir(filepath.Dir(c.Path), o.netnsDir) {
		return gc.Verdict{}
	}
	ev := o.evidenceOfNomad(c)
	if ev == "" {
		// Not Nomad's as far as this host tells: never judged.
		return gc.Verdict{}
	}
	v := gc.Verdict{Owned: true, Netns: filepath.Join(o.netnsDir, c.ID)}
	a, err := o.lookup(ctx, c.ID)
	if err != nil {
		v.Err, v.Status = err, "Nomad could not be asked"
		return v
	}
	now := o.now()
	rule := func(r string) string { return r + ":" + ev }
	if a != nil {
		v.Status = a.ClientStatus
		desc := fmt.Sprintf("Nomad allocation %s (job %q, group %q, namespace %s)", a.ID, a.JobID, a.TaskGroup, a.Namespace)
		if a.NodeID != o.node.ID {
			desc += " of node " + a.NodeID
		}
		if !a.Terminal() {
			v.Live = true
			v.Reason = fmt.Sprintf("%s is %s (desired %s)", desc, a.ClientStatus, a.DesiredStatus)
			return v
		}
		ago := now.Sub(a.Modified()).Round(time.Second)
		if c.Kind == gc.KindCNICache {
			over := o.TeardownOver(a)
			if over == "" {
				v.Rule = rule(RuleAwaitingTeardown)
				v.Reason = fmt.Sprintf("%s is %s since %s: its libcni cache entry is left to Nomad's own teardown while its client (pid %d) holds the allocation, up to %s", desc, a.ClientStatus, ago, o.host.PID, o.teardownWait)
				return v
			}
			v.Dead, v.Rule = true, rule(over)
			v.Reason = fmt.Sprintf("%s is %s since %s and Nomad will not tear it down: %s", desc, a.ClientStatus, ago, o.overText(over))
			return v
		}
		if c.Kind == gc.KindNetns {
			o.awaitUnmount(ctx, c.ID)
		}
		v.Dead, v.Rule = true, rule(RuleTeardownFailed)
		v.Reason = fmt.Sprintf("%s is %s since %s; Nomad's CNI DEL is done (no libcni cache entry is left) and what it left stays: its teardown failed", desc, a.ClientStatus, ago)
		return v
	}
	v.Status = "unknown to Nomad"
	since, what := c.Since, evidenceOf(c.Kind)
	if since.IsZero() {
		o.mu.Lock()
		t, ok := o.firstSeen[c.ID]
		if !ok {
			t = now
			o.firstSeen[c.ID] = t
		}
		o.mu.Unlock()
		since, what = t, "it was first seen"
	}
	age := now.Sub(since).Round(time.Second)
	if age < o.grace {
		v.Rule = rule(RuleWithinGrace)
		v.Reason = fmt.Sprintf("Nomad does not know allocation %s (garbage-collected?) and %s %s ago, within the grace period of %s: kept", c.ID, what, age, o.grace)
		return v
	}
	v.Dead, v.Rule = true, rule(RuleUnknownPastGrace)
	v.Reason = fmt.Sprintf("Nomad does not know allocation %s (garbage-collected) and %s %s ago, past the grace period of %s", c.ID, what, age, o.grace)
	return v
}

// awaitUnmount waits until Nomad's DEL of the allocation is unmountSettle
// old, so that Nomad's own unmount, which follows it, comes first.
func (o *Owner) awaitUnmount(ctx context.Context, id string) {
	o.mu.Lock()
	t, ok := o.delDone[id]
	if !ok {
		t = time.Now()
		o.delDone[id] = t
	}
	o.mu.Unlock()
	if wait := o.settle - time.Since(t); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (o *Owner) overText(rule string) string {
	switch rule {
	case RuleClientGone:
		return fmt.Sprintf("no process holds its client's state (%s): the client was killed", filepath.Join(o.host.StateDir(), "state.db"))
	case RuleClientRestarted:
		return fmt.Sprintf("its client (pid %d) started at %s, after the allocation turned terminal", o.host.PID, o.host.Started.Format(time.RFC3339))
	case RuleClientReleased:
		return "its client no longer holds the allocation (its alloc dir is gone)"
	}
	return fmt.Sprintf("its teardown deadline of %s is past", o.teardownWait)
}

// evidenceOf says what dates a claim of the kind.
func evidenceOf(kind string) string {
	switch kind {
	case gc.KindNetns:
		return "its namespace was pinned"
	case gc.KindLease:
		return "its lease was taken"
	case gc.KindCNICache:
		return "its libcni cache entry was written"
	}
	return "its evidence dates from"
}

// nodeNetworks reads the networks Nomad's client attaches to: those of
// its CNI config dir, and its bridge network as Nomad 1.6 configures it
// (used only for where its leases are and which subnet it hands out, and
// to DEL a lease holder that has no cache entry; a DEL of a cached
// attachment uses the cached configuration).
func nodeNetworks(ctx context.Context, node *Node, log *slog.Logger) map[string]*cni.Network {
	nets := map[string]*cni.Network{}
	files, err := cni.ReadConfigDir(ctx, node.CNIConfigDir)
	if err != nil {
		log.Warn("cannot read Nomad's CNI config dir: only its bridge network is swept", "dir", node.CNIConfigDir, "err", err)
	}
	for _, f := range files {
		if f.Err != nil || f.Network == nil {
			continue
		}
		if _, dup := nets[f.Network.Name()]; !dup {
			nets[f.Network.Name()] = f.Network
		}
	}
	if _, taken := nets[BridgeNetwork]; !taken {
		br, err := bridgeNetwork(node)
		if err != nil {
			log.Warn("cannot describe Nomad's bridge network; only its cached attachments are swept", "err", err)
		}
		nets[BridgeNetwork] = br
	}
	return nets
}

// bridgeNetwork describes the CNI configuration of Nomad's bridge mode.
func bridgeNetwork(node *Node) (*cni.Network, error) {
	conf := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": %q, "plugins": [
  {"type": "loopback"},
  {"type": "bridge", "bridge": %q, "ipMasq": true, "isGateway": true, "forceAddress": true, "hairpinMode": %v,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "firewall", "backend": "iptables", "iptablesAdminChainName": "NOMAD-ADMIN"},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}`,
		BridgeNetwork, node.BridgeName, node.BridgeHairpin, node.BridgeSubnet)
	return cni.ParseNetwork([]byte(conf), "Nomad's bridge network")
}

func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}
