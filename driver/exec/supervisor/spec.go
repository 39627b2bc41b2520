package supervisor

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/berth/berth/internal/cgroup"
)

// Version is the protocol between the driver and the supervisor binary: a
// supervisor refuses a spec of another version, so a stale binary on the
// PATH fails the start with a clear error instead of misreading it.
const Version = 1

// Binary is the supervisor's file name.
const Binary = "berth-supervisor"

// Mount is one bind mount into a task's new root.
type Mount struct {
	// Source is a host path (file or directory); Dest is where the task
	// sees it, inside its root.
	Source, Dest string
	ReadOnly     bool
}

// Spec is everything the supervisor needs to start and watch one task.
// The driver resolves names (user, capabilities, the binary) before it
// writes the spec, so the supervisor only makes system calls.
type Spec struct {
	StoreID, AllocID, Task string

	// Path is the binary as the task sees it (inside Root when set); Args
	// its argv (Args[0] included); Env its whole environment.
	Path string
	Args []string
	Env  []string
	// Dir is the working directory as the task sees it ("" keeps the
	// supervisor's, "/").
	Dir string

	// Credentials are who the task is; a command run in it (enter)
	// takes the same from this spec, never from the task's processes.
	Credentials
	// OOMScoreAdj is written to the task's oom_score_adj when not 0.
	OOMScoreAdj int

	// Root, when set, is the host directory that becomes the task's /
	// (pivot_root in a new mount namespace), with Mounts bound into it,
	// and a private /proc, /dev and /dev/shm.
	Root   string
	Mounts []Mount
	// NewPIDNS and NewIPCNS give the task namespaces of its own.
	NewPIDNS bool
	NewIPCNS bool

	// Cgroup is the task's cgroup; nil: none.
	Cgroup *cgroup.Set

	// LogDir receives Stdout and Stderr (file names), rotated after
	// LogMaxSize bytes, LogMaxFiles files per stream. Empty LogDir: the
	// output goes to /dev/null.
	LogDir      string
	Stdout      string
	Stderr      string
	LogMaxFiles int
	LogMaxSize  int64

	// StatusDir/StatusName is where the exit status is written
	// (atomically: a temporary file renamed over it).
	StatusDir  string
	StatusName string
}

// Credentials are who a task's processes are, as the driver resolved it from
// the job (its user) and the node's settings (the driver's capabilities,
// its seccomp filter). The task's init and every command run in the task
// (enter) take exactly this: nothing of it is read back from a process
// the task controls, which may have exec'd a setuid binary since.
type Credentials struct {
	// SetUser: run as UID/GID with Groups; otherwise as the supervisor
	// (root).
	SetUser bool
	UID     int
	GID     int
	Groups  []int
	// SetCaps: the capability sets (bounding, permitted, effective,
	// inheritable, and ambient for a non-root user) are exactly Caps, as
	// far as the supervisor has them. Without it a root task keeps the
	// supervisor's and another user's has none (bounding set untouched).
	SetCaps bool
	Caps    []int
	// Seccomp installs the default seccomp filter (seccomp.go).
	Seccomp bool
}

// Marshal encodes the spec.
func (s *Spec) Marshal() []byte {
	var w writer
	w.num("version", Version)
	w.str("store", s.StoreID)
	w.str("alloc", s.AllocID)
	w.str("task", s.Task)
	w.str("path", s.Path)
	for _, a := range s.Args {
		w.str("arg", a)
	}
	for _, e := range s.Env {
		w.str("env", e)
	}
	w.str("dir", s.Dir)
	w.identity(&s.Credentials)
	if s.OOMScoreAdj != 0 {
		w.num("oom_score_adj", int64(s.OOMScoreAdj))
	}
	w.str("root", s.Root)
	for _, m := range s.Mounts {
		w.str("mount_src", m.Source)
		w.str("mount_dst", m.Dest)
		w.flag("mount_ro", m.ReadOnly)
	}
	w.flag("newpid", s.NewPIDNS)
	w.flag("newipc", s.NewIPCNS)
	w.cgroup(s.Cgroup)
	w.str("log_dir", s.LogDir)
	w.str("stdout", s.Stdout)
	w.str("stderr", s.Stderr)
	w.num("log_max_files", int64(s.LogMaxFiles))
	w.num("log_max_size", s.LogMaxSize)
	w.str("status_dir", s.StatusDir)
	w.str("status_name", s.StatusName)
	return w.b.Bytes()
}

