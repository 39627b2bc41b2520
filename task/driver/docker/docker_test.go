package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/task/driver"
)

const testImage = "localhost/busybox:latest"

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

// requireDocker skips unless a dockerd answers (scripts/setup.sh starts
// one); it runs docker-setup.sh first, which does nothing when all is
// there, so that the images are loaded.
func requireDocker(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("docker driver tests need root (network namespaces, dockerd)")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("docker driver tests need dockerd (Debian's docker.io; scripts/setup.sh installs it)")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", SetupScript)
	if out, err := exec.Command("bash", script).CombinedOutput(); err != nil {
		t.Skipf("no dockerd answers (%s: %v)\n%s", script, err, out)
	}
}

func testLogger(testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newDriver(t testing.TB, dataDir string, p Policy) *Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := New(ctx, Options{DataDir: dataDir, Logger: testLogger(t), Policy: p})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

// newNetns makes a namespace with lo up, and with addr (a /24 of this
// package's test subnets, 10.199.141-149.x) on a veth to the host when
// addr is set, so that the host reaches the task there.
func newNetns(t testing.TB, addr string) string {
	t.Helper()
	name := "btdkr-" + testenv.RandSuffix(8)
	testenv.Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	testenv.Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	if addr != "" {
		host, peer := "bd"+name[6:12]+"h", "bd"+name[6:12]+"p"
		testenv.Run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
		testenv.Run(t, "ip", "link", "set", peer, "netns", name)
		ip := net.ParseIP(addr).To4()
		hostIP := net.IPv4(ip[0], ip[1], ip[2], 1).String()
		testenv.Run(t, "ip", "addr", "add", hostIP+"/24", "dev", host)
		testenv.Run(t, "ip", "link", "set", host, "up")
		testenv.Run(t, "ip", "-n", name, "addr", "add", addr+"/24", "dev", peer)
		testenv.Run(t, "ip", "-n", name, "link", "set", peer, "up")
	}
	return "/run/netns/" + name
}

// testTask is a task in its own namespace, alloc dir and log dir; whatever
// of it is left is removed at the end of the test.
func testTask(t testing.TB, cfg map[string]any) *driver.Task {
	t.Helper()
	alloc := "btdkr-" + testenv.RandSuffix(8)
	allocDir := t.TempDir()
	task := &driver.Task{
		AllocID: alloc, JobName: "btdkr-job", GroupName: "g", TaskName: "t1",
		Config:      cfg,
		Env:         map[string]string{"BTDKR_ENV": "hello-env", "NOMAD_ALLOC_DIR": ContainerAllocDir, "NOMAD_TASK_DIR": ContainerTaskDir},
		NetnsPath:   newNetns(t, ""),
		AllocDir:    allocDir,
		LogDir:      driver.LogDir(allocDir),
		KillTimeout: time.Second,
		Labels:      map[string]string{"berth.job": "btdkr-job"},
		Resources:   driver.Resources{CPU: 100, MemoryMB: 64},
	}
	for _, dir := range []string{driver.LogDir(allocDir), filepath.Join(allocDir, "t1", "local"), filepath.Join(allocDir, "t1", "secrets")} {
		testenv.Must(t, os.MkdirAll(dir, 0o755))
	}
	t.Cleanup(func() { removeAlloc(alloc) })
	return task
}

// removeAlloc is the last resort: no container of alloc is left.
func removeAlloc(alloc string) {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+LabelAllocID+"="+alloc).Output()
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "rm", "-f", id).Run()
	}
}

func startTask(t testing.TB, d *Driver, task *driver.Task) driver.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := d.Start(ctx, task)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Destroy(ctx); err != nil {
			t.Errorf("Destroy in cleanup: %v", err)
		}
	})
	return h
}

func waitTask(t testing.TB, h driver.Handle) *driver.ExitResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res
}

func destroy(t testing.TB, h driver.Handle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
}

