// Package exec implements berth's raw_exec and exec drivers: a task is a
// plain process started inside its group's network namespace, in a
// process group of its own so that it can be stopped with everything it
// forked. The exec driver also puts it in a cgroup of its own where the
// host allows, which catches descendants that leave the process group.
package exec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/berth/berth/driver"
	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/netns"
	"github.com/berth/berth/store"
	"golang.org/x/sys/unix"
)

const (
	// NameRawExec and NameExec are the driver names used in job specs.
	NameRawExec = "raw_exec"
	NameExec    = "exec"

	defaultCgroupRoot   = "/sys/fs/cgroup"
	defaultCgroupParent = "berth"
)

// Options configures both drivers.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// CgroupRoot is where cgroup hierarchies are mounted (exec only);
	// default /sys/fs/cgroup.
	CgroupRoot string
	// CgroupParent is the directory, in every hierarchy, holding the
	// task cgroups (exec only); default "berth".
	CgroupParent string
}

// Driver is the raw_exec or the exec driver.
type Driver struct {
	name         string
	useCgroups   bool
	log          *slog.Logger
	cgroupRoot   string
	cgroupParent string
	// noCgroupOnce keeps "running without cgroups" to one log line per driver.
	noCgroupOnce sync.Once
}

var _ driver.Driver = (*Driver)(nil)

// NewRawExec returns the raw_exec driver: process group and network
// namespace, no cgroup.
func NewRawExec(opts Options) *Driver { return newDriver(NameRawExec, false, opts) }

// NewExec returns the exec driver: as raw_exec, plus a cgroup per task
// where the host lets berth create one.
func NewExec(opts Options) *Driver { return newDriver(NameExec, true, opts) }

func newDriver(name string, cgroups bool, opts Options) *Driver {
	d := &Driver{
		name:         name,
		useCgroups:   cgroups,
		log:          opts.Logger,
		cgroupRoot:   opts.CgroupRoot,
		cgroupParent: opts.CgroupParent,
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
	return d
}

// Name is "raw_exec" or "exec".
func (d *Driver) Name() string { return d.name }

// ValidateConfig checks a task's config block. Every problem is reported
// (errors.Join of *ConfigError), each naming its field; all match
// ErrInvalidConfig. A deprecated key adds a *driver.ConfigWarning, which
// is not a failure (driver.OnlyWarnings).
func (d *Driver) ValidateConfig(cfg map[string]any) error {
	_, warns, err := parseConfig(d.name, cfg)
	return errors.Join(append(warns, err)...)
}

// Close is a no-op: the drivers hold nothing beyond their tasks.
func (d *Driver) Close(context.Context) error { return nil }

var unsafeCgroupChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func cgroupName(allocID, task string) string {
	return unsafeCgroupChars.ReplaceAllString(allocID+"-"+task, "_")
}

// undoTimeout bounds the undo of a failed Start: killing what it started
// and removing its cgroup, even when the caller's context has ended.
const undoTimeout = time.Minute

// Start starts the task and returns once the process runs (or failed to
// exec). On error nothing is left: no process, no cgroup, no open fd.
// Every error reads "<driver>: start task <alloc>/<task>: <what failed>".
func (d *Driver) Start(ctx context.Context, t *driver.Task) (driver.Handle, error) {
	if t == nil || t.TaskName == "" {
		return nil, fmt.Errorf("%s: start task: the task has no name", d.name)
	}
	id := t.AllocID + "/" + t.TaskName
	h, err := d.start(ctx, id, t)
	if err != nil {
		return nil, fmt.Errorf("%s: start task %s: %w", d.name, id, err)
	}
	d.log.Debug("task started", "task", id, "pid", h.pid, "netns", t.NetnsPath, "cgroup", h.cgroupPath())
	return h, nil
}

// start runs Start's steps. Each thing acquired (log files, cgroup,
// process) has its undo deferred right after it, so a later failure, or
// the caller's cancellation, leaves nothing.
func (d *Driver) start(ctx context.Context, id string, t *driver.Task) (_ *handle, err error) {
	l, err := prepare(t)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	stdout, stderr, err := openLogs(t.LogDir, t.TaskName)
	if err != nil {
		return nil, err
	}
	// The child gets its own copies of the log fds; ours must not outlive
	// Start, success or not.
	defer closeFiles(stdout, stderr)

	var cg *cgroupSet
	if d.useCgroups {
		cg = d.makeCgroup(ctx, id, cgroupName(t.AllocID, t.TaskName))
	}
	if cg != nil {
		defer func() {
			if err != nil {
				err = undo(ctx, err, cg.remove)
			}
		}()
		if err := cg.setMemory(t.Resources); errors.Is(err, errNoMemoryController) {
			d.log.Warn("task memory not limited", "task", id, "err", err)
		} else if err != nil {
			return nil, err
		}
	}

	cmd, inUnified, err := d.spawn(t.NetnsPath, cg, l.command(stdout, stderr))
	if err != nil {
		return nil, fmt.Errorf("command %s: %w", l.bin, err)
	}
	h, err := d.track(id, cmd, cg, inUnified)
	h.killSignal = t.KillSignal
	defer func() {
		if err != nil {
			err = undo(ctx, err, h.Destroy)
		}
	}()
	if err != nil {
		return nil, err
	}
	return h, nil
}

// undo runs fn for a failed Start, bounded by undoTimeout even when ctx has
// ended, and adds its error to err.
func undo(ctx context.Context, err error, fn func(context.Context) error) error {
	cctx, cancel := cleanup.Context(ctx, undoTimeout)
	defer cancel()
	if uerr := fn(cctx); uerr != nil {
		return errors.Join(err, uerr)
	}
	return err
}

// launch is a task's config resolved against its environment.
type launch struct {
	bin  string
	args []string
	env  []string
	dir  string
}

// prepare decodes the task's config and resolves the binary as the task
// will see it: with its PATH, relative to its work_dir.
func prepare(t *driver.Task) (*launch, error) {
	tc, _, err := parseConfig("", t.Config)
	if err != nil {
		return nil, err
	}
	pathEnv := defaultPath
	if p, ok := t.Env["PATH"]; ok {
		pathEnv = p
	}
	if tc.WorkDir != "" {
		// Checked here because a failed chdir in the child is reported by
		// os/exec as an error on the binary's path.
		if fi, err := os.Stat(tc.WorkDir); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return nil, fmt.Errorf("config.work_dir %q: %w", tc.WorkDir, err)
		}
	}
	dir := tc.WorkDir
	if dir == "" && t.AllocDir != "" {
		// Nomad's default working directory: the task dir, where a
		// relative command ("local/tool") is found.
		dir = driver.TaskDir(t.AllocDir, t.TaskName)
	}
	bin, err := lookPath(tc.Command, pathEnv, dir)
	if err != nil {
		return nil, err
	}
	return &launch{bin: bin, args: append([]string{tc.Command}, tc.Args...), env: buildEnv(t.Env), dir: dir}, nil
}

