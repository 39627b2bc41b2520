// Package attach gives an ID a network namespace wired to a CNI network
// and takes both away again: the part of an orchestrator's network hook
// that must never leak.
//
// Order is what makes it robust. The intent is recorded before anything is
// created; DEL runs while the namespace is still pinned (plugins clean up
// iptables and veths from inside it); the namespace is removed only after
// DEL succeeded; the record is deleted only when both did. A step that
// fails leaves the record in phase tearing-down, to be retried.
package attach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/keyed"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

var (
	// ErrCheckFailed: CNI CHECK found an existing namespace misconfigured.
	// Setup heals it once by recreating it; the error is returned only if
	// that also failed.
	ErrCheckFailed = errors.New("network namespace already exists but was misconfigured")
	// ErrNetnsGone: the attachment's namespace vanished (a reboot, an `ip
	// netns del`): CHECK cannot pass, so it is a CHECK failure
	// (errors.Is(err, ErrCheckFailed)) and healed the same way, with a
	// message that says what happened.
	ErrNetnsGone error = netnsGone{}
	// ErrNotOwned: a namespace exists under the ID's name but berth has no
	// record of it (neither in its store nor in libcni's cache).
	ErrNotOwned = errors.New("network namespace exists but was not created by berth")
	// ErrNotFound: berth has no attachment with that ID.
	ErrNotFound = errors.New("no such attachment")
)

// Store persists attachment records; *store.Store implements it.
type Store interface {
	PutAttachment(ctx context.Context, a *store.Attachment) error
	GetAttachment(ctx context.Context, id string) (*store.Attachment, error)
	DeleteAttachment(ctx context.Context, id string) error
	ListAttachments(ctx context.Context) ([]*store.Attachment, error)
}

// Observer is told about every operation, for metrics. Methods must be
// cheap and must not block.
type Observer interface {
	CNIOp(verb, network string, d time.Duration, err error)
	NetnsOp(op string, d time.Duration, err error)
	Removed(rep *netns.RemoveReport)
	CheckFailed(network string)
	Healed(network string, err error)
}

type nopObserver struct{}

func (nopObserver) CNIOp(string, string, time.Duration, error) {}
func (nopObserver) NetnsOp(string, time.Duration, error)       {}
func (nopObserver) Removed(*netns.RemoveReport)                {}
func (nopObserver) CheckFailed(string)                         {}
func (nopObserver) Healed(string, error)                       {}

// Options configure a Manager.
type Options struct {
	// Netns pins the namespaces; netns.NewManager("") when nil.
	Netns Namespaces
	// CNI runs the plugins; a cni.Client with the default paths when nil.
	CNI CNI
	// Host tidies idle networks; hostclean.Host when nil.
	Host    HostCleaner
	ConfDir string
	Store   Store
	Logger  *slog.Logger
	// Observer receives timings and outcomes; nil means none.
	Observer Observer
	// LockDir holds the cross-process network locks (DefaultLockDir).
	LockDir string
	// OwnerPID and OwnerStartTime identify the berth process in records.
	OwnerPID       int
	OwnerStartTime uint64
}

// Manager sets up and tears down attachments. Operations on one ID are
// serialised; different IDs proceed in parallel (no global lock, unlike
// Nomad's).
type Manager struct {
	o     Options
	log   *slog.Logger
	obs   Observer
	locks keyed.Mutex
	// hostLockDir is DefaultLockDir (see LockHost); the unit tests, whose
	// fakes touch no host chain, use their own.
	hostLockDir string
}

// New returns a Manager.
func New(o Options) *Manager {
	if o.Netns == nil {
		o.Netns = netns.NewManager("")
	}
	if o.CNI == nil {
		o.CNI = cni.NewClient(cni.Options{Rules: hostclean.Rules{}})
	}
	if o.Host == nil {
		o.Host = hostclean.Host{}
	}
	if o.ConfDir == "" {
		o.ConfDir = cni.DefaultConfDir
	}
	m := &Manager{o: o, log: o.Logger, obs: o.Observer, hostLockDir: DefaultLockDir}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.obs == nil {
		m.obs = nopObserver{}
	}
	return m
}

