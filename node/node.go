package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/job/service"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
	"github.com/berth/berth/task/driver"
)

// Options are what a program adds to the configuration.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Observer receives the attachment manager's timings and outcomes;
	// Metrics the runner's. Nil means none.
	Observer attach.Observer
	Metrics  runner.Metrics
	// Retention is how many finished allocations (records and log
	// directories) are kept per job; 0 means store.DefaultRetention.
	Retention int
	// Secrets are host paths of credentials no exec task may read (the
	// agent's token and TLS key), beside the data dir, which holds the
	// store (Nomad Variables among it).
	Secrets []string
}

// Node is the object graph of berth on this machine, built from one
// Config. Every field is set by New except Store and Attach, which Open
// (or OpenWithoutStore) sets; all are read-only afterwards.
type Node struct {
	Config  Config
	Log     *slog.Logger
	Netns   *netns.Manager
	CNI     *cni.Client
	Drivers *runner.Drivers
	// Attrs are this machine's attributes, which job constraints read.
	Attrs jobspec.NodeAttrs
	// HostIP is the host address the node advertises for its
	// allocations' ports (client.network_interface, advertiseAddr).
	HostIP string
	// Capacity is what allocations may use (client block, detected totals
	// less the reserve).
	Capacity runner.Capacity
	// OwnerPID and OwnerStartTime mark the records this process owns, so
	// that the next berth can tell a crash orphaned them.
	OwnerPID       int
	OwnerStartTime uint64

	// Store is nil after OpenWithoutStore; StoreErr then says why.
	Store    *store.Store
	StoreErr error
	Attach   *attach.Manager
	// Services is the native service catalog over the store and Checks
	// runs the checks of the services this process registers; both set
	// by OpenStore.
	Services *service.Registry
	Checks   *service.Checker
	// Dirs removes allocation directories in the background: those of
	// the records retention prunes (set by OpenStore).
	Dirs *allocdir.Remover

	o Options
}

// New builds what opens nothing: the netns manager, the CNI client, the
// drivers (each made when first needed) and the node's attributes. That
// is enough to validate jobs (ParseOptions) before the data dir is
// touched; Open adds the store and the attachment manager.
func New(ctx context.Context, cfg Config, o Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	start, err := proc.SelfStartTime()
	if err != nil {
		return nil, fmt.Errorf("read this process's start time: %w", err)
	}
	capa, err := cfg.Capacity()
	if err != nil {
		return nil, err
	}
	hostIP, why, err := advertiseAddr(ctx, netlinkHost{}, cfg.clientSettings().NetworkInterface)
	if err != nil {
		return nil, err
	}
	if why != "" {
		o.Logger.Warn("advertising "+hostIP+" as the host address (a task in a network namespace cannot reach it): "+why, "setting", SettingName("client.network_interface"))
	}
	attrs := jobspec.LocalNode()
	attrs[jobspec.AttrHostIP] = hostIP
	return &Node{
		Config: cfg,
		Log:    o.Logger,
		Netns:  netns.NewManager(cfg.NetnsDir),
		CNI: cni.NewClient(cni.Options{
			PluginPath: cfg.CNIPath, CacheDir: cfg.CNICacheDir, Rules: hostclean.Rules{}, Logger: o.Logger,
		}),
		Drivers:        newDrivers(&cfg, o.Logger, append([]string{cfg.DataDir}, o.Secrets...)),
		Attrs:          attrs,
		HostIP:         hostIP,
		Capacity:       capa,
		OwnerPID:       os.Getpid(),
		OwnerStartTime: start,
		o:              o,
	}, nil
}

