package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// podman's privileged = true is refused by run at the attribute, unless
// the node's settings allow it; validate warns there (Nomad's validate
// knows no node's settings).
func TestSecValidatePodmanPrivileged(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
	job := filepath.Join(t.TempDir(), "priv.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`job "btsec-priv" {
  group "g" {
    task "t" {
      driver = "podman"
      config {
        image      = "localhost/busybox:latest"
        privileged = true
      }
    }
  }
}
`), 0o644))
	out, _, err := run(t, append([]string{"validate", job}, common...)...)
	if err != nil || !strings.Contains(out, "warning: "+job+":7:9: ") || !strings.Contains(out, "podman_allow_privileged") {
		t.Fatalf("validate: %v, want a warning at priv.hcl:7:9 naming podman_allow_privileged:\n%s", err, out)
	}
	_, _, err = run(t, append([]string{"run", job}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "priv.hcl:7:9: ") || !strings.Contains(err.Error(), "podman_allow_privileged") {
		t.Fatalf("run: %v, want an error at priv.hcl:7:9 naming podman_allow_privileged", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("run created the data dir for a job it refused")
	}
	out, _, err = run(t, append([]string{"validate", job, "--podman-allow-privileged"}, common...)...)
	if err != nil || strings.Contains(out, "warning:") {
		t.Fatalf("validate where the node allows it: %v\n%s", err, out)
	}
}

// `berth run` with descriptors inherited without close-on-exec (a
// shell's 10 and 251): a raw_exec task as nobody gets only 0, 1 and 2,
// and writes its own local/ by NOMAD_TASK_DIR's path, though the data
// dir is 0700 and the allocation dir 0750, both root's.
func TestSecRunInheritedFDsAndTaskDir(t *testing.T) {
	testenv.RequireRoot(t)
	devnull, err := os.Open(os.DevNull)
	testenv.Must(t, err)
	defer devnull.Close()
	for _, fd := range []int{10, 251} {
		testenv.Must(t, syscall.Dup2(int(devnull.Fd()), fd))
		t.Cleanup(func() { syscall.Close(fd) })
	}
	job := filepath.Join(t.TempDir(), "fds.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`job "btsec-fds" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      user   = "nobody"
      config {
        command = "/bin/sh"
        args    = ["-c", "ls /proc/self/fd | xargs; cd / && echo hi > $NOMAD_TASK_DIR/x && cat $NOMAD_TASK_DIR/x"]
      }
    }
  }
}
`), 0o644))
	dataDir, flags := localFlags(t)
	out, _, err := run(t, append([]string{"run", job}, flags...)...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if got := taskOutput(t, dataDir, "t"); got != "0 1 2 3\nhi\n" {
		t.Errorf("task printed %q, want its descriptors 0 1 2 3 (ls's own is 3) and its file", got)
	}
}
