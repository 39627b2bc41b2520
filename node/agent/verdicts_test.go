package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
)

// A valid Nomad job this node cannot run (its driver, user, CNI network,
// template or driver config) is refused by submit and plan with a 400
// that names the object at its file:line:col and what to install or
// configure; the agent keeps nothing of it.
func TestNodeFactsRefusedBySubmit(t *testing.T) {
	e := newTestEnv(t, "10.199.182.0/24")
	e.cfg.Bridge = &node.Bridge{Network: "btag-br-" + testenv.RandSuffix(6), Iface: "btag" + testenv.RandSuffix(6), Subnet: "10.199.183.0/24"}
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 2*time.Minute)
	corpus := "../../job/jobspec/testdata/corpus"
	cases := []struct {
		kind, file, pos, summary, fix string
	}{
		{"driver", "node_driver_java.hcl", "5:16", `driver "java" of task "t" in group "g" is not on this node`, "install a JRE"},
		{"user", "node_user_unknown.hcl", "6:16", `user "berth-corpus-no-such-user" of task "t"`, "useradd berth-corpus-no-such-user"},
		{"cni network", "node_cni_absent.hcl", "5:14", `network mode "cni/nope"`, `add a CNI network configuration named "nope"`},
		{"template", "node_template_vault_secret.hcl", "11:6", `template function "secret" reads Vault`, "pass secrets another way"},
		{"driver config", "node_podman_no_image.hcl", "6:7", "podman: config.image is required", "fix the config block"},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(corpus, tc.file))
			testenv.Must(t, err)
			body, err := json.Marshal(api.JobSubmitRequest{JobHCL: string(src), Filename: tc.file})
			testenv.Must(t, err)
			for _, path := range []string{"/v1/jobs/plan", "/v1/jobs"} {
				code, resp := post(t, c, path, strings.NewReader(string(body)))
				var er api.ErrorResponse
				if err := json.Unmarshal([]byte(resp), &er); err != nil {
					t.Fatalf("%s: %d %s", path, code, resp)
				}
				if code != http.StatusBadRequest || !strings.Contains(er.Error, tc.file+":"+tc.pos+": ") ||
					!strings.Contains(er.Error, tc.summary) || !strings.Contains(er.Error, tc.fix) {
					t.Errorf("%s: %d %q, want 400 at %s:%s naming %q and %q", path, code, er.Error, tc.file, tc.pos, tc.summary, tc.fix)
				}
			}
		})
	}
	jobs, err := c.Jobs(ctx)
	if err != nil || len(jobs) != 0 {
		t.Errorf("jobs after refusals: %+v, %v", jobs, err)
	}
	allocs, err := c.Allocations(ctx, "")
	if err != nil || len(allocs) != 0 {
		t.Errorf("allocations after refusals: %+v, %v", allocs, err)
	}
}
