package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/cgroup"
	"golang.org/x/sys/unix"
)

// These tests run the supervisor (this test binary as berth-supervisor)
// the way the driver does, with a task that reports what it sees (this
// test binary as berth-report), and check the identity, capabilities,
// seccomp, mounts and descriptors the task and a command entered into it
// end up with.

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the supervisor takes users, capabilities, namespaces and mounts")
	}
}

// reportDir is a directory any user can reach holding this test binary
// as reportName.
func reportDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, reportName), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// taskSpec is a spec whose task is berth-report at path with args,
// logging into a directory of its own.
func taskSpec(t *testing.T, path string, args ...string) *Spec {
	logs := t.TempDir()
	return &Spec{
		StoreID: "st", AllocID: "al-" + strings.ReplaceAll(t.Name(), "/", "-"), Task: "report",
		Path: path, Args: append([]string{reportName}, args...), Env: []string{"PATH=/usr/bin:/bin"},
		LogDir: logs, Stdout: "report.stdout", Stderr: "report.stderr", LogMaxFiles: 2, LogMaxSize: 1 << 20,
		StatusDir: logs, StatusName: "report.status",
	}
}

// childEnv is the environment the driver gives the supervisor and the
// enter helper, and under `go test -cover` the directory where their
// coverage joins the test's (the init's does not: the supervisor starts it
// with an environment of its own).
func childEnv() []string {
	env := []string{"GOMAXPROCS=1"}
	if f := flag.Lookup("test.gocoverdir"); f != nil && f.Value.String() != "" {
		env = append(env, "GOCOVERDIR="+f.Value.String())
	}
	return env
}

// supervised is a running supervisor.
type supervised struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	pid    int
	spec   *Spec
}

// supervise starts a supervisor for sp as the driver does (the spec on
// fd 3, the reply pipe on fd 4) with extra descriptors beyond them, as
// berth's own inheritance, and returns once it answered.
func supervise(t *testing.T, sp *Spec, extra ...*os.File) (*supervised, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	memfd, err := unix.MemfdCreate("task-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	spec := os.NewFile(uintptr(memfd), "task-spec")
	defer spec.Close()
	if _, err := spec.Write(sp.Marshal()); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(spec.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		t.Fatal(err)
	}
	replyR, replyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer replyR.Close()
	s := &supervised{stderr: &bytes.Buffer{}, spec: sp}
	s.cmd = &exec.Cmd{Path: exe, Args: Args(Binary, sp.StoreID, sp.AllocID, sp.Task), Env: childEnv(), Dir: "/",
		Stderr: s.stderr, ExtraFiles: append([]*os.File{spec, replyW}, extra...), SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	err = s.cmd.Start()
	replyW.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(replyR).ReadString('\n')
	pid, _, err := ParseReady(line)
	if err != nil {
		_ = s.cmd.Wait()
		return nil, err
	}
	s.pid = pid
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			// The supervisor reaps the task only after this kill: pid
			// is still the task's.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = s.cmd.Wait()
		}
	})
	return s, nil
}

// wait waits for the supervisor to end and returns the status it wrote.
func (s *supervised) wait(t *testing.T) *Status {
	t.Helper()
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("supervisor: %v\n%s", err, s.stderr)
	}
	b, err := os.ReadFile(filepath.Join(s.spec.StatusDir, s.spec.StatusName))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// report is the task's report from its log, once written.
func (s *supervised) report(t *testing.T) *report {
	t.Helper()
	p := filepath.Join(s.spec.LogDir, s.spec.Stdout+".0")
	// The task writes its report as it starts: poll for it, bounded only
	// so that a broken task fails the test instead of hanging it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(p)
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return decodeReport(t, b[:i])
		}
		if time.Now().After(deadline) {
			stderr, _ := os.ReadFile(filepath.Join(s.spec.LogDir, s.spec.Stderr+".0"))
			t.Fatalf("no report from the task in %s; its stderr: %s", p, stderr)
		}
	}
}

func decodeReport(t *testing.T, line []byte) *report {
	t.Helper()
	var r report
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("report %q: %v", line, err)
	}
	return &r
}

// capHex is a capability set as /proc/self/status shows it.
func capHex(caps ...int) string {
	var bits uint64
	for _, c := range caps {
		bits |= 1 << uint(c)
	}
	return fmt.Sprintf("%016x", bits)
}

