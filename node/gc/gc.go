// Package gc reconciles berth's records with the host and reclaims what a
// crash, a reboot or a failed teardown left behind: tasks of dead owners,
// half-made or half-removed attachments, orphaned namespaces, libcni cache
// entries, host-local leases and iptables rules.
//
// What is berth's is decided from evidence only, never from a name alone:
// a record in berth's store, a libcni cache entry carrying BERTH_ID, or a
// lease or iptables marker of one of berth's networks whose ID nobody
// knows. Anything else is left alone unless the caller names it with a
// foreign prefix or network.
//
// The sweep of a network runs under the network's exclusive lock (see
// attach.LockNetwork) and reads the store only once it holds it: an ADD
// takes the shared lock after its record is written, so an attachment in
// flight is always known and never reclaimed.
package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// Kinds of Item.
const (
	KindAllocOwner = "alloc-owner" // an allocation whose owning berth process is gone
	KindAttachment = "attachment"  // a store record driven to a clean state
	KindNetns      = "netns"       // a namespace berth made that nothing owns
	KindCNICache   = "cni-cache"   // a libcni cache entry of berth's that nothing owns
	KindCNIGC      = "cni-gc"      // the CNI GC verb sent to a network
	KindLease      = "lease"       // a host-local lease of an unknown container ID
	KindIptables   = "iptables"    // CNI rules and chains of an unknown ID
	KindBridge     = "bridge"      // what a network keeps after its last attachment
	KindError      = "error"       // a step that failed as a whole (no single item)
	// KindTask (gc/tasks.go): what a driver made for a task of a terminal or unknown allocation
	// KindMount (gc/mounts.go): a mount beneath a terminal or unknown allocation's directory
)

// DefaultTidyIdle is how long a network berth used must have had no
// attachment before a collection that runs by itself (an agent's, the
// reconcile of `berth run`) tidies it: a periodic job must not pay for
// rebuilding the bridge and shared chains at every launch.
const DefaultTidyIdle = 10 * time.Minute

// Item is one thing found, reclaimed or kept.
type Item struct {
	Kind    string `json:"kind"`
	ID      string `json:"id,omitempty"`
	Network string `json:"network,omitempty"`
	Path    string `json:"path,omitempty"`
	Reason  string `json:"reason"`
	// Owner names the Owner whose verdict decided (empty for berth's own).
	Owner string `json:"owner,omitempty"`
	// Status is the owner's state of it ("complete", "running", "unknown
	// to Nomad"); Age how old the evidence is (a namespace's pin, a lease
	// file), when the host tells; Holders the processes that live in its
	// namespace.
	Status string `json:"status,omitempty"`
	// Rule is the owner's rule that decided (Verdict.Rule).
	Rule    string `json:"rule,omitempty"`
	Age     string `json:"age,omitempty"`
	Holders string `json:"holders,omitempty"`
}

// States of a Row.
const (
	StatePlanned   = "would reclaim" // a dry run's: the plan
	StateReclaimed = "reclaimed"
	StateFailed    = "failed"
	StateKept      = "kept"
	StateNotDone   = "not done" // found, but the run was cancelled before it acted
)

