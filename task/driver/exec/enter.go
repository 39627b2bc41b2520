package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/exec/supervisor"
	"golang.org/x/sys/unix"
)

var _ driver.Execer = (*handle)(nil)

// Exec implements driver.Execer: `berth-supervisor enter` runs the command
// as the task: its user, groups, capabilities and seccomp filter,
// environment (without loader variables) and working directory as the
// task's spec has them, read from the task's supervisor (a root process
// the task cannot touch), never from a process the task controls, which
// may have exec'd a setuid binary or changed its environment since. The
// command joins the task's cgroup (berth's record) and network namespace
// (its supervisor's) and, for an exec task, the root and the mount, PID
// and IPC namespaces of its main process, each checked to be the task's:
// owned by the supervisor's user namespace, not one the task made.
func (h *handle) Exec(ctx context.Context, req *driver.ExecRequest) (int, error) {
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: no command", driver.ErrExecSetup)
	}
	bin, err := h.drv.supervisorPath()
	if err != nil {
		return -1, fmt.Errorf("%w: %w", driver.ErrExecSetup, err)
	}
	if p := h.taskProc; p == nil || p.Exited() {
		return -1, fmt.Errorf("%w: %s: task %s: its main process (pid %d) has exited", driver.ErrExecSetup, h.drv.name, h.id, h.pid)
	}
	setupErr := func(err error) (int, error) {
		return -1, fmt.Errorf("%w: %s: task %s: %w", driver.ErrExecSetup, h.drv.name, h.id, err)
	}
	rec, sup, err := h.recordedSpec()
	if err != nil {
		return setupErr(err)
	}
	defer sup.close()
	t, err := openProc(h.pid, h.startTime)
	if err != nil {
		return setupErr(err)
	}
	defer t.close()
	files, err := enterFiles(rec, sup, t, h.cg)
	if err != nil {
		return setupErr(err)
	}
	defer closeFiles(files[:])
	sp := &supervisor.EnterSpec{
		Args: req.Cmd, Env: execEnv(rec.Env, req.Env), Credentials: rec.Credentials, Dir: rec.Dir,
		Cgroup: h.cg, TTY: req.TTY,
	}
	sp.Net, sp.IPC, sp.Mnt, sp.PID, sp.Root = files[0] != nil, files[1] != nil, files[2] != nil, files[3] != nil, files[4] != nil

	memfd, err := unix.MemfdCreate("berth-enter-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("%w: memfd: %w", driver.ErrExecSetup, err)
	}
	specFile := os.NewFile(uintptr(memfd), "enter-spec")
	defer specFile.Close()
	if _, err := specFile.Write(sp.Marshal()); err != nil {
		return -1, fmt.Errorf("%w: write the spec: %w", driver.ErrExecSetup, err)
	}
	replyR, replyW, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("%w: %w", driver.ErrExecSetup, err)
	}
	defer replyR.Close()
	cmd := &osexec.Cmd{Path: bin, Args: []string{supervisor.Binary, "enter"}, Env: []string{"GOMAXPROCS=1"}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	cmd.ExtraFiles = append([]*os.File{specFile, replyW}, files[:]...)
	err = cmd.Start()
	replyW.Close()
	if err != nil {
		return -1, fmt.Errorf("%w: start %s: %w", driver.ErrExecSetup, bin, err)
	}
	// The helper kills the command on SIGTERM; SIGKILL if it does not end.
	helper := cmd.Process
	// Wait below reports how the helper ended; a signal that fails found
	// it ended already.
	stop := context.AfterFunc(ctx, func() {
		_ = helper.Signal(syscall.SIGTERM)
		time.AfterFunc(5*time.Second, func() { _ = helper.Kill() })
	})
	defer stop()
	msg, _ := io.ReadAll(io.LimitReader(replyR, 64<<10))
	werr := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if len(msg) > 0 {
		why := driver.ErrExecSetup
		switch code {
		case supervisor.EnterNotFound:
			why = fmt.Errorf("%w: %w", driver.ErrExecSetup, driver.ErrCommandNotFound)
		case supervisor.EnterNotExecutable:
			why = fmt.Errorf("%w: %w", driver.ErrExecSetup, driver.ErrCommandNotExecutable)
		}
		return -1, fmt.Errorf("%w: %s: task %s: %s", why, h.drv.name, h.id, msg)
	}
	var ee *osexec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return -1, fmt.Errorf("%s: task %s: %w", h.drv.name, h.id, werr)
	}
	return code, nil
}