func readLog(t testing.TB, task *driver.Task, stream string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(task.LogDir, task.TaskName+"."+stream+".0"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

func inspect(t testing.TB, d *Driver, id string) *inspectResult {
	t.Helper()
	st, err := d.c.inspect(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return st
}

func containersOf(t testing.TB, alloc string) []string {
	t.Helper()
	return strings.Fields(testenv.Run(t, "docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label="+LabelAllocID+"="+alloc))
}

// TestRunTask: a task in its group's namespace (through the pause
// container), with its env, labels, task dirs; its output in the task's
// log files, its exit code; the container and the pause container gone
// after Destroy, and nothing holding the namespace.
func TestRunTask(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{
		"image":   testImage,
		"command": "/bin/sh",
		"args": []any{"-c", `echo out:$BTDKR_ENV; echo err >&2; ls -d /alloc /local /secrets; ` +
			`ip -o addr show lo | grep -c 127.0.0.1; hostname; echo hi > /alloc/from-task; exit 3`},
		"labels": map[string]any{"btdkr": "yes"},
	})
	h := startTask(t, d, task)
	id := h.State().ContainerID
	st := inspect(t, d, id)
	for k, v := range map[string]string{"btdkr": "yes", LabelAllocID: task.AllocID, LabelTask: "t1", LabelStore: d.storeID, "berth.job": "btdkr-job"} {
		if st.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, st.Config.Labels[k], v)
		}
	}
	if !strings.HasPrefix(st.HostConfig.NetworkMode, "container:") {
		t.Errorf("network mode %q, want container:<pause>", st.HostConfig.NetworkMode)
	}
	pause := inspect(t, d, PauseName(task.AllocID))
	want, _ := nsInode(task.NetnsPath)
	if !pidInNetns(pause.State.Pid, want) {
		t.Errorf("pause container's process is not in the allocation's namespace")
	}
	if got := st.HostConfig.CPUShares; got != 100 {
		t.Errorf("CpuShares = %d, want 100", got)
	}
	if got := st.HostConfig.Memory; got != 64<<20 {
		t.Errorf("Memory = %d, want %d", got, 64<<20)
	}
	res := waitTask(t, h)
	if res.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", res.ExitCode)
	}
	out := readLog(t, task, "stdout")
	for _, w := range []string{"out:hello-env", "/alloc\n/local\n/secrets\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout %q lacks %q", out, w)
		}
	}
	if e := readLog(t, task, "stderr"); e != "err\n" {
		t.Errorf("stderr %q, want %q", e, "err\n")
	}
	if b, _ := os.ReadFile(filepath.Join(task.AllocDir, "alloc", "from-task")); string(b) != "hi\n" {
		t.Errorf("alloc dir file %q: the task's /alloc is not the allocation's", b)
	}
	destroy(t, h)
	if left := containersOf(t, task.AllocID); len(left) > 0 {
		t.Errorf("containers left after Destroy: %v", left)
	}
}

