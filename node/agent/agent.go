// Package agent is berth as a long-running service: it owns the data dir,
// reconciles what a previous agent left at start, runs submitted jobs with
// the runner, serves the HTTP API (unix socket, and TCP with a bearer
// token) and /metrics, collects garbage periodically, and on shutdown
// stops every task and tears every network down before it returns.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/keyed"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/metrics"
	"github.com/berth/berth/node/ui"
	"github.com/berth/berth/store"
)

// ErrAgentRunning: another agent answers on the API socket.
var ErrAgentRunning = errors.New("another berth agent is running")

// Option tunes an Agent beyond its configuration.
type Option func(*Agent)

// WithVersion sets the version the API reports.
func WithVersion(v string) Option { return func(a *Agent) { a.version = v } }

// WithBanner makes Run print where the agent listens and keeps its state,
// once it is ready, to w.
func WithBanner(w io.Writer) Option { return func(a *Agent) { a.banner = w } }

// Agent is one berth agent. Create it with New and call Run once.
type Agent struct {
	cfg     Config
	set     *settings
	log     *slog.Logger
	version string
	banner  io.Writer
	ready   chan struct{}
	uiPage  *ui.UI      // the status page
	hist    *ui.History // what it plots: the last hour

	// reconciled is closed once the reconcile at start has ended; jobs
	// start after it.
	reconciled chan struct{}

	// Set by Run before ready is closed, read-only afterwards.
	node      *node.Node
	runner    *runner.Runner
	met       *metrics.Metrics
	started   time.Time
	unixAddr  string
	tcpAddr   string
	nomadAddr string
	// jobsCtx is the parent of every job's context: it carries the
	// values of Run's ctx but not its cancellation, since ending Run's
	// ctx starts the drain, which cancels the jobs one by one.
	jobsCtx context.Context

	// rejects logs rejected TCP requests, at most a line per interval.
	rejects *rejectLog

	runOnce sync.Once
	keys    keyed.Mutex // serialises submit and stop of one job ID
	gcMu    sync.Mutex  // one garbage collection at a time
	runs    sync.WaitGroup

	// drainReq is closed by a drain request (API, `berth agent drain`):
	// Run then stops every workload before it exits, whatever
	// drain_on_shutdown says; drained is closed once that is done.
	drainReq  chan struct{}
	drainOnce sync.Once
	drained   chan struct{}
	// drainReport is what the drain stopped; set before drained closes.
	drainReport *api.DrainResponse

	mu          sync.Mutex // guards what follows
	jobs        map[string]*jobRun
	draining    bool
	reconciling bool
	lastGC      *api.GCReport
}

// New checks cfg and returns an agent; nothing is opened or started
// until Run.
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Agent, error) {
	set, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	a := &Agent{
		cfg: cfg, set: set, log: logger, version: "dev",
		ready: make(chan struct{}), reconciled: make(chan struct{}), jobs: map[string]*jobRun{},
		drainReq: make(chan struct{}), drained: make(chan struct{}),
		reconciling: true,
		rejects:     &rejectLog{log: logger, every: time.Minute},
	}
	for _, o := range opts {
		o(a)
	}
	a.newUI()
	return a, nil
}

// Ready is closed once the agent serves its API (the reconcile at start
// may still run: see Reconciled).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Reconciled is closed once the reconcile at start has ended.
func (a *Agent) Reconciled() <-chan struct{} { return a.reconciled }

func (a *Agent) isReconciling() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reconciling
}

// SocketPath is the API's unix socket; valid once Ready is closed.
func (a *Agent) SocketPath() string { return a.unixAddr }

// NomadAddr is the Nomad API's address ("" without one); valid once
// Ready is closed.
func (a *Agent) NomadAddr() string { return a.nomadAddr }

// TCPAddr is the API's TCP address ("" without one); valid once Ready is
// closed (it resolves a ":0" port).
func (a *Agent) TCPAddr() string { return a.tcpAddr }

