package exec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

const testPrefix = "btexec"

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces, process groups and cgroups")
	}
}

func randSuffix(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// newNetns makes a named network namespace with lo up, deleted in Cleanup.
func newNetns(tb testing.TB) string {
	tb.Helper()
	name := testPrefix + "-" + randSuffix(tb)
	if out, err := osexec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		tb.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	tb.Cleanup(func() {
		if out, err := osexec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			tb.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if out, err := osexec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		tb.Fatalf("ip -n %s link set lo up: %v: %s", name, err, out)
	}
	return "/run/netns/" + name
}

// newTask is a task with an allocation dir of its own, laid out as the
// runner lays it out (logs at its top).
func newTask(tb testing.TB, netns string, cfg map[string]any) *driver.Task {
	tb.Helper()
	dir := tb.TempDir()
	// TempDir is 0700: the exec task's user must be able to use its dirs.
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return &driver.Task{
		AllocID:   testPrefix + "-" + randSuffix(tb),
		JobName:   "job",
		GroupName: "group",
		TaskName:  "web",
		Config:    cfg,
		// As the runner sets it for raw_exec (exec's is /alloc).
		Env:       map[string]string{"BERTH_TEST": "1", "NOMAD_ALLOC_DIR": driver.SharedDir(dir)},
		NetnsPath: netns,
		LogDir:    driver.LogDir(dir),
		AllocDir:  dir,
	}
}

func sh(script string) map[string]any {
	return map[string]any{"command": "/bin/sh", "args": []any{"-c", script}}
}

// start starts t and destroys it in Cleanup whatever the test does.
func start(tb testing.TB, d *Driver, t *driver.Task) driver.Handle {
	tb.Helper()
	h, err := d.Start(ctxT(tb), t)
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() {
		if err := h.Destroy(context.Background()); err != nil {
			tb.Errorf("Destroy in cleanup: %v", err)
		}
	})
	return h
}

func wait(tb testing.TB, h driver.Handle) *driver.ExitResult {
	tb.Helper()
	res, err := h.Wait(ctxT(tb))
	if err != nil {
		tb.Fatalf("Wait: %v", err)
	}
	return res
}

func readLog(tb testing.TB, t *driver.Task, stream string) string {
	tb.Helper()
	// Every retained file, as berth's log reader serves them.
	b, err := logfile.ReadTail(context.Background(), t.LogDir, t.TaskName+"."+stream, 1<<30)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// testStore keeps this package's tasks apart from any berth's on the host.
var testStore = "btexec" + hex.EncodeToString([]byte{byte(os.Getpid()), byte(os.Getpid() >> 8)})

func drivers() []*Driver {
	return []*Driver{NewRawExec(Options{StoreID: testStore}), NewExec(Options{StoreID: testStore})}
}

func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestValidateConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]any
		want    TaskConfig
		wantErr []string
		warn    bool
	}{
		{name: "minimal", cfg: map[string]any{"command": "/bin/true"}, want: TaskConfig{Command: "/bin/true"}},
		{name: "full", cfg: map[string]any{"command": "sh", "args": []any{"-c", "x"}, "work_dir": "/tmp"},
			want: TaskConfig{Command: "sh", Args: []string{"-c", "x"}, WorkDir: "/tmp"}},
		// As Nomad's list(string): HCL numbers and bools become strings.
		{name: "numbers in args", cfg: map[string]any{"command": "sleep", "args": []any{3, 2.5, int64(7), true}},
			want: TaskConfig{Command: "sleep", Args: []string{"3", "2.5", "7", "true"}}},
		{name: "cwd alias", cfg: map[string]any{"command": "sh", "args": []string{"a"}, "cwd": "/"},
			want: TaskConfig{Command: "sh", Args: []string{"a"}, WorkDir: "/"}, warn: true},
		{name: "same work_dir and cwd", cfg: map[string]any{"command": "sh", "cwd": "/", "work_dir": "/"},
			want: TaskConfig{Command: "sh", WorkDir: "/"}, warn: true},
		{name: "every Nomad key", cfg: map[string]any{"command": "sh", "pid_mode": "host", "ipc_mode": "private",
			"cap_add": []any{"NET_BIND_SERVICE", "cap_sys_time"}, "cap_drop": []any{"all"}, "oom_score_adj": int64(500),
			"denied_envvars": []any{"AWS_*", "SECRET"}},
			want: TaskConfig{Command: "sh", PIDMode: "host", IPCMode: "private", CapAdd: []string{"net_bind_service", "sys_time"},
				CapDrop: []string{"all"}, OOMScoreAdj: 500, DeniedEnvvars: []string{"AWS_*", "SECRET"}}},
		{name: "bad modes and caps", cfg: map[string]any{"command": "sh", "pid_mode": "shared", "cap_add": []any{"cap_fly"}, "oom_score_adj": int64(-5)},
			wantErr: []string{`config.pid_mode must be "private" or "host", got "shared"`, `config.cap_add[0] "cap_fly" is not a Linux capability`, "config.oom_score_adj must be from 0 to 1000, got -5"}},
		{name: "cgroup overrides", cfg: map[string]any{"command": "sh", "cgroup_v2_override": "custom.slice/app", "cgroup_v1_override": map[string]any{"pids": "app"}},
			wantErr: []string{"config.cgroup_v1_override is not supported: berth keeps each task in a cgroup of its own", "config.cgroup_v2_override is not supported"}},
		{name: "oom not a number", cfg: map[string]any{"command": "sh", "oom_score_adj": "5"}, wantErr: []string{"config.oom_score_adj must be a whole number, got string"}},
		{name: "missing command", cfg: map[string]any{}, wantErr: []string{"raw_exec: config.command is required"}},
		{name: "nil config", cfg: nil, wantErr: []string{"raw_exec: config.command is required"}},
		{name: "blank command", cfg: map[string]any{"command": "  "}, wantErr: []string{"config.command is required"}},
		{name: "command not string", cfg: map[string]any{"command": 3.0}, wantErr: []string{"config.command must be a string, got float64"}},
		{name: "unknown keys", cfg: map[string]any{"command": "x", "image": "a", "ports": []any{}},
			wantErr: []string{"raw_exec: config has unknown keys: image, ports"}},
		{name: "bad arg", cfg: map[string]any{"command": "x", "args": []any{"a", []any{"b"}, map[string]any{}}},
			wantErr: []string{"config.args[1] must be a string, got []interface {}", "config.args[2] must be a string, got map[string]interface {}"}},
		{name: "args not list", cfg: map[string]any{"command": "x", "args": "a b"}, wantErr: []string{"config.args must be a list of strings"}},
		{name: "cwd conflict", cfg: map[string]any{"command": "x", "work_dir": "/a", "cwd": "/b"}, wantErr: []string{"config.cwd conflicts with work_dir"}, warn: true},
		{name: "work_dir not string", cfg: map[string]any{"command": "x", "work_dir": 1}, wantErr: []string{"config.work_dir must be a string"}},
		{name: "all at once", cfg: map[string]any{"zzz": 1, "args": 2},
			wantErr: []string{"unknown keys: zzz", "config.command is required", "config.args must be"}},
	}
	d := NewRawExec(Options{StoreID: testStore})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.ValidateConfig(tc.cfg)
			got, warns, perr := parseConfig(d.Name(), tc.cfg)
			if driver.OnlyWarnings(err) != (perr == nil) {
				t.Fatalf("ValidateConfig and parseConfig disagree: %v / %v", err, perr)
			}
			if (len(warns) > 0) != tc.warn {
				t.Fatalf("warnings = %v, want some: %v", warns, tc.warn)
			}
			if len(tc.wantErr) == 0 {
				if !driver.OnlyWarnings(err) {
					t.Fatalf("ValidateConfig: %v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("parsed %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateConfig(%v) = nil, want %q", tc.cfg, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestBuildEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"empty", nil, []string{"PATH=" + defaultPath}},
		{"default PATH added", map[string]string{"B": "x y", "A": ""}, []string{"A=", "B=x y", "PATH=" + defaultPath}},
		{"PATH kept", map[string]string{"PATH": "/x", "Z": "1"}, []string{"PATH=/x", "Z=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildEnv(tc.env); !slices.Equal(got, tc.want) {
				t.Fatalf("buildEnv = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cmd, path, workDir, want string
		wantErr                        bool
	}{
		{name: "in task PATH", cmd: "tool", path: "/nonexistent:" + dir, want: exe},
		{name: "relative PATH entry ignored", cmd: "tool", path: ".", workDir: dir, wantErr: true},
		{name: "absolute", cmd: exe, path: "", want: exe},
		{name: "relative to work_dir", cmd: "./tool", workDir: dir, want: exe},
		{name: "not executable", cmd: plain, wantErr: true},
		{name: "directory", cmd: dir, wantErr: true},
		{name: "missing", cmd: "btexec-no-such-tool", path: defaultPath, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lookPath(tc.cmd, tc.path, tc.workDir, nil)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("lookPath = %q, want error", got)
				}
				if !strings.Contains(err.Error(), "config.command") {
					t.Fatalf("error %q does not name config.command", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("lookPath = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCgroupName(t *testing.T) {
	d := NewExec(Options{StoreID: "s1"})
	if got := d.cgroupName("a1", "web server.x/y"); got != "s1.a1.web_server_x_y" {
		t.Fatalf("cgroupName = %q", got)
	}
}

// ifaces lists the interface names in a /proc/net/dev dump (up to a "---" line).
func ifaces(dump string) []string {
	var out []string
	dump, _, _ = strings.Cut(dump, "\n---\n")
	for _, line := range strings.Split(dump, "\n") {
		name, _, ok := strings.Cut(line, ":")
		if ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	slices.Sort(out)
	return out
}

func statID(path string) (dev, ino uint64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Dev, st.Ino, nil
}

// netnsHolders lists what in this test process refers to the namespace at
// path: open fds and threads inside it.
func netnsHolders(tb testing.TB, path string) []string {
	tb.Helper()
	dev, ino, err := statID(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, pattern := range []string{"/proc/self/fd/*", "/proc/self/task/*/ns/net"} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range matches {
			d, i, err := statID(m)
			if err == nil && d == dev && i == ino {
				out = append(out, m)
			}
		}
	}
	return out
}

func TestNetworkNamespace(t *testing.T) {
	requireRoot(t)
	hostDev, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	hostIfaces := ifaces(string(hostDev))
	netns := newNetns(t)
	tests := []struct {
		name  string
		netns string
		want  []string
	}{
		{name: "host", netns: "", want: hostIfaces},
		{name: "netns", netns: netns, want: []string{"lo"}},
	}
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.name, func(t *testing.T) {
				task := newTask(t, tc.netns, sh("cat /proc/self/net/dev; echo ---; ip -o link"))
				h := start(t, d, task)
				if tc.netns != "" {
					if held := netnsHolders(t, tc.netns); len(held) > 0 {
						t.Errorf("after Start the test process still holds the netns: %v", held)
					}
				}
				if res := wait(t, h); !res.Successful() {
					t.Fatalf("task failed: %+v, stderr %q", res, readLog(t, task, "stderr"))
				}
				if err := h.Destroy(ctxT(t)); err != nil {
					t.Fatalf("Destroy: %v", err)
				}
				if tc.netns != "" {
					if held := netnsHolders(t, tc.netns); len(held) > 0 {
						t.Errorf("after Destroy the test process still holds the netns: %v", held)
					}
				}
				out := readLog(t, task, "stdout")
				if got := ifaces(out); !slices.Equal(got, tc.want) {
					t.Fatalf("task sees interfaces %v, want %v\n%s", got, tc.want, out)
				}
				if tc.netns != "" && !strings.Contains(out, "1: lo: <LOOPBACK,UP") {
					t.Fatalf("lo is not up in the task's view:\n%s", out)
				}
			})
		}
	}
}

func TestStartErrors(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name  string
		mut   func(*driver.Task)
		want  string
		isErr error
	}{
		{name: "bad config", mut: func(t *driver.Task) { t.Config = map[string]any{"args": []any{"x"}} },
			want: "config.command is required", isErr: ErrInvalidConfig},
		{name: "missing command", mut: func(t *driver.Task) { t.Config = map[string]any{"command": "btexec-nope"} },
			want: "not found in", isErr: os.ErrNotExist},
		{name: "missing netns", mut: func(t *driver.Task) { t.NetnsPath = "/run/netns/btexec-missing-" + t.AllocID },
			want: "open network namespace", isErr: os.ErrNotExist},
		{name: "netns path not a netns", mut: func(t *driver.Task) { t.NetnsPath = "/proc/self/ns/mnt" },
			want: "enter network namespace", isErr: syscall.EINVAL},
		{name: "missing work_dir", mut: func(t *driver.Task) {
			t.Config = map[string]any{"command": "/bin/true", "work_dir": "/nonexistent/btexec"}
		}, want: "config.work_dir", isErr: os.ErrNotExist},
	}
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.name, func(t *testing.T) {
				task := newTask(t, "", map[string]any{"command": "/bin/true"})
				tc.mut(task)
				before := countFDs(t)
				h, err := d.Start(ctxT(t), task)
				if err == nil {
					_ = h.Destroy(context.Background())
					t.Fatal("Start succeeded")
				}
				if !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.isErr) {
					t.Fatalf("Start: %v; want %q and errors.Is %v", err, tc.want, tc.isErr)
				}
				if after := countFDs(t); after != before {
					ents, _ := os.ReadDir("/proc/self/fd")
					var links []string
					for _, e := range ents {
						l, _ := os.Readlink("/proc/self/fd/" + e.Name())
						links = append(links, e.Name()+"="+l)
					}
					t.Fatalf("open fds went from %d to %d: %v", before, after, links)
				}
				assertNoCgroup(t, d, task)
			})
		}
	}
}

func countFDs(tb testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}

func assertNoCgroup(tb testing.TB, d *Driver, task *driver.Task) {
	tb.Helper()
	rel := filepath.Join(d.cgroupParent, d.cgroupName(task.AllocID, task.TaskName))
	for _, root := range d.hierarchies().All() {
		if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
			tb.Errorf("cgroup %s left behind", filepath.Join(root, rel))
		}
	}
}

