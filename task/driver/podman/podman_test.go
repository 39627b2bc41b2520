package podman

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/task/driver"
	"golang.org/x/sys/unix"
)

const testImage = "localhost/busybox:latest"

// requirePodman skips unless the test can run real containers.
func requirePodman(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("podman driver tests need root (network namespaces, podman root storage)")
	}
	for _, bin := range []string{"podman", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("podman driver tests need %s in PATH: %v", bin, err)
		}
	}
	ensureImage(t)
}

func ensureImage(t testing.TB) {
	t.Helper()
	if exec.Command("podman", "image", "exists", testImage).Run() == nil {
		return
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "image", "build-busybox.sh")
	out, err := exec.Command("bash", script).CombinedOutput()
	if err != nil {
		t.Fatalf("building %s with %s: %v\n%s", testImage, script, err, out)
	}
}

func randSuffix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newNetns creates a named network namespace with lo up and returns its path.
func newNetns(t testing.TB) string {
	t.Helper()
	name := "btpod-" + randSuffix(t)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if _, err := os.Stat("/run/netns/" + name); errors.Is(err, os.ErrNotExist) {
			return // deleted by the test itself
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	run(t, "ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
	return "/run/netns/" + name
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newDriver starts a driver with its own service in a fresh data dir.
func newDriver(t testing.TB, dataDir string) *Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := New(ctx, Options{DataDir: dataDir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

// testTask is a task in its own namespace and log dir, removed at the end
// of the test whatever happens.
func testTask(t testing.TB, cfg map[string]any) *driver.Task {
	t.Helper()
	alloc := "btpod-" + randSuffix(t)
	task := &driver.Task{
		AllocID:     alloc,
		JobName:     "btpod-job",
		GroupName:   "g",
		TaskName:    "t1",
		Config:      cfg,
		Env:         map[string]string{"BTPOD_ENV": "hello-env"},
		NetnsPath:   newNetns(t),
		LogDir:      t.TempDir(),
		KillTimeout: time.Second,
		Labels:      map[string]string{"btpod.test": alloc},
	}
	name := ContainerName(task.AllocID, task.TaskName)
	// Last resort, after the handle's own Destroy: never leave a container.
	t.Cleanup(func() {
		_ = exec.Command("podman", "rm", "-f", "-t", "0", name).Run()
	})
	return task
}

func startTask(t testing.TB, d *Driver, task *driver.Task) driver.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

// netnsHolders lists the /proc/<pid>/fd entries that point at the
// namespace behind path (same st_dev and st_ino).
func netnsHolders(t testing.TB, path string) []string {
	t.Helper()
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	var holders []string
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(fd, &st) != nil {
			continue // closed meanwhile, or not stat-able
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			comm, _ := os.ReadFile(filepath.Join(fd, "..", "..", "comm"))
			holders = append(holders, fmt.Sprintf("%s (%s)", fd, strings.TrimSpace(string(comm))))
		}
	}
	return holders
}

// podmanNames lists containers with exactly that name, as the CLI sees them.
func podmanNames(t testing.TB, name string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "podman", "ps", "-a", "--filter", "name=^"+name+"$", "--format", "{{.Names}}"))
}

func assertGone(t testing.TB, d *Driver, h driver.Handle, netnsPath string) {
	t.Helper()
	st := h.State()
	if got := podmanNames(t, st.ContainerName); got != "" {
		t.Errorf("podman ps -a still lists %q", got)
	}
	if holders := netnsHolders(t, netnsPath); len(holders) > 0 {
		t.Errorf("file descriptors still open on %s after Destroy: %v", netnsPath, holders)
	}
	for _, p := range []string{d.rawLogPath(st.ContainerName), d.conmonPidPath(st.ContainerName)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
}

// forget drops a handle as a dead berth would, releasing what the test
// process holds for it (log follower, conmon pidfd) but not the container.
func forget(h driver.Handle) {
	hh := h.(*handle)
	if hh.logs != nil {
		hh.logs.detach()
	}
	hh.conmon.Close()
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunTask(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())

	tests := []struct {
		name      string
		script    string
		wantCode  int
		stdout    []string // substrings
		stderr    string
		notStdout []string
	}{
		{name: "exit 0", script: "exit 0", wantCode: 0},
		{name: "exit 3", script: "exit 3", wantCode: 3},
		{
			name:     "output env and namespace",
			script:   `echo "out $BTPOD_ENV"; echo err >&2; printf 'no newline'; echo; cat /proc/net/dev; hostname`,
			wantCode: 0,
			// A fresh namespace has lo only: no eth0 from podman's network.
			stdout:    []string{"out hello-env\n", "no newline\n", "lo:", "btpod-host\n"},
			notStdout: []string{"eth0"},
			stderr:    "err\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := testTask(t, map[string]any{
				"image":    "busybox:latest", // resolved to localhost/busybox:latest
				"command":  "/bin/sh",
				"args":     []any{"-c", tt.script},
				"hostname": "btpod-host",
				"labels":   map[string]any{"btpod.user": "x"},
			})
			h := startTask(t, d, task)
			st := h.State()
			if st.Driver != "podman" || st.ContainerID == "" || st.ContainerName != ContainerName(task.AllocID, task.TaskName) {
				t.Fatalf("State() = %+v", st)
			}

			ctx := context.Background()
			for _, l := range [][2]string{{"btpod.test", task.AllocID}, {LabelAllocID, task.AllocID}, {LabelTask, "t1"}, {"btpod.user", "x"}} {
				ids, err := d.ListByLabel(ctx, l[0], l[1])
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) != 1 || ids[0] != st.ContainerID {
					t.Errorf("ListByLabel(%s=%s) = %v, want [%s]", l[0], l[1], ids, st.ContainerID)
				}
			}

			res := waitTask(t, h)
			if res.ExitCode != tt.wantCode || res.Err != nil || res.OOMKilled {
				t.Fatalf("Wait = %+v, want exit code %d", res, tt.wantCode)
			}
			if res.StartedAt.IsZero() || res.FinishedAt.IsZero() {
				t.Errorf("Wait = %+v: no start or finish time", res)
			}
			if again, err := h.Wait(ctx); err != nil || again != res {
				t.Errorf("second Wait = %+v, %v; want the same result", again, err)
			}

			stdout := readFile(t, filepath.Join(task.LogDir, "t1.stdout.0"))
			stderr := readFile(t, filepath.Join(task.LogDir, "t1.stderr.0"))
			for _, s := range tt.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout %q does not contain %q", stdout, s)
				}
			}
			for _, s := range tt.notStdout {
				if strings.Contains(stdout, s) {
					t.Errorf("stdout %q contains %q", stdout, s)
				}
			}
			if stderr != tt.stderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.stderr)
			}

			destroy(t, h)
			assertGone(t, d, h, task.NetnsPath)
			// A second Destroy finds nothing and is fine.
			destroy(t, h)
		})
	}
}

