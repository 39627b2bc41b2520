package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
)

// runIn is run with stdin.
func runIn(t *testing.T, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetIn(stdin)
	root.SetArgs(NomadArgs(root, args))
	err := root.Execute()
	return out.String(), errb.String(), err
}

// localFlags are the node flags of a berth with its own data dir, lock
// dir and CNI config dir, advertising 127.0.0.1 (tests dial loopback,
// never the host's default-route address).
func localFlags(t *testing.T) (dataDir string, flags []string) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), "data")
	return dataDir, []string{"--data-dir", dataDir, "--lock-dir", t.TempDir(), "--cni-config-dir", t.TempDir(), "--cni-path", testenv.ReferencePlugins,
		"--client-network-interface", "lo"}
}

// taskOutput is the stdout of the one allocation of a run's data dir.
func taskOutput(t *testing.T, dataDir, task string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "alloc"))
	testenv.Must(t, err)
	if len(ents) != 1 {
		t.Fatalf("%d allocation dirs, want 1", len(ents))
	}
	return readFile(filepath.Join(dataDir, "alloc", ents[0].Name(), "alloc", "logs", task+".stdout.0"))
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

const varsJob = `variable "greeting" {
  type = string
}
variable "who" {
  type    = string
  default = "nobody"
}
variable "times" {
  type    = number
  default = 1
}
job "btcli-vars" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args    = [var.greeting, var.who, format("%d", var.times)]
      }
    }
  }
}
`

// -var, -var-file and NOMAD_VAR_ on `berth run`, with Nomad's precedence
// (environment < file < -var).
func TestRunVariables(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	job := filepath.Join(dir, "vars.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(varsJob), 0o644))
	varFile := filepath.Join(dir, "v.hcl")
	testenv.Must(t, os.WriteFile(varFile, []byte("who = \"file\"\ntimes = 2\n"), 0o644))
	t.Setenv("NOMAD_VAR_greeting", "hello-env")
	t.Setenv("NOMAD_VAR_who", "env")
	dataDir, flags := localFlags(t)
	out, _, err := run(t, append([]string{"run", "-var-file", varFile, "-var", "times=3", job}, flags...)...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if got := taskOutput(t, dataDir, "t"); got != "hello-env file 3\n" {
		t.Errorf("task saw %q", got)
	}
}

// startAgent runs an agent in this process for the test, on its own data
// dir and socket; a job of the tests uses host networking only.
func startAgent(t *testing.T) string {
	t.Helper()
	addr, _ := startAgentOn(t, "10.199.135.0/24")
	return addr
}

// startAgentOn is startAgent with the bridge network on subnet; it also
// returns the agent's data dir.
func startAgentOn(t *testing.T, subnet string) (string, string) {
	t.Helper()
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "btcli")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := agent.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = t.TempDir()
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	cfg.GCMode = agent.GCRecords
	cfg.GCInterval = "0"
	cfg.DrainOnShutdown = true // stopped with the test: leave nothing
	cfg.Bridge = &node.Bridge{Network: "btcli-br-" + testenv.RandSuffix(6), Iface: "btcli" + testenv.RandSuffix(6), Subnet: subnet}
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(cfg.Bridge.Network, cfg.Bridge.Iface) })
	cfg.API = &agent.APIConfig{Socket: filepath.Join(dir, "b.sock")}
	// Checks of address_mode "host" dial the advertised address: loopback.
	cfg.Client.NetworkInterface = "lo"
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), agent.WithVersion("test"))
	testenv.Must(t, err)
	testenv.Serve(t, "agent", a.Run, a.Ready())
	return "unix://" + a.SocketPath(), cfg.DataDir
}

