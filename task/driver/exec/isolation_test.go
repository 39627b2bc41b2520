package exec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/task/driver"
)

func runTask(t *testing.T, d *Driver, task *driver.Task) (*driver.ExitResult, string) {
	t.Helper()
	h := start(t, d, task)
	res := wait(t, h)
	return res, readLog(t, task, "stdout")
}

func selfNS(t *testing.T, kind string) string {
	t.Helper()
	l, err := os.Readlink("/proc/self/ns/" + kind)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Row 15 of issue 10: `id -u; echo $$; ls /` in an exec task is nobody,
// PID 1, and a root of chroot_env plus the task's dirs; raw_exec stays
// unisolated.
func TestExecIsolation(t *testing.T) {
	requireRoot(t)
	script := `id -u; echo $$; ls /; readlink /proc/self/ns/ipc; readlink /proc/self/ns/mnt; ` +
		`touch /etc/btexec-probe 2>/dev/null && echo etc-writable; ls /root >/dev/null 2>&1 && echo root-readable; ` +
		`echo hi > /alloc/shared && echo > /local/x && echo > /secrets/x && echo > /tmp/x && echo dirs-writable`
	res, out := runTask(t, NewExec(Options{StoreID: testStore}), newTask(t, newNetns(t), sh(script)))
	if !res.Successful() {
		t.Fatalf("exec task failed: %+v\n%s", res, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "65534" || lines[1] != "1" {
		t.Fatalf("exec task runs as uid %s, pid %s; want nobody (65534) as PID 1\n%s", lines[0], lines[1], out)
	}
	top := map[string]bool{}
	var ipc, mnt string
	for _, l := range lines[2:] {
		switch {
		case strings.HasPrefix(l, "ipc:"):
			ipc = l
		case strings.HasPrefix(l, "mnt:"):
			mnt = l
		default:
			top[l] = true
		}
	}
	for _, want := range []string{"alloc", "bin", "dev", "etc", "local", "proc", "secrets", "tmp", "usr", "dirs-writable"} {
		if !top[want] {
			t.Errorf("the task's / lacks %s: %v", want, top)
		}
	}
	for _, never := range []string{"root", "home", "var", "srv", "opt", "etc-writable", "root-readable"} {
		if top[never] {
			t.Errorf("the exec task sees %q: %v", never, top)
		}
	}
	if ipc == selfNS(t, "ipc") || mnt == selfNS(t, "mnt") || ipc == "" {
		t.Errorf("exec task shares the host's IPC (%s) or mount (%s) namespace", ipc, mnt)
	}
	if _, err := os.Stat("/etc/btexec-probe"); err == nil {
		os.Remove("/etc/btexec-probe")
		t.Error("the exec task wrote the host's /etc")
	}

	// raw_exec: the host as it is.
	res, out = runTask(t, NewRawExec(Options{StoreID: testStore}), newTask(t, "", sh("id -u; ls /; readlink /proc/self/ns/ipc")))
	if !res.Successful() || !strings.HasPrefix(out, "0\n") || !strings.Contains(out, "\nroot\n") || !strings.Contains(out, selfNS(t, "ipc")) {
		t.Fatalf("raw_exec is not unisolated: %+v\n%s", res, out)
	}
}

// Issue 23 item 8: exec's root has Nomad's special filesystems (a
// read-only sysfs, a devpts of its own behind /dev/ptmx, mqueue, shm), and
// what Nomad's default capabilities would open is shut, for root and for
// nobody who made itself root with its ambient CAP_SETUID: /proc/sys and
// /proc/sysrq-trigger read-only, /proc/kcore and /sys/firmware masked, a
// device node made with CAP_MKNOD does not open (nodev root and /dev).
func TestExecSpecialMounts(t *testing.T) {
	requireRoot(t)
	// m PATH: the filesystem type and the read-write flag of the mount
	// on PATH (the last one there wins).
	const script = `m() { awk -v p="$1" '$5 == p { for (i = 7; $i != "-"; i++); split($6, o, ","); v = $(i+1) " " o[1] } END { print v }' /proc/self/mountinfo; }
echo "uid=$(id -u)"
echo "sys=$(m /sys)"
echo "pts=$(m /dev/pts)"
echo "mqueue=$(m /dev/mqueue)"
echo "shm=$(m /dev/shm)"
echo "ptmx=$(readlink /dev/ptmx)"
echo "procsys=$(m /proc/sys)"
echo "sysrq=$(m /proc/sysrq-trigger)"
echo "kcore=$(stat -c %s /proc/kcore)"
echo "firmware=$(ls -A /sys/firmware | wc -l)"
v=$(cat /proc/sys/kernel/core_pattern)
echo "corepattern=$( (printf '%s\n' "$v" > /proc/sys/kernel/core_pattern) 2>&1 | sed 's/.*: //')"
echo "null=$( (echo x > /dev/null && echo ok) 2>&1)"
for d in /tmp /dev; do
  echo "mknod$d=$( (mknod $d/btnull c 1 3 && echo x > $d/btnull && echo opened) 2>&1 | sed 's/.*: //')"
done
echo "pty=$(perl -e 'open(my $f, "+<", "/dev/ptmx") or die "$!"; print "ok"' 2>&1)"
`
	// nobody becomes root by its ambient CAP_SETUID, then runs the same.
	asRoot := `exec perl -e '$< = $> = 0; $( = $) = 0; exec "/bin/sh", "-c", $ARGV[0], "sh" or die "$!"' "$1"`
	tests := []struct {
		name, user, cmd string
	}{
		{"root", "root", script},
		{"nobody made root", "", asRoot},
	}
	want := map[string]string{
		"uid": "0", "sys": "sysfs ro", "pts": "devpts rw", "mqueue": "mqueue rw", "shm": "tmpfs rw", "ptmx": "pts/ptmx",
		"procsys": "proc ro", "sysrq": "proc ro", "kcore": "0", "firmware": "0",
		"corepattern": "Read-only file system", "null": "ok",
		"mknod/tmp": "Permission denied", "mknod/dev": "Permission denied", "pty": "ok",
	}
	// Paths a kernel may lack (CONFIG_PROC_KCORE, CONFIG_MAGIC_SYSRQ).
	if _, err := os.Stat("/proc/kcore"); err != nil {
		want["kcore"] = ""
	}
	if _, err := os.Stat("/proc/sysrq-trigger"); err != nil {
		want["sysrq"] = ""
	}
	d := NewExec(Options{StoreID: testStore, DeniedUsers: []string{}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]any{"command": "/bin/sh", "args": []any{"-c", tc.cmd, "sh", script}}
			task := newTask(t, newNetns(t), cfg)
			task.User = tc.user
			res, out := runTask(t, d, task)
			if !res.Successful() {
				t.Fatalf("%+v\n%s\nstderr: %s", res, out, readLog(t, task, "stderr"))
			}
			got := map[string]string{}
			for _, l := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					got[k] = v
				}
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// pid_mode/ipc_mode "host" only where the node allows them.
func TestExecHostModes(t *testing.T) {
	requireRoot(t)
	cfg := sh("readlink /proc/self/ns/pid /proc/self/ns/ipc")
	cfg["pid_mode"], cfg["ipc_mode"] = "host", "host"
	strict := NewExec(Options{StoreID: testStore})
	if err := strict.ValidateConfig(cfg); err == nil || !driver.OnlyWarnings(err) || !strings.Contains(err.Error(), "allow_host_pid_mode") {
		t.Fatalf("ValidateConfig = %v, want warnings naming the settings", err)
	}
	if h, err := strict.Start(ctxT(t), newTask(t, "", cfg)); err == nil {
		_ = h.Destroy(ctxT(t))
		t.Fatal("pid_mode host started on a node that does not allow it")
	} else if !strings.Contains(err.Error(), "config.pid_mode") || !strings.Contains(err.Error(), "config.ipc_mode") {
		t.Fatalf("Start: %v", err)
	}
	lax := NewExec(Options{StoreID: testStore, AllowHostPIDMode: true, AllowHostIPCMode: true})
	res, out := runTask(t, lax, newTask(t, "", cfg))
	if !res.Successful() || !strings.Contains(out, selfNS(t, "pid")) || !strings.Contains(out, selfNS(t, "ipc")) {
		t.Fatalf("host modes: %+v %s", res, out)
	}
}

func capEff(out string) uint64 {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return ^uint64(0)
}

// Nomad 1.6.5's capability rules (capabilities.Calculate, measured by
// node/parity/testdata/caps.nomad.hcl): every task gets the default set
// less cap_drop plus cap_add, a non-root one as ambient capabilities too;
// as nobody it binds port 80 (in a network namespace of its own here).
func TestExecCaps(t *testing.T) {
	requireRoot(t)
	const netBind, dac, chown = 1 << 10, 1 << 1, 1 << 0
	var defaults uint64
	for _, c := range DefaultAllowCaps {
		defaults |= 1 << capabilities[c]
	}
	const bind80 = `perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0) or die; print bind(S, pack_sockaddr_in(80, INADDR_ANY)) ? "bind=ok\n" : "bind=$!\n"'`
	tests := []struct {
		name       string
		user       string
		add, drp   []any
		eff, amb   uint64
		bindPort80 bool
	}{
		{name: "nobody", eff: defaults, amb: defaults, bindPort80: true},
		{name: "nobody, drop all, add two", drp: []any{"all"}, add: []any{"net_bind_service", "chown"}, eff: netBind | chown, amb: netBind | chown, bindPort80: true},
		{name: "nobody, drop two", drp: []any{"dac_override", "NET_BIND_SERVICE"}, eff: defaults &^ (dac | netBind), amb: defaults &^ (dac | netBind)},
		{name: "nobody, drop all", drp: []any{"all"}},
		{name: "root", user: "root", eff: defaults, bindPort80: true},
		{name: "root, drop all", user: "root", drp: []any{"all"}},
		{name: "root, drop all, add one", user: "root", drp: []any{"all"}, add: []any{"NET_BIND_SERVICE"}, eff: netBind, bindPort80: true},
	}
	d := NewExec(Options{StoreID: testStore, DeniedUsers: []string{}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sh("grep -E '^Cap(Eff|Amb|Bnd)' /proc/self/status; " + bind80)
			if tc.add != nil {
				cfg["cap_add"] = tc.add
			}
			if tc.drp != nil {
				cfg["cap_drop"] = tc.drp
			}
			task := newTask(t, newNetns(t), cfg)
			task.User = tc.user
			res, out := runTask(t, d, task)
			if !res.Successful() {
				t.Fatalf("%+v %s", res, out)
			}
			got := capLines(out)
			// The bounding set is what the task may ever have: never
			// beyond what it was given.
			if got["CapEff"] != tc.eff || got["CapAmb"] != tc.amb || got["CapBnd"] != tc.eff {
				t.Errorf("CapEff %x CapAmb %x CapBnd %x, want %x %x %x\n%s", got["CapEff"], got["CapAmb"], got["CapBnd"], tc.eff, tc.amb, tc.eff, out)
			}
			if bound := strings.Contains(out, "bind=ok"); bound != tc.bindPort80 {
				t.Errorf("bind port 80: %v, want %v\n%s", bound, tc.bindPort80, out)
			}
		})
	}
	if err := d.ValidateConfig(map[string]any{"command": "x", "cap_add": []any{"sys_admin"}}); err == nil || !strings.Contains(err.Error(), "allow_caps") {
		t.Fatalf("cap_add sys_admin: %v", err)
	}
}

// capLines reads the Cap* lines of /proc/<pid>/status output.
func capLines(out string) map[string]uint64 {
	m := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.HasPrefix(k, "Cap") {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			m[k] = n
		}
	}
	return m
}

// The exec task's cgroup enforces its memory: past it the task is
// OOM-killed and the result says so.
func TestExecMemoryLimit(t *testing.T) {
	requireRoot(t)
	d := NewExec(Options{StoreID: testStore})
	// tail of a file without newlines keeps everything it read.
	task := newTask(t, "", map[string]any{"command": "/usr/bin/tail", "args": []any{"/dev/zero"}})
	task.Resources = driver.Resources{CPU: 100, MemoryMB: 16}
	h := start(t, d, task)
	st := h.State()
	if st.CgroupPath == "" {
		t.Skip("no cgroup on this host")
	}
	cg := h.(*handle).cg
	found := false
	for _, dir := range cg.Dirs() {
		for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && strings.TrimSpace(string(b)) != "max" {
				found = true
				if strings.TrimSpace(string(b)) != strconv.Itoa(16<<20) {
					t.Errorf("%s/%s = %s, want 16 MB", dir, f, b)
				}
			}
		}
	}
	if !found {
		t.Skip("no memory controller for the task's cgroup on this host")
	}
	res := wait(t, h)
	if res.Signal != int(syscall.SIGKILL) || !res.OOMKilled {
		t.Fatalf("result %+v, want OOM-killed", res)
	}
}

func TestLimitsOf(t *testing.T) {
	tests := []struct {
		r    driver.Resources
		max  int64
		soft int64
	}{
		{driver.Resources{CPU: 100, MemoryMB: 300}, 300 << 20, 0},
		{driver.Resources{MemoryMB: 300, MemoryMaxMB: 500}, 500 << 20, 300 << 20},
		{driver.Resources{MemoryMB: 300, MemoryMaxMB: -1}, 0, 300 << 20},
	}
	for _, tc := range tests {
		l := limitsOf(tc.r)
		if l.MemoryMax != tc.max || l.MemorySoft != tc.soft || l.CPUShares != tc.r.CPU {
			t.Errorf("limitsOf(%+v) = %+v", tc.r, l)
		}
	}
}

// Row 4 of issue 10: user is the task's uid, gid and groups, for raw_exec
// as for exec, and its dirs are its own.
func TestUser(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			// Relative: the working directory is the task dir (exec: its
			// root), which a raw_exec task's user may not reach by path.
			task := newTask(t, "", sh("id -u; id -g; id -G; stat -c %U local"))
			task.User = "nobody"
			res, out := runTask(t, d, task)
			f := strings.Split(strings.TrimSpace(out), "\n")
			if !res.Successful() || len(f) != 4 || f[0] != "65534" || f[1] != "65534" || f[3] != "nobody" {
				t.Fatalf("as nobody: %+v\n%s", res, out)
			}
			if slices.Contains(strings.Fields(f[2]), "0") {
				t.Fatalf("nobody kept root's group: %s", f[2])
			}
		})
	}
	d := NewRawExec(Options{StoreID: testStore})
	task := newTask(t, "", sh("true"))
	task.User = "btexec-no-such-user"
	if h, err := d.Start(ctxT(t), task); err == nil {
		_ = h.Destroy(ctxT(t))
		t.Fatal("unknown user started")
	} else if !errors.Is(err, driver.ErrUnknownUser) {
		t.Fatalf("Start: %v", err)
	}
	if err := d.ValidateUser("btexec-no-such-user"); !errors.Is(err, driver.ErrUnknownUser) {
		t.Fatalf("ValidateUser: %v", err)
	}
}

