package exec

import (
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/exec/supervisor"
)

// execIn runs cmd in the task through Exec (what `berth alloc exec`
// calls) and returns its status and its output (stdout and stderr).
func execIn(t *testing.T, h driver.Handle, env map[string]string, cmd ...string) (int, string) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	code, err := h.(driver.Execer).Exec(ctxT(t), &driver.ExecRequest{Cmd: cmd, Stdin: in, Stdout: out, Stderr: out, Env: env})
	if err != nil {
		t.Fatalf("Exec %q: %v", cmd, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// exe is where /proc/<pid>/exe points ("" when unknown).
func exe(pid int) string {
	p, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return p
}

// euid is the effective UID of pid, -1 when unknown.
func euid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 1 {
				n, _ := strconv.Atoi(f[1])
				return n
			}
		}
	}
	return -1
}

// A task running as nobody whose main process became a setuid-root one,
// with loader variables in its environment, cannot make `alloc exec` run
// as root: the command runs as the job's user with the driver's
// capabilities, without LD_*, and cannot write /root.
func TestSecExecIdentity(t *testing.T) {
	requireRoot(t)
	for _, d := range []*Driver{NewRawExec(Options{StoreID: testStore}), NewExec(Options{StoreID: testStore})} {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, newNetns(t), nil)
			// A setuid-root binary the task can run (planted by root:
			// the task could not make one). raw_exec's task becomes
			// root by it; exec's root is nosuid (its task dir too), so
			// its task stays nobody.
			local := filepath.Join(driver.TaskDir(task.AllocDir, task.TaskName), "local")
			if err := os.MkdirAll(local, 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile("/bin/sleep")
			if err != nil {
				t.Fatal(err)
			}
			suid := filepath.Join(local, "suid-sleep")
			if err := os.WriteFile(suid, b, 0o755); err != nil {
				t.Fatal(err)
			}
			// os.Chmod takes Go's mode bits: ModeSetuid, not 0o4000.
			if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
				t.Fatal(err)
			}
			task.User = "nobody"
			task.Env["LD_LIBRARY_PATH"] = "/nonexistent-berth-test"
			task.Config = sh("export LD_PRELOAD=/nonexistent-berth-test.so TASK_EXPORTED=1; exec ./local/suid-sleep 1000")
			h := start(t, d, task)
			pid := h.State().PID
			for i := 0; !strings.HasSuffix(exe(pid), "/suid-sleep"); i++ {
				if i == 2000 {
					t.Fatalf("the task's main process is %q, not suid-sleep\nstderr: %s", exe(pid), readLog(t, task, "stderr"))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if wantRoot := d.Name() == "raw_exec"; (euid(pid) == 0) != wantRoot {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
				t.Fatalf("the task's main process ran a setuid-root binary: euid %d, want root %v: %s", euid(pid), wantRoot, b)
			}

			victim := "/root/btsec-" + randSuffix(t)
			t.Cleanup(func() { os.Remove(victim) })
			code, out := execIn(t, h, map[string]string{"FROM_REQUEST": "1", "LD_PRELOAD": "/nonexistent-berth-request.so", "LD_AUDIT": "/nonexistent-berth-request.so"}, "/bin/sh", "-c",
				`id -u; grep CapEff /proc/self/status; env | grep -c '^LD_'; env | grep -c TASK_EXPORTED; `+
					`echo "recorded=$BERTH_TEST request=$FROM_REQUEST"; touch `+victim+` && echo WROTE-ROOT; exit 0`)
			if code != 0 {
				t.Fatalf("exec: status %d: %s", code, out)
			}
			lines := strings.Split(out, "\n")
			if len(lines) < 5 || lines[0] != "65534" {
				t.Fatalf("exec ran as %q, want nobody (65534):\n%s", lines[0], out)
			}
			// The driver's capabilities: none for raw_exec's nobody,
			// Nomad's default set (ambient) for exec's.
			var want uint64
			if d.Name() == "exec" {
				for _, c := range DefaultAllowCaps {
					want |= 1 << capabilities[c]
				}
			}
			if c := capEff(out); c != want {
				t.Errorf("exec CapEff %x, want %x:\n%s", c, want, out)
			}
			if lines[2] != "0" {
				t.Errorf("exec got %s loader variables:\n%s", lines[2], out)
			}
			if lines[3] != "0" {
				t.Errorf("exec got the environment of the task's process, not its recorded one:\n%s", out)
			}
			if !strings.Contains(out, "recorded=1 request=1") {
				t.Errorf("exec lost the task's recorded or the request's environment:\n%s", out)
			}
			if strings.Contains(out, "WROTE-ROOT") {
				t.Errorf("exec wrote %s", victim)
			}
			if _, err := os.Stat(victim); err == nil {
				t.Errorf("%s exists", victim)
			}
		})
	}
}

