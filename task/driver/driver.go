// Package driver defines how berth starts tasks inside a group's network
// namespace and how it makes sure a task holds nothing of that namespace
// once it is gone.
package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth/berth/store"
)

var (
	// ErrUnknownDriver is returned for a driver name berth does not have.
	ErrUnknownDriver = errors.New("unknown driver")
	// ErrNotRecoverable is returned by Recover for a task that cannot be
	// re-attached: gone without a recorded exit, another data dir's, a
	// reused PID, a handle of another driver or of an older berth.
	ErrNotRecoverable = errors.New("task cannot be re-attached")
	// ErrExitUnknown is returned by Find for a task an earlier berth
	// started and did not record that ran (a live supervisor, a cgroup
	// with processes, a container that started) but could neither be
	// adopted nor tell how it ended: what was left of it is removed; and
	// by Start when the start got no answer and whether the task ran
	// cannot be told. A task of a job that runs to completion must not be
	// run again (its work may be done); a service's may.
	ErrExitUnknown = errors.New("task ran, and how it ended cannot be known")
	// ErrUnknownUser is returned for a task user this node does not have.
	ErrUnknownUser = errors.New("unknown user")
	// ErrDeniedUser is returned for a task user this node's settings deny.
	ErrDeniedUser = errors.New("user denied by this node's settings")
)

// Task is everything a driver needs to start one task.
type Task struct {
	AllocID   string
	JobName   string
	GroupName string
	TaskName  string
	// Config is the task's driver-specific `config` block, already decoded
	// (strings, numbers, bools, []any, map[string]any).
	Config map[string]any
	// Env is the complete environment for the task, NOMAD_* variables included.
	Env map[string]string
	// NetnsPath is the group's pinned network namespace; empty means the host's.
	NetnsPath string
	// LogDir receives <TaskName>.stdout.N and <TaskName>.stderr.N,
	// rotated as Nomad's logmon does (logfile.Rotator); with an AllocDir
	// it is LogDir(AllocDir).
	LogDir string
	// AllocDir is the allocation's directory, laid out as Nomad's (see
	// SharedDir and TaskDir); empty means none (raw_exec only).
	AllocDir    string
	KillTimeout time.Duration
	// KillSignal is what Stop sends first (the job's kill_signal); 0
	// means SIGTERM.
	KillSignal syscall.Signal
	Resources  Resources
	// User is who the task runs as; empty is the driver's default (berth's
	// own user for raw_exec, nobody for exec, the image's for podman).
	User string
	Logs LogConfig
	// Labels are attached to whatever the driver creates (container labels),
	// so an orphan can be found by them after a crash.
	Labels map[string]string
	// Mounts are the task's host volumes (volume_mount blocks): exec binds
	// them into the task's root, podman into the container; raw_exec, as
	// Nomad's, refuses to start a task that has any.
	Mounts []Mount
}

// Mount is a host path bound into a task at Dest (a path as the task
// sees it).
type Mount struct {
	Source, Dest string
	ReadOnly     bool
	// Propagation is the volume_mount's propagation_mode: what a mount made
	// below Source on the host, or below Dest in the task, does on the
	// other side. Empty is PropagationPrivate.
	Propagation Propagation
}

// Propagation is a mount's propagation, as Nomad's propagation_mode.
type Propagation string

// The propagation modes of a volume_mount, as Nomad's (and as Linux's
// rprivate, rslave and rshared).
const (
	// PropagationPrivate: neither side sees the other's later mounts.
	PropagationPrivate Propagation = "private"
	// PropagationHostToTask: the task sees what the host mounts below
	// the volume after the task started; the host sees nothing of the
	// task's mounts.
	PropagationHostToTask Propagation = "host-to-task"
	// PropagationBidirectional: host-to-task, and the task's mounts
	// below the volume are shared back where the driver can (podman).
	PropagationBidirectional Propagation = "bidirectional"
)

// Resources is what the task may use, as the job file says (Nomad's
// defaults filled in): cpu in MHz, memory in MB; MemoryMaxMB above MemoryMB
// is the hard limit (MemoryMB then the soft one), -1 no hard limit.
type Resources struct {
	CPU         int
	MemoryMB    int
	MemoryMaxMB int
}

// LogConfig is the task's logs block: MaxFiles files of MaxFileSizeMB
// each per stream (0: Nomad's 10 and 10); Disabled sends the output to
// /dev/null.
type LogConfig struct {
	MaxFiles      int
	MaxFileSizeMB int
	Disabled      bool
}

// SharedDir is the allocation's directory shared by its tasks
// (NOMAD_ALLOC_DIR): <alloc dir>/alloc.
func SharedDir(allocDir string) string { return filepath.Join(allocDir, "alloc") }

// LogDir is where the allocation's task logs go, as Nomad's:
// <alloc dir>/alloc/logs, seen by the tasks as $NOMAD_ALLOC_DIR/logs.
func LogDir(allocDir string) string { return filepath.Join(SharedDir(allocDir), "logs") }

