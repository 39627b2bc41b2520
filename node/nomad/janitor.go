package nomad

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
)

// Metrics is what Run reports to (metrics.Metrics is one); nil is allowed.
type Metrics interface {
	Observer
	// NomadReclaimed counts leftovers of Nomad's reclaimed, by gc kind
	// and the rule that proved them dead (gc.Item.Rule).
	NomadReclaimed(kind, rule string, n int)
	// NomadReclaimLatency observes how long after an allocation turned
	// terminal its leftovers were gone.
	NomadReclaimLatency(d time.Duration)
	// NomadConnected says whether the event stream is followed.
	NomadConnected(up bool)
}

// RunOptions configure Run.
type RunOptions struct {
	Settings Settings
	// GC is the base of every collection: Attach, Store, LockDir, Logger.
	// Owners, OwnersOnly and IDs are set by Run.
	GC gc.Options
	// Interval is how often the full reconcile runs (0: at start and
	// after each reconnect only).
	Interval time.Duration
	// NetnsDir is where Nomad pins namespaces (OwnerOptions.NetnsDir).
	NetnsDir string
	Metrics  Metrics
	Logger   *slog.Logger
}

// retryDelays space the attempts at one terminal allocation: soon at
// first (Nomad's own teardown takes a second or two), then rarely, until
// its teardown wait is long over.
var retryDelays = []time.Duration{
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
	4 * time.Second, 8 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second,
}

// janitor follows one node's allocations and reclaims what Nomad leaves.
type janitor struct {
	o   RunOptions
	log *slog.Logger

	// sem bounds the collections running at once.
	sem chan struct{}

	mu      sync.Mutex
	pending map[string]bool
	done    map[string]time.Time
	wg      sync.WaitGroup
}

// Run reconciles the node with Nomad (at start, every Interval, and after
// each reconnect), follows Nomad's allocation events and reclaims an
// allocation's leftovers as soon as it is terminal, retrying while
// Nomad's own teardown is in flight. While Nomad cannot be reached it
// reclaims nothing and retries the connection with backoff. It returns
// when ctx ends, once the reclaims in flight are done.
func Run(ctx context.Context, o RunOptions) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	j := &janitor{o: o, log: o.Logger.With("component", "nomad"), sem: make(chan struct{}, 2),
		pending: map[string]bool{}, done: map[string]time.Time{}}
	defer j.wg.Wait()
	j.connected(false)
	backoff := time.Second
	for {
		start := time.Now()
		err := j.session(ctx)
		j.connected(false)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second // it had been working
		}
		j.log.Warn("Nomad unreachable or failing: nothing of Nomad's is reclaimed until it answers", "address", o.Settings.Address, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		if backoff < 30*time.Second {
			backoff *= 2
		}
	}
}

func (j *janitor) connected(up bool) {
	if j.o.Metrics != nil {
		j.o.Metrics.NomadConnected(up)
	}
}

// session is one connection: who the node is, a listing, a full
// reconcile, then events until the stream breaks.
func (j *janitor) session(ctx context.Context) error {
	c, err := NewClient(j.o.Settings, j.o.Metrics)
	if err != nil {
		return err
	}
	node, err := c.Self(ctx)
	if err != nil {
		return err
	}
	ow := NewOwner(ctx, c, node, OwnerOptions{Logger: j.log, Now: j.o.GC.Now, NetnsDir: j.o.NetnsDir})
	idx, err := ow.Refresh(ctx)
	if err != nil {
		return err
	}
	events, err := c.Follow(ctx, idx+1)
	if err != nil {
		// The listing is fresh: reconcile with it all the same (each
		// reconnect does), then retry the stream.
		j.reconcile(ctx, ow, "start", false)
		return err
	}
	j.connected(true)
	j.log.Info("following Nomad's allocations", "address", c.Address(), "node", node.ID, "node_name", node.Name, "nomad", node.Version,
		"data_dir", node.DataDir, "client_pid", node.Host.PID, "cni_config_dir", node.CNIConfigDir, "networks", len(ow.Networks()),
		"grace_period", j.o.Settings.Grace, "teardown_deadline", j.o.Settings.TeardownWait)
	// Terminal allocations whose teardown may still be under way are
	// followed as those that turn terminal from now on.
	for _, a := range ow.Terminal() {
		j.track(ctx, ow, a)
	}
	j.reconcile(ctx, ow, "start", false)
	var tick <-chan time.Time
	if j.o.Interval > 0 {
		t := time.NewTicker(j.o.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b, ok := <-events:
			if !ok {
				return errors.New("event stream closed")
			}
			for _, ev := range b.Events {
				j.event(ctx, ow, ev)
			}
			if b.Err != nil {
				return b.Err
			}
		case <-tick:
			j.reconcile(ctx, ow, "periodic", true)
		}
	}
}

