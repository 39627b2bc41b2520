package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// podman's privileged = true is refused at the attribute, unless the
// node's settings allow it.
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
	_, _, err := run(t, append([]string{"validate", job}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "priv.hcl:7:9: ") || !strings.Contains(err.Error(), "podman_allow_privileged") {
		t.Fatalf("validate: %v, want an error at priv.hcl:7:9 naming podman_allow_privileged", err)
	}
	if _, _, err := run(t, append([]string{"validate", job, "--podman-allow-privileged"}, common...)...); err != nil {
		t.Fatalf("validate where the node allows it: %v", err)
	}
}