// TaskDir is a task's own directory, <alloc dir>/<task>, with local/
// (NOMAD_TASK_DIR), secrets/ (NOMAD_SECRETS_DIR) and tmp/ in it.
func TaskDir(allocDir, task string) string { return filepath.Join(allocDir, task) }

// TaskPaths are where a task sees its allocation's shared dir, its local
// dir and its secrets dir (NOMAD_ALLOC_DIR, NOMAD_TASK_DIR,
// NOMAD_SECRETS_DIR).
type TaskPaths struct {
	AllocDir, TaskDir, SecretsDir string
}

// PathMapper is a driver whose tasks see a filesystem of their own (a
// container's, exec's root): it says where the task's directories appear
// there. For any other driver, or when TaskPaths is the zero value (the
// raw_exec side of the exec package's Driver), they are the host's paths.
type PathMapper interface {
	TaskPaths() TaskPaths
}

// CgroupParenter is a driver whose tasks run in cgroups under one parent:
// CgroupParent is that parent as the task's NOMAD_PARENT_CGROUP names it.
type CgroupParenter interface {
	CgroupParent() string
}

// ExitResult is how a task ended.
type ExitResult struct {
	ExitCode   int
	Signal     int
	OOMKilled  bool
	StartedAt  time.Time
	FinishedAt time.Time
	// Err is set when the driver lost track of the task rather than seeing it exit.
	Err error
}

// Successful reports a clean exit.
func (r *ExitResult) Successful() bool {
	return r != nil && r.Err == nil && r.ExitCode == 0 && r.Signal == 0
}

// Handle is a started task.
type Handle interface {
	// State is what must be recorded so that a later berth process can find
	// and kill the task if this one dies (PID and start time, container ID).
	State() store.TaskHandle
	// Wait blocks until the task exits or ctx ends.
	Wait(ctx context.Context) (*ExitResult, error)
	// Stop asks the task to stop (its Task.KillSignal, SIGTERM by default)
	// and kills it after timeout.
	Stop(ctx context.Context, timeout time.Duration) error
	// Destroy releases everything the driver holds for the task: the
	// container is removed, every file descriptor and helper process that
	// could pin the namespace is gone. The network teardown runs only after
	// Destroy returned, so it must not return early.
	Destroy(ctx context.Context) error
}

// Driver starts tasks of one kind.
type Driver interface {
	Name() string
	// ValidateConfig checks a task's config block before anything is
	// created; the error names the offending field.
	ValidateConfig(cfg map[string]any) error
	Start(ctx context.Context, t *Task) (Handle, error)
	// Cleanup kills and removes whatever is left of a task whose owning
	// berth process died, from its recorded state. It never touches a
	// process whose start time differs from the recorded one. Nothing left
	// is not an error.
	Cleanup(ctx context.Context, h store.TaskHandle) error
	// Recover re-attaches a task a berth process that died started, from
	// its recorded handle: the returned Handle waits for, stops and
	// destroys it as if this process had started it. A task that ended
	// while nobody watched returns a Handle whose Wait reports its real
	// exit. A task that cannot be proven to be the recorded one (its
	// process or container gone without an exit status, a PID reused,
	// another data dir's) is ErrNotRecoverable: Cleanup it.
	Recover(ctx context.Context, h store.TaskHandle) (Handle, error)
	// Close releases driver-wide resources (e.g. a podman service berth started).
	Close(ctx context.Context) error
}

// Leftover is something a driver made for a task of this data dir that is
// still on the host: a container, a task cgroup, a supervisor. AllocID
// (and Task, when known) say whose it is, read from the object itself
// (labels, names, command lines), not from a record.
type Leftover struct {
	Driver string `json:"driver"`
	// StoreID is the data dir's store the object is marked with.
	StoreID string `json:"store_id"`
	Kind    string `json:"kind"` // "container", "cgroup", "supervisor"
	ID      string `json:"id"`   // container ID, cgroup path, "pid:start"
	AllocID string `json:"alloc_id"`
	Task    string `json:"task,omitempty"`
}

// Sweeper is a driver that can list what it made for a data dir's tasks
// (by its store ID, store.IDFor), so that garbage collection finds what no
// record describes (berth killed between making a task and recording its
// handle).
type Sweeper interface {
	Leftovers(ctx context.Context, storeID string) ([]Leftover, error)
	// RemoveLeftover kills and removes one, once it checked the object
	// still carries l.StoreID; gone already is not an error.
	RemoveLeftover(ctx context.Context, l Leftover) error
}

// FindRequest names a task an earlier berth may have started and not
// recorded, with what an adopted task needs that only the job says.
type FindRequest struct {
	AllocID, Task string
	// AllocDir is the allocation's dir (where a supervisor leaves its
	// status file); empty: none.
	AllocDir string
	// Since: an exit recorded at or before it is an earlier attempt's
	// (already recorded), not this one's.
	Since time.Time
	// KillSignal is what Stop of an adopted task sends first (the job's
	// kill_signal; 0: SIGTERM), as Task.KillSignal for a started one.
	KillSignal syscall.Signal
}