// The exec's environment is the task's recorded one with the request's
// over it, and neither brings a loader variable: not the task's record,
// not what the client sent.
func TestSecExecEnvDropsLoaderVars(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recorded []string
		extra    map[string]string
		want     string
	}{
		{"recorded", []string{"PATH=/bin", "LD_PRELOAD=/t/x.so", "LD_LIBRARY_PATH=/t", "A=1"}, nil, "PATH=/bin A=1"},
		{"request", []string{"PATH=/bin"}, map[string]string{"TERM": "xterm", "LD_PRELOAD": "/t/x.so", "LD_AUDIT": "/t/a.so", "LD_": "x"}, "PATH=/bin TERM=xterm"},
		{"request over recorded", []string{"PATH=/bin", "TERM=dumb"}, map[string]string{"TERM": "xterm"}, "PATH=/bin TERM=xterm"},
		{"request cannot smuggle one", []string{"PATH=/bin"}, map[string]string{"X=1\x00LD_PRELOAD": "/t/x.so", "": "y"}, "PATH=/bin"},
		{"not a loader variable", []string{"OLD_PRELOAD=1"}, map[string]string{"MY_LD_PATH": "2"}, "OLD_PRELOAD=1 MY_LD_PATH=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(execEnv(tc.recorded, tc.extra), " "); got != tc.want {
				t.Errorf("execEnv = %q, want %q", got, tc.want)
			}
		})
	}
}

// enter refuses a task whose main process is not where the task was
// started: a PID that now names another process.
func TestSecExecPIDReused(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	h := start(t, d, newTask(t, "", sh("exec sleep 1000"))).(*handle)
	st, err := proc.ReadStat(h.pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openProc(h.pid, st.StartTime+1); err == nil {
		t.Fatal("a /proc entry of another start time was taken for the task's")
	}
	other := &handle{drv: d, supPID: h.supPID, supStart: h.supStart, allocID: h.allocID, task: "other"}
	if _, _, err := other.recordedSpec(); err == nil || !strings.Contains(err.Error(), "not the supervisor of task") {
		t.Fatalf("the supervisor of another task was taken: %v", err)
	}
}

// fdList is what `ls /proc/self/fd` printed, as one line.
func fdList(out string) string { return strings.Join(strings.Fields(out), " ") }

// Descriptors berth inherited without close-on-exec (a service manager's,
// a shell's 10 and 251) reach neither the supervisor, nor the task, nor a
// command run in it: they get 0, 1 and 2 (3 is ls's own directory).
func TestSecTaskFDs(t *testing.T) {
	requireRoot(t)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	for _, fd := range []int{10, 251} {
		// dup2 leaves the copy without close-on-exec, as an inherited
		// descriptor is.
		if err := syscall.Dup2(int(devnull.Fd()), fd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
	}
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, "", sh("ls /proc/self/fd; exec sleep 1000"))
			h := start(t, d, task)
			waitFor(t, "the task's output", func() bool {
				b, _ := os.ReadFile(filepath.Join(task.LogDir, task.TaskName+".stdout.0"))
				return len(b) > 0
			})
			if got := fdList(readLog(t, task, "stdout")); got != "0 1 2 3" {
				t.Errorf("the task has descriptors %s, want 0 1 2 3", got)
			}
			ents, err := os.ReadDir("/proc/" + strconv.Itoa(h.State().SupervisorPID) + "/fd")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				// The inherited ones are /dev/null; the supervisor's own
				// copy of it is closed once the task runs.
				n, _ := strconv.Atoi(e.Name())
				link, _ := os.Readlink("/proc/" + strconv.Itoa(h.State().SupervisorPID) + "/fd/" + e.Name())
				if n > 2 && link == os.DevNull {
					t.Errorf("the supervisor holds berth's inherited descriptor %d", n)
				}
			}
			if _, out := execIn(t, h, nil, "ls", "/proc/self/fd"); fdList(out) != "0 1 2 3" {
				t.Errorf("exec has descriptors %s, want 0 1 2 3", fdList(out))
			}
		})
	}
}