// Nomad's user.denylist: exec refuses root and every user of UID 0;
// raw_exec is not checked unless told.
func TestDeniedUsers(t *testing.T) {
	requireRoot(t)
	exec := NewExec(Options{StoreID: testStore})
	for _, u := range []string{"root", "0"} {
		if err := exec.ValidateUser(u); !errors.Is(err, driver.ErrDeniedUser) {
			t.Errorf("exec ValidateUser(%q) = %v, want denied", u, err)
		}
	}
	if err := exec.ValidateUser(""); err != nil {
		t.Errorf("exec's default user: %v", err)
	}
	if err := NewRawExec(Options{StoreID: testStore}).ValidateUser("root"); err != nil {
		t.Errorf("raw_exec root: %v", err)
	}
	if err := NewRawExec(Options{StoreID: testStore, DeniedUsers: []string{"root"}}).ValidateUser("0"); !errors.Is(err, driver.ErrDeniedUser) {
		t.Errorf("raw_exec with a denylist, uid 0: %v", err)
	}
	task := newTask(t, "", sh("true"))
	task.User = "root"
	if h, err := exec.Start(ctxT(t), task); err == nil {
		_ = h.Destroy(ctxT(t))
		t.Fatal("exec started a root task")
	}
}

// logs { max_files, max_file_size } rotate the task's output.
func TestLogRotation(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, "", sh("head -c 3500000 /dev/zero | tr '\\0' x"))
			task.Logs = driver.LogConfig{MaxFiles: 2, MaxFileSizeMB: 1}
			res, _ := runTask(t, d, task)
			if !res.Successful() {
				t.Fatalf("%+v", res)
			}
			// 3.5 MB without a newline: four files by Nomad's naming
			// (logmon's rule: near a file's end, output without a
			// newline that fits in a whole file starts the next one, so
			// a file ends up to 32 KiB short), the newest two kept.
			fi, err := os.Stat(filepath.Join(task.LogDir, "web.stdout.2"))
			if err != nil || fi.Size() > 1<<20 || fi.Size() < 1<<20-64<<10 {
				t.Errorf("web.stdout.2: %v, size %v, want 1 MB less at most 64 KiB", err, fi)
			}
			if _, err := os.Stat(filepath.Join(task.LogDir, "web.stdout.3")); err != nil {
				t.Errorf("web.stdout.3: %v", err)
			}
			for _, name := range []string{"web.stdout.0", "web.stdout.1", "web.stdout.4"} {
				if _, err := os.Stat(filepath.Join(task.LogDir, name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: more than max_files: %v", name, err)
				}
			}
		})
	}
}

// Row 10: a log name that is a symlink (planted by an earlier run of the
// task) is not followed: it is replaced by a file of the log writer's own
// and the target is untouched.
func TestLogSymlinkRefused(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	task := newTask(t, "", sh("echo pwned"))
	target := filepath.Join(t.TempDir(), "os-release")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(task.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(task.LogDir, "web.stdout.0")); err != nil {
		t.Fatal(err)
	}
	res, _ := runTask(t, d, task)
	if !res.Successful() {
		t.Fatalf("%+v", res)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Fatalf("target changed: %q", b)
	}
	b, err := logfile.ReadTail(ctxT(t), task.LogDir, "web.stdout", 1<<10)
	if err != nil || string(b) != "pwned\n" {
		t.Fatalf("the task's log: %q, %v", b, err)
	}
}
