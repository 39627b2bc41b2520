package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
)

// TestNomadCLIScript runs examples/nomad-cli.sh, Nomad 1.6.5's own CLI,
// against a private berth agent's Nomad API: the seed job, a service job
// with a check, a batch job's logs followed, exec, a variable, each
// stopped and purged. Every command exits 0 and prints Nomad's shapes.
func TestNomadCLIScript(t *testing.T) {
	testenv.RequireRoot(t)
	requireTool(t, "nomad")
	requireTool(t, "podman")
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	if err := exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run(); err != nil {
		t.Skip("image localhost/busybox:latest missing: run scripts/setup.sh")
	}
	nw := testenv.NewNetwork(t, testenv.NetworkSpec{Name: "btnc-" + testenv.RandSuffix(6), Subnet: "10.199.246.0/24", Portmap: true, Firewall: true, Loopback: true})
	dir, err := os.MkdirTemp("", "btnc")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	token := "btnc-" + testenv.RandSuffix(24)

	// The example jobs, their network pointed at the test's.
	jobs := filepath.Join(dir, "jobs")
	testenv.Must(t, os.MkdirAll(jobs, 0o755))
	for _, f := range []string{"seed-podman-every-second.nomad.hcl", "web-service.nomad.hcl", "countdown.nomad.hcl"} {
		b, err := os.ReadFile(filepath.Join("jobs", f))
		testenv.Must(t, err)
		testenv.Must(t, os.WriteFile(filepath.Join(jobs, f), bytes.ReplaceAll(b, []byte("cni/private"), []byte("cni/"+nw.Name)), 0o644))
	}

	cfg := agent.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = nw.ConfDir
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	cfg.GCMode = agent.GCRecords // a full sweep would take other tests' attachments
	cfg.GCInterval = "0"
	cfg.DrainOnShutdown = true // stopped with the test: leave nothing
	cfg.Bridge = &node.Bridge{Network: "btnc-br-" + testenv.RandSuffix(6), Iface: "btnc" + testenv.RandSuffix(6), Subnet: "10.199.247.0/24"}
	cfg.API = &agent.APIConfig{Socket: filepath.Join(dir, "b.sock"), NomadAddress: "127.0.0.1:0", Token: token}
	cfg.Client.NetworkInterface = "lo"
	a := startAgent(t, cfg, filepath.Join(dir, "agent.log"))

	cmd := exec.Command("bash", "nomad-cli.sh")
	// Its own process group: a timeout kills the nomad commands too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=http://"+a.NomadAddr(), "NOMAD_TOKEN="+token, "BERTH_EXAMPLE_JOBS="+jobs)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	testenv.Must(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	t.Logf("nomad-cli.sh:\n%s", out.String())
	if err != nil {
		t.Fatalf("nomad-cli.sh: %v", err)
	}
	// Nomad's output shapes, as its CLI prints them against Nomad.
	for _, want := range []string{
		"Approximate next launch time", // the periodic seed job registered
		"Deployment",                   // the service job's monitor
		"finished with status \"complete\"",
		"liftoff",     // logs -f followed the batch task to its end
		"hello from ", // exec ran wget in the service's task
		"greeting",    // var get
		"every command exited 0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("nomad-cli.sh output lacks %q", want)
		}
	}
}