// TestConfigKeysApplied: each key the driver runs, seen in the container
// (inspect) or from inside it.
func TestConfigKeysApplied(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{
		"image":              testImage,
		"entrypoint":         []any{"/bin/sh", "-c"},
		"args":               []any{`id -u; pwd; hostname; cat /etc/resolv.conf; grep btdkr-host /etc/hosts; ulimit -n; cat /proc/sys/net/core/somaxconn; df -k /dev/shm | tail -1; touch /x 2>&1 || echo ro; mount | grep ' /scratch '; ps | head -2; sleep 600`},
		"work_dir":           "/tmp",
		"hostname":           "btdkr-h",
		"network_mode":       "none",
		"dns_servers":        []any{"10.199.141.53"},
		"dns_search_domains": []any{"btdkr.test"},
		"dns_options":        []any{"ndots:3"},
		"extra_hosts":        []any{"btdkr-host:10.199.141.7"},
		"cap_add":            []any{"net_bind_service"},
		"cap_drop":           []any{"mknod"},
		"security_opt":       []any{"no-new-privileges"},
		"readonly_rootfs":    true,
		"tmpfs":              []any{"/scratch:size=1m"},
		"ulimit":             map[string]any{"nofile": "1234:2345"},
		"sysctl":             map[string]any{"net.core.somaxconn": "999"},
		"shm_size":           8 << 20,
		"pids_limit":         77,
		"init":               true,
		"tty":                true,
		"interactive":        true,
		"logging":            []any{map[string]any{"type": "json-file"}},
		"image_pull_timeout": "1m",
		"force_pull":         false,
	})
	task.User = "nobody"
	task.Resources = driver.Resources{CPU: 250, MemoryMB: 32, MemoryMaxMB: 96}
	task.KillSignal = syscall.SIGINT
	h := startTask(t, d, task)
	st := inspect(t, d, h.State().ContainerID)
	hc := st.HostConfig
	checks := []struct {
		key      string
		ok       bool
		got, doc any
	}{
		{"work_dir", st.Config.WorkingDir == "/tmp", st.Config.WorkingDir, "/tmp"},
		{"hostname", st.Config.Hostname == "btdkr-h", st.Config.Hostname, "btdkr-h"},
		{"network_mode", hc.NetworkMode == "none", hc.NetworkMode, "none"},
		{"dns_servers", strings.Join(hc.DNS, ",") == "10.199.141.53", hc.DNS, "10.199.141.53"},
		{"dns_search_domains", strings.Join(hc.DNSSearch, ",") == "btdkr.test", hc.DNSSearch, "btdkr.test"},
		{"dns_options", strings.Join(hc.DNSOptions, ",") == "ndots:3", hc.DNSOptions, "ndots:3"},
		{"extra_hosts", strings.Join(hc.ExtraHosts, ",") == "btdkr-host:10.199.141.7", hc.ExtraHosts, "btdkr-host"},
		{"cap_add", strings.Join(hc.CapAdd, ",") == "CAP_NET_BIND_SERVICE", hc.CapAdd, "CAP_NET_BIND_SERVICE"},
		{"cap_drop", strings.Join(hc.CapDrop, ",") == "CAP_MKNOD", hc.CapDrop, "CAP_MKNOD"},
		{"security_opt", strings.Join(hc.SecurityOpt, ",") == "no-new-privileges", hc.SecurityOpt, "no-new-privileges"},
		{"readonly_rootfs", hc.ReadonlyRootfs, hc.ReadonlyRootfs, true},
		{"tmpfs", hc.Tmpfs["/scratch"] == "size=1m", hc.Tmpfs, "/scratch:size=1m"},
		{"ulimit", len(hc.Ulimits) == 1 && hc.Ulimits[0] == ulimitSpec{Name: "nofile", Soft: 1234, Hard: 2345}, hc.Ulimits, "nofile 1234:2345"},
		{"sysctl", hc.Sysctls["net.core.somaxconn"] == "999", hc.Sysctls, "999"},
		{"shm_size", hc.ShmSize == 8<<20, hc.ShmSize, 8 << 20},
		{"pids_limit", hc.PidsLimit != nil && *hc.PidsLimit == 77, hc.PidsLimit, 77},
		{"init", hc.Init != nil && *hc.Init, hc.Init, true},
		{"tty", st.Config.Tty, st.Config.Tty, true},
		{"interactive", st.Config.OpenStdin, st.Config.OpenStdin, true},
		{"logging", hc.LogConfig.Type == "json-file", hc.LogConfig, "json-file"},
		{"user", st.Config.User == "nobody", st.Config.User, "nobody"},
		{"entrypoint", strings.Join(st.Config.Entrypoint, " ") == "/bin/sh -c", st.Config.Entrypoint, "/bin/sh -c"},
		{"cpu", hc.CPUShares == 250, hc.CPUShares, 250},
		{"memory_max", hc.Memory == 96<<20 && hc.MemoryReservation == 32<<20, []int64{hc.Memory, hc.MemoryReservation}, "96m hard, 32m reservation"},
		{"kill_signal", st.Config.StopSignal == "2", st.Config.StopSignal, "2"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: got %v, want %v", c.key, c.got, c.doc)
		}
	}
	// From inside: the output of the command above (a tty merges stderr).
	deadline := time.Now().Add(20 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		if out = readLog(t, task, "stdout"); strings.Contains(out, "PID") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range []string{"65534", "/tmp", "btdkr-h", "nameserver 10.199.141.53", "search btdkr.test", "ndots:3",
		"10.199.141.7", "1234", "999", "ro", "/scratch", "docker-init"} {
		if !strings.Contains(out, w) {
			t.Errorf("the task's output lacks %q:\n%s", w, out)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Stop(stopCtx, time.Second); err != nil {
		t.Fatal(err)
	}
	waitTask(t, h)
}

// TestExecSignalKillTimeout: alloc exec runs in the task's container;
// a signal reaches the task; Stop sends kill_signal and SIGKILL after
// kill_timeout to a task that ignores it.
func TestExecSignalKillTimeout(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{
		"image":   testImage,
		"command": "/bin/sh",
		"args":    []any{"-c", `trap 'echo got-usr1' USR1; trap 'echo ignoring-term' TERM; echo ready; while :; do sleep 0.1; done`},
	})
	task.KillTimeout = 2 * time.Second
	h := startTask(t, d, task)
	waitFor(t, func() bool { return strings.Contains(readLog(t, task, "stdout"), "ready") })

	r, w, _ := os.Pipe()
	defer r.Close()
	code, err := h.(driver.Execer).Exec(context.Background(), &driver.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo exec:$BTDKR_ENV:$X; exit 7"}, Stdout: w, Stderr: w, Env: map[string]string{"X": "y"}})
	w.Close()
	got, _ := io.ReadAll(r)
	if err != nil || code != 7 || strings.TrimSpace(string(got)) != "exec:hello-env:y" {
		t.Errorf("exec: code %d err %v output %q, want 7 and exec:hello-env:y", code, err, got)
	}

	// As a shell says (and podman): 127 for no such command, 126 for a
	// file that cannot be executed.
	for _, c := range []struct {
		cmd  string
		code int
	}{{"no-such-command", 127}, {"/no/such", 127}, {"/etc/passwd", 126}} {
		code, err := h.(driver.Execer).Exec(context.Background(), &driver.ExecRequest{Cmd: []string{c.cmd}})
		if err != nil || code != c.code {
			t.Errorf("exec %s: code %d err %v, want %d", c.cmd, code, err, c.code)
		}
	}

	if err := h.(driver.Signaler).Signal(context.Background(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(readLog(t, task, "stdout"), "got-usr1") })

	t0 := time.Now()
	if err := h.Stop(context.Background(), task.KillTimeout); err != nil {
		t.Fatal(err)
	}
	res := waitTask(t, h)
	if el := time.Since(t0); el < 1500*time.Millisecond || el > 10*time.Second {
		t.Errorf("stop took %v, want about kill_timeout (2s)", el)
	}
	if res.ExitCode != 137 {
		t.Errorf("exit code %d, want 137 (SIGKILL after kill_timeout)", res.ExitCode)
	}
	if !strings.Contains(readLog(t, task, "stdout"), "ignoring-term") {
		t.Errorf("the task did not get SIGTERM first")
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPortFromHost: a task in the group's namespace (joined through the
// pause container) serves a port the host reaches at the namespace's
// address; a second task of the allocation shares the namespace, and the
// pause container goes with the last task.
func TestPortFromHost(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{
		"image":   testImage,
		"command": "/bin/httpd",
		"args":    []any{"-f", "-p", "8080", "-h", "/var/www"},
		"ports":   []any{"http"},
	})
	task.NetnsPath = newNetns(t, "10.199.142.2")
	task.Env["NOMAD_HOST_PORT_http"] = "8080"
	h := startTask(t, d, task)
	c := &http.Client{Timeout: 2 * time.Second}
	var body string
	waitFor(t, func() bool {
		resp, err := c.Get("http://10.199.142.2:8080/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return true
	})
	if !strings.Contains(body, "berth busybox image") {
		t.Errorf("body %q", body)
	}
	// A second task of the allocation reaches the first on localhost.
	t2 := *task
	t2.TaskName = "t2"
	t2.Config = map[string]any{"image": testImage, "command": "/bin/wget", "args": []any{"-q", "-O", "-", "http://127.0.0.1:8080/"}}
	testenv.Must(t, os.MkdirAll(filepath.Join(task.AllocDir, "t2", "local"), 0o755))
	testenv.Must(t, os.MkdirAll(filepath.Join(task.AllocDir, "t2", "secrets"), 0o755))
	h2 := startTask(t, d, &t2)
	if res := waitTask(t, h2); res.ExitCode != 0 {
		t.Errorf("second task: exit %d", res.ExitCode)
	}
	destroy(t, h2)
	if _, err := d.c.inspect(context.Background(), PauseName(task.AllocID)); err != nil {
		t.Errorf("pause container gone while a task of the allocation runs: %v", err)
	}
	destroy(t, h)
	if left := containersOf(t, task.AllocID); len(left) > 0 {
		t.Errorf("containers left after the last Destroy: %v", left)
	}
}

// TestRecoverAfterRestart: a second driver (a restarted agent) re-attaches
// the running container from its handle, goes on copying its output, sees
// its exit; Find finds it by its labels; a handle of another data dir is
// not recoverable.
func TestRecoverAfterRestart(t *testing.T) {
	requireDocker(t)
	dataDir := t.TempDir()
	d1 := newDriver(t, dataDir, Policy{})
	task := testTask(t, map[string]any{
		"image": testImage, "command": "/bin/sh",
		"args": []any{"-c", `echo before; while [ ! -e /alloc/go ]; do sleep 0.1; done; echo after; exit 5`},
	})
	h1 := startTask(t, d1, task)
	waitFor(t, func() bool { return strings.Contains(readLog(t, task, "stdout"), "before") })
	th := h1.State()
	h1.(*handle).logs.detach() // as a dying berth leaves it
	_ = d1.Close(context.Background())

	d2 := newDriver(t, dataDir, Policy{})
	ctx := testenv.Context(t, 30*time.Second)
	h2, err := d2.Recover(ctx, th)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	fh, removed, err := d2.Find(ctx, driver.FindRequest{AllocID: task.AllocID, Task: task.TaskName})
	if err != nil || fh == nil || len(removed) > 0 || fh.State().ContainerID != th.ContainerID {
		t.Errorf("Find: %v, removed %v, err %v", fh, removed, err)
	}
	if fh != nil {
		fh.(*handle).logs.detach()
	}
	d3 := newDriver(t, t.TempDir(), Policy{})
	if _, err := d3.Recover(ctx, th); !errors.Is(err, driver.ErrNotRecoverable) {
		t.Errorf("Recover from another data dir: %v, want ErrNotRecoverable", err)
	}
	testenv.Must(t, os.WriteFile(filepath.Join(task.AllocDir, "alloc", "go"), nil, 0o644))
	res := waitTask(t, h2)
	if res.ExitCode != 5 {
		t.Errorf("exit %d, want 5", res.ExitCode)
	}
	if out := readLog(t, task, "stdout"); out != "before\nafter\n" {
		t.Errorf("stdout %q, want before and after once each", out)
	}
	destroy(t, h2)
	if left := containersOf(t, task.AllocID); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
}

// TestLeftoversSwept: a container and pause container no handle records
// (berth killed after create) are listed by their store label and removed.
func TestLeftoversSwept(t *testing.T) {
	requireDocker(t)
	dataDir := t.TempDir()
	d := newDriver(t, dataDir, Policy{})
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []any{"600"}})
	h := startTask(t, d, task)
	_ = h
	ctx := testenv.Context(t, 60*time.Second)
	l, err := d.Leftovers(ctx, d.storeID)
	if err != nil {
		t.Fatal(err)
	}
	var tasks, pauses int
	for _, e := range l {
		if e.AllocID != task.AllocID {
			continue
		}
		if e.Task == "" {
			pauses++
		} else {
			tasks++
		}
		if err := d.RemoveLeftover(ctx, e); err != nil {
			t.Errorf("RemoveLeftover %v: %v", e, err)
		}
	}
	if tasks != 1 || pauses != 1 {
		t.Errorf("leftovers: %d task and %d pause containers, want 1 and 1", tasks, pauses)
	}
	if left := containersOf(t, task.AllocID); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	if err := d.RemoveLeftover(ctx, driver.Leftover{ID: "nope", StoreID: d.storeID}); err != nil {
		t.Errorf("RemoveLeftover of a gone container: %v", err)
	}
}

// TestImageNotLocal: no registry answers here; a non-local image is an
// error naming it, and nothing is left.
func TestImageNotLocal(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{"image": "localhost:1/berth-nope:1", "image_pull_timeout": "5s"})
	_, err := d.Start(testenv.Context(t, 30*time.Second), task)
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "localhost:1/berth-nope:1") || !strings.Contains(err.Error(), "pulling it failed") {
		t.Errorf("Start: %v, want ErrImageNotFound naming the image", err)
	}
	// A registry off this host is not asked at all.
	for _, img := range []string{"busybox:berth-nope", "registry.example.org/x:1"} {
		task.Config = map[string]any{"image": img}
		_, err = d.Start(testenv.Context(t, 30*time.Second), task)
		if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "berth pulls only from a registry on localhost") {
			t.Errorf("Start %s: %v, want a refusal to pull from off the host", img, err)
		}
	}
	// force_pull of a local image asks its registry (localhost, where
	// none answers) and fails rather than run the local copy.
	task.Config = map[string]any{"image": testImage, "force_pull": true, "image_pull_timeout": "5s"}
	if _, err = d.Start(testenv.Context(t, 30*time.Second), task); !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "pulling it failed") {
		t.Errorf("force_pull: %v", err)
	}
	if left := containersOf(t, task.AllocID); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
}