func TestExit(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantSignal int
		wantOut    string
		wantErr    string
	}{
		{name: "exit 0", script: "echo out; echo err >&2", wantOut: "out\n", wantErr: "err\n"},
		{name: "exit 7", script: "echo seven; exit 7", wantCode: 7, wantOut: "seven\n"},
		{name: "SIGKILL", script: "echo bye >&2; kill -KILL $$", wantCode: 137, wantSignal: 9, wantErr: "bye\n"},
		{name: "SIGTERM", script: "kill -TERM $$", wantCode: 143, wantSignal: 15},
	}
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.name, func(t *testing.T) {
				if d.isolate && tc.wantSignal != 0 {
					// The exec task is its PID namespace's init, which
					// signals from inside the namespace cannot kill
					// (Nomad's exec behaves the same).
					t.Skip("a PID namespace's init ignores its own signals")
				}
				task := newTask(t, newNetns(t), sh(tc.script))
				h := start(t, d, task)
				res := wait(t, h)
				if res.ExitCode != tc.wantCode || res.Signal != tc.wantSignal || res.Err != nil {
					t.Fatalf("result %+v, want code %d signal %d", res, tc.wantCode, tc.wantSignal)
				}
				if res.Successful() != (tc.wantCode == 0) {
					t.Fatalf("Successful() = %v for %+v", res.Successful(), res)
				}
				if res.FinishedAt.Before(res.StartedAt) || res.StartedAt.IsZero() {
					t.Fatalf("bad times in %+v", res)
				}
				if again := wait(t, h); *again != *res {
					t.Fatalf("second Wait = %+v, first %+v", again, res)
				}
				if got := readLog(t, task, "stdout"); got != tc.wantOut {
					t.Errorf("stdout %q, want %q", got, tc.wantOut)
				}
				if got := readLog(t, task, "stderr"); got != tc.wantErr {
					t.Errorf("stderr %q, want %q", got, tc.wantErr)
				}
				// Stop after exit is a no-op; Destroy is idempotent.
				if err := h.Stop(ctxT(t), time.Second); err != nil {
					t.Fatalf("Stop after exit: %v", err)
				}
				for i := 0; i < 2; i++ {
					if err := h.Destroy(ctxT(t)); err != nil {
						t.Fatalf("Destroy #%d: %v", i+1, err)
					}
				}
			})
		}
	}
}