// command returns a maker of the task's command writing to the given log
// files (/dev/null when nil), started directly in the cgroup2 cgroup open
// as cgroupFD when that is not -1.
func (l *launch) command(stdout, stderr *os.File) func(cgroupFD int) *osexec.Cmd {
	return func(cgroupFD int) *osexec.Cmd {
		c := &osexec.Cmd{
			Path: l.bin,
			Args: l.args,
			Env:  l.env,
			Dir:  l.dir,
			// Setpgid: the task and whatever it forks can be signalled as
			// one group, without touching berth.
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		}
		if stdout != nil {
			c.Stdout, c.Stderr = stdout, stderr
		}
		if cgroupFD >= 0 {
			c.SysProcAttr.UseCgroupFD = true
			c.SysProcAttr.CgroupFD = cgroupFD
		}
		return c
	}
}

// spawn starts the command in netnsPath, directly in the cgroup2 cgroup of
// cg when the kernel allows (so nothing it forks can escape it). inUnified
// reports whether that happened.
func (d *Driver) spawn(netnsPath string, cg *cgroupSet, newCmd func(cgroupFD int) *osexec.Cmd) (cmd *osexec.Cmd, inUnified bool, err error) {
	fd, err := cg.openUnified()
	if err != nil {
		d.log.Warn("cannot open task cgroup, starting outside it", "err", err)
	}
	if fd >= 0 {
		cmd = newCmd(fd)
		err = startInNetns(netnsPath, cmd)
		unix.Close(fd)
		switch {
		case err == nil:
			return cmd, true, nil
		case errors.Is(err, netns.ErrRestore):
			// Already abandoned; a second start must not follow.
			return nil, false, err
		case !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) &&
			!errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EPERM):
			return nil, false, err
		}
		// clone3 or CLONE_INTO_CGROUP refused: start normally, join after.
		d.log.Debug("CLONE_INTO_CGROUP refused, joining the cgroup after start", "cgroup", cg.unified, "err", err)
	}
	cmd = newCmd(-1)
	if err := startInNetns(netnsPath, cmd); err != nil {
		return nil, false, err
	}
	return cmd, false, nil
}

// startInNetns starts cmd inside the network namespace pinned at netnsPath
// (the host's when empty). fork inherits the namespace of the calling
// thread, so starting from a thread moved into the namespace is enough: no
// helper binary, no re-exec.
func startInNetns(netnsPath string, cmd *osexec.Cmd) error {
	if netnsPath == "" {
		return cmd.Start()
	}
	err := netns.WithPath(netnsPath, cmd.Start)
	if errors.Is(err, netns.ErrRestore) {
		// The child did start in the right namespace, but from a thread
		// berth can no longer vouch for: such a start counts as failed.
		return abandon(cmd, err)
	}
	return err
}

