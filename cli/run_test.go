package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
)

// Ctrl-C on `berth run` stops the tasks, tears the network down, prints
// the summary and exits 0 (stopped allocations are complete, as in Nomad).
func TestRunInterrupted(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	n := testenv.NewNetwork(t, testenv.NetworkSpec{Subnet: "10.199.91.0/24", Portmap: true, Firewall: true, Loopback: true})
	bin := berthBinary.Path(t)
	job := filepath.Join(t.TempDir(), "svc.nomad.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`job "btcli-svc" {
  type = "service"
  group "g" {
    count = 2
    network {
      mode = "cni/`+n.Name+`"
    }
    task "sleeper" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"]
      }
    }
  }
}`), 0o644))
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", job, "--data-dir", dataDir, "--cni-config-dir", n.ConfDir,
		"--cni-path", testenv.ReferencePlugins, "--lock-dir", t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	testenv.Must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Wait until both allocations have their namespaces.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ents, _ := os.ReadDir("/run/netns")
		mine := 0
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(dataDir, "alloc", e.Name(), "alloc", "logs", "sleeper.stdout.0")); err == nil || b != nil {
				mine++
			}
		}
		if mine == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("allocations did not start:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	testenv.Must(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("berth run after Ctrl-C: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"summary of job \"btcli-svc\"", "complete 2", "leak check: nothing left",
		"kept for the next run: the bridge and shared CNI chains of network " + n.Name} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dataDir, "alloc"))
	for _, e := range ents {
		if _, err := os.Stat("/run/netns/" + e.Name()); err == nil {
			t.Errorf("namespace of %s left", e.Name())
		}
	}
}