func TestLogsAppend(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	task := newTask(t, "", sh("echo run"))
	for i := 0; i < 2; i++ {
		h := start(t, d, task)
		wait(t, h)
	}
	if got := readLog(t, task, "stdout"); got != "run\nrun\n" {
		t.Fatalf("stdout after two runs %q", got)
	}
}

func TestEnv(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{name: "default PATH", env: map[string]string{"FOO": "bar", "SPACED": "a b  c", "EMPTY": ""},
			want: []string{"EMPTY=", "FOO=bar", "PATH=" + defaultPath, "SPACED=a b  c"}},
		{name: "own PATH", env: map[string]string{"PATH": "/usr/bin:/bin", "NOMAD_TASK_NAME": "web"},
			want: []string{"NOMAD_TASK_NAME=web", "PATH=/usr/bin:/bin"}},
	}
	t.Setenv("BTEXEC_MUST_NOT_LEAK", "1")
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.name, func(t *testing.T) {
				// env is found through the task's PATH, not berth's.
				task := newTask(t, "", map[string]any{"command": "env"})
				task.Env = tc.env
				h := start(t, d, task)
				if res := wait(t, h); !res.Successful() {
					t.Fatalf("env failed: %+v %s", res, readLog(t, task, "stderr"))
				}
				got := strings.Split(strings.TrimSuffix(readLog(t, task, "stdout"), "\n"), "\n")
				slices.Sort(got)
				want := tc.want
				if d.isolate {
					// exec tells the task where its dirs are in its root.
					want = append([]string{"NOMAD_ALLOC_DIR=/alloc", "NOMAD_SECRETS_DIR=/secrets", "NOMAD_TASK_DIR=/local"}, want...)
					slices.Sort(want)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("task env %q, want exactly %q", got, want)
				}
			})
		}
	}
}