// allCaps is every capability this process has: what the supervisor
// (root, run by it) can hand on.
func allCaps(t *testing.T) string {
	have, err := permitted()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%016x", have)
}

// ownBounding is this process's bounding set, which a task that asks for
// no capabilities keeps.
func ownBounding(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return procStatus(string(b))["CapBnd"]
}

// checkStatus compares /proc/self/status fields.
func checkStatus(t *testing.T, who string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s is %q, want %q", who, k, got[k], v)
		}
	}
}

// checkFDs: nothing but stdin, stdout and stderr.
func checkFDs(t *testing.T, who string, fds map[int]string) {
	t.Helper()
	for fd, what := range fds {
		if fd > 2 {
			t.Errorf("%s has descriptor %d open (%s): only 0, 1 and 2 may reach it", who, fd, what)
		}
	}
	for fd := 0; fd <= 2; fd++ {
		if _, ok := fds[fd]; !ok {
			t.Errorf("%s has no descriptor %d", who, fd)
		}
	}
}

// A task's identity: the user, groups and capability sets it asked for,
// within what the supervisor has; seccomp when asked; no_new_privs never
// (the filter is installed as root, and setuid binaries are bounded by the
// bounding set instead); only stdin, stdout and stderr open, whatever
// berth inherited.
func TestSupTaskIdentity(t *testing.T) {
	needRoot(t)
	dir := reportDir(t)
	const nobody = 65534
	full, bnd := allCaps(t), ownBounding(t)
	for _, tc := range []struct {
		name string
		cred Credentials
		want map[string]string
	}{
		{"raw_exec as root", Credentials{}, map[string]string{
			"Uid": "0\t0\t0\t0", "Gid": "0\t0\t0\t0", "Groups": "",
			"CapBnd": bnd, "CapEff": full, "CapPrm": full, "CapAmb": capHex(),
			"NoNewPrivs": "0", "Seccomp": "0"}},
		{"raw_exec as nobody", Credentials{SetUser: true, UID: nobody, GID: nobody}, map[string]string{
			"Uid": "65534\t65534\t65534\t65534", "Gid": "65534\t65534\t65534\t65534", "Groups": "",
			"CapBnd": bnd, "CapEff": capHex(), "CapPrm": capHex(), "CapInh": capHex(), "CapAmb": capHex(),
			"NoNewPrivs": "0", "Seccomp": "0"}},
		{"exec as nobody without capabilities", Credentials{SetUser: true, UID: nobody, GID: nobody, Groups: []int{nobody, 100}, SetCaps: true, Seccomp: true}, map[string]string{
			"Uid": "65534\t65534\t65534\t65534", "Gid": "65534\t65534\t65534\t65534", "Groups": "100 65534",
			"CapBnd": capHex(), "CapEff": capHex(), "CapPrm": capHex(), "CapInh": capHex(), "CapAmb": capHex(),
			"NoNewPrivs": "0", "Seccomp": "2"}},
		{"exec as nobody with net_bind_service", Credentials{SetUser: true, UID: nobody, GID: 100, SetCaps: true, Caps: []int{unix.CAP_NET_BIND_SERVICE, 99}, Seccomp: true}, map[string]string{
			"Uid": "65534\t65534\t65534\t65534", "Gid": "100\t100\t100\t100", "Groups": "",
			"CapBnd": capHex(10), "CapEff": capHex(10), "CapPrm": capHex(10), "CapInh": capHex(10), "CapAmb": capHex(10),
			"NoNewPrivs": "0", "Seccomp": "2"}},
		{"exec as root with chown and kill", Credentials{SetUser: true, SetCaps: true, Caps: []int{unix.CAP_CHOWN, unix.CAP_KILL}, Seccomp: true}, map[string]string{
			"Uid": "0\t0\t0\t0", "Gid": "0\t0\t0\t0", "Groups": "",
			"CapBnd": capHex(0, 5), "CapEff": capHex(0, 5), "CapPrm": capHex(0, 5), "CapInh": capHex(0, 5), "CapAmb": capHex(),
			"NoNewPrivs": "0", "Seccomp": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// berth's own inheritance: a descriptor the driver did not
			// mean to pass, which must not reach the task.
			leak, err := os.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer leak.Close()
			sp := taskSpec(t, filepath.Join(dir, reportName))
			sp.Credentials = tc.cred
			s, err := supervise(t, sp, leak)
			if err != nil {
				t.Fatal(err)
			}
			st := s.wait(t)
			if st.ExitCode != 0 || st.Error != "" || st.PID != s.pid {
				t.Errorf("status %+v, want exit 0 of pid %d", st, s.pid)
			}
			r := s.report(t)
			checkStatus(t, "the task", r.Status, tc.want)
			checkFDs(t, "the task", r.FDs)
			if seccomp := tc.want["Seccomp"] == "2"; seccomp != (r.Unshare == "EPERM") {
				t.Errorf("seccomp %v, but unshare(CLONE_NEWUSER) gave %q", seccomp, r.Unshare)
			}
			if r.Cwd != "/" {
				t.Errorf("working directory %q, want the supervisor's /", r.Cwd)
			}
		})
	}
}

