package podman

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/task/driver"
)

// A host volume is a bind mount of the container: the task reads the
// host's file and writes one the host sees; a read-only one refuses the
// write.
func TestPodmanHostVolume(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	rw, ro := t.TempDir(), t.TempDir()
	for _, dir := range []string{rw, ro} {
		if err := os.WriteFile(filepath.Join(dir, "in"), []byte("from-host-"+filepath.Base(dir)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	task := testTask(t, map[string]any{
		"image":   "busybox:latest",
		"command": "/bin/sh",
		"args": []any{"-c", `cat /data/in /srv/ro/in && echo from-task > /data/out && echo written; ` +
			`echo x > /srv/ro/out 2>/dev/null && echo ro-writable; true`},
	})
	task.Mounts = []driver.Mount{{Source: rw, Dest: "/data"}, {Source: ro, Dest: "/srv/ro", ReadOnly: true}}
	h := startTask(t, d, task)
	if res := waitTask(t, h); res.ExitCode != 0 || res.Err != nil {
		t.Fatalf("Wait = %+v", res)
	}
	destroy(t, h)
	out := readFile(t, filepath.Join(task.LogDir, "t1.stdout"))
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

// volume_mounts become bind mounts after the task's directories.
func TestVolumeMountsSpec(t *testing.T) {
	task := &driver.Task{Mounts: []driver.Mount{{Source: "/srv/a", Dest: "/a"}, {Source: "/srv/b", Dest: "/b", ReadOnly: true}}}
	got := volumeMounts(task)
	if len(got) != 2 || got[0].Type != "bind" || got[0].Source != "/srv/a" || got[0].Destination != "/a" ||
		strings.Join(got[0].Options, ",") != "rbind,rw" || strings.Join(got[1].Options, ",") != "rbind,ro" {
		t.Errorf("volumeMounts = %+v", got)
	}
}
