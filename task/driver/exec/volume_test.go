package exec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/task/driver"
)

// A host volume is bound into an exec task's root at its destination:
// the task reads the host's file and writes one the host sees; a
// read-only mount refuses the write.
func TestExecHostVolume(t *testing.T) {
	requireRoot(t)
	rw, ro := t.TempDir(), t.TempDir()
	for _, dir := range []string{rw, ro} {
		// TempDir is 0700 and the task runs as nobody.
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "in"), []byte("from-host-"+filepath.Base(dir)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	task := newTask(t, "", sh(`cat /data/in /srv/ro/in && echo from-task > /data/out && echo written; `+
		`echo x > /srv/ro/out 2>/dev/null && echo ro-writable; true`))
	task.Mounts = []driver.Mount{{Source: rw, Dest: "/data"}, {Source: ro, Dest: "/srv/ro", ReadOnly: true}}
	res, out := runTask(t, NewExec(Options{StoreID: testStore}), task)
	if !res.Successful() {
		t.Fatalf("exec task failed: %+v\n%s", res, out)
	}
	want := "from-host-" + filepath.Base(rw) + "\nfrom-host-" + filepath.Base(ro) + "\nwritten"
	if strings.TrimSpace(out) != want {
		t.Errorf("task output:\n%s\nwant:\n%s", out, want)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "out")); err != nil || string(b) != "from-task\n" {
		t.Errorf("the host does not see the task's file: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "out")); err == nil {
		t.Error("the task wrote into a read-only host volume")
	}
}

// raw_exec refuses a task with host volumes, as Nomad's ("does not
// support host volumes"), before it makes anything: its task sees the
// host's filesystem, and a mount left out would be dropped silently.
func TestRawExecRefusesMounts(t *testing.T) {
	task := &driver.Task{AllocID: "btexec-mounts", TaskName: "t", Config: sh("true"), LogDir: t.TempDir(),
		Mounts: []driver.Mount{{Source: t.TempDir(), Dest: "/data"}}}
	_, err := NewRawExec(Options{StoreID: testStore}).Start(ctxT(t), task)
	if err == nil || !strings.Contains(err.Error(), "the raw_exec driver does not support host volumes (volume_mount at /data)") {
		t.Fatalf("Start = %v, want a refusal of the host volume", err)
	}
}
