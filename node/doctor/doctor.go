// Package doctor checks that a node can run berth: privileges and kernel
// support for network namespaces, the namespace directory's mounts, the
// CNI configurations and the plugins they name, iptables, podman, the
// store, and leftovers for gc. Every problem comes with the command or
// setting that fixes it.
//
// Each check is a function of explicit inputs (paths, plugin path, config
// dir, a command runner), so tests can plant problems; Run strings them
// together for `berth doctor`. Checks only read, except where a probe must
// act to know (unsharing a namespace on a locked thread, a temporary file
// in the data dir, opening the store); those undo what they did.
package doctor

import (
	"context"
	"log/slog"
	"time"

	"github.com/berth/berth/network/cni"
)

// Status is a check's outcome.
type Status string

const (
	StatusOK   Status = "ok"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
	StatusSkip Status = "skip"
)

// Check is one finding. Fix is set for warn and fail: the command or
// setting that makes the problem go away.
type Check struct {
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Report is the outcome of Run.
type Report struct {
	Checks  []Check        `json:"checks"`
	Summary map[Status]int `json:"summary"`
	// Failed is true when any check failed: berth doctor then exits non-zero.
	Failed bool `json:"failed"`
}

// Options are Run's inputs. Zero values take the defaults noted.
type Options struct {
	// NetnsDir is where namespaces are pinned (netns.DefaultDir).
	NetnsDir string
	// ConfDir is the CNI config dir (cni.DefaultConfDir).
	ConfDir string
	// CNI runs VERSION on plugins; its plugin path is the one checked
	// (cni.NewClient with defaults).
	CNI *cni.Client
	// DataDir is berth's state directory (required for the store check).
	DataDir string
	// OpenStore opens the store for the store check (the node's
	// node.Node.ReadStore); nil checks the data dir only.
	OpenStore StoreOpener
	// Podman configures the podman checks.
	Podman PodmanOptions
	// Docker configures the docker checks.
	Docker DockerOptions
	// Leaks finds what gc would reclaim; nil skips the check.
	Leaks LeakFinder
	// Run runs external commands (iptables, podman); nil means ExecRunner.
	Run Runner
	// ProcDir is /proc (tests point it elsewhere for status and mountinfo).
	ProcDir string
	// Timeout bounds each check that runs an external program (10 s).
	Timeout time.Duration
	Logger  *slog.Logger
}

func (o *Options) defaults() {
	if o.NetnsDir == "" {
		o.NetnsDir = "/run/netns"
	}
	if o.ConfDir == "" {
		o.ConfDir = cni.DefaultConfDir
	}
	if o.CNI == nil {
		o.CNI = cni.NewClient(cni.Options{Logger: o.Logger})
	}
	if o.Run == nil {
		o.Run = ExecRunner
	}
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Podman.Run == nil {
		o.Podman.Run = o.Run
	}
	if o.Podman.ProcDir == "" {
		o.Podman.ProcDir = o.ProcDir
	}
	if o.Podman.DataDir == "" {
		o.Podman.DataDir = o.DataDir
	}
}

// Run performs every check, in a fixed order, and never stops early: one
// broken part must not hide the state of the others.
func Run(ctx context.Context, o Options) *Report {
	o.defaults()
	var checks []Check
	add := func(cs ...Check) { checks = append(checks, cs...) }
	bounded := func(fn func(ctx context.Context) []Check) []Check {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		return fn(cctx)
	}

	add(CheckPrivileges(o.ProcDir + "/self/status"))
	add(CheckNetnsKernel(ctx, o.ProcDir))
	add(CheckNetnsDir(o.NetnsDir, o.ProcDir+"/self/mountinfo"))
	add(CheckCNI(ctx, o.ConfDir, o.CNI)...)
	add(bounded(func(ctx context.Context) []Check { return CheckFirewall(ctx, o.Run) })...)
	// podman info can take a few seconds on a cold host: its own bound.
	podmanTimeout := 3 * o.Timeout
	pctx, cancel := context.WithTimeout(ctx, podmanTimeout)
	add(CheckPodman(pctx, o.Podman)...)
	cancel()
	add(bounded(func(ctx context.Context) []Check { return CheckDocker(ctx, o.Docker) })...)
	add(CheckStore(ctx, o.DataDir, o.OpenStore))
	add(CheckLeftovers(ctx, o.Leaks))

	for _, c := range checks {
		o.Logger.Debug("doctor check", "name", c.Name, "status", c.Status, "message", c.Message)
	}
	return NewReport(checks)
}

// NewReport summarises checks.
func NewReport(checks []Check) *Report {
	r := &Report{Checks: checks, Summary: map[Status]int{StatusOK: 0, StatusWarn: 0, StatusFail: 0, StatusSkip: 0}}
	for _, c := range checks {
		r.Summary[c.Status]++
		if c.Status == StatusFail {
			r.Failed = true
		}
	}
	if r.Checks == nil {
		r.Checks = []Check{}
	}
	return r
}

// Find returns the checks whose name is name.
func (r *Report) Find(name string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}
