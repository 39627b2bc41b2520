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
	// Propagation is set on the mount and every mount under it once bound:
	// PropagationPrivate, PropagationSlave or PropagationShared; empty
	// keeps the root's (rslave).
	Propagation string
}

// The propagations of a Mount, as mount(8) names them.
const (
	PropagationPrivate = "rprivate"
	PropagationSlave   = "rslave"
	PropagationShared  = "rshared"
)

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
	// Masks are paths in the root hidden from the task beside the host's
	// usual credentials (hostSecrets): the operator's own, wherever
	// chroot_env binds them.
	Masks []string
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

// specFields is the task spec's record, in the order it is written.
func specFields() table[Spec] {
	t := table[Spec]{
		str("store", func(s *Spec) *string { return &s.StoreID }),
		str("alloc", func(s *Spec) *string { return &s.AllocID }),
		str("task", func(s *Spec) *string { return &s.Task }),
		str("path", func(s *Spec) *string { return &s.Path }),
		strs("arg", func(s *Spec) *[]string { return &s.Args }),
		strs("env", func(s *Spec) *[]string { return &s.Env }),
		str("dir", func(s *Spec) *string { return &s.Dir }),
	}
	t = append(t, within(func(s *Spec) *Credentials { return &s.Credentials }, credentialsFields())...)
	t = append(t,
		numOmitZero("oom_score_adj", func(s *Spec) *int { return &s.OOMScoreAdj }),
		str("root", func(s *Spec) *string { return &s.Root }),
		records(func(s *Spec) *[]Mount { return &s.Mounts }, mountFields()),
		strs("mask", func(s *Spec) *[]string { return &s.Masks }),
		boolFlag("newpid", func(s *Spec) *bool { return &s.NewPIDNS }),
		boolFlag("newipc", func(s *Spec) *bool { return &s.NewIPCNS }),
	)
	t = append(t, optional(func(s *Spec) **cgroup.Set { return &s.Cgroup }, cgroupFields())...)
	return append(t,
		str("log_dir", func(s *Spec) *string { return &s.LogDir }),
		str("stdout", func(s *Spec) *string { return &s.Stdout }),
		str("stderr", func(s *Spec) *string { return &s.Stderr }),
		num("log_max_files", func(s *Spec) *int { return &s.LogMaxFiles }),
		num64("log_max_size", func(s *Spec) *int64 { return &s.LogMaxSize }),
		str("status_dir", func(s *Spec) *string { return &s.StatusDir }),
		str("status_name", func(s *Spec) *string { return &s.StatusName }),
	)
}

// mountFields is one bind mount; mount_src starts one.
func mountFields() table[Mount] {
	return table[Mount]{
		str("mount_src", func(m *Mount) *string { return &m.Source }),
		str("mount_dst", func(m *Mount) *string { return &m.Dest }),
		boolFlag("mount_ro", func(m *Mount) *bool { return &m.ReadOnly }),
		str("mount_prop", func(m *Mount) *string { return &m.Propagation }),
	}
}

// credentialsFields is a task's identity, in the task spec and the enter
// spec alike. The user's IDs are written only with SetUser, which a uid
// sets; the capabilities only with SetCaps.
func credentialsFields() table[Credentials] {
	setUser := func(c *Credentials) bool { return c.SetUser }
	setCaps := func(c *Credentials) bool { return c.SetCaps }
	uid := num("uid", func(c *Credentials) *int { return &c.UID })
	setUID := uid.set
	uid.set = func(r *reader, c *Credentials, f field) { c.SetUser = true; setUID(r, c, f) }
	return table[Credentials]{
		when(setUser, uid),
		when(setUser, num("gid", func(c *Credentials) *int { return &c.GID })),
		when(setUser, nums("group", func(c *Credentials) *[]int { return &c.Groups })),
		boolFlag("setcaps", func(c *Credentials) *bool { return &c.SetCaps }),
		when(setCaps, nums("cap", func(c *Credentials) *[]int { return &c.Caps })),
		boolFlag("seccomp", func(c *Credentials) *bool { return &c.Seccomp }),
	}
}

// cgroupFields is a task's cgroup (a nil one is written as nothing).
func cgroupFields() table[cgroup.Set] {
	return table[cgroup.Set]{
		str("cgroup_rel", func(c *cgroup.Set) *string { return &c.Rel }),
		str("cgroup_unified", func(c *cgroup.Set) *string { return &c.Unified }),
		strs("cgroup_v1", func(c *cgroup.Set) *[]string { return &c.V1 }),
	}
}

// Marshal encodes the spec.
func (s *Spec) Marshal() []byte { return specFields().write(s) }

// ParseSpec decodes a spec written by Marshal of the same Version.
func ParseSpec(b []byte) (*Spec, error) {
	s := &Spec{}
	version, unknown, err := specFields().read(b, s)
	if unknown != "" {
		return nil, fmt.Errorf("task spec: unknown key %q", unknown)
	}
	if err != nil {
		return nil, fmt.Errorf("task spec: %w", err)
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

// statusFields is the status record, in the order it is written.
func statusFields() table[Status] {
	return table[Status]{
		str("store", func(s *Status) *string { return &s.StoreID }),
		str("alloc", func(s *Status) *string { return &s.AllocID }),
		str("task", func(s *Status) *string { return &s.Task }),
		num("supervisor_pid", func(s *Status) *int { return &s.SupervisorPID }),
		unum64("supervisor_start", func(s *Status) *uint64 { return &s.SupervisorStart }),
		num("pid", func(s *Status) *int { return &s.PID }),
		unum64("pid_start", func(s *Status) *uint64 { return &s.PIDStart }),
		num("exit_code", func(s *Status) *int { return &s.ExitCode }),
		num("signal", func(s *Status) *int { return &s.Signal }),
		boolFlag("oom_killed", func(s *Status) *bool { return &s.OOMKilled }),
		unixNano("started_at", func(s *Status) *time.Time { return &s.StartedAt }),
		unixNano("finished_at", func(s *Status) *time.Time { return &s.FinishedAt }),
		strOmitEmpty("error", func(s *Status) *string { return &s.Error }),
	}
}

// Marshal encodes the status.
func (s *Status) Marshal() []byte { return statusFields().write(s) }

// ParseStatus decodes a status file. A key it does not know is passed
// over: written by a newer supervisor, it says nothing this berth reads.
func ParseStatus(b []byte) (*Status, error) {
	s := &Status{}
	version, _, err := statusFields().read(b, s)
	if err != nil {
		return nil, fmt.Errorf("task status: %w", err)
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