// groupOf waits until the group led by pid has n live members and returns them.
func groupOf(tb testing.TB, pid, n int) []proc.Stat {
	tb.Helper()
	var members []proc.Stat
	waitFor(tb, strconv.Itoa(n)+" processes in group "+strconv.Itoa(pid), func() bool {
		var err error
		members, err = proc.GroupMembers(context.Background(), pid)
		if err != nil {
			tb.Fatal(err)
		}
		return len(members) == n
	})
	return members
}

func anyAlive(ps []proc.Stat) []int {
	var alive []int
	for _, p := range ps {
		if proc.Alive(p.PID, p.StartTime) {
			alive = append(alive, p.PID)
		}
	}
	return alive
}

func TestStop(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name       string
		script     string
		wantSignal int
	}{
		{name: "TERM honoured", script: "sleep 1000 & sleep 1000", wantSignal: 15},
		// SIG_IGN is inherited across fork and exec: nobody in the group dies of TERM.
		{name: "TERM ignored", script: `trap "" TERM; sleep 1000 & sleep 1000`, wantSignal: 9},
	}
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.name, func(t *testing.T) {
				task := newTask(t, newNetns(t), sh(tc.script))
				h := start(t, d, task)
				members := groupOf(t, h.State().PID, 3)
				if err := h.Stop(ctxT(t), 300*time.Millisecond); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				res := wait(t, h)
				want := tc.wantSignal
				if d.isolate && want == 15 {
					// The shell is its PID namespace's init and ignores
					// TERM; its sleeps die of it and it exits with 143.
					want = 0
				}
				if res.Signal != want || res.ExitCode != 128+tc.wantSignal {
					t.Fatalf("result %+v, want signal %d, exit code %d", res, want, 128+tc.wantSignal)
				}
				waitFor(t, "children gone after Stop", func() bool { return len(anyAlive(members)) == 0 })
				if err := h.Destroy(ctxT(t)); err != nil {
					t.Fatalf("Destroy: %v", err)
				}
				if alive := anyAlive(members); len(alive) > 0 {
					t.Fatalf("alive after Destroy: %v", alive)
				}
			})
		}
	}
}

