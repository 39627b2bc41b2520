package cli

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

// Nomad's single-dash long flags become pflag's double-dash ones for the
// command they are given to; shorthands, values and a command's own
// arguments stay as they are.
func TestNomadFlagsNormalise(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want string
	}{
		{"status -short -verbose", "job status -short -verbose web", "job status --short --verbose web"},
		{"address with =", "job status -address=unix:///x.sock web", "job status --address=unix:///x.sock web"},
		{"address before the subcommand", "job -address unix:///x.sock status web", "job --address unix:///x.sock status web"},
		{"stop", "job stop -purge -detach -yes web", "job stop --purge --detach --yes web"},
		{"run -check-index", "job run -check-index 3 -var a=b j.hcl", "job run --check-index 3 --var a=b j.hcl"},
		{"plan -verbose", "job plan -verbose j.hcl", "job plan --verbose j.hcl"},
		{"double dash stays", "job status --short web", "job status --short web"},
		{"shorthands stay", "alloc logs -f -n 5 -tail ID t", "alloc logs -f -n 5 --tail ID t"},
		{"-y stays", "job stop -y web", "job stop -y web"},
		{"unknown word stays", "job status -nosuch web", "job status -nosuch web"},
		{"help", "job status -help", "job status --help"},
		{"exec: the command's flags are its own", "alloc exec -i=false -task t ID /bin/sh -c 'echo -verbose'", "alloc exec -i=false --task t ID /bin/sh -c 'echo -verbose'"},
		{"exec: -task of the command", "alloc exec ID ls -task", "alloc exec ID ls -task"},
		{"after --", "alloc exec ID -- sh -verbose", "alloc exec ID -- sh -verbose"},
		{"validate -var-file", "validate -var-file v.hcl j.hcl", "validate --var-file v.hcl j.hcl"},
		{"dispatch -meta", "job dispatch -meta k=v -detach p", "job dispatch --meta k=v --detach p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRoot(&bytes.Buffer{}, &bytes.Buffer{})
			got := NomadArgs(root, strings.Fields(tc.in))
			if want := strings.Fields(tc.want); !reflect.DeepEqual(got, want) {
				t.Errorf("NomadArgs(%q) = %q, want %q", tc.in, got, want)
			}
		})
	}
}

// A 401 says where the token comes from; an untrusted certificate names
// --ca-cert.
func TestNomadFlagsAgentErrors(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&api.Error{StatusCode: http.StatusUnauthorized, Message: "missing or invalid bearer token"}, api.EnvToken},
		{&api.Error{StatusCode: http.StatusUnauthorized}, "--token-file"},
		{fmt.Errorf("get: %w", x509.UnknownAuthorityError{}), "--ca-cert"},
		{errors.New(`Get "https://127.0.0.1:1/v1/jobs": tls: failed to verify certificate: x509: certificate signed by unknown authority`), "--ca-cert"},
	}
	for _, tc := range cases {
		if got := agentErr(tc.err).Error(); !strings.Contains(got, tc.want) {
			t.Errorf("agentErr(%v) = %q, want it to name %s", tc.err, got, tc.want)
		}
	}
	if got := agentErr(&api.Error{StatusCode: http.StatusNotFound, Message: "no such job"}).Error(); strings.Contains(got, "token") {
		t.Errorf("a 404 talks of tokens: %s", got)
	}
}