// recordedSpec is the task's spec as its supervisor holds it (the memfd
// on its descriptor 3 the driver wrote at the start, sealed), checked to
// be this task's, with the supervisor's /proc directory.
func (h *handle) recordedSpec() (*supervisor.Spec, *procDir, error) {
	sup, err := openProc(h.supPID, h.supStart)
	if err != nil {
		return nil, nil, fmt.Errorf("supervisor: %w", err)
	}
	spec, err := sup.taskSpec(h.drv.storeID, h.allocID, h.task)
	if err != nil {
		sup.close()
		return nil, nil, err
	}
	return spec, sup, nil
}

func (p *procDir) taskSpec(storeID, allocID, task string) (*supervisor.Spec, error) {
	cmdline, err := p.read("cmdline")
	if err != nil {
		return nil, err
	}
	if !supervisor.IsSupervisorOf(cmdline, storeID, allocID, task) {
		return nil, fmt.Errorf("%s is not the supervisor of task %s/%s", p.name, allocID, task)
	}
	if link, err := readlinkat(int(p.dir.Fd()), "fd/3"); err != nil || link != "/memfd:"+specMemfdName+" (deleted)" {
		return nil, fmt.Errorf("%s/fd/3 is not the task's spec (%q, %v)", p.name, link, err)
	}
	b, err := p.read("fd/3")
	if err != nil {
		return nil, err
	}
	spec, err := supervisor.ParseSpec(b)
	if err != nil {
		return nil, fmt.Errorf("%s/fd/3: %w", p.name, err)
	}
	if spec.StoreID != storeID || spec.AllocID != allocID || spec.Task != task {
		return nil, fmt.Errorf("%s/fd/3 is the spec of task %s/%s of store %s", p.name, spec.AllocID, spec.Task, spec.StoreID)
	}
	return spec, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// execEnv is the task's recorded environment with the request's
// variables over it, both without the loader's variables
// (driver.LoaderVar), which a job or a client could aim at a file the
// task wrote.
func execEnv(recorded []string, extra map[string]string) []string {
	env := map[string]string{}
	var order []string
	for _, kv := range recorded {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || driver.LoaderVar(k) {
			continue
		}
		if _, dup := env[k]; !dup {
			order = append(order, k)
		}
		env[k] = v
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if k != "" && !strings.Contains(k, "=") && !driver.LoaderVar(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, dup := env[k]; !dup {
			order = append(order, k)
		}
		env[k] = extra[k]
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out
}

// procDir is a process's /proc directory, opened once and checked to be
// the process of that start time: what it shows from then on is that
// process's, or nothing.
type procDir struct {
	dir  *os.File
	name string
}

func openProc(pid int, start uint64) (*procDir, error) {
	d, err := os.Open("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return nil, fmt.Errorf("open /proc/%d: %w", pid, err)
	}
	p := &procDir{dir: d, name: d.Name()}
	b, err := p.read("stat")
	if err == nil {
		var st proc.Stat
		if st, err = proc.ParseStat(b); err == nil && st.StartTime != start {
			err = fmt.Errorf("pid %d is another process now (start time %d, the task's %d)", pid, st.StartTime, start)
		}
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *procDir) open(name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(p.dir.Fd()), name, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/%s: %w", p.name, name, err)
	}
	return os.NewFile(uintptr(fd), p.name+"/"+name), nil
}

func (p *procDir) read(name string) ([]byte, error) {
	f, err := p.open(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4<<20))
}

func (p *procDir) close() { p.dir.Close() }

// nsID names a namespace (its nsfs inode).
type nsID struct{ dev, ino uint64 }

func nsStat(fd int) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsID{}, err
	}
	return nsID{st.Dev, st.Ino}, nil
}