// Netns is the namespace manager in use, for the packages that share it
// (gc, the runner's leak check); nil when Options.Netns was not a
// *netns.Manager (a unit test's fake).
func (m *Manager) Netns() *netns.Manager {
	n, _ := m.o.Netns.(*netns.Manager)
	return n
}

// CNI is the CNI client in use, for the packages that share it; nil when
// Options.CNI was not a *cni.Client.
func (m *Manager) CNI() *cni.Client {
	c, _ := m.o.CNI.(*cni.Client)
	return c
}

type netnsGone struct{}

func (netnsGone) Error() string        { return "network namespace is gone" }
func (netnsGone) Is(target error) bool { return target == ErrCheckFailed }

// ConfDir is the CNI config dir networks are loaded from.
func (m *Manager) ConfDir() string { return m.o.ConfDir }

// Request asks for an attachment.
type Request struct {
	ID string
	// Network names a configuration in the config dir, unless Config is set.
	Network string
	// Config is a configuration built by the caller (bridge mode).
	Config *cni.Network
	IfName string
	// Args are extra CNI_ARGS (workload identity); BERTH_ID is always added.
	Args           map[string]string
	CapabilityArgs map[string]any
	AllocID        string
}

// Status is an attachment as it stands.
type Status struct {
	ID        string      `json:"id"`
	NetnsPath string      `json:"netns_path"`
	Network   string      `json:"network"`
	Phase     store.Phase `json:"phase"`
	cni.Status
	// Created is true when this call made the namespace; false when it
	// found and checked an existing one.
	Created bool `json:"created"`
	// CheckSkipped says why an existing attachment was not CHECKed.
	CheckSkipped string `json:"check_skipped,omitempty"`
	// Healed carries the CHECK failure that made Setup recreate the namespace.
	Healed string `json:"healed,omitempty"`
	// Timings of this call's steps.
	Timings Timings `json:"timings_ms"`
}

// Timings are how long the steps of one Setup, Check or Teardown took, in
// milliseconds; a step that did not run is absent from the JSON. The
// fields are in the alphabetical order of their JSON keys, as the map
// they replaced was encoded.
type Timings struct {
	// Add is CNI ADD, without the wait for the network's lock.
	Add float64 `json:"add,omitempty"`
	// Check is CNI CHECK of an existing attachment.
	Check float64 `json:"check,omitempty"`
	// Del is CNI DEL, without the wait for the network's lock.
	Del float64 `json:"del,omitempty"`
	// HealTeardown is tearing down an attachment that failed CHECK, before
	// it is made again.
	HealTeardown float64 `json:"heal_teardown,omitempty"`
	// Netns is creating and pinning the namespace.
	Netns float64 `json:"netns,omitempty"`
	// Record is writing and deleting berth's record of the attachment.
	Record float64 `json:"record,omitempty"`
	// Remove is unmounting and unlinking the namespace.
	Remove float64 `json:"remove,omitempty"`
}

// ms is d in milliseconds, to the microsecond, as Timings hold it.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// since is ms(time.Since(start)).
func since(start time.Time) float64 { return ms(time.Since(start)) }

func (m *Manager) logger(id, path, network string) *slog.Logger {
	return m.log.With("id", id, "netns", path, "network", network)
}