func TestDestroyKillsChildren(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, newNetns(t), sh(`trap "" TERM; sleep 1000 & sleep 1000`))
			h := start(t, d, task)
			members := groupOf(t, h.State().PID, 3)
			if err := h.Destroy(ctxT(t)); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if alive := anyAlive(members); len(alive) > 0 {
				t.Fatalf("alive after Destroy: %v", alive)
			}
			if res := wait(t, h); res.Signal != 9 {
				t.Fatalf("result %+v, want SIGKILL", res)
			}
		})
	}
}

// A child that leaves the process group (setsid) is still in the task's
// cgroup, of raw_exec's as of exec's: Destroy kills it.
func TestTaskCgroup(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, newNetns(t), sh("setsid sleep 1000 & echo $! > $NOMAD_ALLOC_DIR/escaped.pid; sleep 1000"))
			pidFile := filepath.Join(driver.SharedDir(task.AllocDir), "escaped.pid")
			h := start(t, d, task)
			st := h.State()
			if st.Driver != d.Name() || st.PID <= 0 || st.PIDStartTime == 0 || st.SupervisorPID <= 0 {
				t.Fatalf("State = %+v", st)
			}
			if st.CgroupPath == "" {
				t.Skip("host has no writable cgroup: the task ran without one (cgroup assertions skipped)")
			}
			cg := h.(*handle).cg
			dirs := cg.Dirs()
			t.Logf("cgroups: %v", dirs)
			if st.CgroupPath != dirs[0] {
				t.Fatalf("recorded cgroup %q, want the primary %q", st.CgroupPath, dirs[0])
			}
			escaped := escapedChild(t, pidFile)
			for _, dir := range dirs {
				b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				if err != nil {
					t.Fatal(err)
				}
				pids := strings.Fields(string(b))
				for _, pid := range []int{st.PID, escaped.PID} {
					if !slices.Contains(pids, strconv.Itoa(pid)) {
						t.Errorf("%s/cgroup.procs = %v, lacks pid %d", dir, pids, pid)
					}
				}
			}
			if err := h.Destroy(ctxT(t)); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if proc.Alive(escaped.PID, escaped.StartTime) {
				_ = proc.KillIfSame(escaped.PID, escaped.StartTime, syscall.SIGKILL)
				t.Fatalf("child %d that left the process group survived Destroy", escaped.PID)
			}
			for _, dir := range dirs {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("cgroup %s still there after Destroy: %v", dir, err)
				}
			}
		})
	}
}

