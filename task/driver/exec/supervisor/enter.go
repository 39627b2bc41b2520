package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/inherited"
	"golang.org/x/sys/unix"
)

// `berth-supervisor enter` runs a command beside a running task (berth
// alloc exec): it joins the task's cgroup and namespaces and takes the
// task's identity on one locked thread, forks the command from that
// thread, waits for it and exits with its status. The driver hands it,
// after stdin, stdout and stderr, the spec and a reply pipe, then the
// task's namespaces and root as open files, so a PID reused in between
// cannot make it enter another process. The identity, environment and
// working directory are the task's spec as its supervisor holds it, not
// anything read from the task's processes.
const (
	enterNetFD  = 5
	enterIPCFD  = 6
	enterMntFD  = 7
	enterPIDFD  = 8
	enterRootFD = 9
	// EnterFDs is how many files the driver passes after stdin, stdout
	// and stderr: the spec, the reply pipe and the five above.
	EnterFDs = 7
)

// EnterSetupFailed is the enter helper's exit status when it could not
// run the command; the reply pipe says why.
const EnterSetupFailed = 255

// The enter helper's exit status when the command itself could not start
// (with the reason on the reply pipe): not found, or not executable.
const (
	EnterNotFound      = 127
	EnterNotExecutable = 126
)

// execFailure is the enter helper's exit status for a command that could
// not start: ENOENT and ENOTDIR mean there is no such file; anything else
// (EACCES, ENOEXEC, EISDIR...) that the file cannot be executed.
func execFailure(err error) int {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, errNotInPath) {
		return EnterNotFound
	}
	return EnterNotExecutable
}

// EnterSpec is what `enter` needs: the command, and the task's identity,
// environment and working directory from its spec (Spec), with the
// namespaces and cgroup the driver checked are the task's.
type EnterSpec struct {
	// Args is the command (Args[0] is looked up in Env's PATH inside the
	// task's root), Env its whole environment.
	Args []string
	Env  []string
	// Credentials is the task's, as its spec has it.
	Credentials
	// Dir is the task's working directory as the task sees it ("": /).
	Dir string
	// Cgroup is the task's cgroup, as Spec has it; nil: none.
	Cgroup *cgroup.Set
	// Which of the namespace and directory files were passed.
	Net, IPC, Mnt, PID, Root bool
	// TTY: stdin is a terminal that becomes the command's controlling one.
	TTY bool
}

// enterFields is the enter spec's record, in the order it is written.
func enterFields() table[EnterSpec] {
	t := table[EnterSpec]{
		strs("arg", func(s *EnterSpec) *[]string { return &s.Args }),
		strs("env", func(s *EnterSpec) *[]string { return &s.Env }),
	}
	t = append(t, within(func(s *EnterSpec) *Credentials { return &s.Credentials }, credentialsFields())...)
	t = append(t, str("dir", func(s *EnterSpec) *string { return &s.Dir }))
	t = append(t, optional(func(s *EnterSpec) **cgroup.Set { return &s.Cgroup }, cgroupFields())...)
	return append(t,
		boolValue("net", func(s *EnterSpec) *bool { return &s.Net }),
		boolValue("ipc", func(s *EnterSpec) *bool { return &s.IPC }),
		boolValue("mnt", func(s *EnterSpec) *bool { return &s.Mnt }),
		boolValue("pid", func(s *EnterSpec) *bool { return &s.PID }),
		boolValue("root", func(s *EnterSpec) *bool { return &s.Root }),
		boolValue("tty", func(s *EnterSpec) *bool { return &s.TTY }),
	)
}

// Marshal encodes the spec.
func (s *EnterSpec) Marshal() []byte { return enterFields().write(s) }

// ParseEnterSpec decodes a spec written by Marshal of the same Version.
func ParseEnterSpec(b []byte) (*EnterSpec, error) {
	s := &EnterSpec{}
	version, unknown, err := enterFields().read(b, s)
	if unknown != "" {
		return nil, fmt.Errorf("enter spec: unknown field %q", unknown)
	}
	if err != nil {
		return nil, fmt.Errorf("enter spec: %w", err)
	}
	if version != Version {
		return nil, fmt.Errorf("enter spec version %d, this %s speaks %d: berth and %s are of different builds", version, Binary, Version, Binary)
	}
	if len(s.Args) == 0 {
		return nil, errors.New("enter spec: no command")
	}
	return s, nil
}

