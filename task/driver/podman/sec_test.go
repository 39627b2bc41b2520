package podman

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/task/driver"
)

// privileged = true is refused, naming the field, unless the node allows
// it; allowed, it is honoured.
func TestSecPodmanPrivileged(t *testing.T) {
	cfg := map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "grep CapEff /proc/self/status"}, "privileged": true}
	err := Policy{}.ValidateConfig(cfg)
	var ce interface{ ConfigField() string }
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.ConfigField() != "privileged" ||
		!strings.Contains(err.Error(), "podman_allow_privileged") {
		t.Fatalf("validate privileged: %v", err)
	}
	if err := (Policy{AllowPrivileged: true}).ValidateConfig(cfg); err != nil {
		t.Fatalf("validate privileged where allowed: %v", err)
	}

	requirePodman(t)
	d := newDriver(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if h, err := d.Start(ctx, testTask(t, cfg)); err == nil {
		_ = h.Destroy(ctx)
		t.Fatal("a privileged container started on a node that does not allow it")
	} else if !strings.Contains(err.Error(), "config.privileged") {
		t.Fatalf("Start: %v", err)
	}

	d.policy.AllowPrivileged = true
	task := testTask(t, cfg)
	h := startTask(t, d, task)
	if res := waitTask(t, h); !res.Successful() {
		t.Fatalf("privileged task: %+v", res)
	}
	out := readFile(t, task.LogDir+"/"+task.TaskName+".stdout.0")
	// Everything berth has (this host's root lacks CAP_SYS_RESOURCE),
	// cap_sys_admin (21) above all, which no default set has.
	v, ok := strings.CutPrefix(strings.TrimSpace(out), "CapEff:")
	caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
	if !ok || err != nil || caps&(1<<21) == 0 {
		t.Fatalf("privileged = true was not honoured: %s", out)
	}
}

// podman exec is given the request's variables without the loader's.
func TestSecPodmanExecEnvDropsLoaderVars(t *testing.T) {
	got := strings.Join(execEnvArgs(map[string]string{"TERM": "xterm", "LD_PRELOAD": "/t/x.so", "LD_LIBRARY_PATH": "/t", "A=B": "c", "MY_LD": "1"}), " ")
	if want := "--env MY_LD=1 --env TERM=xterm"; got != want {
		t.Errorf("execEnvArgs = %q, want %q", got, want)
	}
}

// podman exec takes the container's user (its configuration, podman's
// record), whatever its processes became, and gets nothing but 0-2.
func TestSecPodmanExecIdentity(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "exec sleep 1000"}})
	task.User = "nobody"
	h := startTask(t, d, task)
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := h.(driver.Execer).Exec(ctx, &driver.ExecRequest{Cmd: []string{"/bin/sh", "-c", "id -u; grep CapEff /proc/self/status; ls /proc/self/fd"}, Stdout: f, Stderr: f})
	if err != nil || code != 0 {
		t.Fatalf("exec: %d %v", code, err)
	}
	out := readFile(t, f.Name())
	if !strings.HasPrefix(out, "65534\n") || !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Fatalf("podman exec ran as:\n%s", out)
	}
}
