package nomad

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/berth/berth/cni"
	"github.com/berth/berth/gc"
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
}

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
		log: o.Logger, now: o.Now, netnsDir: o.NetnsDir,
		allocs: map[string]*Alloc{}, unknown: map[string]bool{}, firstSeen: map[string]time.Time{},
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
	o.mu.Lock()
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
// attachments whose container ID is an allocation ID; the verdict is the
// allocation's client status:
//
//   - pending, running, unknown (a disconnected client): live;
//   - complete, failed, lost: dead, but a libcni cache entry only once
//     Nomad's own teardown had TeardownWait to DEL it;
//   - not known to Nomad (garbage-collected): dead once the evidence is
//     older than the grace period; undated evidence is dated from when
//     this owner first saw it;
//   - Nomad could not be asked: an error, so gc keeps it.
func (o *Owner) Judge(ctx context.Context, c gc.Claim) gc.Verdict {
	if !allocID.MatchString(c.ID) {
		return gc.Verdict{}
	}
	if c.Kind == gc.KindNetns && !sameDir(filepath.Dir(c.Path), o.netnsDir) {
		return gc.Verdict{}
	}
	v := gc.Verdict{Owned: true, Netns: filepath.Join(o.netnsDir, c.ID)}
	a, err := o.lookup(ctx, c.ID)
	if err != nil {
		v.Err, v.Status = err, "Nomad could not be asked"
		return v
	}
	now := o.now()
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
		if c.Kind == gc.KindCNICache && ago < o.teardownWait {
			v.Reason = fmt.Sprintf("%s is %s since %s: its libcni cache entry is left to Nomad's own teardown (DEL in flight) for %s", desc, a.ClientStatus, ago, o.teardownWait)
			return v
		}
		v.Dead = true
		v.Reason = fmt.Sprintf("%s is %s since %s", desc, a.ClientStatus, ago)
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
		v.Reason = fmt.Sprintf("Nomad does not know allocation %s (garbage-collected?) and %s %s ago, within the grace period of %s: kept", c.ID, what, age, o.grace)
		return v
	}
	v.Dead = true
	v.Reason = fmt.Sprintf("Nomad does not know allocation %s (garbage-collected) and %s %s ago, past the grace period of %s", c.ID, what, age, o.grace)
	return v
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