// rootSpec is a spec of a task in a root of its own: the host's /usr (and
// /bin, /lib, /lib64 as the host has them) read-only, berth-report at
// /berth, an alloc directory read-write, and namespaces of its own.
func rootSpec(t *testing.T, dir string, args ...string) (*Spec, string) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	alloc := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sp := taskSpec(t, "/berth/"+reportName, args...)
	sp.Root, sp.NewPIDNS, sp.NewIPCNS, sp.Dir = root, true, true, "/alloc"
	sp.Mounts = []Mount{{Source: "/usr", Dest: "/usr", ReadOnly: true}}
	for _, d := range []string{"/bin", "/lib", "/lib64"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				t.Fatal(err)
			}
		default:
			sp.Mounts = append(sp.Mounts, Mount{Source: d, Dest: d, ReadOnly: true})
		}
	}
	sp.Mounts = append(sp.Mounts, Mount{Source: dir, Dest: "/berth", ReadOnly: true}, Mount{Source: alloc, Dest: "/alloc"})
	return sp, alloc
}

// A task with a root of its own sees that root (pivot_root: the host's
// tree is not reachable), a /proc of its PID namespace, a /dev of the
// harmless devices on tmpfs with its own /dev/shm, and its bind mounts
// nosuid and nodev, read-only when asked.
func TestSupTaskMounts(t *testing.T) {
	needRoot(t)
	dir := reportDir(t)
	sp, alloc := rootSpec(t, dir, "exists:/marker", "exists:"+dir, "write:/usr/.berth-probe", "write:/alloc/probe", "write:/berth/probe")
	sp.SetCaps, sp.Caps = true, []int{unix.CAP_DAC_OVERRIDE}
	s, err := supervise(t, sp)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.wait(t); st.ExitCode != 0 || st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	r := s.report(t)
	if r.PID != 1 {
		t.Errorf("the task is pid %d in its PID namespace, want 1", r.PID)
	}
	if r.Cwd != "/alloc" {
		t.Errorf("working directory %q, want /alloc", r.Cwd)
	}
	if r.Exists["/marker"] != "" {
		t.Errorf("/marker of the new root: %s", r.Exists["/marker"])
	}
	if r.Exists[dir] != "ENOENT" {
		t.Errorf("the host's %s is reachable from the task (%q)", dir, r.Exists[dir])
	}
	for p, want := range map[string]string{"/usr/.berth-probe": "EROFS", "/berth/probe": "EROFS", "/alloc/probe": ""} {
		if r.Writes[p] != want {
			t.Errorf("writing %s: %q, want %q", p, r.Writes[p], want)
		}
	}
	if _, err := os.Stat(filepath.Join(alloc, "probe")); err != nil {
		t.Errorf("the task's write to /alloc did not reach the host: %v", err)
	}
	checkFDs(t, "the task", r.FDs)
	checkMounts(t, r.Mounts)
	wantDev := append(slices.Clone(devices), "fd", "stdin", "stdout", "stderr", "shm", "pts", "ptmx", "mqueue")
	slices.Sort(wantDev)
	if !slices.Equal(r.Dev, wantDev) {
		t.Errorf("/dev holds %v, want %v", r.Dev, wantDev)
	}
	self := map[string]string{}
	for _, ns := range []string{"mnt", "pid", "ipc", "net"} {
		self[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	for ns, same := range map[string]bool{"mnt": false, "pid": false, "ipc": false, "net": true} {
		if (r.NS[ns] == self[ns]) != same {
			t.Errorf("the task's %s namespace %s, the test's %s: want same %v", ns, r.NS[ns], self[ns], same)
		}
	}
}

// checkMounts: the task's mount table is its root, /proc, /dev and its
// devices, /dev/shm and the bind mounts (with what is mounted under
// them), each with the options it must have.
func checkMounts(t *testing.T, mounts []mountInfo) {
	t.Helper()
	byPoint := map[string]mountInfo{}
	for _, m := range mounts {
		byPoint[m.Point] = m
		ok := m.Point == "/" || m.Point == "/proc" || m.Point == "/dev" || strings.HasPrefix(m.Point, "/dev/") ||
			m.Point == "/sys" || m.Point == "/sys/firmware" || slices.Contains(readonlyPaths, m.Point) || slices.Contains(maskedPaths, m.Point) ||
			m.Point == "/alloc" || m.Point == "/berth" || m.Point == "/usr" || strings.HasPrefix(m.Point, "/usr/") ||
			m.Point == "/bin" || m.Point == "/lib" || m.Point == "/lib64"
		if !ok {
			t.Errorf("the task sees a mount at %s (%s): not one of its own", m.Point, m.FSType)
		}
	}
	opts := func(m mountInfo) []string { return strings.Split(m.Options, ",") }
	for point, want := range map[string]struct {
		fstype string
		opts   []string
	}{
		"/":           {"", []string{"rw", "nosuid", "nodev"}},
		"/proc":       {"proc", []string{"rw", "nosuid", "nodev", "noexec"}},
		"/proc/sys":   {"proc", []string{"ro", "nosuid", "nodev", "noexec"}},
		"/sys":        {"sysfs", []string{"ro", "nosuid", "nodev", "noexec"}},
		"/dev":        {"tmpfs", []string{"rw", "nosuid", "nodev", "noexec"}},
		"/dev/pts":    {"devpts", []string{"rw", "nosuid", "noexec"}},
		"/dev/mqueue": {"mqueue", []string{"rw", "nosuid", "nodev", "noexec"}},
		"/dev/shm":    {"tmpfs", []string{"rw", "nosuid", "nodev", "noexec"}},
		"/dev/null":   {"", []string{"rw"}},
		"/usr":        {"", []string{"ro", "nosuid", "nodev"}},
		"/berth":      {"", []string{"ro", "nosuid", "nodev"}},
		"/alloc":      {"", []string{"rw", "nosuid", "nodev"}},
	} {
		m, ok := byPoint[point]
		if !ok {
			t.Errorf("no mount at %s", point)
			continue
		}
		if want.fstype != "" && m.FSType != want.fstype {
			t.Errorf("%s is %s, want %s", point, m.FSType, want.fstype)
		}
		for _, o := range want.opts {
			if !slices.Contains(opts(m), o) {
				t.Errorf("%s has options %s, want %s among them", point, m.Options, o)
			}
		}
	}
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, "/usr/") && !slices.Contains(opts(m), "ro") {
			t.Errorf("%s under the read-only /usr is %s", m.Point, m.Options)
		}
	}
	for _, point := range []string{"/dev", "/dev/shm"} {
		if !strings.Contains(byPoint[point].Super, "size=65536k") {
			t.Errorf("%s: %+v, want a tmpfs of 64 MiB", point, byPoint[point])
		}
	}
}