// ParseSpec decodes a spec written by Marshal of the same Version.
func ParseSpec(b []byte) (*Spec, error) {
	fields, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("task spec: %w", err)
	}
	s := &Spec{}
	var r reader
	version := 0
	for _, f := range fields {
		switch f.key {
		case "version":
			version = r.int(f)
		case "store":
			s.StoreID = f.val
		case "alloc":
			s.AllocID = f.val
		case "task":
			s.Task = f.val
		case "path":
			s.Path = f.val
		case "arg":
			s.Args = append(s.Args, f.val)
		case "env":
			s.Env = append(s.Env, f.val)
		case "dir":
			s.Dir = f.val
		case "oom_score_adj":
			s.OOMScoreAdj = r.int(f)
		case "root":
			s.Root = f.val
		case "mount_src":
			s.Mounts = append(s.Mounts, Mount{Source: f.val})
		case "mount_dst", "mount_ro":
			if len(s.Mounts) == 0 {
				return nil, fmt.Errorf("task spec: %s before mount_src", f.key)
			}
			m := &s.Mounts[len(s.Mounts)-1]
			if f.key == "mount_dst" {
				m.Dest = f.val
			} else {
				m.ReadOnly = true
			}
		case "newpid":
			s.NewPIDNS = true
		case "newipc":
			s.NewIPCNS = true
		case "log_dir":
			s.LogDir = f.val
		case "stdout":
			s.Stdout = f.val
		case "stderr":
			s.Stderr = f.val
		case "log_max_files":
			s.LogMaxFiles = r.int(f)
		case "log_max_size":
			s.LogMaxSize = r.int64(f)
		case "status_dir":
			s.StatusDir = f.val
		case "status_name":
			s.StatusName = f.val
		default:
			if r.cgroup(&s.Cgroup, f) || r.identity(&s.Credentials, f) {
				continue
			}
			return nil, fmt.Errorf("task spec: unknown key %q", f.key)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("task spec: %w", r.err)
	}
	if version != Version {
		return nil, fmt.Errorf("task spec version %d, this %s speaks %d: install the %s built with this berth", version, Binary, Version, Binary)
	}
	if s.Path == "" || len(s.Args) == 0 {
		return nil, errors.New("task spec: no binary")
	}
	if s.StatusDir == "" || s.StatusName == "" {
		return nil, errors.New("task spec: no status file")
	}
	return s, nil
}

// Status is how a task ended, as its supervisor recorded it.
type Status struct {
	StoreID, AllocID, Task string
	// The supervisor that wrote it and the task it watched (PID and
	// start time in clock ticks since boot).
	SupervisorPID   int
	SupervisorStart uint64
	PID             int
	PIDStart        uint64
	ExitCode        int
	Signal          int
	OOMKilled       bool
	StartedAt       time.Time
	FinishedAt      time.Time
	// Error is what went wrong around the task (leftovers that would not
	// die, a log that could not be written); the exit code is still right.
	Error string
}

// Marshal encodes the status.
func (s *Status) Marshal() []byte {
	var w writer
	w.num("version", Version)
	w.str("store", s.StoreID)
	w.str("alloc", s.AllocID)
	w.str("task", s.Task)
	w.num("supervisor_pid", int64(s.SupervisorPID))
	w.unum("supervisor_start", s.SupervisorStart)
	w.num("pid", int64(s.PID))
	w.unum("pid_start", s.PIDStart)
	w.num("exit_code", int64(s.ExitCode))
	w.num("signal", int64(s.Signal))
	w.flag("oom_killed", s.OOMKilled)
	w.num("started_at", s.StartedAt.UnixNano())
	w.num("finished_at", s.FinishedAt.UnixNano())
	if s.Error != "" {
		w.str("error", s.Error)
	}
	return w.b.Bytes()
}

