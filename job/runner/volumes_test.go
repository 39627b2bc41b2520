package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

const hostVolSubnet = "10.199.97.0/24"

// hostVolEnv is e with a runner that has the host volumes vols.
func hostVolEnv(e *env, vols map[string]runner.HostVolume) *env {
	c := *e
	c.r = runner.New(runner.Options{
		Attach: e.m, Store: e.st, Drivers: e.drivers, AllocDir: filepath.Join(e.dataDir, "alloc"),
		Node: jobspec.LocalNode(), OwnerPID: os.Getpid(), HostVolumes: vols,
	})
	return &c
}

func hostVolJob(drv, image string) string {
	return `job "hostvol" {
  type = "batch"
  group "g" {
    volume "v" {
      type   = "host"
      source = "rw"
    }
    volume "r" {
      type   = "host"
      source = "ro"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "` + drv + `"
      config {
        ` + image + `
        command = "/bin/sh"
        args    = ["-c", "cat /data/in /ro/in && echo ` + drv + ` > /data/out-` + drv + ` && echo written; echo x > /data-ro/x 2>/dev/null && echo mount-ro-writable; echo x > /ro/x 2>/dev/null && echo node-ro-writable; true"]
      }
      volume_mount {
        volume      = "v"
        destination = "/data"
      }
      volume_mount {
        volume      = "v"
        destination = "/data-ro"
        read_only   = true
      }
      volume_mount {
        volume      = "r"
        destination = "/ro"
      }
    }
  }
}`
}

// A task of each driver that mounts reads the host path of its host
// volume and writes a file the host sees; read_only, of the node's
// volume or of the volume_mount, makes the write fail.
func TestHostVolumeMounted(t *testing.T) {
	base := newEnv(t, hostVolSubnet)
	rw, ro := t.TempDir(), t.TempDir()
	for _, d := range []string{rw, ro} {
		// TempDir is 0700 and an exec task runs as nobody.
		testenv.Must(t, os.Chmod(d, 0o777))
		testenv.Must(t, os.WriteFile(filepath.Join(d, "in"), []byte("host-"+filepath.Base(d)+"\n"), 0o644))
	}
	e := hostVolEnv(base, map[string]runner.HostVolume{"rw": {Path: rw}, "ro": {Path: ro, ReadOnly: true}})
	for _, tc := range []struct{ drv, image string }{{"exec", ""}, {"podman", `image = "busybox:latest"`}} {
		t.Run(tc.drv, func(t *testing.T) {
			if tc.drv == "podman" {
				requireImage(t)
			}
			a, _ := runOne(t, e, hostVolJob(tc.drv, tc.image))
			if a.Status != store.AllocComplete {
				t.Fatalf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
			}
			want := "host-" + filepath.Base(rw) + "\nhost-" + filepath.Base(ro) + "\nwritten\n"
			if got := stdout(t, e, a, "t"); got != want {
				t.Errorf("task printed %q, want %q", got, want)
			}
			if got := readFile(filepath.Join(rw, "out-"+tc.drv)); got != tc.drv+"\n" {
				t.Errorf("the host sees %q in out-%s", got, tc.drv)
			}
			for _, p := range []string{filepath.Join(rw, "x"), filepath.Join(ro, "x")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was written through a read-only mount", p)
				}
			}
		})
	}
}

// A host volume the runner does not have (the node's configuration
// changed after the job was accepted) fails the task, naming it.
func TestHostVolumeUnknown(t *testing.T) {
	e := hostVolEnv(newEnv(t, "10.199.98.0/24"), nil)
	a, _ := runOne(t, e, hostVolJob("exec", ""))
	if a.Status != store.AllocFailed || !strings.Contains(eventTypes(a)+a.StatusDesc, `host volume not configured on this node: "rw" (volume "v")`) {
		t.Errorf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
	}
}