// A command entered into a running task (alloc exec) is the task's user
// with the task's capabilities and seccomp filter, taken from the spec,
// in the task's root, working directory and namespaces, with nothing but
// stdin, stdout and stderr open.
func TestSupEnter(t *testing.T) {
	needRoot(t)
	dir := reportDir(t)
	sp, _ := rootSpec(t, dir, "sleep")
	sp.Credentials = Credentials{SetUser: true, UID: 65534, GID: 65534, Groups: []int{100}, SetCaps: true, Caps: []int{unix.CAP_NET_BIND_SERVICE}, Seccomp: true}
	s, err := supervise(t, sp)
	if err != nil {
		t.Fatal(err)
	}
	task := s.report(t)

	es := &EnterSpec{Args: []string{reportName, "exists:/marker"}, Env: []string{"PATH=/berth:/usr/bin"}, Credentials: sp.Credentials, Dir: sp.Dir,
		Net: true, IPC: true, Mnt: true, PID: true, Root: true}
	out, code, msg := enterTask(t, s.pid, es)
	if code != 0 || msg != "" {
		t.Fatalf("enter: exit %d, %q; stdout %s", code, msg, out)
	}
	cmd := decodeReport(t, bytes.TrimSpace(out))
	for _, k := range []string{"Uid", "Gid", "Groups", "CapBnd", "CapEff", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs", "Seccomp"} {
		if cmd.Status[k] != task.Status[k] {
			t.Errorf("the command's %s is %q, the task's %q", k, cmd.Status[k], task.Status[k])
		}
	}
	checkStatus(t, "the command", cmd.Status, map[string]string{"Uid": "65534\t65534\t65534\t65534", "CapAmb": capHex(10), "Seccomp": "2"})
	for _, ns := range []string{"mnt", "pid", "ipc", "net"} {
		if cmd.NS[ns] != task.NS[ns] {
			t.Errorf("the command's %s namespace %s, the task's %s", ns, cmd.NS[ns], task.NS[ns])
		}
	}
	if cmd.PID == 1 || cmd.Cwd != "/alloc" || cmd.Exists["/marker"] != "" {
		t.Errorf("the command: pid %d, cwd %q, /marker %q; want a pid beside the task's 1, /alloc, the task's root", cmd.PID, cmd.Cwd, cmd.Exists["/marker"])
	}
	checkFDs(t, "the command", cmd.FDs)

	// A command not in the task's PATH: 127, and the reason.
	es.Args = []string{"no-such-command"}
	if _, code, msg := enterTask(t, s.pid, es); code != EnterNotFound || !strings.Contains(msg, "not found in the task's PATH") {
		t.Errorf("a missing command: exit %d, %q", code, msg)
	}

	if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := s.wait(t); st.Signal != int(syscall.SIGKILL) || st.ExitCode != 137 {
		t.Errorf("status of the killed task %+v", st)
	}
}

