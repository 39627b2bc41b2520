package podman

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

func ctx60(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startForgotten starts a task with a driver that then "dies": its handle
// is dropped and its service let go. The container runs on under conmon.
func startForgotten(t *testing.T, dataDir string, task *driver.Task, before ...func()) store.TaskHandle {
	t.Helper()
	d1 := newDriver(t, dataDir)
	h, err := d1.Start(ctx60(t), task)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for _, fn := range before {
		fn()
	}
	st := h.State()
	if st.AllocID != task.AllocID || st.Task != task.TaskName {
		t.Fatalf("State %+v lacks the alloc and task", st)
	}
	forget(h)
	return st
}

// A container started by one berth is re-attached by the next: same
// container, its log copy goes on without repeating a line, and its exit
// code is podman's.
func TestRecoverRunning(t *testing.T) {
	requirePodman(t)
	dataDir := t.TempDir()
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sh",
		"args": []any{"-c", `echo before; trap "echo got TERM; exit 5" TERM; while :; do sleep 0.1; done`}})
	stdout := task.LogDir + "/" + task.TaskName + ".stdout.0"
	st := startForgotten(t, dataDir, task, func() {
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(readFile(t, stdout), "before") {
			if time.Now().After(deadline) {
				t.Fatal("no output before the driver died")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	d2 := newDriver(t, dataDir)
	h, err := d2.Recover(ctx60(t), st)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	t.Cleanup(func() { _ = h.Destroy(context.Background()) })
	if got := h.State(); got.ContainerID != st.ContainerID || got.ContainerName != st.ContainerName {
		t.Fatalf("recovered %+v, recorded %+v", got, st)
	}
	if err := h.Stop(ctx60(t), 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	res := waitTask(t, h)
	if res.ExitCode != 5 {
		t.Fatalf("result %+v, want exit 5", res)
	}
	destroy(t, h)
	if got := readFile(t, stdout); got != "before\ngot TERM\n" {
		t.Fatalf("stdout %q", got)
	}
	assertGone(t, d2, h, task.NetnsPath)
}

// A container that exited while no berth watched reports its exit code.
func TestRecoverExited(t *testing.T) {
	requirePodman(t)
	dataDir := t.TempDir()
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "echo bye; exit 7"}})
	st := startForgotten(t, dataDir, task)
	d2 := newDriver(t, dataDir)
	deadline := time.Now().Add(30 * time.Second)
	for {
		is, err := d2.c.inspect(ctx60(t), st.ContainerID)
		if err == nil && isExited(is.State.Status) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container did not exit: %+v %v", is, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h, err := d2.Recover(ctx60(t), st)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	t.Cleanup(func() { _ = h.Destroy(context.Background()) })
	if res := waitTask(t, h); res.ExitCode != 7 {
		t.Fatalf("result %+v, want 7", res)
	}
	destroy(t, h)
	if got := readFile(t, task.LogDir+"/"+task.TaskName+".stdout.0"); got != "bye\n" {
		t.Fatalf("stdout %q", got)
	}
}

// Another data dir's berth does not adopt the container (store label), and
// a container gone is not recoverable.
func TestRecoverRefuses(t *testing.T) {
	requirePodman(t)
	dataDir := t.TempDir()
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sleep", "args": []any{"1000"}})
	st := startForgotten(t, dataDir, task)
	other := newDriver(t, t.TempDir())
	if h, err := other.Recover(ctx60(t), st); !errors.Is(err, driver.ErrNotRecoverable) || !strings.Contains(err.Error(), "store label") {
		if h != nil {
			_ = h.Destroy(context.Background())
		}
		t.Fatalf("Recover by another data dir: %v", err)
	}
	wrong := st
	wrong.Task = "other"
	d2 := newDriver(t, dataDir)
	if _, err := d2.Recover(ctx60(t), wrong); !errors.Is(err, driver.ErrNotRecoverable) {
		t.Fatalf("Recover of another task's handle: %v", err)
	}
	if err := d2.Cleanup(ctx60(t), st); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.Recover(ctx60(t), st); !errors.Is(err, driver.ErrNotRecoverable) {
		t.Fatalf("Recover of a removed container: %v", err)
	}
}

// Containers carry the store identity; Leftovers finds them by it, with
// their allocation, and RemoveLeftover removes them. The task user is the
// container's.
func TestLeftoversAndUser(t *testing.T) {
	requirePodman(t)
	dataDir := t.TempDir()
	task := testTask(t, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "id -u; sleep 1000"}})
	task.User = "65534"
	st := startForgotten(t, dataDir, task)
	d := newDriver(t, dataDir)
	is, err := d.c.inspect(ctx60(t), st.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if is.Config.Labels[LabelStore] != store.IDFor(dataDir) || is.Config.Labels[LabelAllocID] != task.AllocID {
		t.Fatalf("labels %v", is.Config.Labels)
	}
	ls, err := d.Leftovers(ctx60(t), store.IDFor(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].ID != st.ContainerID || ls[0].AllocID != task.AllocID || ls[0].Task != task.TaskName {
		t.Fatalf("Leftovers = %+v", ls)
	}
	if other, err := d.Leftovers(ctx60(t), store.IDFor(t.TempDir())); err != nil || len(other) != 0 {
		t.Fatalf("another data dir's Leftovers = %+v, %v", other, err)
	}
	if err := d.RemoveLeftover(ctx60(t), ls[0]); err != nil {
		t.Fatal(err)
	}
	if got := podmanNames(t, st.ContainerName); got != "" {
		t.Fatalf("container %q still there", got)
	}
	if out := readFile(t, task.LogDir+"/"+task.TaskName+".stdout.0"); out != "" && out != "65534\n" {
		t.Fatalf("stdout %q, want the uid 65534", out)
	}
}
