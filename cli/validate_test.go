package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// validate takes -var, -var-file and NOMAD_VAR_, warns without failing,
// and a required variable with no value is a positioned error.
func TestValidateVariables(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "vars.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`variable "cmd" {
  type = string
}
variable "args" {
  type    = list(string)
  default = []
}
variable "tag" {
  type    = string
  default = "none"
}
job "btcli-vars" {
  type = "batch"
  update {
    max_parallel = 1
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = var.cmd
        args    = concat(var.args, [var.tag])
      }
    }
  }
}
`), 0o644))
	varFile := filepath.Join(dir, "vars.json")
	testenv.Must(t, os.WriteFile(varFile, []byte(`{"args": ["-n", "x"]}`), 0o644))
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir(), "--json"}

	_, _, err := run(t, append([]string{"validate", job}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "vars.hcl:1:1: variable \"cmd\" is required and has no value") {
		t.Errorf("no value for cmd: %v", err)
	}

	t.Setenv("NOMAD_VAR_tag", "from-env")
	out, _, err := run(t, append([]string{"validate", "-var", "cmd=/bin/echo", "-var-file", varFile, job}, common...)...)
	if err == nil {
		t.Fatal("update in a batch job was accepted")
	}
	_ = out
	testenv.Must(t, os.WriteFile(job, []byte(strings.Replace(mustRead(t, job), `type = "batch"`, `type = "service"`, 1)), 0o644))
	out, _, err = run(t, append([]string{"validate", "-var", "cmd=/bin/echo", "-var-file", varFile, job}, common...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"command": "/bin/echo"`, `"-n"`, `"from-env"`, "update in job \\\"btcli-vars\\\" does not apply on one node"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("validate created the data dir")
	}
}

// The seed job validates with a warning for its hostname constraint; run
// refuses it, naming the constraint and this node's value, before creating
// anything.
func TestValidateWarnsRunRefusesPlacement(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
	job := filepath.Join(dir, "seed.hcl")
	seed := strings.Replace(mustRead(t, "../job/jobspec/testdata/corpus/seed.hcl"), `mode = "cni/private"`, `mode = "host"`, 1)
	testenv.Must(t, os.WriteFile(job, []byte(seed), 0o644))
	out, _, err := run(t, append([]string{"validate", job}, common...)...)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	if !strings.Contains(out, `warning: `+job+`:9:3: constraint "${attr.unique.hostname}" = "hostname"`) {
		t.Errorf("validate output lacks the constraint warning:\n%s", out)
	}
	before := netnsEntries()
	_, _, err = run(t, append([]string{"run", job}, common...)...)
	host, _ := os.Hostname()
	if err == nil || !strings.Contains(err.Error(), job+":9:3: constraint") || !strings.Contains(err.Error(), `this node has attr.unique.hostname = "`+host+`"`) {
		t.Errorf("run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("run created the data dir for a job it refused")
	}
	if after := netnsEntries(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("namespaces changed: before %v after %v", before, after)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	testenv.Must(t, err)
	return string(b)
}

// A task user this node does not have, or denies for the driver (exec:
// root, as Nomad's user.denylist), is a warning at the user attribute in
// validate (Nomad's validate knows no node) and an error there in run;
// raw_exec's root is fine.
func TestValidateTaskUser(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
	cases := []struct {
		driver, user, want string
	}{
		{"raw_exec", "btcli-no-such-user", `user.hcl:5:16: user "btcli-no-such-user" of task "t"`},
		{"exec", "btcli-no-such-user", "unknown user"},
		{"exec", "root", "user denied by this node's settings"},
		{"raw_exec", "root", ""},
		{"exec", "nobody", ""},
	}
	for _, tc := range cases {
		t.Run(tc.driver+"/"+tc.user, func(t *testing.T) {
			job := filepath.Join(t.TempDir(), "user.hcl")
			testenv.Must(t, os.WriteFile(job, []byte(`job "btcli-user" {
  group "g" {
    task "t" {
      driver = "`+tc.driver+`"
      user   = "`+tc.user+`"
      config {
        command = "/bin/true"
      }
    }
  }
}
`), 0o644))
			out, _, err := run(t, append([]string{"validate", job}, common...)...)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			if tc.want == "" {
				if strings.Contains(out, "warning:") {
					t.Errorf("validate warned:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, "warning: "+job+":5:16: ") || !strings.Contains(out, tc.want) {
				t.Errorf("validate: want a warning at %s:5:16 with %q:\n%s", job, tc.want, out)
			}
			_, _, err = run(t, append([]string{"run", job}, common...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), job+":5:16: ") {
				t.Fatalf("run: %v, want a refusal at %s:5:16 with %q", err, job, tc.want)
			}
		})
	}
}

// `berth validate` of a file that is not UTF-8 (or holds nothing) says
// where: file:line:col, the line and column of the first bad byte.
func TestValidateInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"in a string", "job \"x\" {\n  meta { x = \"a\xff\" }\n}\n", "bad.hcl:2:16: invalid UTF-8 (byte 0xff at offset 25)"},
		{"first byte", "\xfejob \"x\" {}\n", "bad.hcl:1:1: invalid UTF-8 (byte 0xfe at offset 0)"},
		{"after multibyte runes", "# é ü\njob \"x\" {\n  # \xc3\x28\n}\n", "bad.hcl:3:5: invalid UTF-8 (byte 0xc3 at offset 22)"},
		{"truncated rune at the end", "job \"x\" {}\n\xe2\x82", "bad.hcl:2:1: invalid UTF-8"},
		{"empty", "", "bad.hcl:1:1: the job file is empty"},
		{"whitespace only", " \n\t\n", "bad.hcl:1:1: the job file holds only white space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := filepath.Join(dir, "bad.hcl")
			testenv.Must(t, os.WriteFile(job, []byte(tc.src), 0o644))
			_, _, err := run(t, append([]string{"validate", job}, common...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate: %v, want %q", err, tc.want)
			}
		})
	}
}