// A command entered into a raw_exec task (no root, no namespaces of its
// own: the driver passes only the network namespace) is the task's user,
// in the task's working directory, with nothing but stdin, stdout and
// stderr open.
func TestSupEnterRawExec(t *testing.T) {
	needRoot(t)
	dir := reportDir(t)
	for _, tc := range []struct {
		name string
		cred Credentials
	}{
		{"as nobody", Credentials{SetUser: true, UID: 65534, GID: 65534}},
		{"as root", Credentials{}},
	} {
		t.Run(tc.name, func(t *testing.T) { enterRawExec(t, dir, tc.cred) })
	}
}

func enterRawExec(t *testing.T, dir string, cred Credentials) {
	sp := taskSpec(t, filepath.Join(dir, reportName), "sleep")
	sp.Credentials = cred
	sp.Dir = dir
	s, err := supervise(t, sp)
	if err != nil {
		t.Fatal(err)
	}
	task := s.report(t)
	es := &EnterSpec{Args: []string{reportName}, Env: []string{"PATH=" + dir}, Credentials: sp.Credentials, Dir: sp.Dir, Net: true}
	out, code, msg := enterTask(t, s.pid, es)
	if code != 0 || msg != "" {
		t.Fatalf("enter: exit %d, %q; stdout %s", code, msg, out)
	}
	cmd := decodeReport(t, bytes.TrimSpace(out))
	for _, k := range []string{"Uid", "Gid", "Groups", "CapBnd", "CapEff", "CapPrm", "CapAmb", "Seccomp"} {
		if cmd.Status[k] != task.Status[k] {
			t.Errorf("the command's %s is %q, the task's %q", k, cmd.Status[k], task.Status[k])
		}
	}
	if cmd.Cwd != dir || task.Cwd != dir {
		t.Errorf("working directory: the command's %q, the task's %q, want %q", cmd.Cwd, task.Cwd, dir)
	}
	checkFDs(t, "the command", cmd.FDs)
	// Not executable: 126.
	es.Args = []string{filepath.Join(dir)}
	if _, code, msg := enterTask(t, s.pid, es); code != EnterNotExecutable || msg == "" {
		t.Errorf("a directory as the command: exit %d, %q", code, msg)
	}
	if err := syscall.Kill(s.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := s.wait(t); st.Signal != int(syscall.SIGTERM) || st.ExitCode != 128+int(syscall.SIGTERM) {
		t.Errorf("status of the stopped task %+v", st)
	}
}

// enterTask runs `berth-supervisor enter` as the driver does: the spec
// (fd 3), the reply pipe (4), then the task's namespaces and root.
func enterTask(t *testing.T, pid int, es *EnterSpec) (stdout []byte, code int, msg string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	memfd, err := unix.MemfdCreate("enter-spec", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	spec := os.NewFile(uintptr(memfd), "enter-spec")
	defer spec.Close()
	if _, err := spec.Write(es.Marshal()); err != nil {
		t.Fatal(err)
	}
	files := []*os.File{spec}
	replyR, replyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer replyR.Close()
	files = append(files, replyW)
	passed := []bool{es.Net, es.IPC, es.Mnt, es.PID, es.Root}
	for i, p := range []string{"ns/net", "ns/ipc", "ns/mnt", "ns/pid", "root"} {
		if !passed[i] {
			files = append(files, nil)
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, p))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	var out bytes.Buffer
	cmd := &exec.Cmd{Path: exe, Args: []string{Binary, "enter"}, Env: childEnv(), Stdout: &out, ExtraFiles: files}
	err = cmd.Start()
	replyW.Close()
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(replyR)
	_ = cmd.Wait()
	return out.Bytes(), cmd.ProcessState.ExitCode(), string(reply)
}

// A task that cannot start is refused with the reason, and no status is
// written.
func TestSupRefused(t *testing.T) {
	needRoot(t)
	dir := reportDir(t)
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"no such binary", func(sp *Spec) { sp.Path = filepath.Join(dir, "missing") }, "no such file or directory"},
		{"mount on the root itself", func(sp *Spec) {
			sp.Root, sp.Mounts = t.TempDir(), []Mount{{Source: dir, Dest: "/../"}}
		}, "is the root itself"},
		{"mount source missing", func(sp *Spec) {
			sp.Root, sp.Mounts = t.TempDir(), []Mount{{Source: filepath.Join(dir, "missing"), Dest: "/x"}}
		}, "mount source"},
		{"no such working directory", func(sp *Spec) { sp.Dir = "/nonexistent-dir" }, "config.work_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := taskSpec(t, filepath.Join(dir, reportName))
			tc.edit(sp)
			_, err := supervise(t, sp)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("started: %v, want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(sp.StatusDir, sp.StatusName)); !os.IsNotExist(err) {
				t.Errorf("a status was written for a task that never ran: %v", err)
			}
		})
	}
}