func TestStop(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())

	tests := []struct {
		name     string
		script   string
		timeout  time.Duration
		wantCode int
	}{
		// PID 1 without a handler ignores SIGTERM: killed after the timeout.
		{name: "killed after timeout", script: "exec sleep 1000", timeout: time.Second, wantCode: 137},
		{name: "stops on SIGTERM", script: `trap "exit 7" TERM; while :; do sleep 0.1; done`, timeout: 30 * time.Second, wantCode: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", tt.script}})
			h := startTask(t, d, task)
			ctx, cancel := context.WithTimeout(context.Background(), 2*tt.timeout+30*time.Second)
			defer cancel()
			if err := h.Stop(ctx, tt.timeout); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			res := waitTask(t, h)
			if res.ExitCode != tt.wantCode {
				t.Fatalf("Wait after Stop = %+v, want exit code %d", res, tt.wantCode)
			}
			// Stopping a stopped container is fine.
			if err := h.Stop(ctx, tt.timeout); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
			destroy(t, h)
			assertGone(t, d, h, task.NetnsPath)
		})
	}
}

// TestDestroyRunning destroys a task that still runs: Destroy kills it and
// returns only once neither podman nor conmon holds the namespace.
func TestDestroyRunning(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []any{"1000"}})
	h := startTask(t, d, task)
	hh := h.(*handle)
	if hh.conmon == nil {
		t.Fatal("Start did not find the container's conmon")
	}
	conmonPid := hh.conmon.PID()

	// The holder check must see a holder when there is one.
	f, err := os.Open(task.NetnsPath)
	if err != nil {
		t.Fatal(err)
	}
	holders := netnsHolders(t, task.NetnsPath)
	f.Close()
	if len(holders) != 1 {
		t.Fatalf("netnsHolders with one open fd = %v", holders)
	}

	destroy(t, h)
	assertGone(t, d, h, task.NetnsPath)
	if err := unix.Kill(conmonPid, 0); !errors.Is(err, unix.ESRCH) {
		// It may be a zombie not yet reaped by PID 1, which holds nothing.
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", conmonPid))
		if !strings.Contains(string(stat), ") Z ") {
			t.Errorf("conmon %d still runs after Destroy: %s", conmonPid, stat)
		}
	}
	res := waitTask(t, h)
	if res.Err == nil {
		t.Errorf("Wait after Destroy = %+v, want Err (container vanished)", res)
	}
}