// Row is one line of a run: an item and what became of it. A dry run's
// rows are the plan; a real run judges and acts in the same order, so on
// a host that did not change meanwhile its rows are the plan's with their
// outcome. Every reclaim is a row, tidying and the GC verb included.
type Row struct {
	Item
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// Counts sum a report's rows: Found are the rows to reclaim (planned,
// reclaimed, failed or not done), Errors the failed rows, GCSent the
// networks sent the CNI GC verb (or, in a dry run, that would be): it is
// housekeeping every run does, not garbage found.
type Counts struct {
	Found     int `json:"found"`
	Reclaimed int `json:"reclaimed"`
	Kept      int `json:"kept"`
	Errors    int `json:"errors"`
	GCSent    int `json:"gc_sent"`
}

// Progress is a real run's position in its plan: Done of Planned items
// acted on, Current the one being acted on now.
type Progress struct {
	Done, Planned int
	Current       Item
}

// Report says what a run found and did. Rows are its account, one per
// item (see Row), and Counts their sums. Found, Reclaimed and Kept are the
// same items by outcome: Found every item to reclaim (tidying included),
// Reclaimed those reclaimed (equal values) and the GC verb sent, Kept
// suspicious things left alone on purpose.
type Report struct {
	DryRun bool `json:"dry_run"`
	// StoreUnavailable is why the store could not be read; the sweep then
	// used host evidence only and kept every namespace that still exists.
	StoreUnavailable string `json:"store_unavailable,omitempty"`
	// Reboot is set when berth's attachments expect namespaces and none
	// of them exists any more.
	Reboot     bool     `json:"reboot_detected,omitempty"`
	Found      []Item   `json:"found"`
	Reclaimed  []Item   `json:"reclaimed"`
	Kept       []Item   `json:"kept"`
	Errors     []string `json:"errors"`
	Rows       []Row    `json:"rows"`
	Counts     Counts   `json:"counts"`
	DurationMS float64  `json:"duration_ms"`
}

// Failed reports whether something found could not be reclaimed.
func (r *Report) Failed() bool { return len(r.Errors) > 0 }

// Options configure a run.
type Options struct {
	// Attach tears attachments down and tidies networks; required.
	Attach *attach.Manager
	// Store is berth's store. Nil means it is unreadable (StoreErr says
	// why): the run then sweeps on host evidence only.
	Store *store.Store
	// StoreID identifies berth's attachments among other berths' on the
	// host (store.IDFor(dataDir)); taken from Store when empty.
	StoreID  string
	StoreErr error
	// CNI and ConfDir default to those of Attach.
	CNI     *cni.Client
	ConfDir string
	// LockDir must be the lock dir Attach uses (attach.DefaultLockDir if empty).
	LockDir string
	// Drivers stop the tasks of allocations whose owner died, by name.
	// A driver missing here is asked of OpenDriver (if set); without
	// either, a task with a recorded PID is killed by PID and start time,
	// and any other task is skipped with a warning (and its allocation's
	// network kept, since the task may still use it).
	Drivers    map[string]driver.Driver
	OpenDriver func(ctx context.Context, name string) (driver.Driver, error)
	// AllocDir holds the allocation directories (Config.AllocDir): what
	// is mounted beneath those of terminal or unknown allocations is
	// unmounted (kind "mount"). Empty: no such sweep.
	AllocDir string
	// DryRun reports what would be reclaimed and changes nothing.
	DryRun bool
	// ReclaimDetached also reclaims the allocations a stopping agent left
	// running for the next one (store.Allocation.Detached); without it
	// they are kept. An agent sets it once it has re-adopted its own.
	ReclaimDetached bool
	// IgnoreBackoff retries pending teardowns now, even before their
	// NextAttempt (an operator's explicit `berth gc`).
	IgnoreBackoff bool
	// ForeignPrefixes and ForeignNetworks name what is not berth's but
	// may be reclaimed all the same: namespaces whose name starts with a
	// prefix, attachments (cache entries, leases, rules) of a network.
	ForeignPrefixes []string
	ForeignNetworks []string
	Logger          *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// Progress, when set, makes a real run plan first (a dry run of the
	// same options) and report its position in that plan before each
	// item it acts on, and once at the end.
	Progress func(Progress)
	// TaskTimeout bounds the stop of one task (default 1 minute).
	TaskTimeout time.Duration
	// Owners are other runtimes whose leftovers gc may reclaim when they
	// say those are dead (see Owner).
	Owners []Owner
	// OwnersOnly limits the run to what an owner claims: berth's records
	// are not replayed (steps 1 and 2), IDs nobody claims are left alone
	// in every network, and nothing is tidied (step 8).
	OwnersOnly bool
	// IDs, when set, limits the sweep to these container IDs and namespace
	// names (one allocation's leftovers): steps 1, 2, 6 and 8 are skipped,
	// and so are the firewall rules that name an address only.
	IDs []string
	// TidyIdle: the networks berth used (store.ListNetworks) that have had
	// no attachment for at least this long get their bridge, host-local
	// directory and the shared chains removed, when nothing of any runtime
	// uses them. 0 tidies every idle network now (`berth gc`); an agent
	// waits a while so that a periodic job does not pay for rebuilding
	// them at every launch. Negative: only networks this run reclaimed
	// from are tidied.
	TidyIdle time.Duration
}

func (o *Options) defaults() error {
	if o.Attach == nil {
		return errors.New("gc: Options.Attach is required")
	}
	if o.CNI == nil {
		o.CNI = o.Attach.CNI()
	}
	if o.ConfDir == "" {
		o.ConfDir = o.Attach.ConfDir()
	}
	if o.LockDir == "" {
		o.LockDir = attach.DefaultLockDir
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TaskTimeout <= 0 {
		o.TaskTimeout = time.Minute
	}
	for _, p := range o.ForeignPrefixes {
		if p == "" {
			return errors.New("gc: empty foreign prefix would match every namespace")
		}
	}
	return nil
}

// run is the state of one Run or ReplayPending.
type run struct {
	o     Options
	log   *slog.Logger
	rep   *Report
	netns *netns.Manager
	// touched are networks where something was reclaimed: they are
	// tidied at the end. A nil value is resolved from the config dir.
	touched map[string]*cni.Network
	// handled are "network\x00id" attachments this run reclaimed (or
	// would, in a dry run), so later steps do not report them twice.
	handled map[string]bool
	// storeID is this berth's store ID, for evidence.Owned.
	storeID string
	// ids is Options.IDs as a set (nil: everything).
	ids map[string]bool
	// stay are the container IDs whose cache entries stay (kept, or their
	// reclaim failed): step 7 leaves their namespaces.
	stay map[string]bool
	// netnsDone are the namespaces steps 3 to 6 removed (or, in a dry
	// run, would), by netnsKey: step 7 does not report them again.
	netnsDone map[string]bool
	// ownerNets are the owners' networks, by name.
	ownerNets map[string]ownerNet
	// memberIdx maps namespace inodes to the processes living in them,
	// read once per run when an owner's namespace is judged.
	memberIdx map[uint64][]netns.Holder
	drivers   map[string]driver.Driver
	opened    []driver.Driver
	// open are the rows found and not yet acted on, by item.
	open map[Item]int
	// going are, by network, the container IDs this run reclaims (or, in
	// a dry run, would): a dry run's tidy does not count them as uses.
	going map[string]map[string]bool
	// planned and done drive Options.Progress.
	planned, done int
}

func newRun(o Options) (*run, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &run{
		o:       o,
		log:     o.Logger.With("component", "gc"),
		rep:     &Report{DryRun: o.DryRun, Found: []Item{}, Reclaimed: []Item{}, Kept: []Item{}, Errors: []string{}, Rows: []Row{}},
		open:    map[Item]int{},
		going:   map[string]map[string]bool{},
		netns:   o.Attach.Netns(),
		touched: map[string]*cni.Network{},
		handled: map[string]bool{},
		stay:    map[string]bool{},
		drivers: map[string]driver.Driver{},

		netnsDone: map[string]bool{},
		ownerNets: map[string]ownerNet{},
	}
	for _, ow := range o.Owners {
		for name, conf := range ow.Networks() {
			if _, dup := r.ownerNets[name]; !dup && name != "" {
				r.ownerNets[name] = ownerNet{owner: ow, conf: conf}
			}
		}
	}
	if len(o.IDs) > 0 {
		r.ids = map[string]bool{}
		for _, id := range o.IDs {
			r.ids[id] = true
		}
	}
	for k, v := range o.Drivers {
		r.drivers[k] = v
	}
	r.storeID = o.StoreID
	if r.storeID == "" && o.Store != nil {
		r.storeID = o.Store.ID()
	}
	if o.Store == nil {
		why := "no store given"
		if o.StoreErr != nil {
			why = o.StoreErr.Error()
		}
		r.rep.StoreUnavailable = why
	}
	return r, nil
}

// Run reconciles and collects garbage, in this order:
//
//  1. stops the tasks of allocations whose owner died, and marks them lost,
//     and deletes the service registrations of allocations that are gone;
//  2. drives every unfinished record to a clean state (finishes or undoes
//     half-made setups and pending teardowns, tears down what lost or
//     finished allocations left);
//
// then, network by network under the network's exclusive lock,
//
//  3. DELs libcni cache entries of berth's that nothing owns and removes
//     their namespaces;
//  4. releases host-local leases of container IDs nobody knows;
//  5. removes CNI iptables rules marked with unknown IDs, and firewall
//     rules of addresses nobody leases;
//  6. sends the CNI GC verb with the complete set of attachments that stay;
//
// and finally
//
//  7. removes namespaces with a foreign prefix, or that an owner says are
//     dead, that berth has no record of;
//  8. tidies the networks it reclaimed from and those idle for TidyIdle.
//
// Owners (Options.Owners) are asked in steps 3 to 5 and 7 about what
// berth's evidence does not explain; OwnersOnly and IDs narrow the run
// (see Options).
//
// Before step 1 it notes whether the host looks rebooted (Report.Reboot).
// Problems with single objects are collected in Report.Errors and do not
// stop the run; the error is for bad options and a cancelled ctx.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	planned := 0
	if o.Progress != nil && !o.DryRun {
		po := o
		po.DryRun, po.Progress = true, nil
		po.Logger = slog.New(slog.DiscardHandler)
		plan, err := Run(ctx, po)
		if err != nil {
			return plan, err
		}
		planned = plan.Counts.Found + plan.Counts.GCSent
	}
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	r.planned = planned
	defer r.closeDrivers(ctx)
	if r.o.Store == nil {
		r.log.Warn("store unavailable: sweeping with host evidence only; namespaces that still exist are kept", "reason", r.rep.StoreUnavailable)
	}
	whole := !r.o.OwnersOnly && r.ids == nil
	if whole {
		r.checkReboot(ctx)
		r.replay(ctx)
		r.sweepTasks(ctx)
		r.sweepMounts(ctx)
		if err := ctx.Err(); err != nil {
			return r.finish(start), err
		}
	}
	r.sweep(ctx)
	if err := ctx.Err(); err != nil {
		return r.finish(start), err
	}
	if whole {
		r.tidy(ctx)
	}
	return r.finish(start), ctx.Err()
}

// ReplayPending runs the cheap steps only: Run's steps 1 and 2
// (allocations of dead owners, and records not in a final phase: half-made
// setups, pending teardowns whose NextAttempt has passed, attachments
// whose namespace or owner is gone), and step 8 for what they reclaimed.
// It reads nothing but the store and /proc when there is nothing to do.
func ReplayPending(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	o.IgnoreBackoff = false
	o.TidyIdle = -1
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	defer r.closeDrivers(ctx)
	r.replay(ctx)
	if r.mayHaveTasks(ctx) {
		r.sweepTasks(ctx)
	}
	r.sweepMounts(ctx)
	if len(r.touched) > 0 {
		r.tidy(ctx)
	}
	return r.finish(start), ctx.Err()
}

// mayHaveTasks says whether a task of this store can be running: only an
// allocation that is not terminal (or that replay just found lost) has
// tasks, since an allocation is recorded before its tasks start and made
// terminal only after they are gone. Without one, ReplayPending skips the
// task sweep and its scan of /proc, which every quick command would
// otherwise pay (a third of `berth net up`'s own work); Run always sweeps.
// In doubt (the store unreadable), it sweeps.
func (r *run) mayHaveTasks(ctx context.Context) bool {
	for _, it := range r.rep.Reclaimed {
		if it.Kind == KindAllocOwner {
			return true
		}
	}
	if r.o.Store == nil {
		return false
	}
	live, err := r.o.Store.ListAllocations(ctx, store.AllocFilter{NonTerminal: true})
	return err != nil || len(live) > 0
}

func (r *run) finish(start time.Time) *Report {
	r.rep.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	c := Counts{}
	for i := range r.rep.Rows {
		row := &r.rep.Rows[i]
		if row.State == StatePlanned && !r.o.DryRun {
			row.State = StateNotDone
		}
		switch {
		case row.Kind == KindCNIGC && (row.State == StatePlanned || row.State == StateReclaimed):
			c.GCSent++
			continue
		case row.Kind == KindCNIGC && row.State == StateFailed:
			c.Errors++
			continue
		}
		switch row.State {
		case StatePlanned, StateNotDone:
			c.Found++
		case StateReclaimed:
			c.Found++
			c.Reclaimed++
		case StateFailed:
			if row.Kind != KindError {
				c.Found++
			}
			c.Errors++
		case StateKept:
			c.Kept++
		}
	}
	r.rep.Counts = c
	if r.o.Progress != nil && !r.o.DryRun {
		r.o.Progress(Progress{Done: r.done, Planned: max(r.planned, r.done)})
	}
	if n := len(r.rep.Found); n > 0 || len(r.rep.Errors) > 0 {
		r.log.Info("gc done", "dry_run", r.o.DryRun, "found", n, "reclaimed", len(r.rep.Reclaimed), "errors", len(r.rep.Errors), "duration_ms", r.rep.DurationMS)
	} else {
		r.log.Debug("gc done: nothing to reclaim", "duration_ms", r.rep.DurationMS)
	}
	return r.rep
}

// row adds a row and returns its index.
func (r *run) row(it Item, state, errText string) int {
	r.rep.Rows = append(r.rep.Rows, Row{Item: it, State: state, Error: errText})
	return len(r.rep.Rows) - 1
}

// act notes that the run is about to act on it (Options.Progress).
func (r *run) act(it Item) {
	if r.o.Progress == nil || r.o.DryRun {
		return
	}
	r.o.Progress(Progress{Done: r.done, Planned: max(r.planned, r.done+1), Current: it})
	r.done++
}

// goes notes that the attachment id of network is reclaimed by this run.
func (r *run) goes(network, id string) {
	if network == "" || id == "" {
		return
	}
	if r.going[network] == nil {
		r.going[network] = map[string]bool{}
	}
	r.going[network][id] = true
}

func (r *run) found(it Item) {
	r.rep.Found = append(r.rep.Found, it)
	if it.Kind != KindNetns || it.Network != "" {
		r.goes(it.Network, it.ID)
	}
	r.open[it] = r.row(it, StatePlanned, "")
	r.act(it)
	msg := "gc found garbage"
	if r.o.DryRun {
		msg = "gc would reclaim"
	}
	r.log.Info(msg, "kind", it.Kind, "id", it.ID, "network", it.Network, "path", it.Path, "rule", it.Rule, "reason", it.Reason)
}

func (r *run) reclaimed(it Item) {
	r.rep.Reclaimed = append(r.rep.Reclaimed, it)
	if i, ok := r.open[it]; ok {
		r.rep.Rows[i].State = StateReclaimed
		delete(r.open, it)
	} else {
		// What followed from the found items (tidying, the GC verb) is
		// found and done at once.
		if it.Kind != KindCNIGC {
			r.rep.Found = append(r.rep.Found, it)
		}
		r.act(it)
		r.row(it, StateReclaimed, "")
	}
	if it.Kind == KindCNIGC {
		// Sent on every run: not news.
		r.log.Debug("gc sent CNI GC", "network", it.Network, "reason", it.Reason)
		return
	}
	r.log.Info("gc reclaimed", "kind", it.Kind, "id", it.ID, "network", it.Network, "path", it.Path, "rule", it.Rule, "reason", it.Reason)
}

// withdraw takes back a found item that turned out not to be garbage
// after all, and keeps it with the reason why.
func (r *run) withdraw(it Item, why string) {
	for i := len(r.rep.Found) - 1; i >= 0; i-- {
		if r.rep.Found[i] == it {
			r.rep.Found = append(r.rep.Found[:i], r.rep.Found[i+1:]...)
			break
		}
	}
	if i, ok := r.open[it]; ok {
		r.rep.Rows = append(r.rep.Rows[:i], r.rep.Rows[i+1:]...)
		delete(r.open, it)
		for k, j := range r.open {
			if j > i {
				r.open[k] = j - 1
			}
		}
	}
	it.Reason = why
	r.kept(it)
}

func (r *run) kept(it Item) {
	r.rep.Kept = append(r.rep.Kept, it)
	r.row(it, StateKept, "")
	r.log.Info("gc kept", "kind", it.Kind, "id", it.ID, "network", it.Network, "path", it.Path, "rule", it.Rule, "reason", it.Reason)
}

func (r *run) fail(it Item, err error) {
	msg := fmt.Sprintf("%s %s", it.Kind, it.ID)
	if it.Network != "" {
		msg += " (network " + it.Network + ")"
	}
	msg += ": " + err.Error()
	r.rep.Errors = append(r.rep.Errors, msg)
	if i, ok := r.open[it]; ok {
		r.rep.Rows[i].State, r.rep.Rows[i].Error = StateFailed, err.Error()
		delete(r.open, it)
	} else {
		if it.Kind != KindCNIGC {
			r.rep.Found = append(r.rep.Found, it)
		}
		r.act(it)
		r.row(it, StateFailed, err.Error())
	}
	r.log.Warn("gc could not reclaim", "kind", it.Kind, "id", it.ID, "network", it.Network, "path", it.Path, "err", err)
}

func (r *run) errorf(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	r.rep.Errors = append(r.rep.Errors, err.Error())
	r.row(Item{Kind: KindError, Reason: err.Error()}, StateFailed, err.Error())
	r.log.Warn("gc error", "err", err)
}

func handledKey(network, id string) string { return network + "\x00" + id }

// touch marks a network for tidying. conf may be nil.
func (r *run) touch(network string, conf *cni.Network) {
	if network == "" {
		return
	}
	if cur, ok := r.touched[network]; !ok || cur == nil {
		r.touched[network] = conf
	}
}

// tidy is step 8: it removes what the plugins keep by design (bridge,
// host-local dir, shared chains) from the networks this run reclaimed from
// and from the networks berth used that have been idle for TidyIdle, once
// they have no attachment left and no interface of any runtime on their
// bridge. A network that is not berth's is never tidied, even if its
// bridge is unused.
//
// A dry run plans the same: what would go once the attachments it plans to
// reclaim are gone (hostclean.Plan).
func (r *run) tidy(ctx context.Context) {
	lastUsed := r.touchIdle(ctx)
	if len(r.touched) == 0 {
		return
	}
	var confs map[string]*cni.Network
	for _, name := range sortedKeys(r.touched) {
		conf := r.touched[name]
		if conf == nil {
			if confs == nil {
				confs = r.confDirNetworks(ctx)
			}
			conf = confs[name]
		}
		if conf == nil {
			r.log.Debug("not tidying a network whose configuration is unknown", "network", name)
			continue
		}
		if _, owned := r.ownerNets[name]; owned {
			r.log.Debug("not tidying a network another runtime uses", "network", name)
			continue
		}
		used, ours := lastUsed[name]
		r.tidyNetwork(ctx, name, conf, used, ours)
	}
}

// touchIdle marks for tidying the networks berth used that have been idle
// for TidyIdle, and returns when each was last used.
func (r *run) touchIdle(ctx context.Context) map[string]time.Time {
	lastUsed := map[string]time.Time{}
	if r.o.Store == nil || r.o.TidyIdle < 0 {
		return lastUsed
	}
	nets, err := r.o.Store.ListNetworks(ctx)
	if err != nil {
		r.errorf("read berth's networks: %w", err)
	}
	for _, n := range nets {
		if r.o.Now().Sub(n.LastUsed) < r.o.TidyIdle {
			continue
		}
		conf, err := cni.ParseNetwork(n.ConfList, "store record of network "+n.Name)
		if err != nil {
			r.errorf("network %q: %w", n.Name, err)
			continue
		}
		lastUsed[n.Name] = n.LastUsed
		r.touch(n.Name, conf)
	}
	return lastUsed
}

// tidyNetwork tidies one network and reports what it removed and kept. A
// network of the store's (ours, last used at used) that is fully tidied is
// forgotten, unless it was used again meanwhile.
func (r *run) tidyNetwork(ctx context.Context, name string, conf *cni.Network, used time.Time, ours bool) {
	tr, err := r.o.Attach.TidyNetwork(ctx, conf, r.tidyPlan(name, conf))
	if err != nil {
		r.errorf("tidy network %q: %w", name, err)
	}
	if tr == nil {
		return
	}
	for _, what := range tr.Removed {
		kind := KindBridge
		switch {
		case strings.HasPrefix(what, "host-local"):
			kind = KindLease
		case strings.Contains(what, "tables"):
			kind = KindIptables
		}
		it := Item{Kind: kind, Network: name, Path: what, Reason: "network has no attachment left: " + what}
		if r.o.DryRun {
			r.found(it)
			continue
		}
		r.reclaimed(it)
	}
	for _, what := range tr.Kept {
		r.kept(Item{Kind: KindBridge, Network: name, Path: what, Reason: "network has no attachment of berth's, but " + what})
	}
	if err != nil || !ours || tr.Skipped != "" || len(tr.Kept) > 0 || r.o.DryRun {
		return
	}
	if _, err := r.o.Store.ForgetNetwork(ctx, name, used); err != nil {
		r.errorf("%w", err)
	}
}

// tidyPlan is how a network is tidied: for real, or in a dry run as it
// would be once the attachments this run plans to reclaim on it are gone
// (their leases, addresses and bridge ports).
func (r *run) tidyPlan(name string, conf *cni.Network) hostclean.Plan {
	if !r.o.DryRun {
		return hostclean.Plan{}
	}
	p := hostclean.Plan{DryRun: true, GoingIDs: r.going[name], GoingPorts: len(r.going[name])}
	dirs, _ := hostLocal(conf)
	for _, d := range dirs {
		ls, _ := evidence.ReadLeases(d)
		for _, l := range ls {
			if p.GoingIDs[l.ID] {
				p.GoingIPs = append(p.GoingIPs, l.IP.String())
			}
		}
	}
	return p
}

// confDirNetworks loads the config dir; files that do not parse are
// skipped (they are the operator's business, not gc's).
func (r *run) confDirNetworks(ctx context.Context) map[string]*cni.Network {
	out := map[string]*cni.Network{}
	files, err := cni.ReadConfigDir(ctx, r.o.ConfDir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("cannot read the CNI config dir", "dir", r.o.ConfDir, "err", err)
		}
		return out
	}
	for _, f := range files {
		if f.Err != nil || f.Network == nil {
			continue
		}
		if _, ok := out[f.Network.Name()]; !ok {
			out[f.Network.Name()] = f.Network
		}
	}
	return out
}

func (r *run) closeDrivers(ctx context.Context) {
	for _, d := range r.opened {
		if err := d.Close(context.WithoutCancel(ctx)); err != nil {
			r.log.Warn("close driver", "driver", d.Name(), "err", err)
		}
	}
}

// NoRecords stands in for a store that cannot be read, so that an
// attach.Manager can still tidy networks: it knows no attachment and
// refuses to record one.
type NoRecords struct{}

var errNoStore = errors.New("store unavailable")

func (NoRecords) PutAttachment(context.Context, *store.Attachment) error { return errNoStore }
func (NoRecords) GetAttachment(_ context.Context, id string) (*store.Attachment, error) {
	return nil, fmt.Errorf("attachment %s: %w", id, store.ErrNotFound)
}
func (NoRecords) DeleteAttachment(context.Context, string) error               { return nil }
func (NoRecords) ListAttachments(context.Context) ([]*store.Attachment, error) { return nil, nil }