// ns is the process's namespace kind and the user namespace that owns it.
func (p *procDir) ns(kind string) (id, owner nsID, err error) {
	f, err := p.open("ns/"+kind, unix.O_RDONLY)
	if err != nil {
		return id, owner, err
	}
	defer f.Close()
	if id, err = nsStat(int(f.Fd())); err != nil {
		return id, owner, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if kind == "user" {
		return id, owner, nil
	}
	ufd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return id, owner, fmt.Errorf("owner of %s: %w", f.Name(), err)
	}
	defer unix.Close(ufd)
	owner, err = nsStat(ufd)
	return id, owner, err
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// enterFiles are the namespaces and root the enter helper joins, in the
// order of its descriptors (net, ipc, mnt, pid, root), nil where it stays
// in berth's. The network namespace is the supervisor's (started in the
// group's). The task's main process must be in it and in the
// supervisor's user namespace; its IPC, mount and PID namespaces are the
// supervisor's, or, where the spec made new ones, others owned by the
// supervisor's user namespace: a task cannot make such a namespace (it
// has not CAP_SYS_ADMIN there), so they are the ones its init was cloned
// into. With a cgroup, the main process must still be in it.
func enterFiles(rec *supervisor.Spec, sup, t *procDir, cg *cgroup.Set) (files [5]*os.File, err error) {
	defer func() {
		if err != nil {
			closeFiles(files[:])
			files = [5]*os.File{}
		}
	}()
	if cg != nil {
		if err := inCgroup(t, cg.Rel); err != nil {
			return files, err
		}
	}
	d, err := os.Open("/proc/self")
	if err != nil {
		return files, err
	}
	self := &procDir{dir: d, name: "/proc/self"}
	defer self.close()
	supUser, _, err := sup.ns("user")
	if err != nil {
		return files, err
	}
	taskUser, _, err := t.ns("user")
	if err != nil {
		return files, err
	}
	if taskUser != supUser {
		return files, fmt.Errorf("the task's main process (%s) is in a user namespace of its own: not entered", t.name)
	}
	for i, k := range []struct {
		kind string
		own  bool // the spec gave the task a namespace of its own
	}{{"net", false}, {"ipc", rec.NewIPCNS}, {"mnt", rec.Root != ""}, {"pid", rec.NewPIDNS}} {
		mine, _, err := self.ns(k.kind)
		if err != nil {
			return files, err
		}
		supID, _, err := sup.ns(k.kind)
		if err != nil {
			return files, err
		}
		taskID, owner, err := t.ns(k.kind)
		if err != nil {
			return files, err
		}
		from := t
		switch {
		case k.kind == "net":
			if taskID != supID {
				return files, fmt.Errorf("the task's main process (%s) left the allocation's network namespace: not entered", t.name)
			}
			from = sup
		case !k.own && taskID != supID:
			return files, fmt.Errorf("the task's main process (%s) is in a %s namespace of its own: not entered", t.name, k.kind)
		case k.own && (taskID == supID || owner != supUser):
			return files, fmt.Errorf("the task's main process (%s) is not in the %s namespace the task was started in: not entered", t.name, k.kind)
		}
		if taskID == mine {
			continue
		}
		if files[i], err = from.open("ns/"+k.kind, unix.O_RDONLY); err != nil {
			return files, err
		}
	}
	if files[2] != nil {
		if files[4], err = t.open("root", unix.O_PATH|unix.O_DIRECTORY); err != nil {
			return files, err
		}
	}
	return files, nil
}

// inCgroup checks that the process is in the cgroup rel (any hierarchy).
func inCgroup(p *procDir, rel string) error {
	b, err := p.read("cgroup")
	if err != nil {
		return err
	}
	want := "/" + strings.Trim(rel, "/")
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.LastIndexByte(line, ':'); i >= 0 && line[i+1:] == want {
			return nil
		}
	}
	return fmt.Errorf("the task's main process (%s) is not in the task's cgroup %s: not entered", p.name, rel)
}