// TestCleanupAfterDeadDriver removes a container whose driver is gone,
// from its recorded handle only.
func TestCleanupAfterDeadDriver(t *testing.T) {
	requirePodman(t)
	dataDir := t.TempDir()
	d1 := newDriver(t, dataDir)
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []any{"1000"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := d1.Start(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	state := h.State()
	forget(h)
	// The "dead" berth: its service goes away, its container keeps running.
	if err := d1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := podmanNames(t, state.ContainerName); got != state.ContainerName {
		t.Fatalf("container should outlive its driver, podman ps -a says %q", got)
	}

	d2 := newDriver(t, dataDir)
	if err := d2.Cleanup(ctx, state); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	assertGone(t, d2, h, task.NetnsPath)
	// Nothing left is not an error, by ID or by name.
	if err := d2.Cleanup(ctx, state); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
	state.ContainerID = ""
	if err := d2.Cleanup(ctx, state); err != nil {
		t.Errorf("Cleanup by name: %v", err)
	}
}

// TestStartReplacesLeftover starts a task whose container from an earlier
// run was never removed.
func TestStartReplacesLeftover(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []any{"1000"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old, err := d.Start(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	forget(old)
	h := startTask(t, d, task)
	if h.State().ContainerID == old.State().ContainerID {
		t.Fatal("second Start reused the old container")
	}
	if ids, _ := d.ListByLabel(ctx, LabelAllocID, task.AllocID); len(ids) != 1 {
		t.Errorf("containers of the alloc: %v, want only the new one", ids)
	}
}

func TestValidateConfig(t *testing.T) {
	// Needs no service: ValidateConfig is pure.
	d := &Driver{}
	tests := []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"missing image", map[string]any{"command": "/bin/sh"}, "podman: config.image is required"},
		{"bad args type", map[string]any{"image": testImage, "args": "-c"}, "podman: config.args must be a list of strings"},
		{"unknown key", map[string]any{"image": testImage, "mounts": []any{}}, "podman: unknown config key(s) config.mounts (known: apparmor_profile, arch, args, auth,"},
		{"ok", map[string]any{"image": testImage, "args": []any{"-c", "true"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.ValidateConfig(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidateConfig: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ValidateConfig = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestMissingImage(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	task := testTask(t, map[string]any{"image": "btpod-nosuch:latest"})
	_, err := d.Start(context.Background(), task)
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "scripts/image/build-busybox.sh") {
		t.Fatalf("Start = %v, want ErrImageNotFound naming the build script", err)
	}
	if got := podmanNames(t, ContainerName(task.AllocID, task.TaskName)); got != "" {
		t.Errorf("failed Start left %q", got)
	}
}

// TestStartFailureLeavesNothing: a command that does not exist fails in
// start, after create; the container must not stay.
func TestStartFailureLeavesNothing(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	task := testTask(t, map[string]any{"image": testImage, "command": "/btpod/no/such/binary"})
	_, err := d.Start(context.Background(), task)
	if err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if got := podmanNames(t, ContainerName(task.AllocID, task.TaskName)); got != "" {
		t.Errorf("failed Start left %q", got)
	}
	if holders := netnsHolders(t, task.NetnsPath); len(holders) > 0 {
		t.Errorf("failed Start left holders of the namespace: %v", holders)
	}
}

// A stop that lands while Start talks to podman (the seed job's stop under
// load) must leave no container, whichever request it cuts short: a
// create that podman finishes after berth stopped listening once left a
// "created" container nothing removed.
func TestStartCutShortLeavesNothing(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []string{"30"}})
			ctx, cancel := context.WithTimeout(context.Background(), after)
			defer cancel()
			h, err := d.Start(ctx, task)
			if err == nil {
				// Started before the stop: stopping it is the caller's
				// part, as the runner does.
				destroy(t, h)
			}
			// What podman still had in hand when Start returned shows up
			// within a moment, if it was going to.
			time.Sleep(time.Second)
			if got := podmanNames(t, ContainerName(task.AllocID, task.TaskName)); got != "" {
				t.Errorf("Start cut short after %s (err %v) left %q", after, err, got)
			}
			if holders := netnsHolders(t, task.NetnsPath); len(holders) > 0 {
				t.Errorf("Start cut short after %s left holders of the namespace: %v", after, holders)
			}
		})
	}
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestServiceLifecycle: with nothing on the socket the driver starts a
// service, another driver on that socket uses it without owning it, and
// Close of the owner stops it.
func TestServiceLifecycle(t *testing.T) {
	requirePodman(t)
	ctx := context.Background()
	d1 := newDriver(t, t.TempDir())
	if d1.svc == nil {
		t.Fatal("driver did not start its own service")
	}
	pid := d1.svc.own.cmd.Process.Pid
	conf := readFile(t, d1.confPath)
	for _, s := range []string{`runtime = "runc"`, `cgroup_manager = "cgroupfs"`, `events_logger = "file"`, "nofile="} {
		if !strings.Contains(conf, s) {
			t.Errorf("containers.conf lacks %s:\n%s", s, conf)
		}
	}
	env := readFile(t, fmt.Sprintf("/proc/%d/environ", pid))
	if !strings.Contains(env, "CONTAINERS_CONF="+d1.confPath+"\x00") {
		t.Errorf("service %d does not run with CONTAINERS_CONF=%s", pid, d1.confPath)
	}

	d2, err := New(ctx, Options{Socket: d1.socket, DataDir: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if d2.svc != nil {
		t.Error("driver took ownership of a service that answered")
	}
	if err := d2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Ping(ctx, d1.socket); err != nil {
		t.Fatalf("service gone after Close of a driver that did not own it: %v", err)
	}

	if err := d1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Errorf("service PID %d still exists after Close", pid)
	}
	if _, err := os.Stat(d1.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left after Close (%v)", d1.socket, err)
	}
	if err := d1.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestServiceSharedByOneDataDir: berth processes on one data dir (an agent
// and `berth run`, say) share berth's service; the last to close stops it,
// whichever started it.
func TestServiceSharedByOneDataDir(t *testing.T) {
	requirePodman(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	d1 := newDriver(t, dataDir)
	d2 := newDriver(t, dataDir)
	if d1.svc == nil || d1.svc.own == nil {
		t.Fatal("first driver did not start berth's service")
	}
	if d2.svc == nil || d2.svc.own != nil {
		t.Fatal("second driver on the data dir did not share the first's service")
	}
	pid := d1.svc.own.cmd.Process.Pid
	if err := d1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Ping(ctx, d2.socket); err != nil {
		t.Fatalf("service stopped while another driver used it: %v", err)
	}
	if err := d2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !processGone(pid) {
		t.Errorf("service PID %d still runs after the last driver closed", pid)
	}
}

// TestStaleServiceReaped: a service started by a berth that died is
// stopped and replaced, not adopted.
func TestStaleServiceReaped(t *testing.T) {
	requirePodman(t)
	dataDir := t.TempDir()
	stateDir := filepath.Join(dataDir, "podman")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(stateDir, "podman.sock")
	conf := filepath.Join(stateDir, "containers.conf")
	if err := os.WriteFile(conf, []byte(containersConf(hostRlimits())), 0o600); err != nil {
		t.Fatal(err)
	}
	stale := exec.Command("podman", "system", "service", "--time=0", "unix://"+sock)
	stale.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	if err := stale.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = stale.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = stale.Process.Kill()
		<-exited
	})
	if err := os.WriteFile(filepath.Join(stateDir, "service.pid"), []byte(strconv.Itoa(stale.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(sock)
	defer c.close()
	for i := 0; c.ping(context.Background()) != nil; i++ {
		if i > 500 {
			t.Fatal("stale service did not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}

	d := newDriver(t, dataDir)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("stale service still runs")
	}
	if d.svc == nil || d.svc.own == nil || d.svc.own.cmd.Process.Pid == stale.Process.Pid {
		t.Fatal("driver adopted the stale service instead of starting its own")
	}
	if err := Ping(context.Background(), d.socket); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPInNetns serves HTTP with busybox httpd in the task's namespace
// and fetches it over that namespace's loopback.
func TestHTTPInNetns(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	task := testTask(t, map[string]any{
		"image":   testImage,
		"command": "/bin/sh",
		// Its own page, so that the test does not depend on the image's.
		"args": []any{"-c", "mkdir -p /tmp/www && echo btpod-page-$BTPOD_ENV > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"},
	})
	h := startTask(t, d, task)
	ns := filepath.Base(task.NetnsPath)
	wget := []string{"netns", "exec", ns, "wget", "-q", "-T", "2", "-O-", "http://127.0.0.1:8080/"}
	if _, err := exec.LookPath("wget"); err != nil {
		wget = []string{"netns", "exec", ns, "busybox", "wget", "-q", "-T", "2", "-O-", "http://127.0.0.1:8080/"}
	}
	var out []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out, err = exec.Command("ip", wget...).CombinedOutput(); err == nil {
			break
		}
	}
	if err != nil || !strings.Contains(string(out), "btpod-page-hello-env") {
		t.Fatalf("wget in %s: %v: %s", ns, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// httpd as PID 1 ignores SIGTERM: this is the kill path.
	if err := h.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	waitTask(t, h)
	destroy(t, h)
	assertGone(t, d, h, task.NetnsPath)
}

// TestServiceRevived: berth's podman service killed under a running
// driver (the chaos suite's "podman service" death) is started again by
// the next request that cannot reach it; a task already running lives on
// in its conmon and is stopped through the new service.
func TestServiceRevived(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	if d.svc == nil || d.svc.own == nil {
		t.Fatal("driver did not start its own service")
	}
	running := startTask(t, d, testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []any{"1000"}}))
	old := d.svc.own.cmd.Process.Pid
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.svc.own.exited

	h := startTask(t, d, testTask(t, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "exit 3"}}))
	if res := waitTask(t, h); res.ExitCode != 3 {
		t.Errorf("task through the revived service: exit %d, want 3", res.ExitCode)
	}
	d.svc.mu.Lock()
	cur := d.svc.own
	d.svc.mu.Unlock()
	if cur == nil || cur.cmd.Process.Pid == old || processGone(cur.cmd.Process.Pid) {
		t.Fatalf("no new podman service after the old one (pid %d) was killed", old)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := running.Stop(ctx, time.Second); err != nil {
		t.Errorf("stopping the task that ran across the service's death: %v", err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !processGone(cur.cmd.Process.Pid) {
		t.Errorf("revived service %d still runs after Close", cur.cmd.Process.Pid)
	}
}