func waitJobDead(t *testing.T, c *api.Client, id string) *api.JobStatus {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := c.Job(context.Background(), id)
		if err == nil && st.Status == api.JobDead {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s did not finish", id)
	return nil
}

func allocOutput(t *testing.T, c *api.Client, st *api.JobStatus, task string) string {
	t.Helper()
	if len(st.Allocations) != 1 || st.Allocations[0].Status != api.AllocComplete {
		t.Fatalf("job %s allocations: %+v", st.ID, st.Allocations)
	}
	b, err := c.AllocLogs(context.Background(), st.Allocations[0].ID, task, false, 0)
	testenv.Must(t, err)
	return string(b)
}

// `berth job run` and `job plan` send -var, the -var-file contents and
// NOMAD_VAR_ to the agent, which resolves them; `berth job dispatch`
// dispatches a parameterized job with -meta and a payload file or stdin.
func TestJobRunVariablesAndDispatch(t *testing.T) {
	addr := startAgent(t)
	c, err := api.NewClient(addr, "")
	testenv.Must(t, err)
	defer c.Close()
	dir := t.TempDir()
	job := filepath.Join(dir, "vars.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(varsJob), 0o644))
	varFile := filepath.Join(dir, "v.json")
	testenv.Must(t, os.WriteFile(varFile, []byte(`{"who": "file"}`), 0o644))
	t.Setenv("NOMAD_VAR_greeting", "hi-env")

	// A new job: allocations would be created, exit 1 (Nomad's).
	out, _, err := run(t, "job", "plan", "--address", addr, "-var-file", varFile, "-var", "times=4", job)
	if ec := exitCode(0); !errors.As(err, &ec) || ec != planChanges || !strings.Contains(out, `+ Job: "btcli-vars"`) {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	if _, _, err := run(t, "job", "plan", "--address", addr, "-var", "nope=1", job); err == nil || !strings.Contains(err.Error(), `declares no variable "nope"`) {
		t.Errorf("plan with an undeclared variable: %v", err)
	}
	out, _, err = run(t, "job", "run", "--address", addr, "-var-file", varFile, "-var", "times=4", job)
	if err != nil {
		t.Fatalf("job run: %v\n%s", err, out)
	}
	if got := allocOutput(t, c, waitJobDead(t, c, "btcli-vars"), "t"); got != "hi-env file 4\n" {
		t.Errorf("task saw %q", got)
	}

	param := filepath.Join(dir, "param.hcl")
	testenv.Must(t, os.WriteFile(param, []byte(`job "btcli-param" {
  type = "batch"
  parameterized {
    payload       = "optional"
    meta_required = ["input"]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      dispatch_payload {
        file = "in.txt"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cat $NOMAD_TASK_DIR/in.txt; echo $NOMAD_META_input"]
      }
    }
  }
}
`), 0o644))
	out, _, err = run(t, "job", "run", "--address", addr, param)
	if err != nil || !strings.Contains(out, "registered (parameterized: it runs only when dispatched)") {
		t.Fatalf("job run of a parameterized job: %v\n%s", err, out)
	}
	payload := filepath.Join(dir, "payload.txt")
	testenv.Must(t, os.WriteFile(payload, []byte("from-file\n"), 0o644))
	idRE := regexp.MustCompile(`dispatched job "(btcli-param/dispatch-[0-9]+-[0-9a-f]{8})" from "btcli-param"`)
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"payload file", []string{"-meta", "input=a", "btcli-param", payload}, "", "from-file\na\n"},
		{"stdin", []string{"-meta=input=b", "-detach", "btcli-param", "-"}, "from-stdin\n", "from-stdin\nb\n"},
		{"no payload", []string{"-meta", "input=c", "btcli-param"}, "", "c\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runIn(t, strings.NewReader(tc.stdin), append([]string{"job", "dispatch", "--address", addr}, tc.args...)...)
			m := idRE.FindStringSubmatch(out)
			if err != nil || m == nil {
				t.Fatalf("dispatch: %v\n%s", err, out)
			}
			if got := allocOutput(t, c, waitJobDead(t, c, m[1]), "t"); got != tc.want {
				t.Errorf("task saw %q, want %q", got, tc.want)
			}
		})
	}
	if _, _, err := run(t, "job", "dispatch", "--address", addr, "btcli-param"); err == nil || !strings.Contains(err.Error(), "did not provide required meta keys: input") {
		t.Errorf("dispatch without meta: %v", err)
	}
	out, _, err = run(t, "job", "status", "--address", addr)
	if err != nil || !regexp.MustCompile(`btcli-param\s+batch/parameterized\s+registered`).MatchString(out) {
		t.Errorf("job status: %v\n%s", err, out)
	}
}