// Open is New, then OpenStore.
func Open(ctx context.Context, cfg Config, o Options) (*Node, error) {
	n, err := New(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	if err := n.OpenStore(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// OpenStore opens the store in the data dir and builds the attachment
// manager over it. Its error is the store's (store.ErrCorrupt, an owner's
// lock...): the caller decides whether OpenWithoutStore is the answer.
func (n *Node) OpenStore(ctx context.Context) error {
	if n.Attach != nil {
		return errors.New("node: opened twice")
	}
	dirs := allocdir.NewRemover(n.Config.AllocDir(), n.Log)
	st, err := store.Open(ctx, n.Config.DataDir, store.Options{Logger: n.Log, Retention: n.o.Retention,
		// A pruned record takes its directory with it.
		OnPrune: func(ids []string) { dirs.Remove(ids...) }})
	if err != nil {
		return errors.Join(err, dirs.Close(ctx))
	}
	n.Store, n.Dirs = st, dirs
	n.Attach = n.manager(st)
	n.Services = service.NewRegistry(st, n.Log)
	n.Checks = service.NewChecker(0, n.Log)
	return nil
}

// ReadStore opens the data dir's store for a reader that builds nothing
// over it (berth doctor): quiet (its log discarded), and no attachment
// manager, services or directory remover. The caller closes it.
func (n *Node) ReadStore(ctx context.Context) (*store.Store, error) {
	return store.Open(ctx, n.Config.DataDir, store.Options{Logger: slog.New(slog.DiscardHandler)})
}

// OpenWithoutStore builds an attachment manager for a store that cannot
// be read (why): it can tidy networks and knows no attachment, so that gc
// can still sweep the host on its evidence.
func (n *Node) OpenWithoutStore(why error) {
	n.StoreErr = why
	n.Attach = n.manager(gc.NoRecords{})
}

func (n *Node) manager(st attach.Store) *attach.Manager {
	return attach.New(attach.Options{
		Netns:          n.Netns,
		CNI:            n.CNI,
		ConfDir:        n.Config.CNIConfigDir,
		Store:          st,
		Logger:         n.Log,
		Observer:       n.o.Observer,
		LockDir:        n.Config.LockDir,
		OwnerPID:       n.OwnerPID,
		OwnerStartTime: n.OwnerStartTime,
	})
}

// Close closes the drivers made (stopping a podman service berth
// started), then the store.
func (n *Node) Close(ctx context.Context) error {
	cctx, cancel := cleanup.Context(ctx, time.Minute)
	defer cancel()
	var errs []error
	if n.Checks != nil {
		n.Checks.Close()
	}
	if n.Services != nil {
		// Its last health changes, before the store closes.
		n.Services.Close()
	}
	if err := n.Drivers.Close(cctx); err != nil {
		errs = append(errs, err)
	}
	if n.Dirs != nil {
		if err := n.Dirs.Close(cctx); err != nil {
			errs = append(errs, err)
		}
	}
	if n.Store != nil {
		if err := n.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close the store %s: %w", n.Store.Path(), err))
		}
	}
	return errors.Join(errs...)
}

// ParseOptions validate a job against this node: its attributes, its
// drivers, the CNI networks of its config dir and what they map, its host
// volumes. What only this node decides is an error (run, plan); validate
// sets NodeWarnings.
func (n *Node) ParseOptions(ctx context.Context) jobspec.ParseOptions {
	res := n.Resources(ctx)
	return jobspec.ParseOptions{
		Node:           n.Attrs,
		MaxKillTimeout: n.Config.MaxKillTimeout(),
		Drivers:        n.Drivers.Validators(),
		Users:          n.Drivers.UserValidators(),
		DriverHint:     driverHint,
		Resources:      &res,
		Network: func(name string) error {
			_, err := cni.LoadNetwork(ctx, n.Config.CNIConfigDir, name)
			return err
		},
	}
}

// Runner runs allocations with the node's store, attachment manager and
// drivers; it needs Open.
func (n *Node) Runner() *runner.Runner {
	return runner.New(n.runnerOptions())
}

// AgentRunner is Runner for an agent: its allocations may be re-adopted
// by the next agent on the data dir (runner.Options.Agent).
func (n *Node) AgentRunner() *runner.Runner {
	o := n.runnerOptions()
	o.Agent = true
	return runner.New(o)
}

func (n *Node) runnerOptions() runner.Options {
	capa := n.Capacity
	return runner.Options{
		Attach:             n.Attach,
		Store:              n.Store,
		Drivers:            n.Drivers,
		AllocDir:           n.Config.AllocDir(),
		Bridge:             n.Config.RunnerBridge(),
		Node:               n.Attrs,
		Logger:             n.Log,
		Metrics:            n.o.Metrics,
		Services:           n.Services,
		Checks:             n.Checks,
		OwnerPID:           n.OwnerPID,
		OwnerStartTime:     n.OwnerStartTime,
		Capacity:           &capa,
		StartWorkers:       n.Config.Client.StartWorkers,
		MaxPendingLaunches: n.Config.Client.MaxPendingLaunches,
		MaxKillTimeout:     n.Config.MaxKillTimeout(),
		ArtifactLimits:     n.Config.ArtifactLimits(),
		HostVolumes:        n.Config.RunnerHostVolumes(),
		HostIP:             n.HostIP,
	}
}

// GCOptions are gc's options over this node (after Open or
// OpenWithoutStore); the caller sets what the run is to do (DryRun,
// foreign names, TidyIdle...). gc stops tasks of dead owners with the
// node's own drivers, lent: the node closes them.
func (n *Node) GCOptions() gc.Options {
	made := map[string]driver.Driver{}
	for name, d := range n.Drivers.Made() {
		made[name] = lent{d}
	}
	return gc.Options{
		Attach:   n.Attach,
		Store:    n.Store,
		StoreErr: n.StoreErr,
		StoreID:  store.IDFor(n.Config.DataDir),
		LockDir:  n.Config.LockDir,
		AllocDir: n.Config.AllocDir(),
		Drivers:  made,
		OpenDriver: func(ctx context.Context, name string) (driver.Driver, error) {
			d, err := n.Drivers.Get(ctx, name)
			if err != nil {
				return nil, err
			}
			return lent{d}, nil
		},
		Logger: n.Log,
	}
}

// Place returns why this node cannot run job, nil if it can: an unmet
// constraint or node pool (a *jobspec.PlacementError), or a launch that
// asks more CPU, memory or allocations than the node offers at all (a
// *runner.ExhaustedError). run and plan call it before creating anything.
func (n *Node) Place(ctx context.Context, job *jobspec.Job) error {
	if err := job.Placement(n.Attrs); err != nil {
		return err
	}
	if m := job.Missing(n.Resources(ctx)); len(m) > 0 {
		return m[0]
	}
	return n.Capacity.Admissible(job)
}

// Resources is what this node offers a job beyond its attributes: its
// host volumes, and which CNI networks of its config dir map ports.
func (n *Node) Resources(ctx context.Context) jobspec.NodeResources {
	return jobspec.NodeResources{
		HostVolumes: n.Config.hostVolumeNames(),
		PortMap: func(name string) error {
			net, err := cni.LoadNetwork(ctx, n.Config.CNIConfigDir, name)
			if err != nil || net.HasPlugin("portmap") {
				return nil // a network that does not load is the Network check's
			}
			return fmt.Errorf("its configuration %s has no portmap plugin: add {\"type\": \"portmap\", \"capabilities\": {\"portMappings\": true}} to its plugins", net.File)
		},
	}
}

// SweepAllocDirs queues for removal the allocation directories no record
// knows (those of records pruned while no berth removed their directory,
// or deleted by hand): the agent calls it after its reconcile at start.
// It needs OpenStore.
func (n *Node) SweepAllocDirs(ctx context.Context) {
	ids, err := allocdir.Unknown(ctx, n.Config.AllocDir(), n.Store.AllocationIDs)
	if err != nil {
		n.Log.Warn("cannot sweep allocation directories", "err", err)
		return
	}
	if len(ids) > 0 {
		n.Log.Info("removing allocation directories no record knows", "count", len(ids), "dir", n.Config.AllocDir())
		n.Dirs.Remove(ids...)
	}
}