// escapedChild waits for the PID a task wrote of a child in a session of
// its own, and returns it.
func escapedChild(t *testing.T, pidFile string) proc.Stat {
	t.Helper()
	var escaped proc.Stat
	waitFor(t, "escaped pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid <= 0 {
			return false
		}
		// In exec's PID namespace the task wrote its own view of the PID:
		// find the host's through the task's cgroup.procs.
		if hostPID := hostPIDOf(pid, pidFile); hostPID > 0 {
			pid = hostPID
		}
		escaped, err = proc.ReadStat(pid)
		return err == nil && escaped.Comm == "sleep" && escaped.PGRP == escaped.PID
	})
	t.Cleanup(func() { _ = proc.KillIfSame(escaped.PID, escaped.StartTime, syscall.SIGKILL) })
	return escaped
}

// hostPIDOf maps a PID of some task's PID namespace to the host's by
// NSpid in /proc/*/status; 0 if none has it (the PID is the host's).
func hostPIDOf(nsPID int, _ string) int {
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		b, err := os.ReadFile("/proc/" + de.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) > 1 && f[len(f)-1] == strconv.Itoa(nsPID) {
					host, _ := strconv.Atoi(f[0])
					return host
				}
			}
		}
	}
	return 0
}

// When the task's main process ends, its supervisor kills what it left
// (row 5 of issue 10): a child in a session of its own does not outlive
// the task, even before Destroy.
func TestLeftoversDieWithTask(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, "", sh("setsid sleep 1000 & echo $! > $NOMAD_ALLOC_DIR/escaped.pid; sleep 0.3; exit 3"))
			h := start(t, d, task)
			escaped := escapedChild(t, filepath.Join(driver.SharedDir(task.AllocDir), "escaped.pid"))
			if res := wait(t, h); res.ExitCode != 3 {
				t.Fatalf("result %+v, want exit 3", res)
			}
			if proc.Alive(escaped.PID, escaped.StartTime) {
				t.Fatalf("child %d in its own session outlived the task", escaped.PID)
			}
		})
	}
}

