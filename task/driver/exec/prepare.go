package exec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/berth/berth/internal/acl"
	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/exec/supervisor"
)

// launch is a task resolved against its config, its user and this node's
// settings: everything its supervisor needs, with every name looked up.
type launch struct {
	bin  string // as the task sees it
	args []string
	env  []string
	dir  string // as the task sees it

	user *taskUser // nil: berth's own (root)

	setCaps bool
	caps    []int
	// seccomp: the default seccomp filter (exec, unless the node's
	// settings turn it off).
	seccomp bool

	root   string // exec: the task dir, which becomes its /
	mounts []supervisor.Mount
	newPID bool
	newIPC bool
	limits cgroup.Limits

	oomScoreAdj int

	allocDir, taskDir string
	logDir            string // "" when logs are off
	statusDir         string
	logMaxFiles       int
	logMaxSize        int64
}

// policy checks a config against this node's settings. Its errors are
// refusals at start and warnings at validate.
func (d *Driver) policy(tc *TaskConfig) []*ConfigError {
	if !d.isolate {
		return nil
	}
	var out []*ConfigError
	if tc.PIDMode == "host" && !d.allowHostPID {
		out = append(out, &ConfigError{Driver: d.name, Field: "pid_mode", Msg: `"host" is not allowed on this node (agent setting tasks.allow_host_pid_mode)`})
	}
	if tc.IPCMode == "host" && !d.allowHostIPC {
		out = append(out, &ConfigError{Driver: d.name, Field: "ipc_mode", Msg: `"host" is not allowed on this node (agent setting tasks.allow_host_ipc_mode)`})
	}
	for i, c := range tc.CapAdd {
		if c == "all" {
			continue
		}
		if !d.allowCaps[capabilities[c]] {
			out = append(out, &ConfigError{Driver: d.name, Field: fmt.Sprintf("cap_add[%d]", i),
				Msg: fmt.Sprintf("%q is not in this node's allow_caps (agent setting tasks.allow_caps)", c)})
		}
	}
	return out
}