// alloc status shows each port (label, host address, port inside) and
// each task's resources, as Nomad's.
func TestAllocStatusPorts(t *testing.T) {
	var out bytes.Buffer
	g := &Globals{stdout: &out, stderr: &out}
	a := &api.Allocation{
		ID: "0123abcd-0000-4000-8000-000000000000", JobID: "web", Group: "g", Status: api.AllocRunning,
		Network: &api.NetworkStatus{Mode: "bridge", Ports: []api.PortMapping{
			{Label: "http", HostIP: "127.0.0.1", HostPort: 28080, To: 80},
			{Label: "admin", HostPort: 29090, To: -1},
		}},
		Tasks: []api.TaskState{{Name: "web", Driver: "exec", State: "running", Resources: &api.Resources{CPU: 500, MemoryMB: 256, MemoryMaxMB: 512}}},
	}
	testenv.Must(t, printAlloc(g, a))
	for _, want := range []string{
		"Allocation Addresses", "http   127.0.0.1:28080  80", "admin  0.0.0.0:29090    29090",
		"Task Resources", "web   500 MHz  256 MiB  512 MiB",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("alloc status lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExecNoDashDash runs Nomad's command lines against an agent: exec
// without "--", job run of an unchanged job (a no-op), plan's exit
// codes, stop -purge, history.
func TestExecNoDashDash(t *testing.T) {
	addr, _ := startAgentOn(t, "10.199.174.0/24")
	c, err := api.NewClient(addr, "")
	testenv.Must(t, err)
	t.Cleanup(func() {
		_, _ = c.StopJobWith(context.Background(), "btcli-nomad", api.JobStopOptions{Purge: true})
	})
	dir := t.TempDir()
	write := func(arg string) string {
		p := filepath.Join(dir, "j.nomad.hcl")
		testenv.Must(t, os.WriteFile(p, []byte(`job "btcli-nomad" {
  type = "service"
  group "g" {
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["`+arg+`"]
      }
    }
  }
}
`), 0o644))
		return p
	}
	berth := func(args ...string) (string, string, error) {
		t.Helper()
		// After the subcommand: what follows an exec's allocation is the
		// command's.
		return run(t, append(append(args[:2:2], "-address="+addr), args[2:]...)...)
	}
	file := write("600")
	out, stderr, err := berth("job", "run", file)
	if err != nil || !strings.Contains(out, "submitted (version 0)") {
		t.Fatalf("job run: %q %v %s", out, err, stderr)
	}
	var id string
	deadline := time.Now().Add(time.Minute)
	for id == "" && time.Now().Before(deadline) {
		if l, err := c.Allocations(context.Background(), "btcli-nomad"); err == nil && len(l) == 1 && l[0].Status == api.AllocRunning {
			id = l[0].ID
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("no running allocation")
	}

	out, _, err = berth("alloc", "exec", "-i=false", id, "/bin/sh", "-c", "echo hi; exit 3")
	var ec exitCode
	if !errors.As(err, &ec) || int(ec) != 3 || out != "hi\n" {
		t.Errorf("alloc exec without --: %q %v; want hi and exit 3", out, err)
	}
	if out, _, err := berth("alloc", "exec", "-i=false", id[:8], "ls", "-d", "/"); err != nil || out != "/\n" {
		t.Errorf("alloc exec ls -d /: %q %v", out, err)
	}
	if out, _, err := berth("alloc", "status", "-verbose", id); err != nil || !strings.Contains(out, "Task Resources") || !strings.Contains(out, "100 MHz") {
		t.Errorf("alloc status: %q %v", out, err)
	}

	// Unchanged: plan exits 0 and run does nothing.
	out, _, err = berth("job", "plan", file)
	if err != nil || !strings.Contains(out, `Task Group: "g" (1 ignore)`) || !strings.Contains(out, "Job Modify Index: 1") {
		t.Errorf("plan of the same job: %q %v; want exit 0", out, err)
	}
	if out, _, err := berth("job", "run", file); err != nil || !strings.Contains(out, "unchanged (version 0)") {
		t.Errorf("job run of the same job: %q %v", out, err)
	}
	// A task change: plan exits 1 with the diff; -check-index guards run.
	file = write("601")
	out, _, err = berth("job", "plan", file)
	if !errors.As(err, &ec) || int(ec) != 1 || !strings.Contains(out, `+/- Job: "btcli-nomad"`) || !strings.Contains(out, `+/- config.args[0]: "600" => "601"`) || !strings.Contains(out, "1 create/destroy update") {
		t.Errorf("plan of a task change: %q %v; want the diff and exit 1", out, err)
	}
	if _, stderr, err := berth("job", "run", "-check-index", "7", file); err == nil || !strings.Contains(err.Error()+stderr, "modify index") {
		t.Errorf("job run -check-index 7: %v %s; want a refusal", err, stderr)
	}
	if out, _, err := berth("job", "run", "-check-index", "1", file); err != nil || !strings.Contains(out, "replaced") {
		t.Errorf("job run -check-index 1: %q %v", out, err)
	}
	var ee exitError
	if _, _, err := berth("job", "plan", filepath.Join(dir, "missing.hcl")); !errors.As(err, &ee) || ee.code != 255 || !strings.Contains(err.Error(), "missing.hcl") {
		t.Errorf("plan of a missing file: %v; want exit 255", err)
	}
	if out, _, err := berth("job", "history", "btcli-nomad"); err != nil || strings.Count(out, "Version ") != 2 {
		t.Errorf("history: %q %v", out, err)
	}
	if out, _, err := berth("job", "stop", "-yes", "btcli-nomad"); err != nil || !strings.Contains(out, "stays listed as dead") {
		t.Errorf("job stop: %q %v", out, err)
	}
	if out, _, err := berth("job", "status", "-short", "btcli-nomad"); err != nil || !strings.Contains(out, "dead (stopped)") {
		t.Errorf("job status of a stopped job: %q %v", out, err)
	}
	if out, _, err := berth("job", "stop", "-purge", "btcli-nomad"); err != nil || !strings.Contains(out, "purged") {
		t.Errorf("job stop -purge: %q %v", out, err)
	}
	if _, err := c.Job(context.Background(), "btcli-nomad"); !api.IsNotFound(err) {
		t.Errorf("purged job still known: %v", err)
	}
}