// Setup makes the attachment, or, when the ID already has one, CHECKs it.
// A CHECK failure is healed once: DEL, remove, recreate, ADD. On error
// nothing is left behind, or (if cleaning up failed too) the record stays
// in phase tearing-down so that a later Teardown or GC finishes the job.
func (m *Manager) Setup(ctx context.Context, req Request) (*Status, error) {
	if err := netns.ValidateName(req.ID); err != nil {
		return nil, fmt.Errorf("attachment ID: %w", err)
	}
	unlock, err := m.lockID(ctx, req.ID)
	if err != nil {
		return nil, fmt.Errorf("setup %s: %w", req.ID, err)
	}
	defer unlock()

	net, err := m.network(ctx, req)
	if err != nil {
		return nil, err
	}
	path := m.o.Netns.Path(req.ID)
	log := m.logger(req.ID, path, net.Name())

	rec, err := m.existing(ctx, req, net)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if rec.Phase == store.PhaseReady && m.exists(req.ID) {
			return m.checkOrHeal(ctx, req, net, rec, log)
		}
		// A half-made setup or an unfinished teardown: finish undoing it
		// before starting afresh.
		log.Info("finishing an interrupted attachment before setup", "phase", rec.Phase)
		if _, err := m.teardown(ctx, rec, log); err != nil {
			return nil, fmt.Errorf("setup %s: clean up earlier attachment (phase %s): %w", req.ID, rec.Phase, err)
		}
	}
	return m.create(ctx, req, net, log)
}

// existing is what the ID has: its record, or one adopted from libcni's
// cache for a namespace berth has no record of; nil when it has nothing.
func (m *Manager) existing(ctx context.Context, req Request, net *cni.Network) (*store.Attachment, error) {
	rec, err := m.o.Store.GetAttachment(ctx, req.ID)
	switch {
	case err == nil:
		return rec, nil
	case errors.Is(err, store.ErrCorrupt):
		return nil, fmt.Errorf("setup %s: %w: `berth net down %s` tears it down from libcni's cache and drops the record", req.ID, err, req.ID)
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("setup %s: read record: %w", req.ID, err)
	case m.exists(req.ID):
		return m.adopt(ctx, req, net)
	}
	return nil, nil
}

// adopt takes over a pinned namespace that berth has no record of, when
// libcni's cache shows berth attached it to this network (a store lost or
// reset). Anything else is not ours to touch.
func (m *Manager) adopt(ctx context.Context, req Request, net *cni.Network) (*store.Attachment, error) {
	path := m.o.Netns.Path(req.ID)
	att := m.cniAttachment(req.ID, path, req.IfName, req.Args, req.CapabilityArgs)
	res, err := m.o.CNI.CachedResult(net, att)
	if err != nil || res == nil {
		return nil, fmt.Errorf("setup %s: %w: %s (remove it with `ip netns del %s` if nothing uses it, or pick another ID)", req.ID, ErrNotOwned, path, req.ID)
	}
	rec := m.newRecord(req, net, path)
	rec.Result = res.Raw
	rec.Phase = store.PhaseReady
	if err := m.o.Store.PutAttachment(ctx, rec); err != nil {
		return nil, fmt.Errorf("setup %s: record adopted attachment: %w", req.ID, err)
	}
	return rec, nil
}

func (m *Manager) network(ctx context.Context, req Request) (*cni.Network, error) {
	if req.Config != nil {
		return req.Config, nil
	}
	if req.Network == "" {
		return nil, fmt.Errorf("setup %s: no network given", req.ID)
	}
	net, err := cni.LoadNetwork(ctx, m.o.ConfDir, req.Network)
	if err != nil {
		return nil, fmt.Errorf("setup %s: %w", req.ID, err)
	}
	return net, nil
}

func (m *Manager) newRecord(req Request, net *cni.Network, path string) *store.Attachment {
	ifname := req.IfName
	if ifname == "" {
		ifname = "eth0"
	}
	return &store.Attachment{
		ID:             req.ID,
		NetnsPath:      path,
		Network:        net.Name(),
		IfName:         ifname,
		ConfList:       append([]byte(nil), net.Bytes()...),
		Args:           m.args(req.ID, req.Args),
		CapabilityArgs: req.CapabilityArgs,
		Phase:          store.PhaseIntent,
		OwnerPID:       m.o.OwnerPID,
		OwnerStartTime: m.o.OwnerStartTime,
		AllocID:        req.AllocID,
	}
}

func (m *Manager) args(id string, extra map[string]string) map[string]string {
	return evidence.MarkArgs(extra, id, m.storeID())
}