// Finder is a driver that can find a task an earlier berth started and
// did not record (killed between Start and recording its handle), so that
// a re-adopted allocation never runs a second of it.
type Finder interface {
	// Find returns a Handle for what is left of the task as Recover would
	// from a recorded handle: a running task to supervise, or one that
	// ended after req.Since whose Wait reports its real exit; nil when
	// nothing of it is found. What it cannot adopt (a second instance, a
	// supervisor it cannot re-attach) it removes and lists in removed;
	// when that ran and its exit cannot be known, err wraps
	// ErrExitUnknown.
	Find(ctx context.Context, req FindRequest) (h Handle, removed []string, err error)
}

// ConfigWarning is returned by ValidateConfig, alone or inside errors.Join
// with real errors, for a config that works but should change (a
// deprecated key). It is not a failure: jobspec reports it as a warning.
type ConfigWarning struct {
	Driver string
	// Field is the config key concerned ("cwd").
	Field string
	Msg   string
}

func (w *ConfigWarning) Error() string { return w.Driver + ": config." + w.Field + " " + w.Msg }

// Warning marks the error as a warning for jobspec.
func (w *ConfigWarning) Warning() bool { return true }

// ConfigField names the key, so jobspec can point at it.
func (w *ConfigWarning) ConfigField() string { return w.Field }

// OnlyWarnings reports whether err holds nothing but ConfigWarnings.
func OnlyWarnings(err error) bool {
	if err == nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !OnlyWarnings(e) {
				return false
			}
		}
		return true
	}
	_, ok := err.(*ConfigWarning)
	return ok
}

// Signaler is a handle that can send a signal to its task's main process
// without stopping it (berth alloc signal, a template's change_mode
// "signal"), as Nomad's drivers do. Both berth drivers implement it.
type Signaler interface {
	Signal(ctx context.Context, sig syscall.Signal) error
}

// ExecRequest is a command to run beside a running task (berth alloc
// exec): in its network namespace, as its user, in its cgroup and, for a
// task with a filesystem of its own, in that filesystem and its PID and
// IPC namespaces.
type ExecRequest struct {
	// Cmd is the command and its arguments; Cmd[0] is looked up in the
	// task's PATH as the task would see it.
	Cmd []string
	// Stdin, Stdout and Stderr are handed to the command as they are
	// (pipes, or the same pty slave three times when TTY is set).
	Stdin, Stdout, Stderr *os.File
	// TTY: Stdin is a terminal that becomes the command's controlling
	// terminal, in a session of its own.
	TTY bool
	// Env is added to the task's environment (TERM for a terminal),
	// without the loader's variables (LoaderVar).
	Env map[string]string
}

// LoaderVar reports whether name is a variable of the dynamic loader
// (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...). An exec takes none, neither
// from the task's recorded environment nor from the request: one could
// aim it at a file the task wrote, to run that file with the exec's
// identity instead of the command asked for.
func LoaderVar(name string) bool { return strings.HasPrefix(name, "LD_") }

// ErrExecSetup wraps the failure to enter the task's context (its
// namespaces, cgroup, user) or to start the command, as opposed to the
// command's own exit status.
var ErrExecSetup = errors.New("cannot run the command in the task's context")

// ErrCommandNotFound and ErrCommandNotExecutable (each with ErrExecSetup)
// say why the command could not start: no such file, in the task's PATH
// or at the path given (exit status 127, as a shell says), or a file that
// cannot be executed (126).
var (
	ErrCommandNotFound      = errors.New("command not found")
	ErrCommandNotExecutable = errors.New("command not executable")
)

// Execer is a handle that can run a command in its task's context. Exec
// returns the command's exit status (128+N for a command killed by signal
// N) once it ended; ending ctx kills it.
type Execer interface {
	Exec(ctx context.Context, req *ExecRequest) (exitCode int, err error)
}

// ConfigString is a scalar of a task's config as a string, converted as
// Nomad's list(string) and string attributes convert it (HCL's number and
// bool to string: `args = ["-n", 3, true]` is "-n", "3", "true"); ok is
// false for anything else (a list, a map, null).
func ConfigString(v any) (s string, ok bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	return "", false
}

// Credential is a host identity a helper process takes.
type Credential struct {
	Name     string
	UID, GID int
	Groups   []int
}

// CredentialResolver is a driver whose task users are users of this host
// (raw_exec, exec): it says who a task runs as, so that what berth does
// for the task (fetching its artifacts) runs as that user too. Other
// drivers' users live in their images; their helpers run as nobody.
type CredentialResolver interface {
	// TaskCredential resolves a task's user (empty: the driver's default).
	TaskCredential(user string) (Credential, error)
}