// Run owns the data dir, reconciles, serves until ctx ends, then drains:
// stops launching, stops every job's tasks (each within its kill_timeout),
// tears their networks down, closes the drivers (a podman service berth
// started) and the store. It returns nil after a clean drain.
func (a *Agent) Run(ctx context.Context) error {
	first := false
	a.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("agent: Run called twice")
	}
	a.started = time.Now()
	ls, err := a.listen()
	if err != nil {
		return err
	}
	defer ls.close()
	defer a.rejects.close()
	n, err := a.openNode(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := n.Close(ctx); err != nil {
			a.log.Error("closing drivers and store", "err", err)
		}
	}()
	a.runner = n.AgentRunner()
	a.jobsCtx = context.WithoutCancel(ctx)

	// Serve first, reconcile in the background: an agent with a big store
	// (tens of thousands of allocations a killed agent left) answers at
	// once, and says it is reconciling; jobs submitted meanwhile start
	// once it is done.
	// The stored jobs are known before the API answers (a client that
	// asks right after a restart finds them); those that resume start
	// once the reconcile is done (start waits for it).
	a.resumeJobs(ctx)
	servers, serveErr := a.serveAPI(ls)
	// Before the reconcile starts: what waits for it (a test, a script
	// reading the banner) then finds the banner written.
	a.printBanner()
	bgCtx, stopBG := context.WithCancel(a.jobsCtx)
	bgDone := make(chan struct{})
	recErr := make(chan error, 1)
	go func() {
		defer close(bgDone)
		a.background(bgCtx, recErr)
	}()
	nomadDone := a.startNomad(bgCtx)

	close(a.ready)
	a.log.Info("berth agent ready (reconciling in the background)", "socket", a.unixAddr, "tcp", a.tcpAddr, "data_dir", a.cfg.DataDir, "pid", os.Getpid())

	drain, runErr := a.awaitShutdown(ctx, serveErr, recErr)
	stopBG()
	<-bgDone
	<-nomadDone
	if drain {
		a.drain()
	} else {
		a.detach()
	}
	close(a.drained)

	sctx, cancel := cleanup.Context(ctx, 5*time.Second)
	defer cancel()
	for _, s := range servers {
		// Past the grace period the listeners close anyway (ls.close):
		// nothing is left to report.
		_ = s.Shutdown(sctx)
	}
	a.log.Info("berth agent stopped")
	return runErr
}

// apiListeners are what the agent holds for its life: the data dir's
// ownership and the API's listeners.
type apiListeners struct {
	owner *store.OwnerLock
	unix  *unixSocket
	tcp   net.Listener // nil without api.tcp_address
	nomad net.Listener // nil without api.nomad_address
}

// close releases them, the ownership last.
func (ls *apiListeners) close() {
	// An error closing a listener leaves nothing to undo.
	if ls.tcp != nil {
		_ = ls.tcp.Close()
	}
	if ls.nomad != nil {
		_ = ls.nomad.Close()
	}
	if ls.unix != nil {
		ls.unix.closeAndRemove()
	}
	ls.owner.Release()
}

// listen creates the data dir, takes its ownership and opens the API's
// listeners. One agent per data dir (it resumes jobs and reconciles as
// their owner); any number of other berth commands may use the store
// beside it. The listeners come before the reconcile: a second agent on
// the same socket is told at once, not after a host-wide sweep.
func (a *Agent) listen() (*apiListeners, error) {
	cfg := a.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	owner, err := store.LockOwner(cfg.DataDir, "berth agent")
	if err != nil {
		return nil, err
	}
	ls := &apiListeners{owner: owner}
	if ls.unix, err = listenUnix(cfg.API.Socket, a.log); err != nil {
		ls.close()
		return nil, err
	}
	a.unixAddr = cfg.API.Socket
	if cfg.API.TCPAddress != "" {
		if ls.tcp, err = net.Listen("tcp", cfg.API.TCPAddress); err != nil {
			ls.close()
			return nil, fmt.Errorf("listen on api.tcp_address %s: %w", cfg.API.TCPAddress, err)
		}
		a.tcpAddr = ls.tcp.Addr().String()
	}
	if cfg.API.NomadAddress != "" {
		if ls.nomad, err = net.Listen("tcp", cfg.API.NomadAddress); err != nil {
			ls.close()
			return nil, fmt.Errorf("listen on api.nomad_address %s: %w", cfg.API.NomadAddress, err)
		}
		a.nomadAddr = ls.nomad.Addr().String()
	}
	return ls, nil
}

// openNode builds the agent's metrics (a registry of its own: commands
// other than the agent build none) and its node, and opens the store.
func (a *Agent) openNode(ctx context.Context) (*node.Node, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.met = metrics.New(reg)
	n, err := node.New(ctx, a.cfg.Config, node.Options{Logger: a.log, Observer: a.met, Metrics: a.met, Retention: a.cfg.Retention, Secrets: a.cfg.secretFiles()})
	if err != nil {
		return nil, err
	}
	if err := n.OpenStore(ctx); err != nil {
		return nil, fmt.Errorf("open the store in %s: %w", a.cfg.DataDir, err)
	}
	a.node = n
	return n, nil
}