// enterMain is `berth-supervisor enter`.
func enterMain() int {
	// Namespaces, root, credentials and capabilities change on this
	// thread only; the command is forked from it. The Go runtime makes
	// no thread from a locked one, so nothing else inherits this state.
	runtime.LockOSThread()
	reply := os.NewFile(replyFD, "reply")
	fail := func(err error) int {
		// The reply pipe is the only way back to the driver; the exit
		// status says setup failed even when the write did not get
		// through.
		_, _ = reply.WriteString(err.Error())
		return EnterSetupFailed
	}
	// Not inherited by the command: the spec, the namespaces, and
	// whatever berth itself inherited.
	if err := inherited.CloseOnExec(specFD); err != nil {
		return fail(err)
	}
	b, err := readFD(specFD)
	if err != nil {
		return fail(fmt.Errorf("read the enter spec: %w", err))
	}
	sp, err := ParseEnterSpec(b)
	if err != nil {
		return fail(err)
	}
	path, err := enter(sp)
	if errors.Is(err, errNotInPath) {
		fail(err)
		return EnterNotFound
	}
	if err != nil {
		return fail(err)
	}
	attr := &syscall.SysProcAttr{
		// A session of its own; with a terminal, that terminal is its
		// controlling one.
		Setsid: true, Setctty: sp.TTY, Ctty: 0,
	}
	if !sp.PID {
		// It dies with this helper (this thread). Not in another PID
		// namespace: there its parent's PID reads 0, which Go's fork
		// takes for a parent already dead, and the child kills itself.
		attr.Pdeathsig = syscall.SIGKILL
	}
	// The driver ends a session with SIGTERM: the command goes with it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	pid, err := syscall.ForkExec(path, sp.Args, &syscall.ProcAttr{Env: sp.Env, Files: []uintptr{0, 1, 2}, Sys: attr})
	if err != nil {
		fail(fmt.Errorf("exec %s: %w", sp.Args[0], err))
		return execFailure(err)
	}
	go func() {
		// Another thread than the locked one: still root, it may
		// signal the command whatever the task's user.
		<-sigs
		// Nowhere to report a failure (stdio is closed), and ESRCH
		// only means the command has ended already.
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}()
	reply.Close()
	os.Stdin.Close()
	os.Stdout.Close()
	os.Stderr.Close()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// enter takes this thread into the task's context and returns the
// command's path as found there.
func enter(sp *EnterSpec) (string, error) {
	// The cgroup first: its files are the host's.
	if sp.Cgroup != nil {
		if err := sp.Cgroup.JoinSelf(); err != nil {
			return "", fmt.Errorf("join the task's cgroup: %w", err)
		}
	}
	if sp.Net {
		if err := unix.Setns(enterNetFD, unix.CLONE_NEWNET); err != nil {
			return "", fmt.Errorf("enter the task's network namespace: %w", err)
		}
	}
	if sp.IPC {
		if err := unix.Setns(enterIPCFD, unix.CLONE_NEWIPC); err != nil {
			return "", fmt.Errorf("enter the task's IPC namespace: %w", err)
		}
	}
	if sp.Mnt {
		// A thread may change its mount namespace only once it shares
		// its root and working directory with no other thread.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return "", fmt.Errorf("unshare the filesystem attributes: %w", err)
		}
		if err := unix.Setns(enterMntFD, unix.CLONE_NEWNS); err != nil {
			return "", fmt.Errorf("enter the task's mount namespace: %w", err)
		}
	}
	if sp.Root {
		if err := unix.Fchdir(enterRootFD); err != nil {
			return "", fmt.Errorf("enter the task's root: %w", err)
		}
		if err := unix.Chroot("."); err != nil {
			return "", fmt.Errorf("chroot to the task's root: %w", err)
		}
	}
	// The task's recorded working directory, as root still: one the
	// task's user cannot reach by path is still its working directory.
	dir := sp.Dir
	if dir == "" {
		dir = "/"
	}
	if err := unix.Chdir(dir); err != nil {
		return "", fmt.Errorf("enter the task's working directory %s: %w", dir, err)
	}
	if sp.PID {
		// For the command only: this helper stays where it is.
		if err := unix.Setns(enterPIDFD, unix.CLONE_NEWPID); err != nil {
			return "", fmt.Errorf("enter the task's PID namespace: %w", err)
		}
	}
	// Looked up as the task would, before the user changes: root can
	// stat what the task's user could not, which does not matter here as
	// the exec is checked as the user anyway.
	path, err := lookPath(sp.Args[0], sp.Env)
	if err != nil {
		return "", err
	}
	if err := sp.Credentials.take(); err != nil {
		return "", err
	}
	return path, nil
}

// lookPath finds name in env's PATH, as a shell of the task would.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %s: %w (%s)", name, errNotInPath, pathVar)
}

var errNotInPath = errors.New("not found in the task's PATH")

// readFD reads fd from its start.
func readFD(fd int) ([]byte, error) {
	var b []byte
	buf := make([]byte, 64<<10)
	for off := int64(0); ; {
		n, err := unix.Pread(fd, buf, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n > 0 {
			b = append(b, buf[:n]...)
			off += int64(n)
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
	}
}