// An exec task runs under the default seccomp filter: no user namespace
// (unshare -Ur), no mount, while ordinary commands work; so does a
// command run in it. The node setting turns it off; raw_exec has none.
func TestSecExecSeccomp(t *testing.T) {
	requireRoot(t)
	const script = `grep '^Seccomp:' /proc/self/status; unshare -Ur true 2>/dev/null; echo "unshare=$?"; ` +
		`mkdir -p ./local/m; mount -t tmpfs none ./local/m 2>/dev/null; echo "mount=$?"; echo ok > ./local/x && cat ./local/x`
	for _, tc := range []struct {
		name string
		d    *Driver
		user string
		want []string
	}{
		{"exec", NewExec(Options{StoreID: testStore}), "", []string{"Seccomp:\t2", "unshare=1", "ok"}},
		{"exec as root", NewExec(Options{StoreID: testStore, DeniedUsers: []string{}}), "root", []string{"Seccomp:\t2", "unshare=1", "ok"}},
		{"exec without seccomp", NewExec(Options{StoreID: testStore, NoSeccomp: true}), "", []string{"Seccomp:\t0", "unshare=0", "ok"}},
		{"raw_exec", NewRawExec(Options{StoreID: testStore}), "nobody", []string{"Seccomp:\t0", "unshare=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := newTask(t, "", sh(script+"; echo done; exec sleep 1000"))
			task.User = tc.user
			h := start(t, tc.d, task)
			waitFor(t, "the task's output", func() bool {
				b, _ := os.ReadFile(filepath.Join(task.LogDir, task.TaskName+".stdout.0"))
				return strings.Contains(string(b), "done")
			})
			out := readLog(t, task, "stdout")
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("task output lacks %q:\n%s", w, out)
				}
			}
			_, out = execIn(t, h, nil, "/bin/sh", "-c", `grep '^Seccomp:' /proc/self/status; unshare -Ur true 2>/dev/null; echo "unshare=$?"`)
			for _, w := range tc.want[:2] {
				if !strings.Contains(out, w) {
					t.Errorf("exec output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// A raw_exec task running as nobody writes its own local/ by the path
// NOMAD_TASK_DIR gives, though the allocation dir is root's 0750 under a
// data dir of 0700; another local user still cannot get in.
func TestSecRawExecTaskDirAccess(t *testing.T) {
	requireRoot(t)
	data := filepath.Join(t.TempDir(), "data")
	allocDir := filepath.Join(data, "alloc", "btsec-"+randSuffix(t))
	if err := os.MkdirAll(allocDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(allocDir, 0o750); err != nil {
		t.Fatal(err)
	}
	task := newTask(t, "", nil)
	task.AllocDir, task.LogDir = allocDir, allocDir
	task.User = "nobody"
	local := filepath.Join(driver.TaskDir(allocDir, task.TaskName), "local")
	task.Config = sh("cd / && echo hi > " + local + "/x && cat " + local + "/x")
	res, out := runTask(t, NewRawExec(Options{StoreID: testStore}), task)
	if !res.Successful() || strings.TrimSpace(out) != "hi" {
		t.Fatalf("task as nobody could not write %s: %+v %q %s", local, res, out, readLog(t, task, "stderr"))
	}
	// Another user (no ACL entry) cannot reach it.
	cmd := osexec.Command("/bin/cat", filepath.Join(local, "x"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 12345, Gid: 12345}}
	if b, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("uid 12345 read the task's file: %s", b)
	}
	fi, err := os.Stat(allocDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		t.Fatalf("the alloc dir is open to others: %v", fi.Mode())
	}
}

// A task whose main process moved into namespaces of its own (a user
// namespace, and a network namespace in it) is not entered: enter would
// join what the task controls.
func TestSecExecRefusesTaskNamespaces(t *testing.T) {
	requireRoot(t)
	task := newTask(t, newNetns(t), sh("exec unshare -Urn sleep 1000"))
	task.User = "nobody"
	h := start(t, NewRawExec(Options{StoreID: testStore}), task)
	pid := h.State().PID
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/user", &self); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to be in a user namespace of its own", func() bool {
		var st syscall.Stat_t
		return syscall.Stat("/proc/"+strconv.Itoa(pid)+"/ns/user", &st) == nil && st.Ino != self.Ino
	})
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	_, err = h.(driver.Execer).Exec(ctxT(t), &driver.ExecRequest{Cmd: []string{"true"}, Stdin: in, Stdout: in, Stderr: in})
	if !errors.Is(err, driver.ErrExecSetup) || !strings.Contains(err.Error(), "user namespace of its own") {
		t.Fatalf("exec into a task in its own user namespace: %v", err)
	}
}

// With Nomad's default capabilities an exec task as nobody reads any file
// of its root (CAP_DAC_OVERRIDE); the host's credentials under the
// default chroot_env's /etc are masked, berth's token and TLS files under
// /etc/berth among them.
func TestSecExecHostSecretsMasked(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Skipf("this host has no /etc/shadow: %v", err)
	}
	d := NewExec(Options{StoreID: testStore})
	task := newTask(t, "", sh(`grep -c CapEff /proc/self/status; wc -c < /etc/shadow; ls -A /etc/berth 2>/dev/null | wc -l; `+
		`for k in /etc/ssh/ssh_host_*_key; do [ -e "$k" ] && wc -c < "$k"; done; wc -c < /etc/passwd | grep -qv '^0$' && echo passwd-readable`))
	task.User = "nobody"
	res, out := runTask(t, d, task)
	if !res.Successful() {
		t.Fatalf("task failed: %+v %s", res, out)
	}
	lines := strings.Fields(out)
	if len(lines) < 4 || lines[0] != "1" || lines[1] != "0" || lines[2] != "0" || lines[len(lines)-1] != "passwd-readable" {
		t.Fatalf("the task read host secrets, or could not run: %q", out)
	}
	for _, n := range lines[3 : len(lines)-1] {
		if n != "0" {
			t.Errorf("an SSH host key is readable in the task's root: %q", out)
		}
	}
}

// The operator's credentials (the agent's token file, TLS key, config
// file, data dir: Options.Secrets) are masked wherever chroot_env binds
// them, not only under /etc/berth; the rest of the bind stays readable.
func TestSecExecOperatorSecretsMasked(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"token": "s3cret-token", "other": "visible", "tls/key.pem": "s3cret-key"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "other"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := DefaultChrootEnv()
	env[dir] = "/opt/op"
	d := NewExec(Options{StoreID: testStore, ChrootEnv: env, Secrets: []string{filepath.Join(dir, "token"), filepath.Join(dir, "tls")}})
	task := newTask(t, "", sh(`cat /opt/op/token; echo; ls -A /opt/op/tls | wc -l; cat /opt/op/other`))
	task.User = "nobody"
	res, out := runTask(t, d, task)
	if !res.Successful() {
		t.Fatalf("task failed: %+v %s", res, out)
	}
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "visible") || !strings.Contains(out, "\n0\n") {
		t.Fatalf("task output %q: want the token and TLS dir masked, the other file readable", out)
	}
}

func TestSecretsInRoot(t *testing.T) {
	mounts := []supervisor.Mount{
		{Source: "/etc", Dest: "/etc", ReadOnly: true},
		{Source: "/opt/berth", Dest: "/srv/b", ReadOnly: true},
		{Source: "/var/lib/berth/alloc/a1/alloc", Dest: "/alloc"},
	}
	tests := []struct {
		secrets []string
		want    []string
	}{
		{[]string{"/etc/berth/token"}, []string{"/etc/berth/token"}},
		{[]string{"/opt/berth/tls/key.pem"}, []string{"/srv/b/tls/key.pem"}},
		{[]string{"/opt/berth"}, []string{"/srv/b"}},
		{[]string{"/var/lib/berth"}, nil}, // the data dir holds /alloc's source: not bound itself
		{[]string{"/root/token"}, nil},
		{[]string{"/etcetera/token"}, nil},
	}
	for _, tc := range tests {
		if got := secretsInRoot(tc.secrets, mounts); !slices.Equal(got, tc.want) {
			t.Errorf("secretsInRoot(%v) = %v, want %v", tc.secrets, got, tc.want)
		}
	}
}