// storeID identifies berth's attachments among other berths' (see
// evidence.Owned); "" for a store that does not say.
func (m *Manager) storeID() string {
	if s, ok := m.o.Store.(interface{ ID() string }); ok {
		return s.ID()
	}
	return ""
}

func (m *Manager) cniAttachment(id, path, ifname string, args map[string]string, capArgs map[string]any) *cni.Attachment {
	return &cni.Attachment{ContainerID: id, NetNS: path, IfName: ifname, Args: m.args(id, args), CapabilityArgs: capArgs}
}

// create makes a new attachment. The caller holds the ID's lock and has
// found nothing of the ID left.
func (m *Manager) create(ctx context.Context, req Request, net *cni.Network, log *slog.Logger) (_ *Status, err error) {
	var t Timings
	path := m.o.Netns.Path(req.ID)
	rec := m.newRecord(req, net, path)

	start := time.Now()
	if err := m.o.Store.PutAttachment(ctx, rec); err != nil {
		return nil, fmt.Errorf("setup %s: record intent: %w", req.ID, err)
	}
	t.Record += since(start)
	// One deferred undo for every exit below: right after each
	// acquisition, undo becomes the undo of all acquired so far.
	undo := func(ctx context.Context) error { return m.o.Store.DeleteAttachment(ctx, rec.ID) }
	defer func() {
		if err != nil {
			err = m.runUndo(ctx, err, undo)
		}
	}()
	fault.PointCtx(ctx, fault.AfterIntent)

	d, err := m.createNetns(ctx, req.ID)
	t.Netns += ms(d)
	if err != nil {
		// Create leaves nothing on failure, and a namespace that was
		// already there is not ours: the undo deletes the intent only.
		return nil, err
	}
	// From here the namespace may hold part of an ADD, so undoing is a
	// teardown: it DELs whenever the namespace is pinned (DEL of what was
	// never added is harmless). No record is written between the
	// namespace and ADD: the intent covers both, one fsync fewer per
	// attachment.
	undo = func(ctx context.Context) error {
		_, err := m.teardown(ctx, rec, log)
		return err
	}
	fault.PointCtx(ctx, fault.AfterNetns)

	res, d, err := m.add(ctx, net, m.cniAttachment(req.ID, path, rec.IfName, req.Args, req.CapabilityArgs))
	t.Add += ms(d)
	if err != nil {
		log.Warn("CNI ADD failed; undoing", "err", err)
		return nil, fmt.Errorf("setup %s: %w", req.ID, err)
	}
	fault.PointCtx(ctx, fault.AfterAdd)

	start = time.Now()
	rec.Result = res.Raw
	rec.Phase = store.PhaseReady
	if err := m.o.Store.PutAttachment(ctx, rec); err != nil {
		return nil, fmt.Errorf("setup %s: record phase %s: %w", req.ID, rec.Phase, err)
	}
	t.Record += since(start)
	log.Debug("attachment ready", "ipv4", res.Status.IPv4, "timings_ms", t)
	return &Status{ID: req.ID, NetnsPath: path, Network: net.Name(), Phase: rec.Phase, Status: res.Status, Created: true, Timings: t}, nil
}

// createNetns creates and pins the namespace of id.
func (m *Manager) createNetns(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	_, err := m.o.Netns.Create(ctx, id)
	d := time.Since(start)
	m.obs.NetnsOp("create", d, err)
	switch {
	case errors.Is(err, netns.ErrExists):
		return d, fmt.Errorf("setup %s: %w (remove it with `ip netns del %s` if nothing uses it)", id, ErrNotOwned, id)
	case err != nil:
		return d, fmt.Errorf("setup %s: %w", id, err)
	}
	return d, nil
}

// runUndo runs fn, the undo of a setup that failed with cause. The setup's
// context may be what failed (a deadline, a cancel), so fn gets one of
// its own.
func (m *Manager) runUndo(ctx context.Context, cause error, fn func(context.Context) error) error {
	cctx, cancel := cleanup.Context(ctx, m.cleanupTimeout())
	defer cancel()
	if err := fn(cctx); err != nil {
		return fmt.Errorf("%w; cleanup also failed and is pending: %w", cause, err)
	}
	return cause
}