// serveAPI serves the API on the unix socket and, when configured, on TCP
// (token-gated, TLS when set). A server's failure is sent on serveErr.
func (a *Agent) serveAPI(ls *apiListeners) (servers []*http.Server, serveErr <-chan error) {
	mux := a.routes()
	errs := make(chan error, 3)
	us := a.server(mux)
	servers = append(servers, us)
	go func() { errs <- serve(us, a.limit(ls.unix), "unix:"+a.cfg.API.Socket) }()
	if ls.tcp != nil {
		ts := a.server(a.uiPage.Gate(a.tokenOK, mux, a.requireToken(mux)))
		servers = append(servers, ts)
		l := a.limit(ls.tcp)
		if a.set.tls != nil {
			l = tls.NewListener(l, a.set.tls)
		}
		go func() { errs <- serve(ts, l, "tcp:"+a.tcpAddr) }()
	}
	if ls.nomad != nil {
		ns := a.server(a.nomadHandler())
		servers = append(servers, ns)
		l := a.limit(ls.nomad)
		if a.set.tls != nil {
			l = tls.NewListener(l, a.set.tls)
		}
		go func() { errs <- serve(ns, l, "nomad:"+a.nomadAddr) }()
	}
	return servers, errs
}

// awaitShutdown waits for the reason to stop: ctx ending, a drain request,
// a failed API server or a failed reconcile. drain says whether the jobs
// are to be stopped (else they keep running for the next agent).
func (a *Agent) awaitShutdown(ctx context.Context, serveErr, recErr <-chan error) (drain bool, err error) {
	drain = a.cfg.DrainOnShutdown
	select {
	case <-ctx.Done():
		if drain {
			a.log.Info("shutting down (drain_on_shutdown): stopping jobs, tearing their networks down", "reason", context.Cause(ctx))
		} else {
			a.log.Info("shutting down: workloads keep running for the next agent (berth agent drain stops them)", "reason", context.Cause(ctx))
		}
	case <-a.drainReq:
		drain = true
		a.log.Info("draining on request: stopping jobs, tearing their networks down, then exiting")
	case err := <-serveErr:
		a.log.Error("API server failed; shutting down", "err", err)
		return drain, fmt.Errorf("API server: %w", err)
	case err := <-recErr:
		a.log.Error("reconcile at start failed; shutting down", "err", err)
		return drain, fmt.Errorf("reconcile at start: %w", err)
	}
	return drain, nil
}

// background is the agent's work beside the API: the reconcile at start
// (tasks a killed agent left, half-made and pending teardowns, and with
// gc_mode full host leftovers), then the allocation directories no
// record knows, and the periodic gc until ctx ends. A failed reconcile is
// sent on recErr (the agent shuts down).
func (a *Agent) background(ctx context.Context, recErr chan<- error) {
	_, err := a.collect(ctx, "start", api.GCRequest{}, false)
	a.mu.Lock()
	a.reconciling = false
	a.mu.Unlock()
	close(a.reconciled)
	if err != nil {
		if ctx.Err() == nil {
			recErr <- err
		}
		return
	}
	a.log.Info("reconcile at start done")
	a.node.SweepAllocDirs(ctx)
	a.gcLoop(ctx)
}

// drain stops launching and stops every job, waiting until each run has
// stopped its tasks and torn its networks down.
func (a *Agent) drain() {
	running := a.stopLaunching()
	ctx := a.jobsCtx
	// Recorded first: an agent killed during the drain leaves each stop
	// to the next agent, which finishes it instead of re-adopting.
	a.runner.RequestStops(ctx, "", "drain")
	fault.Point(fault.DrainRequested)
	live, _ := a.node.Store.ListAllocations(ctx, store.AllocFilter{NonTerminal: true})
	for _, jr := range running {
		jr.cancel()
	}
	if len(running) > 0 {
		a.log.Info("waiting for jobs to stop", "jobs", len(running))
	}
	a.runs.Wait()
	rep := &api.DrainResponse{Jobs: len(running), PID: os.Getpid(), Done: true}
	for _, al := range live {
		cur, err := a.node.Store.GetAllocation(ctx, al.ID)
		if err != nil {
			cur = al
		}
		d := api.DrainedAlloc{ID: cur.ID, JobID: cur.JobID, Status: string(cur.Status)}
		if d.Why = a.drainLeft(ctx, cur); d.Why == "" {
			rep.Stopped = append(rep.Stopped, d)
		} else {
			rep.Left = append(rep.Left, d)
		}
	}
	a.log.Info("drained", "jobs", len(running), "allocations_stopped", len(rep.Stopped), "allocations_left", len(rep.Left))
	a.mu.Lock()
	a.drainReport = rep
	a.mu.Unlock()
	fault.Point(fault.DrainStopped)
}

// drainLeft says what a drain left of allocation al (empty: nothing):
// not terminal, its network still recorded (its teardown failed), a task
// still holding a handle (not destroyed).
func (a *Agent) drainLeft(ctx context.Context, al *store.Allocation) string {
	var left []string
	if !al.Status.Terminal() {
		left = append(left, "still "+string(al.Status))
	}
	if _, err := a.node.Store.GetAttachment(ctx, al.ID); err == nil {
		why := "its network is still there"
		for _, ev := range al.Events {
			if ev.Type == runner.EventTeardownFailed {
				why = "its network teardown failed: " + ev.Message
			}
		}
		left = append(left, why)
	}
	for _, ts := range al.Tasks {
		if ts.Handle != nil {
			left = append(left, "task "+ts.Name+" not destroyed")
		}
	}
	return strings.Join(left, "; ")
}

