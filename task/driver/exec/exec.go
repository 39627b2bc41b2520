// Package exec implements berth's raw_exec and exec drivers. Every task
// runs under a supervisor of its own (cmd/berth-supervisor, package
// supervisor): a small process that is the task's parent, owns its log
// files, waits for it, kills whatever it left in its cgroup and session
// when it ends, and writes its exit status to a file in the allocation
// directory. berth watches the supervisor through a pidfd on Go's poller,
// so a running task costs berth a parked goroutine and two fds, no thread,
// and a task outlives the berth that started it: a new berth re-attaches
// it from its recorded handle (Recover), or reads how it ended.
//
// raw_exec runs the task as it is, in its group's network namespace, in a
// cgroup of its own (for tracking and killing, nothing enforced). exec
// isolates as Nomad's exec driver: a root built from chroot_env, private
// PID, IPC and mount namespaces, user nobody unless the task says
// otherwise, Nomad's default capabilities, a default seccomp filter
// (unless the node turns it off) and a cgroup enforcing the task's cpu
// and memory.
package exec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

const (
	// NameRawExec and NameExec are the driver names used in job specs.
	NameRawExec = "raw_exec"
	NameExec    = "exec"

	defaultCgroupRoot   = "/sys/fs/cgroup"
	defaultCgroupParent = "berth"

	// DefaultExecUser is who an exec task runs as when it names no user.
	DefaultExecUser = "nobody"
)

// DefaultDataDir is the data dir whose store ID tasks carry when
// Options.StoreID is empty.
const DefaultDataDir = "/var/lib/berth"

// DefaultChrootEnv is Nomad's chroot_env: host path -> path in the task's
// root. Missing sources are skipped.
func DefaultChrootEnv() map[string]string {
	return map[string]string{
		"/bin":            "/bin",
		"/etc":            "/etc",
		"/lib":            "/lib",
		"/lib32":          "/lib32",
		"/lib64":          "/lib64",
		"/run/resolvconf": "/run/resolvconf",
		"/sbin":           "/sbin",
		"/usr":            "/usr",
	}
}

// DefaultAllowCaps is Nomad's exec allow_caps, also the capabilities an
// exec task gets when it asks for none: Docker's default set without
// net_raw.
var DefaultAllowCaps = []string{"audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
	"net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"}

// DefaultDeniedUsers is Nomad's user.denylist; with it every user whose
// UID is root's is denied too ("root-like").
var DefaultDeniedUsers = []string{"root"}

// Options configures both drivers.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// CgroupRoot is where cgroup hierarchies are mounted; default
	// /sys/fs/cgroup.
	CgroupRoot string
	// CgroupParent is the directory, in every hierarchy, holding the
	// task cgroups; default "berth".
	CgroupParent string
	// StoreID marks every task's supervisor and cgroup, so that a berth
	// re-attaches and sweeps only the tasks of its own data dir; default
	// store.IDFor(DefaultDataDir).
	StoreID string
	// SupervisorPath is the berth-supervisor binary; empty looks for
	// $BERTH_SUPERVISOR, then beside the running executable, then $PATH.
	SupervisorPath string
	// DeniedUsers are users tasks may not run as, by name; a user with
	// the UID of a denied one is denied too. nil means the driver's
	// default: DefaultDeniedUsers for exec, none for raw_exec (as Nomad's
	// user.checked_drivers); an empty list denies nobody.
	DeniedUsers []string
	// MaxParallelStarts bounds the starts and destroys in flight, which
	// block threads in system calls (fork, cgroupfs): 2,000 tasks started
	// at once must not become 2,000 OS threads. Default 8.
	MaxParallelStarts int

	// The exec driver's isolation.
	//
	// ChrootEnv maps host paths to paths in the task's root (read-only
	// bind mounts); nil means DefaultChrootEnv.
	ChrootEnv map[string]string
	// Secrets are host files and directories no exec task may read, such
	// as the agent's token and TLS key: where chroot_env binds one into a
	// task's root, it is masked there (with Nomad's default CAP_DAC_OVERRIDE
	// a task as nobody reads root's 0600 files).
	Secrets []string
	// AllowCaps bounds what cap_add may ask; nil means DefaultAllowCaps.
	AllowCaps []string
	// AllowHostPIDMode and AllowHostIPCMode let a task ask for
	// pid_mode/ipc_mode "host".
	AllowHostPIDMode bool
	AllowHostIPCMode bool
	// NoSeccomp runs exec tasks without the default seccomp filter
	// (which denies namespaces, mounts, kernel modules, BPF, ptrace...:
	// see driver/exec/supervisor/seccomp.go). A node setting: no job can
	// turn the filter off.
	NoSeccomp bool
}

