package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"golang.org/x/sys/unix"
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

// per_alloc, as Nomad's: allocation N of the group mounts the node's host
// volume "<source>[N]", so each of count = 2 allocations reads and writes
// its own directory.
func TestHostVolumePerAlloc(t *testing.T) {
	base := newEnv(t, "10.199.92.0/24")
	for _, tc := range []struct{ drv, image string }{{"exec", ""}, {"podman", `image = "busybox:latest"`}} {
		t.Run(tc.drv, func(t *testing.T) {
			if tc.drv == "podman" {
				requireImage(t)
			}
			dirs := []string{t.TempDir(), t.TempDir()}
			vols := map[string]runner.HostVolume{}
			for i, d := range dirs {
				testenv.Must(t, os.Chmod(d, 0o777))
				testenv.Must(t, os.WriteFile(filepath.Join(d, "in"), []byte(fmt.Sprintf("dir-%d\n", i)), 0o644))
				vols[fmt.Sprintf("pa[%d]", i)] = runner.HostVolume{Path: d}
			}
			e := hostVolEnv(base, vols)
			j := e.job(t, `job "hostvol-pa" {
  type = "batch"
  group "g" {
    count = 2
    volume "v" {
      type      = "host"
      source    = "pa"
      per_alloc = true
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "`+tc.drv+`"
      config {
        `+tc.image+`
        command = "/bin/sh"
        args    = ["-c", "cat /data/in > /data/out-${NOMAD_ALLOC_INDEX}"]
      }
      volume_mount {
        volume      = "v"
        destination = "/data"
      }
    }
  }
}`)
			sum, err := e.r.RunJob(testenv.Context(t, 3*time.Minute), j, runner.RunOptions{})
			testenv.Must(t, err)
			checkClean(t, e, sum)
			if n := sum.ByStatus[store.AllocComplete]; n != 2 {
				t.Fatalf("allocations by status %v, want 2 complete", sum.ByStatus)
			}
			for i, d := range dirs {
				if got := readFile(filepath.Join(d, fmt.Sprintf("out-%d", i))); got != fmt.Sprintf("dir-%d\n", i) {
					t.Errorf("allocation %d wrote %q in its volume", i, got)
				}
				if _, err := os.Stat(filepath.Join(d, fmt.Sprintf("out-%d", 1-i))); err == nil {
					t.Errorf("allocation %d wrote into the volume of allocation %d", 1-i, i)
				}
			}
		})
	}
}

// A volume_mount's propagation_mode reaches the driver's mount.
func TestHostVolumePropagationMode(t *testing.T) {
	base := newEnv(t, "10.199.93.0/24")
	vol := testenv.SharedDir(t)
	testenv.Must(t, os.Mkdir(filepath.Join(vol, "sub"), 0o755))
	e := hostVolEnv(base, map[string]runner.HostVolume{"shared": {Path: vol}})
	j := e.job(t, `job "hostvol-prop" {
  type = "batch"
  group "g" {
    volume "v" {
      type   = "host"
      source = "shared"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo > /h2t/ready; while [ ! -e /h2t/go ]; do sleep 0.05; done; ls /h2t/sub; echo; ls /priv/sub"]
      }
      volume_mount {
        volume           = "v"
        destination      = "/h2t"
        propagation_mode = "host-to-task"
      }
      volume_mount {
        volume      = "v"
        destination = "/priv"
      }
    }
  }
}`)
	ctx := testenv.Context(t, 3*time.Minute)
	// The host mounts once the task runs (RunJob returns when it ended).
	hostErr := make(chan error, 1)
	go func() {
		hostErr <- mountWhenReady(ctx, t, vol)
	}()
	var alloc *store.Allocation
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{OnAlloc: func(a *store.Allocation) { alloc = a }})
	testenv.Must(t, <-hostErr)
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if alloc == nil || alloc.Status != store.AllocComplete {
		t.Fatalf("allocation: %+v", alloc)
	}
	if got, want := stdout(t, e, alloc, "t"), "marker\n\n"; got != want {
		t.Errorf("task listed %q, want %q (the host's later mount in the host-to-task mount only)", got, want)
	}
}

// mountWhenReady waits for the task's vol/ready, mounts a tmpfs on
// vol/sub (unmounted in Cleanup) with a marker in it, and writes vol/go.
// It runs beside RunJob: it returns errors rather than failing t.
func mountWhenReady(ctx context.Context, t *testing.T, vol string) error {
	for {
		if _, err := os.Stat(filepath.Join(vol, "ready")); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the task's ready file: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	sub := filepath.Join(vol, "sub")
	if err := unix.Mount("tmpfs", sub, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", sub, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(sub, "marker"), nil, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(vol, "go"), nil, 0o644)
}
