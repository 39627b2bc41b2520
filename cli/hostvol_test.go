package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// A job asking what this node does not offer (a host volume it does not
// configure, ports in a CNI network without portmap, a CSI volume) is
// valid with warnings at the blocks that ask; run refuses it naming what
// to configure, before creating anything.
func TestValidateWarnsRunRefusesResources(t *testing.T) {
	dir := t.TempDir()
	cniDir := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(cniDir, "btcli-nomap.conflist"),
		[]byte(`{"cniVersion": "1.0.0", "name": "btcli-nomap", "plugins": [{"type": "bridge", "bridge": "btcli-nomap0"}]}`), 0o644))
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", cniDir, "--lock-dir", t.TempDir()}
	hostDir := t.TempDir()
	cases := []struct {
		name, group string
		flags       []string
		warn, run   string
	}{
		{"unconfigured host volume", `volume "v" {
      type   = "host"
      source = "btcli-data"
    }`, nil, `res.hcl:3:5: host volume "btcli-data" in volume "v" in group "g" is not offered by this node`,
			`res.hcl:3:5: host volume "btcli-data" in volume "v" in group "g" not met by this node: this node has no host volume "btcli-data": add client { host_volume "btcli-data"`},
		{"csi volume", `volume "v" {
      type   = "csi"
      source = "ebs"
    }`, []string{"--client-host-volume", "btcli-data=" + hostDir}, `res.hcl:3:5: volume "v" in group "g" is a CSI volume, which berth cannot mount`,
			`res.hcl:3:5: CSI volume "ebs" in volume "v" in group "g" not met by this node: berth has no CSI plugins`},
		{"ports without portmap", `network {
      mode = "cni/btcli-nomap"
      port "http" {
        to = 8080
      }
    }`, nil, `res.hcl:5:7: port "http" in network block in group "g" is not offered by this node`,
			`network mode "cni/btcli-nomap" cannot map ports: its configuration ` + filepath.Join(cniDir, "btcli-nomap.conflist") + ` has no portmap plugin: add {"type": "portmap"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := filepath.Join(t.TempDir(), "res.hcl")
			testenv.Must(t, os.WriteFile(job, []byte(`job "btcli-res" {
  group "g" {
    `+tc.group+`
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`), 0o644))
			args := append(append([]string{}, common...), tc.flags...)
			out, _, err := run(t, append([]string{"validate", job}, args...)...)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			if !strings.Contains(out, "warning: "+filepath.Dir(job)+"/"+tc.warn) {
				t.Errorf("validate output lacks %q:\n%s", tc.warn, out)
			}
			_, _, err = run(t, append([]string{"run", job}, args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.run) {
				t.Errorf("run: %v\nwant %q", err, tc.run)
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
				t.Error("run created the data dir for a job it refused")
			}
		})
	}
	// Configured, the host volume validates without a warning.
	job := filepath.Join(t.TempDir(), "ok.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`job "btcli-res" {
  group "g" {
    volume "v" {
      type   = "host"
      source = "btcli-data"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      volume_mount {
        volume      = "v"
        destination = "/data"
      }
    }
  }
}
`), 0o644))
	out, _, err := run(t, append([]string{"validate", job, "--client-host-volume", "btcli-data=" + hostDir + ":ro"}, common...)...)
	if err != nil || strings.Contains(out, "warning") {
		t.Errorf("validate with the volume configured: %v\n%s", err, out)
	}
}