// Driver is the raw_exec or the exec driver.
type Driver struct {
	name         string
	isolate      bool
	log          *slog.Logger
	cgroupRoot   string
	cgroupParent string
	storeID      string
	supervisor   string
	deniedUsers  []string
	chrootEnv    map[string]string
	secrets      []string
	allowCaps    map[int]bool
	allowHostPID bool
	allowHostIPC bool
	noSeccomp    bool
	slots        chan struct{}

	findOnce sync.Once
	findErr  error
	// warnOnce keeps "running without cgroups" and "cannot enforce
	// limits" to one log line per driver.
	noCgroupOnce sync.Once
	noLimitOnce  sync.Once
}

var (
	_ driver.Driver  = (*Driver)(nil)
	_ driver.Sweeper = (*Driver)(nil)
)

// NewRawExec returns the raw_exec driver.
func NewRawExec(opts Options) *Driver { return newDriver(NameRawExec, false, opts) }

// NewExec returns the exec driver.
func NewExec(opts Options) *Driver { return newDriver(NameExec, true, opts) }

func newDriver(name string, isolate bool, opts Options) *Driver {
	d := &Driver{
		name:         name,
		isolate:      isolate,
		log:          opts.Logger,
		cgroupRoot:   opts.CgroupRoot,
		cgroupParent: opts.CgroupParent,
		storeID:      opts.StoreID,
		supervisor:   opts.SupervisorPath,
		deniedUsers:  opts.DeniedUsers,
		chrootEnv:    opts.ChrootEnv,
		secrets:      opts.Secrets,
		allowCaps:    map[int]bool{},
		allowHostPID: opts.AllowHostPIDMode,
		allowHostIPC: opts.AllowHostIPCMode,
		noSeccomp:    opts.NoSeccomp,
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("driver", name)
	if d.cgroupRoot == "" {
		d.cgroupRoot = defaultCgroupRoot
	}
	if d.cgroupParent == "" {
		d.cgroupParent = defaultCgroupParent
	}
	if d.storeID == "" {
		d.storeID = store.IDFor(DefaultDataDir)
	}
	if d.deniedUsers == nil && isolate {
		d.deniedUsers = DefaultDeniedUsers
	}
	if d.chrootEnv == nil {
		d.chrootEnv = DefaultChrootEnv()
	}
	allow := opts.AllowCaps
	if allow == nil {
		allow = DefaultAllowCaps
	}
	for _, c := range allow {
		n := strings.TrimPrefix(strings.ToLower(c), "cap_")
		if n == "all" {
			for _, num := range capabilities {
				if num >= 0 {
					d.allowCaps[num] = true
				}
			}
			continue
		}
		if num, ok := capabilities[n]; ok {
			d.allowCaps[num] = true
		}
	}
	n := opts.MaxParallelStarts
	if n <= 0 {
		n = 8
	}
	d.slots = make(chan struct{}, n)
	return d
}

// Name is "raw_exec" or "exec".
func (d *Driver) Name() string { return d.name }

// ValidateConfig checks a task's config block. Every problem is reported
// (errors.Join of *ConfigError), each naming its field; all match
// ErrInvalidConfig. What works but should change, and what this node's
// settings would refuse at start (pid_mode "host" where not allowed, a
// capability outside allow_caps), is a *driver.ConfigWarning, which is not
// a failure (driver.OnlyWarnings): the job file is valid, this node just
// cannot run it as it is.
func (d *Driver) ValidateConfig(cfg map[string]any) error {
	tc, warns, err := parseConfig(d.name, cfg)
	if err == nil {
		for _, perr := range d.policy(&tc) {
			warns = append(warns, &driver.ConfigWarning{Driver: d.name, Field: perr.Field, Msg: perr.Msg + " (the task will not start on this node)"})
		}
	}
	return errors.Join(append(warns, err)...)
}

// Close is a no-op: the drivers hold nothing beyond their tasks.
func (d *Driver) Close(context.Context) error { return nil }

// acquire takes one of the MaxParallelStarts slots.
func (d *Driver) acquire(ctx context.Context) (release func(), err error) {
	select {
	case d.slots <- struct{}{}:
		return func() { <-d.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var (
	unsafeNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)
	allocIDRE       = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// cgroupName is "<store>.<alloc>.<task>": the store and the allocation
// can be read back from it by a sweep (alloc IDs are checked to have no
// '.'), the task name is made safe.
func (d *Driver) cgroupName(allocID, task string) string {
	t := unsafeNameChars.ReplaceAllString(task, "_")
	if len(t) > 150 {
		t = t[:150]
	}
	return d.storeID + "." + allocID + "." + t
}

// statusName is the exit status file of a task, beside its logs.
func statusName(task string) string { return task + ".status" }

// undoTimeout bounds the undo of a failed Start, even when the caller's
// context has ended.
const undoTimeout = time.Minute

// Start starts the task's supervisor, which starts the task, and returns
// once the task runs (or failed to exec). On error nothing is left: no
// process, no cgroup, no open fd. Every error reads "<driver>: start task
// <alloc>/<task>: <what failed>".
func (d *Driver) Start(ctx context.Context, t *driver.Task) (driver.Handle, error) {
	if t == nil || t.TaskName == "" {
		return nil, fmt.Errorf("%s: start task: the task has no name", d.name)
	}
	id := t.AllocID + "/" + t.TaskName
	h, err := d.start(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("%s: start task %s: %w", d.name, id, err)
	}
	d.log.Debug("task started", "task", id, "pid", h.pid, "supervisor", h.supPID, "netns", t.NetnsPath, "cgroup", h.cgroupPath())
	return h, nil
}

func (d *Driver) start(ctx context.Context, t *driver.Task) (_ *handle, err error) {
	if !allocIDRE.MatchString(t.AllocID) {
		return nil, fmt.Errorf("allocation ID %q: only letters, digits, '-' and '_' are allowed", t.AllocID)
	}
	if strings.ContainsAny(t.TaskName, "/\x00") || t.TaskName == "." || t.TaskName == ".." {
		return nil, fmt.Errorf("task name %q cannot name a file", t.TaskName)
	}
	// As Nomad's raw_exec: no filesystem of its own to mount into, and a
	// mount left out would be a job's volume silently dropped.
	if !d.isolate && len(t.Mounts) > 0 {
		return nil, fmt.Errorf("the %s driver does not support host volumes (volume_mount at %s)", d.name, t.Mounts[0].Dest)
	}
	// Everything from here blocks threads in system calls (stat, user
	// lookups, cgroupfs, fork): at most MaxParallelStarts at once.
	release, err := d.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	l, err := d.prepare(t)
	if err != nil {
		return nil, err
	}

	if err := l.makeDirs(); err != nil {
		return nil, err
	}
	statusDir := l.statusDir
	// The supervisor writes this run's status there: where the last
	// run's cannot be removed, this run's would be lost.
	if err := os.Remove(filepath.Join(statusDir, statusName(t.TaskName))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("task %s of alloc %s: removing the last run's exit status: %w", t.TaskName, t.AllocID, err)
	}

	cg := d.makeCgroup(ctx, t.AllocID+"/"+t.TaskName, d.cgroupName(t.AllocID, t.TaskName))
	if cg != nil {
		defer func() {
			if err != nil {
				err = undo(ctx, err, cg.Remove)
			}
		}()
		if d.isolate {
			if lerr := cg.SetLimits(l.limits); lerr != nil {
				if errors.Is(lerr, cgroup.ErrNoController) {
					d.noLimitOnce.Do(func() {
						d.log.Warn("cannot enforce task resources on this host", "err", lerr)
					})
				} else {
					return nil, fmt.Errorf("resources: %w", lerr)
				}
			}
		}
	}
	spec := l.spec(d, t, cg)
	return d.launch(ctx, t, spec, cg)
}

// undo runs fn for a failed Start, bounded by undoTimeout even when ctx has
// ended, and adds its error to err.
func undo(ctx context.Context, err error, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if uerr := fn(cctx); uerr != nil {
		return errors.Join(err, uerr)
	}
	return err
}

func (d *Driver) hierarchies() cgroup.Hierarchies { return cgroup.Detect(d.cgroupRoot) }

func (d *Driver) makeCgroup(ctx context.Context, id, name string) *cgroup.Set {
	rel := filepath.Join(d.cgroupParent, name)
	cg, err := cgroup.Create(ctx, d.hierarchies(), rel)
	if cg == nil {
		d.noCgroupOnce.Do(func() {
			d.log.Warn("cannot create task cgroups, running tasks without them", "root", d.cgroupRoot, "task", id, "err", err)
		})
		return nil
	}
	if err != nil {
		d.log.Debug("task cgroup missing in some hierarchies", "task", id, "err", err)
	}
	return cg
}

// Cleanup kills what is left of a task from its recorded handle, after the
// berth that started it died:
//   - its cgroup: everything in it, then the directories;
//   - without a cgroup, the recorded task process, only if it is alive
//     with the recorded start time, and its process group (see killGroup);
//   - its supervisor, only if it is alive with the recorded start time.
//
// Nothing left is nil. Cleanup waits until what it killed is gone or ctx ends.
func (d *Driver) Cleanup(ctx context.Context, h store.TaskHandle) error {
	if h.Driver != "" && h.Driver != d.name {
		return fmt.Errorf("%s: cleanup of a %q task handle", d.name, h.Driver)
	}
	var errs []error
	if h.CgroupPath != "" {
		cg, err := cgroup.FromPath(d.hierarchies(), d.cgroupParent, h.CgroupPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: cleanup: %w", d.name, err))
		} else if err := cg.Remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: cleanup: %w", d.name, err))
		}
	}
	if h.PID > 0 && (h.CgroupPath == "" || len(errs) > 0) {
		if err := d.killGroup(ctx, h.PID, h.PIDStartTime); err != nil {
			errs = append(errs, err)
		}
	}
	if h.SupervisorPID > 0 {
		if err := stopSupervisor(ctx, h.SupervisorPID, h.SupervisorStartTime); err != nil {
			errs = append(errs, fmt.Errorf("%s: cleanup: %w", d.name, err))
		}
	}
	return errors.Join(errs...)
}

// errWrongDriver is returned for a handle of another driver.
func (d *Driver) checkHandle(h store.TaskHandle) error {
	if h.Driver != "" && h.Driver != d.name {
		return fmt.Errorf("%s: a %q task handle: %w", d.name, h.Driver, driver.ErrNotRecoverable)
	}
	return nil
}

// CgroupParent implements driver.CgroupParenter: the parent of the tasks'
// cgroups as a path from the root of each hierarchy ("/berth"; Nomad's is
// "/nomad" on cgroup v1).
func (d *Driver) CgroupParent() string { return "/" + d.cgroupParent }

// TaskPaths implements driver.PathMapper: an exec task sees its
// directories where its root has them (/alloc, /local, /secrets), so that
// `command = "${NOMAD_TASK_DIR}/run.sh"` is resolved inside that root, as
// Nomad's exec does; a raw_exec task sees the host's paths (the zero
// value).
func (d *Driver) TaskPaths() driver.TaskPaths {
	if !d.isolate {
		return driver.TaskPaths{}
	}
	return driver.TaskPaths{AllocDir: "/alloc", TaskDir: "/local", SecretsDir: "/secrets"}
}