func (m *Manager) cleanupTimeout() time.Duration {
	return cni.DefaultTimeouts().Del + 30*time.Second
}

// recordTimeout bounds writing a failure to the store after the
// operation's context ended.
const recordTimeout = 30 * time.Second

// add runs ADD of att holding the network's locks.
func (m *Manager) add(ctx context.Context, net *cni.Network, att *cni.Attachment) (res *cni.Result, d time.Duration, err error) {
	d, err = m.underNetworkLock(ctx, "ADD", net.Name(), func() error {
		res, err = m.o.CNI.Add(ctx, net, att)
		return err
	})
	return res, d, err
}

// del runs DEL of rec holding the network's locks: inside the namespace
// while it is pinned, without it when it is gone (plugins then release
// what is outside it).
func (m *Manager) del(ctx context.Context, rec *store.Attachment, pinned bool) (time.Duration, error) {
	var net *cni.Network // nil for a record rebuilt from the cache: Del finds it by name
	if len(rec.ConfList) > 0 {
		n, err := cni.ParseNetwork(rec.ConfList, "record of "+rec.ID)
		if err != nil {
			return 0, err
		}
		net = n
	}
	att := recordAttachment(rec)
	if !pinned {
		att.NetNS = ""
	}
	return m.underNetworkLock(ctx, "DEL", rec.Network, func() error {
		return m.o.CNI.Del(ctx, net, rec.Network, att)
	})
}

// underNetworkLock runs op, the CNI verb on network, holding the locks
// ADD and DEL need (lockNetwork), and reports it to the observer. The
// duration is op's alone, without the wait for the locks.
func (m *Manager) underNetworkLock(ctx context.Context, verb, network string, op func() error) (time.Duration, error) {
	unlock, err := m.lockNetwork(ctx, network)
	if err != nil {
		return 0, err
	}
	defer unlock()
	start := time.Now()
	err = op()
	d := time.Since(start)
	m.obs.CNIOp(verb, network, d, err)
	return d, err
}

// check runs CHECK of rec against net; a failure wraps ErrCheckFailed.
func (m *Manager) check(ctx context.Context, net *cni.Network, rec *store.Attachment) (time.Duration, error) {
	start := time.Now()
	err := m.o.CNI.Check(ctx, net, recordAttachment(rec))
	d := time.Since(start)
	m.obs.CNIOp("CHECK", net.Name(), d, err)
	if err != nil {
		m.obs.CheckFailed(net.Name())
		return d, fmt.Errorf("%w: %w", ErrCheckFailed, err)
	}
	return d, nil
}

// recordAttachment is the CNI attachment rec describes.
func recordAttachment(rec *store.Attachment) *cni.Attachment {
	return &cni.Attachment{ContainerID: rec.ID, NetNS: rec.NetnsPath, IfName: rec.IfName, Args: rec.Args, CapabilityArgs: rec.CapabilityArgs}
}

// statusOf is the status rec records, without timings.
func statusOf(rec *store.Attachment) *Status {
	st := &Status{ID: rec.ID, NetnsPath: rec.NetnsPath, Network: rec.Network, Phase: rec.Phase}
	if res, err := cni.ParseResult(rec.Result, rec.IfName); err == nil {
		st.Status = res.Status
	}
	return st
}

// exists reports whether the namespace of id is pinned.
func (m *Manager) exists(id string) bool {
	ok, _ := m.o.Netns.IsPinned(m.o.Netns.Path(id))
	return ok
}

