package jobspec

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Every name that reaches a path, CNI_ARGS or a task's environment is
// refused, at its position, when it holds NUL, a newline, ';', '=' or
// (where it becomes a path) '/': names the issue found accepted.
func TestNamesRefused(t *testing.T) {
	job := func(jobAttrs, groupName, groupBody, taskName, taskBody string) string {
		return fmt.Sprintf(`job "j" {
  %s
  group "%s" {
    %s
    task "%s" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      %s
    }
  }
}
`, jobAttrs, groupName, groupBody, taskName, taskBody)
	}
	cases := []struct {
		name, src, pos, want string
	}{
		{"namespace with newline", job(`namespace = "a\nb"`, "g", "", "t", ""), "2:15", `namespace "a\nb" is not a valid namespace name`},
		{"namespace with ;", job(`namespace = "a;b"`, "g", "", "t", ""), "2:15", `namespace "a;b"`},
		{"region with NUL", job(`region = "eu\u0000"`, "g", "", "t", ""), "2:12", `region "eu\x00" contains a NUL byte`},
		{"region with ;", job(`region = "eu;IgnoreUnknown=1"`, "g", "", "t", ""), "2:12", `region "eu;IgnoreUnknown=1" contains ';'`},
		{"group with ;", job("", "g;x=1", "", "t", ""), "3:9", `group name "g;x=1" contains ';'`},
		{"group with newline", job("", `g\nh`, "", "t", ""), "3:9", `group name "g\nh" contains the control character '\n'`},
		{"group with slash", job("", "a/b", "", "t", ""), "3:9", `group name "a/b" contains '/'`},
		{"group with NUL", job("", `t\u0000`, "", "t", ""), "3:9", `group name "t\x00" contains a NUL byte`},
		{"task dotdot", job("", "g", "", "..", ""), "5:10", `task name ".." is a path component`},
		{"task with backslash", job("", "g", "", `a\\b`, ""), "5:10", `task name "a\\b" contains '\\'`},
		{"job meta key with =", job(`meta = { "a=b" = "1" }`, "g", "", "t", ""), "2:10", `meta key in job "j" "a=b" contains '='`},
		{"group meta key with newline", job("", "g", `meta = { "a\nb" = "1" }`, "t", ""), "4:12", `meta key in group "g" "a\nb"`},
		{"task meta value with NUL", job("", "g", "", "t", `meta = { k = "a\u0000" }`), "8:14", `meta "k" in task "t" in group "g" has a NUL byte`},
		{"env name with newline", job("", "g", "", "t", `env = { "A\nB" = "1" }`), "8:13", `invalid environment variable "A\nB"`},
		{"long name", job("", strings.Repeat("g", 129), "", "t", ""), "3:9", "is 129 bytes long; the limit is 128"},
		{"cni arg value with ;", job("", "g", `network {
      mode = "cni/x"
      cni { args = { K = "v;IgnoreUnknown=true" } }
    }`, "t", ""), "6:20", `cni arg K = "v;IgnoreUnknown=true"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "n.hcl", ParseOptions{})
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.src)
			}
			diags, ok := err.(Diagnostics)
			if !ok {
				t.Fatalf("error %T %v, want Diagnostics", err, err)
			}
			var found []string
			for _, d := range diags {
				found = append(found, d.String())
				if d.Pos().String() == "n.hcl:"+tc.pos && strings.Contains(d.Summary, tc.want) {
					return
				}
			}
			t.Errorf("no diagnostic at n.hcl:%s containing %q; got:\n%s", tc.pos, tc.want, strings.Join(found, "\n"))
		})
	}
}

// Names Nomad's own job files use pass.
func TestNamesAccepted(t *testing.T) {
	src := `job "web-1.2_x" {
  namespace = "team-a"
  region    = "eu-west.1"
  meta = { "version.major" = "1", owner = "ops team" }
  group "cache group" {
    meta = { "a-b" = "c=d;e" }
    task "redis:7" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      env { HOME = "/root" }
    }
  }
}
`
	if _, err := Parse([]byte(src), "ok.hcl", ParseOptions{}); err != nil {
		t.Fatal(err)
	}
}

// env NOMAD_* and a kill_timeout beyond the node's cap are warnings, at
// their place: Nomad accepts both files, and the runtime decides.
func TestReservedEnvAndKillTimeoutWarn(t *testing.T) {
	src := `job "j" {
  group "g" {
    task "t" {
      driver       = "raw_exec"
      config { command = "/bin/true" }
      kill_timeout = "87600h"
      env { NOMAD_ALLOC_ID = "x" }
    }
  }
}
`
	j, err := Parse([]byte(src), "w.hcl", ParseOptions{MaxKillTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src2 := `job "j" {
  group "g" {
    network {
      mode = "cni/x"
      cni { args = { NOMAD_ALLOC_ID = "forged", BERTH_STORE = "other", K = "v" } }
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
`
	j2, err := Parse([]byte(src2), "c.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cw []string
	for _, w := range j2.Warnings {
		cw = append(cw, w.String())
	}
	for _, want := range []string{"cni arg BERTH_STORE in cni block", "cni arg NOMAD_ALLOC_ID in cni block"} {
		if !strings.Contains(strings.Join(cw, "\n"), want) {
			t.Errorf("no warning %q: %v", want, cw)
		}
	}
	var ws []string
	for _, w := range j.Warnings {
		ws = append(ws, w.String())
	}
	all := strings.Join(ws, "\n")
	for _, want := range []string{
		`w.hcl:6:22: kill_timeout 87600h0m0s in task "t" in group "g" is longer than this node's max_kill_timeout 30s`,
		`w.hcl:7:7: env NOMAD_ALLOC_ID in task "t" in group "g" is ignored where berth sets it`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q; warnings:\n%s", want, all)
		}
	}
	if j.Groups[0].Tasks[0].KillTimeout != 87600*time.Hour {
		t.Errorf("kill_timeout is recorded as written, the runner cuts it: %s", j.Groups[0].Tasks[0].KillTimeout)
	}
}