func TestCleanupOrphan(t *testing.T) {
	requireRoot(t)
	for _, d := range drivers() {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, newNetns(t), sh(`trap "" TERM; sleep 1000 & sleep 1000`))
			h := start(t, d, task)
			rec := h.State()
			members := groupOf(t, rec.PID, 3)

			// A new berth process: fresh driver, only the record.
			fresh := newDriver(d.Name(), d.isolate, Options{StoreID: testStore})
			if err := fresh.Cleanup(ctxT(t), rec); err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			if alive := anyAlive(members); len(alive) > 0 {
				t.Fatalf("alive after Cleanup: %v", alive)
			}
			if res := wait(t, h); res.Signal != 9 {
				t.Fatalf("result %+v, want SIGKILL", res)
			}
			if rec.CgroupPath != "" {
				if _, err := os.Stat(rec.CgroupPath); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("cgroup %s still there after Cleanup: %v", rec.CgroupPath, err)
				}
			}
			// Nothing left: still fine.
			if err := fresh.Cleanup(ctxT(t), rec); err != nil {
				t.Fatalf("second Cleanup: %v", err)
			}
		})
	}
}

// A true orphan (parent gone, reparented to init) whose PID is recorded.
func TestCleanupReparented(t *testing.T) {
	requireRoot(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The shell exits at once; the sleep loses its parent.
	cmd := osexec.Command("/bin/sh", "-c", "sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > "+pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := proc.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.KillIfSame(orphan.PID, orphan.StartTime, syscall.SIGKILL) })
	if orphan.PGRP == orphan.PID {
		t.Fatalf("orphan %+v leads its own group; the test wants a group whose leader is gone", orphan)
	}
	// The record names the shell (the group leader), long gone and reaped.
	rec := store.TaskHandle{Driver: "raw_exec", PID: orphan.PGRP, PIDStartTime: orphan.StartTime}
	if err := NewRawExec(Options{StoreID: testStore}).Cleanup(ctxT(t), rec); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if proc.Alive(orphan.PID, orphan.StartTime) {
		t.Fatal("orphaned group member survived Cleanup")
	}
}