// corpusRuns says what `berth run` does with each corpus job file Nomad
// accepts: runs (extra arguments), refused (placement), or why it cannot
// run on this machine.
var corpusRuns = map[string]struct {
	args []string
	// refused is a substring of run's refusal; skip why the file is not run.
	refused, skip string
}{
	"artifact.hcl":                     {skip: "fetches from example.com: no internet here (TestArtifacts covers artifacts on 127.0.0.1)"},
	"cluster_blocks_group.hcl":         {},
	"cluster_blocks_job.hcl":           {},
	"constraint_ops.hcl":               {},
	"constraint_windows.hcl":           {refused: `constraint "${attr.kernel.name}" = "windows" in job "windows-only" not met by this node`},
	"consul_identity.hcl":              {skip: "needs /usr/bin/meshy and Consul Connect"},
	"csi_volume.hcl":                   {skip: "needs a CSI volume and the image docker.io/library/postgres:16 (no registry here)"},
	"datacenters_other.hcl":            {},
	"disconnect.hcl":                   {},
	"constraint_attr_forms.hcl":        {skip: "needs /usr/bin/redis-server"},
	"dynamic_groups.hcl":               {},
	"dynamic_nested.hcl":               {skip: "fetches from example.com: no internet here (jobspec.TestDynamicBlocks covers nested expansion)"},
	"dynamic_ports_templates.hcl":      {skip: "needs /usr/bin/python3 and a web app (jobspec.TestDynamicBlocks covers the expansion)"},
	"identity_named.hcl":               {skip: "needs /usr/local/bin/api"},
	"schedule.hcl":                     {skip: "needs /usr/bin/kiosk"},
	"service_identity.hcl":             {},
	"ephemeral_disk_logs.hcl":          {skip: "needs /usr/bin/chatty"},
	"exec_config_keys.hcl":             {skip: "needs /usr/bin/server"},
	"exec_service_http.hcl":            {},
	"functions_collection.hcl":         {},
	"functions_encoding.hcl":           {},
	"functions_file.hcl":               {},
	"hcl1_forms.hcl":                   {},
	"hcl1_task_in_job.hcl":             {},
	"host_volume.hcl":                  {skip: "needs its host volumes configured on the node (runner.TestHostVolumeMounted mounts them)"},
	"host_volume_csi_keys_empty.hcl":   {refused: `host volume "shared-data" in volume "data" in group "g" not met by this node`},
	"host_volume_per_alloc.hcl":        {refused: `host volume "shared-data[0]" in volume "data" in group "g" not met by this node`},
	"raw_exec_volume_mount.hcl":        {refused: `volume_mount of volume "data" in task "t": the raw_exec driver does not support host volumes`},
	"volume_propagation_modes.hcl":     {refused: `host volume "mnt" in volume "mnt" in group "g" not met by this node`},
	"lifecycle.hcl":                    {},
	"max_run_duration.hcl":             {skip: "needs /usr/bin/long-job (runner.TestMaxRunDuration covers max_run_duration)"},
	"memory_unlimited.hcl":             {skip: "needs /usr/bin/bursty (runner.TestExecMemoryMax covers the memory limits)"},
	"node_cni_absent.hcl":              {refused: `network mode "cni/nope"`},
	"node_driver_qemu.hcl":             {refused: `driver "qemu" of task "t" in group "g" is not on this node`},
	"node_driver_java.hcl":             {refused: `driver "java" of task "t" in group "g" is not on this node`},
	"node_driver_plugin.hcl":           {refused: `driver "containerd-driver" of task "t" in group "g" is not on this node`},
	"node_driver_typo.hcl":             {refused: `driver "dockr" of task "t" in group "g" is not on this node`},
	"node_exec_no_command.hcl":         {refused: "exec: config.command is required"},
	"node_podman_no_image.hcl":         {refused: "podman: config.image is required"},
	"node_pool_gpu.hcl":                {refused: `node_pool "gpu" in job "trainer" not met by this node`},
	"node_template_consul_key.hcl":     {refused: `template function "key" reads Consul`},
	"node_template_consul_service.hcl": {refused: `template function "service" reads Consul`},
	"node_template_nomad_var.hcl":      {skip: "reads nomad/jobs/j, which job template-nomad-var may not (Nomad's rule: its own nomad/jobs/<job>...); node/nomadapi's TestNomadCLIVar renders nomadVar"},
	"node_template_syntax.hcl":         {refused: "template: missing value for if"},
	"node_template_vault_secret.hcl":   {refused: `template function "secret" reads Vault`},
	"node_user_unknown.hcl":            {refused: `user "berth-corpus-no-such-user" of task "t" in group "g"`},
	"parameterized.hcl":                {args: []string{"-meta", "input=movie.mp4", "-meta", "priority=high", "--payload", "-"}},
	"parameterized_sysbatch.hcl":       {args: []string{"-meta", "level=3"}},
	"periodic_crons.hcl":               {skip: "periodic, next launch hours away, and needs /usr/bin/report"},
	"podman_all_keys.hcl":              {skip: "refused on this node as written: volumes, cpu_hard_limit, cpu_cfs_period (warnings at validate; podman.TestConfigKeysApplied runs the keys berth applies)"},
	"podman_port_map.hcl":              {skip: "needs the image docker.io/library/redis:7 (no registry here)"},
	"podman_web.hcl":                   {skip: "needs the image docker.io/library/nginx:1.25 (no registry here)"},
	"raw_exec_batch.hcl":               {},
	"refuse_podman_unknown_key.hcl":    {refused: "podman: unknown config key(s) config.mounts"},
	"raw_exec_cwd.hcl":                 {},
	"runtime_refs.hcl":                 {},
	"seed.hcl":                         {refused: `constraint "${attr.unique.hostname}" = "hostname" in job "cni-debug" not met by this node`},
	"sensitive_variable.hcl":           {skip: "needs /usr/bin/app"},
	"services_templates.hcl":           {skip: "its template source local/app.conf.tpl comes from nowhere and its change script /bin/reload does not exist (cli.TestServicesAndTemplates covers both)"},
	"sysbatch_periodic.hcl":            {skip: "periodic, next launch hours away, and needs /usr/sbin/logrotate"},
	"system_job.hcl":                   {skip: "needs /usr/local/bin/node_exporter (runner.TestSystemAndSysbatch covers system jobs)"},
	"task_behaviour.hcl":               {skip: "needs /usr/bin/worker (runner's lifecycle tests cover kill_signal, shutdown_delay, restart)"},
	"variables.hcl":                    {skip: "its default image is not present locally"},
	"variables_json.hcl":               {args: []string{"-var-file", "variables_json.vars.json"}},
	"variables_varfile.hcl":            {args: []string{"-var-file", "variables_varfile.vars.hcl"}},
	"vault.hcl":                        {refused: `template function "secret" reads Vault`},
}