// TestRestartTask: a task that exited is destroyed and started again in
// the same allocation (a restart policy's attempt, alloc restart): a new
// container of the same name, a new pause container in the same
// namespace, output appended to the same logs; a container left by an
// earlier run of the task (not destroyed) is replaced.
func TestRestartTask(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "echo run; exit 1"}})
	h1 := startTask(t, d, task)
	if res := waitTask(t, h1); res.ExitCode != 1 {
		t.Fatalf("first run: exit %d", res.ExitCode)
	}
	id1 := h1.State().ContainerID
	destroy(t, h1)
	h2 := startTask(t, d, task)
	if res := waitTask(t, h2); res.ExitCode != 1 {
		t.Fatalf("second run: exit %d", res.ExitCode)
	}
	if h2.State().ContainerID == id1 {
		t.Errorf("the restart reused the container")
	}
	// Not destroyed: the next start replaces it.
	h3 := startTask(t, d, task)
	waitTask(t, h3)
	if out := readLog(t, task, "stdout"); out != "run\nrun\nrun\n" {
		t.Errorf("stdout %q, want three runs", out)
	}
	if _, err := d.c.inspect(context.Background(), h2.State().ContainerID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the stale container is still there: %v", err)
	}
}

// TestFindAfterCrashAtCreate: berth died between the container's create
// and its start (fault point AfterContainerCreate): Find removes the
// created container, which never ran, and reports no exit as unknown; one
// that ran and is not the task's own name is removed with ErrExitUnknown.
func TestFindAfterCrashAtCreate(t *testing.T) {
	requireDocker(t)
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/true"})
	tc, err := ParseConfig(task.Config)
	testenv.Must(t, err)
	cfg := d.containerConfig(task, tc)
	testenv.Must(t, applyConfig(cfg, task, tc))
	cfg.HostConfig.NetworkMode = "none"
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := d.c.create(ctx, ContainerName(task.AllocID, task.TaskName), cfg); err != nil {
		t.Fatal(err)
	}
	h, removed, err := d.Find(ctx, driver.FindRequest{AllocID: task.AllocID, Task: task.TaskName})
	if h != nil || err != nil || len(removed) != 1 {
		t.Errorf("Find of a created container: %v %v %v, want it removed and nothing to adopt", h, removed, err)
	}
	// One that ran, under another name: its exit cannot be told.
	id, err := d.c.create(ctx, ContainerName(task.AllocID, task.TaskName)+"-old", cfg)
	testenv.Must(t, err)
	testenv.Must(t, d.c.start(ctx, id))
	testenv.Must(t, d.c.wait(ctx, id))
	h, removed, err = d.Find(ctx, driver.FindRequest{AllocID: task.AllocID, Task: task.TaskName})
	if h != nil || !errors.Is(err, driver.ErrExitUnknown) || len(removed) != 1 {
		t.Errorf("Find of another container that ran: %v %v %v, want ErrExitUnknown", h, removed, err)
	}
	if left := containersOf(t, task.AllocID); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
}
