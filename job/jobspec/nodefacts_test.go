package jobspec

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// What only this node decides is, per object kind, a warning at its
// file:line:col for validate (NodeWarnings: Nomad's validate accepts the
// file) and, at the same place, an error naming the object and what to
// install or configure for run and plan.
func TestNodeFacts(t *testing.T) {
	tests := []struct {
		kind, file string
		pos        string // line:col
		summary    string // names the object
		fix        string // what to install or configure
	}{
		{"driver java", "node_driver_java", "5:16", `driver "java" of task "t" in group "g" is not on this node`, "hint for java (this node's drivers: exec, podman, raw_exec)"},
		{"driver qemu", "node_driver_qemu", "5:16", `driver "qemu" of task "t" in group "g"`, "hint for qemu"},
		{"driver plugin", "node_driver_plugin", "5:16", `driver "containerd-driver" of task "t"`, "hint for containerd-driver"},
		{"driver typo", "node_driver_typo", "5:16", `driver "dockr" of task "t"`, "this node's drivers: exec, podman, raw_exec"},
		{"user", "node_user_unknown", "6:16", `user "berth-corpus-no-such-user" of task "t" in group "g"`, "create the user on this node (useradd berth-corpus-no-such-user)"},
		{"cni network", "node_cni_absent", "5:14", `network mode "cni/nope": no CNI network named "nope"`, `add a CNI network configuration named "nope"`},
		{"template consul key", "node_template_consul_key", "11:6", `template function "key" reads Consul`, "use nomadService/nomadServices"},
		{"template consul service", "node_template_consul_service", "11:12", `template function "service" reads Consul`, "berth has no Consul"},
		{"template vault", "node_template_vault_secret", "11:6", `template function "secret" reads Vault`, "pass secrets another way"},
		{"template syntax", "node_template_syntax", "10:24", "template: missing value for if", "fix the template"},
		{"podman config", "node_podman_no_image", "6:7", `invalid config for driver "podman" in task "t" in group "g": podman: config.image is required`, "fix the config block"},
		{"exec config", "node_exec_no_command", "6:7", `invalid config for driver "exec" in task "t" in group "g": exec: config.command is required`, "fix the config block"},
		{"podman unknown key", "refuse_podman_unknown_key", "8:9", `podman: unknown config key(s) config.mounts`, `lists what the podman driver takes`},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			path := filepath.Join("testdata", "corpus", tt.file+".hcl")
			opts := corpusOptions()
			opts.DriverHint = func(name string) string {
				if name == "dockr" {
					return ""
				}
				return "hint for " + name
			}
			job, err := ParseFile(path, opts)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			var warned *Diagnostic
			for i, w := range job.Warnings {
				if strings.Contains(w.Summary, tt.summary) {
					warned = &job.Warnings[i]
				}
			}
			if warned == nil {
				t.Fatalf("validate: no warning with %q; warnings: %v", tt.summary, job.Warnings)
			}
			if got := warned.String(); !strings.HasPrefix(got, path+":"+tt.pos+": ") || !strings.Contains(got, tt.fix) || !strings.HasSuffix(got, nodeRefuses) {
				t.Errorf("validate warning %q, want %s:%s: ...%s...%s", got, path, tt.pos, tt.fix, nodeRefuses)
			}

			opts.NodeWarnings = false
			job, err = ParseFile(path, opts)
			if job != nil || !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("run: job %v, error %v; want a refusal", job, err)
			}
			first := strings.SplitN(err.Error(), "\n", 2)[0]
			if !strings.HasPrefix(first, path+":"+tt.pos+": ") || !strings.Contains(first, tt.summary) || !strings.Contains(first, tt.fix) {
				t.Errorf("run: %q, want %s:%s: ...%s...%s", first, path, tt.pos, tt.summary, tt.fix)
			}
			if strings.Contains(first, nodeRefuses) {
				t.Errorf("run's refusal says the job is refused later: %q", first)
			}
		})
	}
}