// allocLine is one finished allocation in run's output: ID, status, exit codes.
var allocLine = regexp.MustCompile(`(?m)^[0-9a-f-]{36}  (complete|failed|running|pending)\s+(\S+)`)

// Each corpus job file that can run on this machine runs with `berth run`
// (a short --for, one launch) and leaves nothing behind: its tasks really
// started (no exit code -1), every allocation completed, the leak check
// found nothing. The ones this node cannot place are refused before
// anything is created.
func TestCorpusRuns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	corpus := "../job/jobspec/testdata/corpus"
	expected := readFile(filepath.Join(corpus, "expected.tsv"))
	// seed.hcl's network, so that its refusal is the placement's. Never
	// attached (seed.hcl is refused first): nothing of it to clean up.
	confDir := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(confDir, "private.conflist"),
		[]byte(`{"cniVersion":"1.1.0","name":"private","plugins":[{"type":"bridge","bridge":"btcliprv0","ipam":{"type":"host-local","subnet":"10.199.136.0/24"}}]}`), 0o644))
	bridge, iface := "btcli-corp-"+testenv.RandSuffix(4), "btcorp"+testenv.RandSuffix(4)
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(bridge, iface) })
	seen := 0
	for _, line := range strings.Split(expected, "\n") {
		cols := strings.Split(line, "\t")
		if len(cols) < 3 || strings.HasPrefix(line, "#") || cols[2] != "accept" {
			continue
		}
		file := cols[0]
		seen++
		tc, ok := corpusRuns[file]
		if !ok {
			t.Errorf("%s: not in corpusRuns: say whether it runs", file)
			continue
		}
		t.Run(file, func(t *testing.T) {
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			dataDir := filepath.Join(t.TempDir(), "data")
			args := []string{"run", "--for", "3s", "--max-runs", "1", "--data-dir", dataDir, "--lock-dir", t.TempDir(),
				"--cni-config-dir", confDir, "--cni-path", testenv.ReferencePlugins,
				"--bridge-network", bridge, "--bridge-iface", iface, "--bridge-subnet", "10.199.134.0/24"}
			for _, a := range tc.args {
				if strings.HasSuffix(a, ".json") || strings.HasSuffix(a, ".vars.hcl") {
					a = filepath.Join(corpus, a)
				}
				args = append(args, a)
			}
			args = append(args, filepath.Join(corpus, file))
			before := netnsEntries()
			out, _, err := runIn(t, strings.NewReader(`{"codec":"av1"}`), args...)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Errorf("run: %v, want a refusal with %q\n%s", err, tc.refused, out)
				}
				if _, serr := os.Stat(dataDir); serr == nil {
					t.Error("a refused run created the data dir")
				}
				if after := netnsEntries(); strings.Join(after, ",") != strings.Join(before, ",") {
					t.Errorf("namespaces changed: before %v after %v", before, after)
				}
				return
			}
			if err != nil || !strings.Contains(out, "leak check: nothing left") {
				t.Fatalf("run: %v\n%s", err, out)
			}
			allocs := allocLine.FindAllStringSubmatch(out, -1)
			if len(allocs) == 0 {
				t.Fatalf("no allocation ran:\n%s", out)
			}
			for _, m := range allocs {
				if m[1] != "complete" || strings.Contains(","+m[2]+",", ",-1,") {
					t.Errorf("allocation %s with exit codes %s: a task did not start\n%s", m[1], m[2], out)
				}
			}
		})
	}
	if seen != len(corpusRuns) {
		t.Errorf("corpusRuns has %d files, expected.tsv accepts %d", len(corpusRuns), seen)
	}
}