// detach stops launching and lets every run return without stopping
// anything: tasks keep running, networks stay, each allocation recorded
// for the next agent on the data dir to re-adopt (an upgrade is: stop,
// replace the binary, start). Jobs stay "running" in the store.
func (a *Agent) detach() {
	running := a.stopLaunching()
	a.runner.Detach()
	a.runs.Wait()
	if len(running) > 0 {
		a.log.Info("left running for the next agent", "jobs", len(running))
	}
}

// stopLaunching marks the agent draining (no run starts after it) and
// returns the runs going on.
func (a *Agent) stopLaunching() []*jobRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.draining = true
	return a.runningLocked()
}

// runningLocked is the job runs going on; the caller holds a.mu.
func (a *Agent) runningLocked() []*jobRun {
	var running []*jobRun
	for _, jr := range a.jobs {
		if jr.cancel != nil {
			running = append(running, jr)
		}
	}
	return running
}

// requestDrain asks Run to drain and exit; it returns once the drain is
// done (or ctx ends).
func (a *Agent) requestDrain(ctx context.Context) error {
	a.drainOnce.Do(func() { close(a.drainReq) })
	select {
	case <-a.drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Agent) isDraining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.draining
}

func (a *Agent) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h,
		// A client that trickles its request (a slow body, headers one
		// byte at a time) holds a connection for at most read_timeout;
		// responses are not bounded (logs, a stop that waits).
		ReadHeaderTimeout: min(10*time.Second, a.set.readTimeout),
		ReadTimeout:       a.set.readTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
}

func serve(s *http.Server, l net.Listener, what string) error {
	err := s.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (a *Agent) printBanner() {
	if a.banner == nil {
		return
	}
	cfg := a.cfg
	tcp := "(off)"
	if a.tcpAddr != "" {
		tcp = a.tcpAddr + " (bearer token required, plain HTTP)"
		if a.set.tls != nil {
			tcp = a.tcpAddr + " (TLS, bearer token required)"
			if a.set.tls.ClientAuth == tls.RequireAndVerifyClientCert {
				tcp = a.tcpAddr + " (TLS with client certificates, bearer token required)"
			}
		}
	}
	gcEvery := "every " + cfg.GCInterval
	if a.set.gcInterval == 0 {
		gcEvery = "off (reconcile at start only)"
	}
	podmanSock := cfg.PodmanSocket
	if podmanSock == "" {
		podmanSock = filepath.Join(cfg.DataDir, "podman", "podman.sock") + " (started by berth when a task needs it)"
	}
	page := "/ui/ on the API socket (a browser reaches it through e.g. ssh -L 4646:" + a.unixAddr + " HOST)"
	if a.tcpAddr != "" {
		// The scheme the listener speaks: a browser sent to http:// on
		// a TLS port gets garbage.
		scheme := "http://"
		if a.set.tls != nil {
			scheme = "https://"
		}
		page = scheme + a.tcpAddr + "/ui/ (sign in with the API token)"
	}
	lines := [][2]string{
		{"Version", a.version},
		{"API socket", "unix://" + a.unixAddr + " (mode 0600)"},
		{"API TCP", tcp},
		{"Nomad API", a.nomadAPIBanner()},
		{"Metrics", "GET /metrics on the API"},
		{"Status page", page},
		{"Data dir", cfg.DataDir},
		{"Netns dir", cfg.NetnsDir},
		{"CNI config dir", cfg.CNIConfigDir},
		{"CNI plugin path", strings.Join(cfg.CNIPath, ":")},
		{"Bridge network", fmt.Sprintf("%s (%s, %s)", cfg.Bridge.Network, cfg.Bridge.Iface, cfg.Bridge.Subnet)},
		{"Podman socket", podmanSock},
		{"GC", fmt.Sprintf("%s, mode %s", gcEvery, cfg.GCMode)},
		{"Nomad", a.nomadBanner()},
		{"Retention", fmt.Sprintf("%d finished allocations per job", cfg.Retention)},
		{"Log", cfg.LogLevel + ", " + cfg.LogFormat},
	}
	var b strings.Builder
	b.WriteString("==> berth agent started! Log data will stream in below:\n\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "%18s: %s\n", l[0], l[1])
	}
	b.WriteString("\n==> try: berth job run <file.nomad.hcl>; berth alloc ls; berth netns ls\n\n")
	_, _ = io.WriteString(a.banner, b.String())
}
