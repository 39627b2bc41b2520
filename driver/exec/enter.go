package exec

import (
	"bufio"
	"bytes"
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

	"github.com/berth/berth/driver"
	"github.com/berth/berth/driver/exec/supervisor"
	"github.com/berth/berth/internal/proc"
	"golang.org/x/sys/unix"
)

var _ driver.Execer = (*handle)(nil)

// Exec implements driver.Execer: `berth-supervisor enter` runs the command
// in the task's network namespace and cgroup, as its user with its
// capabilities and environment, in its working directory and, for an exec
// task, in its root and its mount, PID and IPC namespaces. All of it is
// read from the task's main process as it runs now, through a /proc
// directory opened once, so a reused PID cannot redirect it.
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
	t, err := openTaskProc(h.pid, h.startTime)
	if err != nil {
		return -1, fmt.Errorf("%w: %s: task %s: %w", driver.ErrExecSetup, h.drv.name, h.id, err)
	}
	defer t.close()
	sp, err := t.enterSpec(req)
	if err != nil {
		return -1, fmt.Errorf("%w: %s: task %s: %w", driver.ErrExecSetup, h.drv.name, h.id, err)
	}
	sp.Cgroup = h.cg
	sp.Net, sp.IPC, sp.Mnt, sp.PID = t.files[0] != nil, t.files[1] != nil, t.files[2] != nil, t.files[3] != nil
	sp.Root, sp.Cwd = t.files[4] != nil, t.files[5] != nil
	sp.TTY = req.TTY

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
	cmd.ExtraFiles = append([]*os.File{specFile, replyW}, t.files[:]...)
	err = cmd.Start()
	replyW.Close()
	if err != nil {
		return -1, fmt.Errorf("%w: start %s: %w", driver.ErrExecSetup, bin, err)
	}
	// The helper kills the command on SIGTERM; SIGKILL if it does not end.
	helper := cmd.Process
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

// taskProc is a task's /proc directory, opened once, and the files the
// enter helper gets from it: its net, ipc, mnt and pid namespaces when they
// differ from berth's, its root (with its mount namespace) and its working
// directory.
type taskProc struct {
	dir   *os.File
	files [6]*os.File
}

func openTaskProc(pid int, start uint64) (*taskProc, error) {
	d, err := os.Open("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return nil, fmt.Errorf("open /proc/%d: %w", pid, err)
	}
	t := &taskProc{dir: d}
	// What the directory shows from now on is this process's, or
	// nothing: checked once it is open.
	b, err := t.read("stat")
	if err == nil {
		var st proc.Stat
		if st, err = proc.ParseStat(b); err == nil && st.StartTime != start {
			err = fmt.Errorf("pid %d is another process now (start time %d, the task's %d)", pid, st.StartTime, start)
		}
	}
	if err != nil {
		t.close()
		return nil, err
	}
	for i, ns := range []string{"net", "ipc", "mnt", "pid"} {
		same, err := sameNS(d, ns)
		if err != nil {
			t.close()
			return nil, err
		}
		if same {
			continue
		}
		if t.files[i], err = t.open("ns/"+ns, unix.O_RDONLY); err != nil {
			t.close()
			return nil, err
		}
	}
	if t.files[2] != nil {
		if t.files[4], err = t.open("root", unix.O_PATH|unix.O_DIRECTORY); err != nil {
			t.close()
			return nil, err
		}
	}
	if t.files[5], err = t.open("cwd", unix.O_PATH|unix.O_DIRECTORY); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *taskProc) open(name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(t.dir.Fd()), name, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/%s: %w", t.dir.Name(), name, err)
	}
	return os.NewFile(uintptr(fd), t.dir.Name()+"/"+name), nil
}

func (t *taskProc) read(name string) ([]byte, error) {
	f, err := t.open(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4<<20))
}

func (t *taskProc) close() {
	for _, f := range t.files {
		if f != nil {
			f.Close()
		}
	}
	t.dir.Close()
}

// sameNS reports whether the process of dir is in berth's namespace ns.
func sameNS(dir *os.File, ns string) (bool, error) {
	var mine, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+ns, &mine); err != nil {
		return false, fmt.Errorf("stat /proc/self/ns/%s: %w", ns, err)
	}
	if err := unix.Fstatat(int(dir.Fd()), "ns/"+ns, &theirs, 0); err != nil {
		return false, fmt.Errorf("stat %s/ns/%s: %w", dir.Name(), ns, err)
	}
	return mine.Dev == theirs.Dev && mine.Ino == theirs.Ino, nil
}

// enterSpec is the task's identity and environment as its process has
// them now, with the request's command and extra variables.
func (t *taskProc) enterSpec(req *driver.ExecRequest) (*supervisor.EnterSpec, error) {
	status, err := t.read("status")
	if err != nil {
		return nil, err
	}
	sp := &supervisor.EnterSpec{Args: req.Cmd}
	have := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		var perr error
		switch k {
		case "Uid":
			if len(f) > 1 {
				sp.UID, perr = strconv.Atoi(f[1])
			}
		case "Gid":
			if len(f) > 1 {
				sp.GID, perr = strconv.Atoi(f[1])
			}
		case "Groups":
			for _, g := range f {
				n, err := strconv.Atoi(g)
				if err != nil {
					perr = err
				}
				sp.Groups = append(sp.Groups, n)
			}
		case "CapBnd":
			sp.CapBnd, perr = supervisor.ParseCapMask(v)
		case "CapPrm":
			sp.CapPrm, perr = supervisor.ParseCapMask(v)
		case "CapAmb":
			sp.CapAmb, perr = supervisor.ParseCapMask(v)
		case "NoNewPrivs":
			sp.NoNewPrivs = strings.TrimSpace(v) == "1"
		default:
			continue
		}
		if perr != nil {
			return nil, fmt.Errorf("%s/status: %s: %w", t.dir.Name(), k, perr)
		}
		have[k] = true
	}
	for _, k := range []string{"Uid", "Gid", "CapBnd", "CapPrm", "CapAmb"} {
		if !have[k] {
			return nil, fmt.Errorf("%s/status has no %s line", t.dir.Name(), k)
		}
	}
	environ, err := t.read("environ")
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	var order []string
	for _, kv := range strings.Split(string(environ), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := env[k]; !dup {
			order = append(order, k)
		}
		env[k] = v
	}
	extra := make([]string, 0, len(req.Env))
	for k := range req.Env {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		if _, dup := env[k]; !dup {
			order = append(order, k)
		}
		env[k] = req.Env[k]
	}
	for _, k := range order {
		sp.Env = append(sp.Env, k+"="+env[k])
	}
	return sp, nil
}