// event handles one allocation change of this node.
func (j *janitor) event(ctx context.Context, ow *Owner, ev AllocEvent) {
	if ev.Alloc.NodeID != ow.node.ID {
		return
	}
	a := ow.Update(ev.Alloc)
	if !a.Terminal() {
		return
	}
	j.track(ctx, ow, a)
}

// track reclaims a terminal allocation's leftovers (reclaimAlloc) unless
// that is under way or done.
func (j *janitor) track(ctx context.Context, ow *Owner, a *Alloc) {
	j.mu.Lock()
	_, finished := j.done[a.ID]
	if finished || j.pending[a.ID] {
		j.mu.Unlock()
		return
	}
	j.pending[a.ID] = true
	j.mu.Unlock()
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		j.reclaimAlloc(ctx, ow, a)
	}()
}

// reclaimAlloc collects one terminal allocation's leftovers, again and
// again until none is left (Nomad's own teardown may still be running, a
// process may still live in its namespace) or the retries are exhausted;
// the periodic reconcile then takes over.
func (j *janitor) reclaimAlloc(ctx context.Context, ow *Owner, a *Alloc) {
	defer func() {
		j.mu.Lock()
		delete(j.pending, a.ID)
		j.done[a.ID] = time.Now()
		j.mu.Unlock()
	}()
	log := j.log.With("alloc_id", a.ID, "job", a.JobID, "status", a.ClientStatus)
	switch j.awaitTeardown(ctx, ow, a) {
	case teardownCancelled:
		return
	case teardownClean:
		ow.Forget(a.ID)
		return
	}
	reclaimedNetns := false
	rules := map[string]bool{}
	for attempt := 0; ; attempt++ {
		rep, err := j.collect(ctx, ow, []string{a.ID})
		if ctx.Err() != nil {
			return
		}
		if rep != nil {
			for _, it := range rep.Reclaimed {
				if it.Kind == gc.KindNetns {
					reclaimedNetns = true
				}
				if it.Rule != "" {
					rules[it.Rule] = true
				}
			}
		}
		if err == nil && rep != nil && settled(rep) {
			if reclaimedNetns && j.o.Metrics != nil {
				j.o.Metrics.NomadReclaimLatency(time.Since(a.Modified()))
			}
			if len(rep.Found) > 0 || reclaimedNetns {
				log.Info("reclaimed what Nomad left of a terminal allocation", "attempts", attempt+1, "since_terminal", time.Since(a.Modified()).Round(time.Millisecond), "rules", sortedKeys(rules))
			}
			ow.Forget(a.ID)
			return
		}
		if attempt >= len(retryDelays) {
			log.Warn("leftovers of a terminal allocation remain after retries; the periodic reconcile will try again", "err", err, "kept", keptReasons(rep))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryDelays[attempt]):
		}
	}
}

// teardownPoll is how often a terminal allocation's teardown by Nomad is
// checked for (its libcni cache entry, its client, its alloc dir).
const teardownPoll = 100 * time.Millisecond

type teardownEnd int