// taskCaps is Nomad's rule (its capabilities.Calculate): the default set
// (allow_caps' defaults, within allow_caps), less cap_drop ("all":
// everything), plus cap_add ("all": all of allow_caps). A task of any
// user gets it: root's as its bounding, permitted and effective sets,
// another user's as ambient capabilities too, the only ones that survive
// its execve (Nomad 1.6.5's exec: a task as nobody binds port 80). What
// that lets a task do in its root is bounded by makeRoot (nosuid, nodev,
// /proc/sys read-only; README, threat model).
func (d *Driver) taskCaps(tc *TaskConfig) []int {
	set := map[int]bool{}
	for _, c := range DefaultAllowCaps {
		if n := capabilities[c]; d.allowCaps[n] {
			set[n] = true
		}
	}
	for _, c := range tc.CapDrop {
		if c == "all" {
			clear(set)
			break
		}
		delete(set, capabilities[c])
	}
	for _, c := range tc.CapAdd {
		if c == "all" {
			for n := range d.allowCaps {
				set[n] = true
			}
			continue
		}
		if n := capabilities[c]; d.allowCaps[n] {
			set[n] = true
		}
	}
	out := make([]int, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// prepare turns a task into what its supervisor is to run: the config
// checked against this node, the user, the environment, the command and
// its directory resolved as the task will see them.
func (d *Driver) prepare(t *driver.Task) (*launch, error) {
	tc, err := d.startConfig(t.Config)
	if err != nil {
		return nil, err
	}
	l, err := newLaunch(t, tc.OOMScoreAdj)
	if err != nil {
		return nil, err
	}
	userName := t.User
	if userName == "" && d.isolate {
		userName = DefaultExecUser
	}
	if userName != "" {
		if l.user, err = d.lookupUser(userName); err != nil {
			return nil, err
		}
	}
	env := denyEnv(t.Env, tc.DeniedEnvvars)
	pathEnv := defaultPath
	if p, ok := env["PATH"]; ok {
		pathEnv = p
	}
	if !d.isolate {
		err = l.resolveRawExec(&tc, pathEnv)
	} else {
		err = d.resolveExec(l, t, &tc, env, pathEnv)
	}
	if err != nil {
		return nil, err
	}
	l.env = buildEnv(env)
	l.args = append([]string{tc.Command}, tc.Args...)
	return l, nil
}

// startConfig is the task's config, refused where this node's settings
// refuse it (the errors name the field, Start names the driver).
func (d *Driver) startConfig(cfg map[string]any) (TaskConfig, error) {
	tc, _, err := parseConfig("", cfg)
	if err != nil {
		return tc, err
	}
	if perrs := d.policy(&tc); len(perrs) > 0 {
		errs := make([]error, len(perrs))
		for i, e := range perrs {
			e.Driver = ""
			errs[i] = e
		}
		return tc, errors.Join(errs...)
	}
	return tc, nil
}

// newLaunch lays out where the task's logs, status and directory go.
func newLaunch(t *driver.Task, oomScoreAdj int) (*launch, error) {
	l := &launch{
		allocDir: t.AllocDir,
		logDir:   t.LogDir,
		// The status stays out of alloc/logs, which the task sees.
		statusDir:   t.AllocDir,
		logMaxFiles: t.Logs.MaxFiles,
		logMaxSize:  int64(t.Logs.MaxFileSizeMB) << 20,
		oomScoreAdj: oomScoreAdj,
	}
	if t.Logs.Disabled {
		l.logDir = ""
	}
	if l.statusDir == "" {
		l.statusDir = t.LogDir
	}
	if l.statusDir == "" {
		return nil, errors.New("the task has neither a log dir nor an allocation dir: nowhere to record its exit status")
	}
	if t.AllocDir != "" {
		l.taskDir = driver.TaskDir(t.AllocDir, t.TaskName)
	}
	return l, nil
}

// resolveRawExec resolves the working directory and the command on the
// host, as raw_exec's task sees them.
func (l *launch) resolveRawExec(tc *TaskConfig, pathEnv string) error {
	l.dir = l.taskDir
	if tc.WorkDir != "" {
		// Checked here so that the error names the config key.
		if fi, err := os.Stat(tc.WorkDir); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return fmt.Errorf("config.work_dir %q: %w", tc.WorkDir, err)
		}
		l.dir = tc.WorkDir
	}
	var err error
	l.bin, err = lookPath(tc.Command, pathEnv, l.dir, nil)
	return err
}

// resolveExec builds exec's isolation (namespaces, capabilities, root,
// limits) and resolves everything as the task will see it, inside its
// root; env gets the task's view of its directories.
func (d *Driver) resolveExec(l *launch, t *driver.Task, tc *TaskConfig, env map[string]string, pathEnv string) error {
	if t.AllocDir == "" {
		return errors.New("the exec driver needs an allocation directory to build the task's root in")
	}
	l.root = l.taskDir
	l.newPID = tc.PIDMode != "host"
	l.newIPC = tc.IPCMode != "host"
	l.setCaps, l.caps = true, d.taskCaps(tc)
	l.seccomp = !d.noSeccomp
	l.mounts = d.rootMounts(t.AllocDir)
	for _, m := range t.Mounts {
		// After /alloc and chroot_env: a host volume may be mounted
		// inside either. The supervisor refuses a destination that
		// climbs out of the root.
		l.mounts = append(l.mounts, supervisor.Mount{Source: filepath.Clean(m.Source), Dest: filepath.Join("/", m.Dest), ReadOnly: m.ReadOnly,
			Propagation: propagation(m.Propagation)})
	}
	l.limits = limitsOf(t.Resources)
	for k, v := range map[string]string{"NOMAD_ALLOC_DIR": "/alloc", "NOMAD_TASK_DIR": "/local", "NOMAD_SECRETS_DIR": "/secrets"} {
		env[k] = v
	}
	inRoot := func(p string) string { return l.hostPath(p) }
	l.dir = "/"
	if tc.WorkDir != "" {
		if !filepath.IsAbs(tc.WorkDir) {
			return fmt.Errorf("config.work_dir %q: must be an absolute path inside the task's root", tc.WorkDir)
		}
		if fi, err := os.Stat(inRoot(tc.WorkDir)); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return fmt.Errorf("config.work_dir %q (in the task's root): %w", tc.WorkDir, err)
		}
		l.dir = tc.WorkDir
	}
	var err error
	l.bin, err = lookPath(tc.Command, pathEnv, l.dir, inRoot)
	return err
}