// abandon kills and reaps a child whose start is treated as failed.
func abandon(cmd *osexec.Cmd, err error) error {
	if cmd.Process == nil {
		return err
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Wait()
	return fmt.Errorf("killed pid %d: %w", pid, err)
}

// track makes the handle of a started command and starts reaping it. The
// handle is returned even with an error: its Destroy undoes the start.
func (d *Driver) track(id string, cmd *osexec.Cmd, cg *cgroupSet, inUnified bool) (*handle, error) {
	h := &handle{
		drv:       d,
		id:        id,
		cmd:       cmd,
		pid:       cmd.Process.Pid,
		startedAt: time.Now(),
		cg:        cg,
		done:      make(chan struct{}),
	}
	// The child is unreaped, so its PID cannot be reused: reading its
	// start time now, before reaping starts, is race free.
	var err error
	h.startTime, err = proc.StartTime(h.pid)
	if err != nil {
		err = fmt.Errorf("pid %d: %w", h.pid, err)
	} else if cg != nil {
		// v1 hierarchies cannot be joined at clone time; the window lets
		// a very fast fork escape them, but not the cgroup2 one.
		if jErr := cg.join(h.pid, inUnified); jErr != nil {
			d.log.Warn("task not in all of its cgroups", "task", id, "pid", h.pid, "err", jErr)
		}
	}
	go h.reap()
	return h, err
}

func (d *Driver) makeCgroup(ctx context.Context, id, name string) *cgroupSet {
	h := detectHierarchies(d.cgroupRoot)
	rel := filepath.Join(d.cgroupParent, name)
	cg, err := createCgroups(ctx, h, rel)
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

func openLogs(dir, task string) (stdout, stderr *os.File, err error) {
	if dir == "" {
		// No log directory: output goes to /dev/null (os/exec's default).
		return nil, nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create log dir %s: %w", dir, err)
	}
	open := func(name string) (*os.File, error) {
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open log %s: %w", p, err)
		}
		return f, nil
	}
	if stdout, err = open(task + ".stdout"); err != nil {
		return nil, nil, err
	}
	if stderr, err = open(task + ".stderr"); err != nil {
		stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// Cleanup kills what is left of a task from its recorded handle, after the
// berth that started it died:
//   - the recorded process, only if it is alive with the recorded start time;
//   - its process group: if the leader is ours, every member; if the leader
//     is gone, members started no earlier than it (they can only be its
//     descendants: the group ID stays reserved while a member exists); if
//     the PID now names another process, nothing;
//   - its cgroup (exec): everything in it, then the directories.
//
// Nothing left is nil. Cleanup waits until what it killed is gone or ctx ends.
func (d *Driver) Cleanup(ctx context.Context, h store.TaskHandle) error {
	if h.Driver != "" && h.Driver != d.name {
		return fmt.Errorf("%s: cleanup of a %q task handle", d.name, h.Driver)
	}
	var errs []error
	if h.PID > 0 {
		if err := d.killGroup(ctx, h.PID, h.PIDStartTime); err != nil {
			errs = append(errs, err)
		}
	}
	if h.CgroupPath != "" {
		cg, err := cgroupSetFromPath(detectHierarchies(d.cgroupRoot), d.cgroupParent, h.CgroupPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: cleanup: %w", d.name, err))
		} else if err := cg.remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: cleanup: %w", d.name, err))
		}
	}
	return errors.Join(errs...)
}

// killGroup SIGKILLs the recorded leader (if still the same process) and
// the members of its process group, and waits until none is alive.
func (d *Driver) killGroup(ctx context.Context, pid int, start uint64) error {
	const poll = 5 * time.Millisecond
	for {
		st, err := proc.ReadStat(pid)
		leaderOurs := err == nil && st.StartTime == start
		if err == nil && !leaderOurs {
			// The PID names another process now; so does its group ID.
			d.log.Debug("recorded pid belongs to another process, not killing", "pid", pid, "start", start, "found_start", st.StartTime)
			return nil
		}
		if leaderOurs && !st.Zombie() {
			if err := proc.KillIfSame(pid, start, syscall.SIGKILL); err != nil &&
				!errors.Is(err, proc.ErrNotFound) && !errors.Is(err, proc.ErrReused) {
				return fmt.Errorf("%s: cleanup pid %d: %w", d.name, pid, err)
			}
		}
		if !leaderOurs || st.Zombie() {
			// ESRCH proves that no process has this group ID, ours or not:
			// nothing is left, and the /proc scan below can be skipped.
			if err := syscall.Kill(-pid, 0); errors.Is(err, syscall.ESRCH) {
				return nil
			}
		}
		members, err := proc.GroupMembers(ctx, pid)
		if err != nil {
			return fmt.Errorf("%s: cleanup process group %d: %w", d.name, pid, err)
		}
		left := 0
		for _, m := range members {
			if m.StartTime < start {
				continue // cannot descend from our task
			}
			left++
			if err := proc.KillIfSame(m.PID, m.StartTime, syscall.SIGKILL); err != nil &&
				!errors.Is(err, proc.ErrNotFound) && !errors.Is(err, proc.ErrReused) {
				return fmt.Errorf("%s: cleanup pid %d of process group %d: %w", d.name, m.PID, pid, err)
			}
		}
		if left == 0 && (!leaderOurs || st.Zombie()) {
			return nil
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return fmt.Errorf("%s: cleanup process group %d: %d processes left: %w", d.name, pid, left, err)
		}
	}
}