const (
	// teardownDone: Nomad's DEL is done, and its namespace still there
	// (Nomad's unmount failed, or is about to run), or Nomad will not
	// tear it down (TeardownOver): collect.
	teardownDone teardownEnd = iota
	// teardownClean: Nomad's teardown is done and left nothing.
	teardownClean
	teardownCancelled
)

// awaitTeardown waits for Nomad to tear the allocation down: its CNI DEL
// (the libcni cache entry gone; its unmount follows at once, and Judge
// gives it unmountSettle), or until Nomad will not (its client gone,
// restarted or done with the allocation, or the deadline past). berth
// never goes before Nomad: that would make Nomad's own teardown fail.
func (j *janitor) awaitTeardown(ctx context.Context, ow *Owner, a *Alloc) teardownEnd {
	for {
		cached, err := ow.Cached(ctx, a.ID)
		if err == nil && !cached {
			ow.NoteDelDone(a.ID, time.Now())
			if ok, _ := netns.IsPinned(filepath.Join(ow.netnsDir, a.ID)); !ok {
				// Nomad's DEL succeeded (libcni drops the entry only
				// then) and its unmount too: nothing is left.
				return teardownClean
			}
			return teardownDone
		}
		if err == nil && ow.TeardownOver(a) != "" {
			return teardownDone
		}
		select {
		case <-ctx.Done():
			return teardownCancelled
		case <-time.After(teardownPoll):
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// settled: the run reclaimed all it found, kept nothing and failed nowhere.
func settled(rep *gc.Report) bool {
	return len(rep.Kept) == 0 && len(rep.Errors) == 0 && len(rep.Reclaimed) >= len(rep.Found)
}

func keptReasons(rep *gc.Report) []string {
	if rep == nil {
		return nil
	}
	var out []string
	for _, it := range rep.Kept {
		out = append(out, it.Reason)
	}
	return append(out, rep.Errors...)
}

// reconcile is the full collection; refresh lists the node's allocations
// first (the listing of a new session is fresh already). Without a
// listing nothing is collected.
func (j *janitor) reconcile(ctx context.Context, ow *Owner, why string, refresh bool) {
	if refresh {
		if _, err := ow.Refresh(ctx); err != nil {
			j.log.Warn("cannot list the node's allocations: the reconcile is skipped", "reconcile", why, "err", err)
			return
		}
		j.pruneDone()
	}
	rep, err := j.collect(ctx, ow, nil)
	switch {
	case err != nil:
		j.log.Warn("reconcile with Nomad failed", "reconcile", why, "err", err)
	case rep != nil && (len(rep.Found) > 0 || len(rep.Errors) > 0):
		j.log.Info("reconciled with Nomad", "reconcile", why, "found", len(rep.Found), "reclaimed", len(rep.Reclaimed), "kept", len(rep.Kept), "errors", len(rep.Errors), "duration_ms", rep.DurationMS)
	}
}

// collect runs gc with Nomad as the owner, for ids only when set.
func (j *janitor) collect(ctx context.Context, ow *Owner, ids []string) (*gc.Report, error) {
	select {
	case j.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-j.sem }()
	o := j.o.GC
	o.Owners, o.OwnersOnly, o.IDs = []gc.Owner{ow}, true, ids
	if o.Logger == nil {
		o.Logger = j.log
	}
	rep, err := gc.Run(ctx, o)
	if rep != nil && j.o.Metrics != nil {
		type key struct{ kind, rule string }
		by := map[key]int{}
		for _, it := range rep.Reclaimed {
			if it.Owner != "" {
				by[key{it.Kind, it.Rule}]++
			}
		}
		for k, n := range by {
			j.o.Metrics.NomadReclaimed(k.kind, k.rule, n)
		}
	}
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	return rep, nil
}

// pruneDone forgets allocations reclaimed long ago (events for them are
// over; should one come, a collection finds nothing).
func (j *janitor) pruneDone() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for id, t := range j.done {
		if time.Since(t) > time.Hour {
			delete(j.done, id)
		}
	}
}