// limitsOf is Nomad's mapping of resources to a cgroup: memory is the hard
// limit, or the soft one when memory_max is above it (memory_max = -1: no
// hard limit); cpu (MHz) is the CPU weight.
func limitsOf(r driver.Resources) cgroup.Limits {
	var l cgroup.Limits
	mem := int64(r.MemoryMB) << 20
	switch {
	case r.MemoryMaxMB < 0:
		l.MemorySoft = mem
	case r.MemoryMaxMB > r.MemoryMB:
		l.MemoryMax, l.MemorySoft = int64(r.MemoryMaxMB)<<20, mem
	default:
		l.MemoryMax = mem
	}
	l.CPUShares = r.CPU
	return l
}

// rootMounts are chroot_env's entries (read-only, parents first, missing
// sources skipped) and the allocation's shared dir at /alloc. The task's
// local, secrets and tmp dirs are in its root already.
func (d *Driver) rootMounts(allocDir string) []supervisor.Mount {
	var out []supervisor.Mount
	for src, dst := range d.chrootEnv {
		if _, err := os.Stat(src); err != nil {
			continue
		}
		out = append(out, supervisor.Mount{Source: filepath.Clean(src), Dest: filepath.Join("/", dst), ReadOnly: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dest < out[j].Dest })
	return append(out, supervisor.Mount{Source: driver.SharedDir(allocDir), Dest: "/alloc"})
}

// secretsInRoot are where the task's root shows the host paths secrets:
// under every bind (chroot_env, a host volume) whose source holds one.
func secretsInRoot(secrets []string, mounts []supervisor.Mount) []string {
	var out []string
	for _, s := range secrets {
		s = filepath.Clean(s)
		for _, m := range mounts {
			if rel, err := filepath.Rel(m.Source, s); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				out = append(out, filepath.Join(m.Dest, rel))
			}
		}
	}
	return out
}

// hostPath is where a path of the task's root is on the host: under the
// deepest mount that holds it, else in the task dir itself.
func (l *launch) hostPath(p string) string {
	p = filepath.Join("/", p)
	best := -1
	for i, m := range l.mounts {
		if (p == m.Dest || strings.HasPrefix(p, m.Dest+"/")) && (best < 0 || len(m.Dest) > len(l.mounts[best].Dest)) {
			best = i
		}
	}
	if best < 0 {
		return filepath.Join(l.root, p)
	}
	m := l.mounts[best]
	return filepath.Join(m.Source, strings.TrimPrefix(p, m.Dest))
}

// makeDirs lays the allocation out as Nomad does: <alloc>/alloc shared by
// the group's tasks, and per task <alloc>/<task>/{local,secrets,tmp},
// owned by the task's user. The task dir itself stays root's: it is the
// exec task's /, where a task must not plant what its next start would
// mount over.
func (l *launch) makeDirs() error {
	if l.logDir != "" {
		if err := os.MkdirAll(l.logDir, 0o755); err != nil {
			return fmt.Errorf("create log dir %s: %w", l.logDir, err)
		}
	}
	if err := os.MkdirAll(l.statusDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", l.statusDir, err)
	}
	if l.allocDir == "" {
		return nil
	}
	uid, gid := -1, -1
	if l.user != nil {
		uid, gid = l.user.uid, l.user.gid
	}
	dirs := []struct {
		path  string
		mode  os.FileMode
		owned bool
	}{
		{driver.SharedDir(l.allocDir), 0o777 | os.ModeSticky, false},
		{l.taskDir, 0o755, false},
		// Nomad's modes for local/ (any task user writes there); the
		// runner makes the dirs with the same (job/runner/taskdir.go).
		{filepath.Join(l.taskDir, "local"), 0o777, true},
		{filepath.Join(l.taskDir, "secrets"), 0o700, true},
		{filepath.Join(l.taskDir, "tmp"), 0o777 | os.ModeSticky, false},
	}
	for _, dd := range dirs {
		if err := os.Mkdir(dd.path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", dd.path, err)
		}
		fi, err := os.Lstat(dd.path)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory: %w", dd.path, logfile.ErrUnsafe)
		}
		if err := os.Chmod(dd.path, dd.mode); err != nil {
			return err
		}
		if dd.owned && uid >= 0 {
			if err := os.Lchown(dd.path, uid, gid); err != nil {
				return fmt.Errorf("give %s to user %s: %w", dd.path, l.user.name, err)
			}
		}
	}
	if uid > 0 && l.root == "" {
		// raw_exec: the task uses the host's paths (exec's are in its
		// root).
		return grantSearch(l.allocDir, uid)
	}
	return nil
}