func (m *Manager) checkOrHeal(ctx context.Context, req Request, net *cni.Network, rec *store.Attachment, log *slog.Logger) (*Status, error) {
	stored, err := cni.ParseNetwork(rec.ConfList, "record of "+rec.ID)
	if err != nil || stored.Name() != net.Name() {
		// The ID is attached to another network (or its record is
		// unreadable): CHECK against the requested one cannot pass.
		return nil, fmt.Errorf("setup %s: already attached to network %q, not %q: tear it down first (berth net down %s)", req.ID, rec.Network, net.Name(), req.ID)
	}
	st := statusOf(rec)
	if err := stored.CheckSupport(); err != nil {
		log.Info("existing attachment not checked", "reason", err)
		st.CheckSkipped = err.Error()
		return st, nil
	}
	d, cerr := m.check(ctx, stored, rec)
	st.Timings.Check = ms(d)
	if cerr == nil {
		return st, nil
	}
	log.Warn("CNI CHECK failed; recreating the namespace", "err", cerr)

	start := time.Now()
	if _, err := m.teardown(ctx, rec, log); err != nil {
		m.obs.Healed(net.Name(), err)
		return nil, fmt.Errorf("setup %s: %w; teardown before recreate failed: %w", req.ID, cerr, err)
	}
	healTeardown := since(start)
	nst, err := m.create(ctx, req, net, log)
	m.obs.Healed(net.Name(), err)
	if err != nil {
		return nil, fmt.Errorf("setup %s: %w; recreate failed: %w", req.ID, cerr, err)
	}
	nst.Timings.Check, nst.Timings.HealTeardown = st.Timings.Check, healTeardown
	nst.Healed = cerr.Error()
	log.Info("namespace recreated after CHECK failure", "ipv4", nst.IPv4)
	return nst, nil
}

