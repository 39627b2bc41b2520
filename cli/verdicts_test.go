package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

// nodeFactCase is a valid Nomad job this node cannot run: pos and summary
// name the object, fix what to install or configure.
type nodeFactCase struct {
	kind, file, pos, summary, fix string
}

var nodeFactCases = []nodeFactCase{
	{"driver java", "node_driver_java.hcl", "5:16", `driver "java" of task "t" in group "g" is not on this node`, "install a JRE and run the jar with exec or raw_exec"},
	{"driver qemu", "node_driver_qemu.hcl", "5:16", `driver "qemu" of task "t" in group "g" is not on this node`, "install qemu and run it with exec or raw_exec"},
	{"driver plugin", "node_driver_plugin.hcl", "5:16", `driver "containerd-driver" of task "t" in group "g" is not on this node`, "berth loads no task driver plugins"},
	{"user", "node_user_unknown.hcl", "6:16", `user "berth-corpus-no-such-user" of task "t" in group "g"`, "create the user on this node (useradd berth-corpus-no-such-user)"},
	{"cni network", "node_cni_absent.hcl", "5:14", `network mode "cni/nope"`, `add a CNI network configuration named "nope"`},
	{"template consul", "node_template_consul_key.hcl", "11:6", `template block in task "t" in group "g": template function "key" reads Consul`, "use nomadService/nomadServices"},
	{"template consul service", "node_template_consul_service.hcl", "11:12", `template block in task "t" in group "g": template function "service" reads Consul`, "berth has no Consul"},
	{"template vault", "node_template_vault_secret.hcl", "11:6", `template block in task "t" in group "g": template function "secret" reads Vault`, "pass secrets another way"},
	{"podman config", "node_podman_no_image.hcl", "6:7", `invalid config for driver "podman" in task "t" in group "g": podman: config.image is required`, "fix the config block"},
	{"exec config", "node_exec_no_command.hcl", "6:7", `invalid config for driver "exec" in task "t" in group "g": exec: config.command is required`, "fix the config block"},
}

const corpusDir = "../job/jobspec/testdata/corpus"

// A valid Nomad job this node cannot run validates, as with Nomad's
// `job validate` (exit 0), with a warning at the object's file:line:col;
// `berth run` refuses it there, naming the object and what to install or
// configure, and creates nothing.
func TestNodeFactsValidateWarnsRunRefuses(t *testing.T) {
	before := netnsEntries()
	for _, tc := range nodeFactCases {
		t.Run(tc.kind, func(t *testing.T) {
			path := filepath.Join(corpusDir, tc.file)
			dataDir := filepath.Join(t.TempDir(), "data")
			flags := []string{"--data-dir", dataDir, "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
			out, _, err := run(t, append([]string{"validate", path}, flags...)...)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			warning := "warning: " + path + ":" + tc.pos + ": " + tc.summary
			if !strings.Contains(out, warning) || !strings.Contains(out, tc.fix) || !strings.Contains(out, "run and plan refuse it on this node") {
				t.Errorf("validate output lacks %q with %q:\n%s", warning, tc.fix, out)
			}
			_, _, err = run(t, append([]string{"run", path}, flags...)...)
			checkRefusal(t, "run", err, path, tc)
			if _, err := os.Stat(dataDir); err == nil {
				t.Error("run created the data dir for a job it refused")
			}
		})
	}
	if after := netnsEntries(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("namespaces changed: before %v after %v", before, after)
	}
}

func checkRefusal(t *testing.T, cmd string, err error, path string, tc nodeFactCase) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s accepted the job", cmd)
	}
	first := strings.SplitN(err.Error(), "\n", 2)[0]
	if !strings.Contains(first, path+":"+tc.pos+": "+tc.summary) || !strings.Contains(first, tc.fix) {
		t.Errorf("%s: %q, want %s:%s: %s ... %s", cmd, first, path, tc.pos, tc.summary, tc.fix)
	}
}

// The agent's `job plan` and `job run` refuse those jobs as `berth run`
// does, and keep nothing of them.
func TestNodeFactsAgentRefuses(t *testing.T) {
	addr, _ := startAgentOn(t, "10.199.181.0/24")
	c, err := api.NewClient(addr, "")
	testenv.Must(t, err)
	defer c.Close()
	for _, tc := range nodeFactCases {
		t.Run(tc.kind, func(t *testing.T) {
			path := filepath.Join(corpusDir, tc.file)
			for _, cmd := range []string{"plan", "run"} {
				_, _, err := run(t, "job", cmd, "--address", addr, path)
				// The agent names the file by its base name.
				checkRefusal(t, "job "+cmd, err, tc.file, tc)
			}
		})
	}
	jobs, err := c.Jobs(context.Background())
	if err != nil || len(jobs) != 0 {
		t.Errorf("the agent kept jobs it refused: %+v, %v", jobs, err)
	}
}

// validate's exit status is Nomad's: 0 with warnings; run's refusal is 1.
func TestNodeFactsExitStatus(t *testing.T) {
	testenv.RequireRoot(t)
	bin := berthBinary.Path(t)
	path := filepath.Join(corpusDir, "node_driver_java.hcl")
	dataDir := filepath.Join(t.TempDir(), "data")
	flags := []string{"--data-dir", dataDir, "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
	if out, err := exec.Command(bin, append([]string{"validate", path}, flags...)...).CombinedOutput(); err != nil {
		t.Errorf("validate: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, append([]string{"run", path}, flags...)...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), path+":5:16: ") {
		t.Errorf("run: %v, want exit status 1 and the position\n%s", err, out)
	}
}