// ParseStatus decodes a status file.
func ParseStatus(b []byte) (*Status, error) {
	fields, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("task status: %w", err)
	}
	s := &Status{}
	var r reader
	version := 0
	for _, f := range fields {
		switch f.key {
		case "version":
			version = r.int(f)
		case "store":
			s.StoreID = f.val
		case "alloc":
			s.AllocID = f.val
		case "task":
			s.Task = f.val
		case "supervisor_pid":
			s.SupervisorPID = r.int(f)
		case "supervisor_start":
			s.SupervisorStart = r.uint64(f)
		case "pid":
			s.PID = r.int(f)
		case "pid_start":
			s.PIDStart = r.uint64(f)
		case "exit_code":
			s.ExitCode = r.int(f)
		case "signal":
			s.Signal = r.int(f)
		case "oom_killed":
			s.OOMKilled = true
		case "started_at":
			s.StartedAt = time.Unix(0, r.int64(f))
		case "finished_at":
			s.FinishedAt = time.Unix(0, r.int64(f))
		case "error":
			s.Error = f.val
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("task status: %w", r.err)
	}
	if version != Version {
		return nil, fmt.Errorf("task status version %d, want %d", version, Version)
	}
	return s, nil
}

// Args is the supervisor's command line for one task: what identifies it
// in /proc (berth adopts only a supervisor of its own data dir, alloc and
// task).
func Args(path, storeID, allocID, task string) []string {
	return []string{path, "run", "--store", storeID, "--alloc", allocID, "--task", task}
}

// IsSupervisorOf reports whether a /proc cmdline (NUL-separated) is the
// supervisor of that task.
func IsSupervisorOf(cmdline []byte, storeID, allocID, task string) bool {
	args := splitCmdline(cmdline)
	want := Args("", storeID, allocID, task)
	if len(args) != len(want) || !isSupervisorBinary(args[0]) {
		return false
	}
	for i := 1; i < len(want); i++ {
		if args[i] != want[i] {
			return false
		}
	}
	return true
}

// Identity parses a supervisor's cmdline: its store, alloc and task, ok
// false if it is not a supervisor's.
func Identity(cmdline []byte) (storeID, allocID, task string, ok bool) {
	args := splitCmdline(cmdline)
	if len(args) != 8 || !isSupervisorBinary(args[0]) || args[1] != "run" ||
		args[2] != "--store" || args[4] != "--alloc" || args[6] != "--task" {
		return "", "", "", false
	}
	return args[3], args[5], args[7], true
}

func isSupervisorBinary(arg0 string) bool {
	base := arg0
	for i := len(arg0) - 1; i >= 0; i-- {
		if arg0[i] == '/' {
			base = arg0[i+1:]
			break
		}
	}
	return base == Binary
}

func splitCmdline(b []byte) []string {
	if len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil
	}
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return append(out, string(b[start:]))
}

// readyLine is what the supervisor writes to the driver once the task runs.
func readyLine(pid int, start uint64) string {
	return "ok " + strconv.Itoa(pid) + " " + strconv.FormatUint(start, 10) + "\n"
}

// ParseReady decodes the supervisor's one-line answer: the task's PID and
// start time, or the reason it could not be started.
func ParseReady(line string) (pid int, start uint64, err error) {
	if msg, ok := cutPrefix(line, "err "); ok {
		text, uerr := strconv.Unquote(trimNL(msg))
		if uerr != nil {
			text = trimNL(msg)
		}
		return 0, 0, errors.New(text)
	}
	rest, ok := cutPrefix(line, "ok ")
	if !ok {
		return 0, 0, fmt.Errorf("supervisor answered %q", line)
	}
	var p, s string
	for i := 0; i < len(rest); i++ {
		if rest[i] == ' ' {
			p, s = rest[:i], trimNL(rest[i+1:])
			break
		}
	}
	if pid, err = strconv.Atoi(p); err != nil {
		return 0, 0, fmt.Errorf("supervisor answered %q: %w", line, err)
	}
	if start, err = strconv.ParseUint(s, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("supervisor answered %q: %w", line, err)
	}
	return pid, start, nil
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

func trimNL(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}