// A task in a cgroup: what it left running when its main process exited
// (a child in a session of its own, which the process group kill misses)
// is killed through the cgroup, its output drained, and the cgroup
// removed.
func TestSupTaskCgroup(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	rel := fmt.Sprintf("berth-suptest/%d.%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	cg, err := cgroup.Create(ctx, cgroup.Detect("/sys/fs/cgroup"), rel)
	if cg == nil {
		t.Skipf("no cgroup to test with: %v", err)
	}
	t.Cleanup(func() {
		if err := cg.Remove(ctx); err != nil {
			t.Errorf("remove %s: %v", rel, err)
		}
		for _, d := range cg.Dirs() {
			// The parent, empty once the task's is gone.
			_ = os.Remove(filepath.Dir(d))
		}
	})
	dir := reportDir(t)
	sp := taskSpec(t, filepath.Join(dir, reportName), "orphan")
	sp.Cgroup = cg
	s, err := supervise(t, sp)
	if err != nil {
		t.Fatal(err)
	}
	st := s.wait(t)
	if st.ExitCode != 0 || st.Error != "" || st.OOMKilled {
		t.Errorf("status %+v, want exit 0 and nothing wrong around it", st)
	}
	out, err := os.ReadFile(filepath.Join(sp.LogDir, sp.Stdout+".0"))
	if _, tail, _ := bytes.Cut(out, []byte("\n")); err != nil || !bytes.HasPrefix(tail, []byte("orphan ")) {
		t.Fatalf("the task's log after its report: %q, %v", tail, err)
	}
	for _, d := range cg.Dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the task's cgroup %s is still there: %v", d, err)
		}
	}
}
