package runner

import (
	"reflect"
	"testing"

	"github.com/berth/berth/job/jobspec"
)

// What a raw_exec or exec task inherits of the agent's environment: all
// but Nomad's default env.denylist and berth's own tokens.
func TestAgentEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    map[string]string
	}{
		{"passed", []string{"HOME=/root", "LANG=C.UTF-8", "EMPTY=", "NOMAD_ADDR=http://127.0.0.1:4646"},
			map[string]string{"HOME": "/root", "LANG": "C.UTF-8", "EMPTY": "", "NOMAD_ADDR": "http://127.0.0.1:4646"}},
		{"nomad's denylist", []string{"CONSUL_TOKEN=a", "CONSUL_HTTP_TOKEN=b", "VAULT_TOKEN=c", "NOMAD_LICENSE=d",
			"AWS_ACCESS_KEY_ID=e", "AWS_SECRET_ACCESS_KEY=f", "AWS_SESSION_TOKEN=g", "GOOGLE_APPLICATION_CREDENTIALS=h", "KEEP=1"},
			map[string]string{"KEEP": "1"}},
		{"berth's own tokens", []string{"BERTH_TOKEN=s", "NOMAD_TOKEN=t", "BERTH_ADDR=unix:///run/berth.sock"},
			map[string]string{"BERTH_ADDR": "unix:///run/berth.sock"}},
		{"not a variable", []string{"=x", "NOEQUALS", "A=b=c"}, map[string]string{"A": "b=c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentEnv(tc.environ); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("agentEnv(%q) = %v, want %v", tc.environ, got, tc.want)
			}
		})
	}
	for driver, want := range map[string]bool{"raw_exec": true, "exec": true, "podman": false, "docker": false} {
		if got := inheritsAgentEnv(driver); got != want {
			t.Errorf("inheritsAgentEnv(%q) = %v, want %v", driver, got, want)
		}
	}
}

// Nomad 1.6.5's resource and meta variables (measured by node/parity).
func TestResourceAndMetaVars(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  jobspec.Resources
		meta map[string]string
		want map[string]string
	}{
		{"limits", jobspec.Resources{CPU: 120, MemoryMB: 64}, nil,
			map[string]string{"NOMAD_CPU_LIMIT": "120", "NOMAD_MEMORY_LIMIT": "64"}},
		{"memory_max", jobspec.Resources{CPU: 100, MemoryMB: 64, MemoryMaxMB: 128}, nil,
			map[string]string{"NOMAD_CPU_LIMIT": "100", "NOMAD_MEMORY_LIMIT": "64", "NOMAD_MEMORY_MAX_LIMIT": "128"}},
		{"cores: no cpu limit", jobspec.Resources{Cores: 2, MemoryMB: 300}, nil,
			map[string]string{"NOMAD_MEMORY_LIMIT": "300"}},
		{"meta as written and upper-cased", jobspec.Resources{}, map[string]string{"team": "blue", "Mixed_Case": "x", "rack-id": "r1", "v1.2": "y"},
			map[string]string{
				"NOMAD_META_team": "blue", "NOMAD_META_TEAM": "blue", "meta.team": "blue",
				"NOMAD_META_Mixed_Case": "x", "NOMAD_META_MIXED_CASE": "x", "meta.Mixed_Case": "x",
				"NOMAD_META_rack_id": "r1", "NOMAD_META_RACK_ID": "r1", "meta.rack-id": "r1",
				"NOMAD_META_v1.2": "y", "NOMAD_META_V1.2": "y", "meta.v1.2": "y",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			resourceVars(got, tc.res)
			metaVars(got, tc.meta)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