// grantSearch lets uid reach the allocation dir by its path (as
// NOMAD_TASK_DIR names it): search, not listing, on the allocation dir
// and on each root-owned ancestor that others may not search (the data
// dir, 0700), through an ACL entry naming uid alone, so that no other
// local user gains anything. The walk goes up to / and stops at a
// directory root does not own (not berth's to change). The entries on
// the data dir stay (search only, for the few users tasks run as); the
// allocation dir's go with it.
func grantSearch(allocDir string, uid int) error {
	for dir := filepath.Clean(allocDir); dir != "/"; dir = filepath.Dir(dir) {
		fi, err := os.Lstat(dir)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid != 0 || !fi.IsDir() {
			return nil
		}
		if fi.Mode().Perm()&0o001 != 0 {
			continue
		}
		if err := acl.GrantSearch(dir, uid); err != nil {
			if errors.Is(err, acl.ErrUnsupported) {
				// The task still reaches its dirs from its working
				// directory (its task dir), by relative paths.
				return nil
			}
			return err
		}
	}
	return nil
}

// spec is what the supervisor gets.
func (l *launch) spec(d *Driver, t *driver.Task, cg *cgroup.Set) *supervisor.Spec {
	s := &supervisor.Spec{
		StoreID: d.storeID, AllocID: t.AllocID, Task: t.TaskName,
		Path: l.bin, Args: l.args, Env: l.env, Dir: l.dir,
		Credentials: supervisor.Credentials{SetCaps: l.setCaps, Caps: l.caps, Seccomp: l.seccomp},
		OOMScoreAdj: l.oomScoreAdj,
		Root:        l.root, Mounts: l.mounts, Masks: secretsInRoot(d.secrets, l.mounts),
		NewPIDNS: l.newPID, NewIPCNS: l.newIPC,
		LogDir: l.logDir, Stdout: t.TaskName + ".stdout", Stderr: t.TaskName + ".stderr",
		LogMaxFiles: l.logMaxFiles, LogMaxSize: l.logMaxSize,
		StatusDir: l.statusDir, StatusName: statusName(t.TaskName),
	}
	if l.user != nil {
		s.SetUser, s.UID, s.GID, s.Groups = true, l.user.uid, l.user.gid, l.user.groups
	}
	s.Cgroup = cg
	return s
}

// denyEnv drops the variables denied_envvars names (globs).
func denyEnv(env map[string]string, denied []string) map[string]string {
	out := make(map[string]string, len(env)+3)
	for k, v := range env {
		drop := false
		for _, pat := range denied {
			if ok, _ := filepath.Match(pat, k); ok {
				drop = true
				break
			}
		}
		if !drop {
			out[k] = v
		}
	}
	return out
}

// propagation is a volume_mount's propagation_mode as the supervisor sets
// it, as Nomad's exec driver: private is rprivate, host-to-task rslave,
// bidirectional rshared. In the task's namespace, whose root is rslave,
// rshared shares the task's mounts with the task's own mounts of the
// volume, not with the host's (as Nomad's exec).
func propagation(p driver.Propagation) string {
	switch p {
	case driver.PropagationHostToTask:
		return supervisor.PropagationSlave
	case driver.PropagationBidirectional:
		return supervisor.PropagationShared
	default:
		return supervisor.PropagationPrivate
	}
}