// Check runs CNI CHECK on an existing attachment without healing it.
func (m *Manager) Check(ctx context.Context, id string) (*Status, error) {
	if err := netns.ValidateName(id); err != nil {
		return nil, fmt.Errorf("attachment ID: %w", err)
	}
	unlock, err := m.lockID(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("check %s: %w", id, err)
	}
	defer unlock()
	rec, err := m.o.Store.GetAttachment(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("check %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("check %s: %w", id, err)
	}
	st := statusOf(rec)
	if rec.Phase != store.PhaseReady {
		return st, fmt.Errorf("check %s: attachment is in phase %s, not ready", id, rec.Phase)
	}
	if !m.exists(id) {
		return st, fmt.Errorf("check %s: %w: %s (rebooted, or removed behind berth's back)", id, ErrNetnsGone, rec.NetnsPath)
	}
	net, err := cni.ParseNetwork(rec.ConfList, "record of "+id)
	if err != nil {
		return st, fmt.Errorf("check %s: %w", id, err)
	}
	if err := net.CheckSupport(); err != nil {
		st.CheckSkipped = err.Error()
		return st, nil
	}
	d, err := m.check(ctx, net, rec)
	st.Timings.Check = ms(d)
	if err != nil {
		return st, fmt.Errorf("check %s: %w", id, err)
	}
	return st, nil
}

// Get returns the record of an attachment.
func (m *Manager) Get(ctx context.Context, id string) (*store.Attachment, error) {
	rec, err := m.o.Store.GetAttachment(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return rec, err
}

// List returns every recorded attachment.
func (m *Manager) List(ctx context.Context) ([]*store.Attachment, error) {
	return m.o.Store.ListAttachments(ctx)
}

// TeardownReport says what a teardown did.
type TeardownReport struct {
	ID      string   `json:"id"`
	Network string   `json:"network,omitempty"`
	Nothing bool     `json:"nothing_to_do,omitempty"`
	Busy    bool     `json:"busy,omitempty"`
	Holders []string `json:"holders,omitempty"`
	Retries int      `json:"retries,omitempty"`
	Timings Timings  `json:"timings_ms"`
}

// Teardown removes the attachment of id: DEL while the namespace is still
// pinned, then the namespace, then the record. It is idempotent and safe to
// call concurrently; with nothing left it returns a report with Nothing set.
// When berth has no record, libcni's cache is used to find the network.
func (m *Manager) Teardown(ctx context.Context, id string) (*TeardownReport, error) {
	if err := netns.ValidateName(id); err != nil {
		return nil, fmt.Errorf("attachment ID: %w", err)
	}
	if err := fault.Fail(fault.FailTeardown); err != nil {
		return nil, fmt.Errorf("teardown %s: %w", id, err)
	}
	unlock, err := m.lockID(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("teardown %s: %w", id, err)
	}
	defer unlock()
	rec, err := m.o.Store.GetAttachment(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrCorrupt):
		// A damaged record is replaced by what libcni's cache knows; the
		// teardown deletes it with the attachment.
		damaged := errors.Is(err, store.ErrCorrupt)
		rec, err = m.recordFromCache(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			if m.exists(id) {
				return nil, fmt.Errorf("teardown %s: %w: %s (remove it with `ip netns del %s` if it is yours)", id, ErrNotOwned, m.o.Netns.Path(id), id)
			}
			if damaged {
				// Nothing of it is left on the host: only the record.
				if err := m.o.Store.DeleteAttachment(ctx, id); err != nil {
					return nil, fmt.Errorf("teardown %s: delete damaged record: %w", id, err)
				}
				return &TeardownReport{ID: id}, nil
			}
			return &TeardownReport{ID: id, Nothing: true}, nil
		}
	case err != nil:
		return nil, fmt.Errorf("teardown %s: read record: %w", id, err)
	}
	return m.teardown(ctx, rec, m.logger(id, rec.NetnsPath, rec.Network))
}

// Reclaim tears id's attachment down for a collector if still, asked
// again under the ID's lock with the record as it stands now, says it is
// still garbage: between the collector's read and now its owner may have
// finished with it, or another berth may have made a new attachment under
// the ID. It reports false, and no error, when there was nothing to do.
func (m *Manager) Reclaim(ctx context.Context, id string, still func(*store.Attachment) bool) (*TeardownReport, bool, error) {
	unlock, err := m.lockID(ctx, id)
	if err != nil {
		return nil, false, fmt.Errorf("reclaim %s: %w", id, err)
	}
	defer unlock()
	rec, err := m.o.Store.GetAttachment(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reclaim %s: read record: %w", id, err)
	case !still(rec):
		return nil, false, nil
	}
	rep, err := m.teardown(ctx, rec, m.logger(id, rec.NetnsPath, rec.Network))
	return rep, true, err
}

// recordFromCache rebuilds a record from libcni's cache, for an
// attachment berth's store does not know (store lost, or made by an older
// berth). Only cache entries that are this berth's (evidence.Owned) count.
func (m *Manager) recordFromCache(ctx context.Context, id string) (*store.Attachment, error) {
	cached, err := evidence.ReadCache(ctx, m.o.CNI.CacheDir(), id)
	if err != nil {
		return nil, fmt.Errorf("teardown %s: %w", id, err)
	}
	mine := m.storeID()
	for _, c := range cached {
		if evidence.Owned(c, mine) != evidence.Mine {
			continue
		}
		// Only a namespace in the netns dir is entered for DEL and
		// removed: the cache file could name any path (/proc/1/ns/net).
		path := m.o.Netns.Path(id)
		if c.NetNS != "" && filepath.Dir(filepath.Clean(c.NetNS)) != m.o.Netns.Dir() {
			m.log.Warn("libcni cache entry names a namespace outside the netns dir; using the ID's own path", "id", id, "netns", c.NetNS)
		} else if c.NetNS != "" {
			path = c.NetNS
		}
		return &store.Attachment{ID: id, Network: c.Network, IfName: c.IfName, NetnsPath: path, Phase: store.PhaseTearingDown}, nil
	}
	return nil, nil
}

// teardown undoes rec: DEL, then the namespace, then the record, each only
// after the one before succeeded. The caller holds the ID's lock.
func (m *Manager) teardown(ctx context.Context, rec *store.Attachment, log *slog.Logger) (*TeardownReport, error) {
	rep := &TeardownReport{ID: rec.ID, Network: rec.Network}
	if rec.NetnsPath == "" {
		rec.NetnsPath = m.o.Netns.Path(rec.ID)
	}
	// ADD needs the namespace, so an intent whose namespace never came
	// to exist reached no plugin; in every other case DEL is due (DEL of
	// what was never added is harmless).
	pinned, _ := m.o.Netns.IsPinned(rec.NetnsPath)
	needDel := pinned || rec.Phase != store.PhaseIntent

	start := time.Now()
	if err := m.markTearingDown(ctx, rec); err != nil {
		return rep, fmt.Errorf("teardown %s: record phase: %w", rec.ID, err)
	}
	rep.Timings.Record += since(start)

	if needDel {
		d, err := m.del(ctx, rec, pinned)
		rep.Timings.Del += ms(d)
		if err != nil {
			// The namespace stays: a DEL retried without it would leak
			// the bridge plugin's masquerade chain.
			return rep, m.fail(ctx, rec, fmt.Errorf("teardown %s: %w", rec.ID, err))
		}
	}
	fault.PointCtx(ctx, fault.AfterDel)

	if err := m.remove(ctx, rec.NetnsPath, rep, log); err != nil {
		return rep, m.fail(ctx, rec, err)
	}

	start = time.Now()
	if err := m.o.Store.DeleteAttachment(ctx, rec.ID); err != nil {
		return rep, fmt.Errorf("teardown %s: delete record: %w", rec.ID, err)
	}
	rep.Timings.Record += since(start)
	return rep, nil
}

// markTearingDown records that rec is being torn down, where that is
// needed. An allocation's ready attachment needs no mark: if berth dies
// before the record is deleted, the next berth finds the allocation's
// owner gone and tears it down anyway. Only attachments that outlive their
// creator (`berth net up`) need the mark, or a crash after DEL would leave
// them looking alive. A failure records the mark in every case (fail).
func (m *Manager) markTearingDown(ctx context.Context, rec *store.Attachment) error {
	if rec.Phase == store.PhaseTearingDown || (rec.AllocID != "" && rec.Phase == store.PhaseReady) {
		return nil
	}
	rec.Phase = store.PhaseTearingDown
	// The process tearing it down owns it now (`net down` in another
	// process than `net up`'s): a collector elsewhere leaves it alone
	// while this process lives.
	if m.o.OwnerPID > 0 {
		rec.OwnerPID, rec.OwnerStartTime = m.o.OwnerPID, m.o.OwnerStartTime
	}
	return m.o.Store.PutAttachment(ctx, rec)
}

// remove removes the namespace at path and notes in rep whether it was
// busy and who held it.
func (m *Manager) remove(ctx context.Context, path string, rep *TeardownReport, log *slog.Logger) error {
	start := time.Now()
	rr, err := m.o.Netns.RemovePath(ctx, path)
	m.obs.NetnsOp("remove", time.Since(start), err)
	rep.Timings.Remove += since(start)
	if rr != nil {
		m.obs.Removed(rr)
		rep.Busy, rep.Retries = rr.Busy, rr.Retries
		for _, h := range rr.Holders {
			rep.Holders = append(rep.Holders, h.String())
		}
		if rr.Busy || rr.Retries > 0 {
			log.Warn("namespace was busy at removal; detached it", "holders", rep.Holders, "retries", rr.Retries)
		}
	}
	return err
}

// fail records a failed teardown so that it is retried with backoff. The
// context that failed may have ended: the record gets one of its own.
func (m *Manager) fail(ctx context.Context, rec *store.Attachment, cause error) error {
	rec.Phase = store.PhaseTearingDown
	rec.TeardownAttempts++
	rec.LastError = cause.Error()
	rec.NextAttempt = time.Now().Add(RetryBackoff(rec.TeardownAttempts))
	cctx, cancel := cleanup.Context(ctx, recordTimeout)
	defer cancel()
	if err := m.o.Store.PutAttachment(cctx, rec); err != nil {
		return fmt.Errorf("%w; recording the failure also failed: %w", cause, err)
	}
	return cause
}

// RetryBackoff is how long to wait before the n-th retry of a teardown:
// exponential from 1 s, capped at 5 minutes.
func RetryBackoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	if d > 5*time.Minute {
		d = 5 * time.Minute
	}
	return d
}
