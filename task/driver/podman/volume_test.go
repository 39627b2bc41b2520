package podman

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
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
	out := readFile(t, filepath.Join(task.LogDir, "t1.stdout.0"))
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
	task := &driver.Task{Mounts: []driver.Mount{{Source: "/srv/a", Dest: "/a"}, {Source: "/srv/b", Dest: "/b", ReadOnly: true},
		{Source: "/srv/c", Dest: "/c", Propagation: driver.PropagationHostToTask},
		{Source: "/srv/d", Dest: "/d", Propagation: driver.PropagationBidirectional}}}
	got := volumeMounts(task)
	if len(got) != 4 || got[0].Type != "bind" || got[0].Source != "/srv/a" || got[0].Destination != "/a" {
		t.Fatalf("volumeMounts = %+v", got)
	}
	for i, want := range []string{"rbind,rw,rprivate", "rbind,ro,rprivate", "rbind,rw,rslave", "rbind,rw,rshared"} {
		if o := strings.Join(got[i].Options, ","); o != want {
			t.Errorf("mount %s: options %s, want %s", got[i].Destination, o, want)
		}
	}
}

// A volume_mount's propagation_mode is the bind mount's: a tmpfs the host
// mounts below the volume after the container started reaches a
// host-to-task (rslave) or bidirectional (rshared) mount, not a private
// (rprivate) one.
func TestPodmanVolumePropagation(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	for _, tc := range []struct {
		mode driver.Propagation
		want string
	}{
		{driver.PropagationPrivate, "hidden"},
		{driver.PropagationHostToTask, "visible"},
		{driver.PropagationBidirectional, "visible"},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			vol := testenv.SharedDir(t)
			testenv.Must(t, os.Mkdir(filepath.Join(vol, "sub"), 0o755))
			task := testTask(t, map[string]any{
				"image":   "busybox:latest",
				"command": "/bin/sh",
				"args": []any{"-c", `echo > /data/ready; while [ ! -e /data/go ]; do sleep 0.05; done; ` +
					`if [ -e /data/sub/marker ]; then echo visible; else echo hidden; fi`},
			})
			task.Mounts = []driver.Mount{{Source: vol, Dest: "/data", Propagation: tc.mode}}
			h := startTask(t, d, task)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			testenv.WaitFile(ctx, t, filepath.Join(vol, "ready"))
			testenv.MountTmpfs(t, filepath.Join(vol, "sub"))
			testenv.Must(t, os.WriteFile(filepath.Join(vol, "sub", "marker"), []byte("x"), 0o644))
			testenv.Must(t, os.WriteFile(filepath.Join(vol, "go"), nil, 0o644))
			if res := waitTask(t, h); res.ExitCode != 0 || res.Err != nil {
				t.Fatalf("Wait = %+v", res)
			}
			destroy(t, h)
			if got := strings.TrimSpace(readFile(t, filepath.Join(task.LogDir, "t1.stdout.0"))); got != tc.want {
				t.Errorf("the host's later mount is %s in the container, want %s", got, tc.want)
			}
		})
	}
}