func TestCleanupWrongStartTime(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	task := newTask(t, "", sh("sleep 1000 & sleep 1000"))
	h := start(t, d, task)
	rec := h.State()
	members := groupOf(t, rec.PID, 3)

	tests := []struct {
		name  string
		start uint64
	}{
		{"later", rec.PIDStartTime + 1},
		{"earlier", rec.PIDStartTime - 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A record of the same PIDs with another start time, and no
			// cgroup to go by: the PIDs may have been reused.
			wrong := rec
			wrong.PIDStartTime = tc.start
			wrong.SupervisorStartTime = rec.SupervisorStartTime + tc.start - rec.PIDStartTime
			wrong.CgroupPath = ""
			if err := d.Cleanup(ctxT(t), wrong); err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			for _, m := range members {
				if !proc.Alive(m.PID, m.StartTime) {
					t.Fatalf("pid %d killed by a Cleanup with the wrong start time", m.PID)
				}
			}
			if !proc.Alive(rec.SupervisorPID, rec.SupervisorStartTime) {
				t.Fatalf("supervisor %d killed by a Cleanup with the wrong start time", rec.SupervisorPID)
			}
		})
	}
	if err := d.Cleanup(ctxT(t), rec); err != nil {
		t.Fatalf("Cleanup with the right record: %v", err)
	}
	if alive := anyAlive(members); len(alive) > 0 {
		t.Fatalf("alive after Cleanup: %v", alive)
	}
	if err := d.Cleanup(ctxT(t), store.TaskHandle{Driver: "podman", PID: rec.PID}); err == nil {
		t.Fatal("Cleanup accepted another driver's handle")
	}
}

func TestCleanupRefusesForeignCgroup(t *testing.T) {
	requireRoot(t)
	d := NewExec(Options{StoreID: testStore})
	h := d.hierarchies()
	if len(h.All()) == 0 {
		t.Skip("no cgroup hierarchy mounted")
	}
	// A cgroup that is not berth's: must be neither emptied nor removed.
	dir := filepath.Join(h.All()[0], testPrefix+"-"+randSuffix(t))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cgroup hierarchy %s not writable: %v", h.All()[0], err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(dir) })
	err := d.Cleanup(ctxT(t), store.TaskHandle{Driver: "exec", CgroupPath: dir})
	if err == nil || !strings.Contains(err.Error(), "not a berth task cgroup") {
		t.Fatalf("Cleanup of %s: %v", dir, err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("foreign cgroup removed: %v", err)
	}
}

func TestWaitContext(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	h := start(t, d, newTask(t, "", sh(`trap "" TERM; sleep 1000`)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := h.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want DeadlineExceeded", err)
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := h.Stop(canceled, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with canceled ctx: %v", err)
	}
}

func BenchmarkStartWaitDestroy(b *testing.B) {
	requireRoot(b)
	netns := newNetns(b)
	for _, d := range drivers() {
		b.Run(d.Name(), func(b *testing.B) {
			task := newTask(b, netns, map[string]any{"command": "/bin/true"})
			ctx := ctxT(b)
			for b.Loop() {
				h, err := d.Start(ctx, task)
				if err != nil {
					b.Fatal(err)
				}
				if res, err := h.Wait(ctx); err != nil || !res.Successful() {
					b.Fatalf("%+v %v", res, err)
				}
				if err := h.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestExecWithoutCgroups(t *testing.T) {
	requireRoot(t)
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	// A root with no cgroup hierarchy mounted: exec must run tasks anyway.
	d := NewExec(Options{Logger: log, CgroupRoot: t.TempDir()})
	for i := 0; i < 2; i++ {
		task := newTask(t, "", sh("exit 3"))
		h := start(t, d, task)
		if st := h.State(); st.CgroupPath != "" || st.Driver != "exec" {
			t.Fatalf("State = %+v, want no cgroup", st)
		}
		if res := wait(t, h); res.ExitCode != 3 {
			t.Fatalf("result %+v", res)
		}
	}
	if n := strings.Count(logs.String(), "running tasks without them"); n != 1 {
		t.Fatalf("%d warnings about missing cgroups, want 1:\n%s", n, logs.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
