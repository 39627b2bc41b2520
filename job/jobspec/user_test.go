package jobspec

import (
	"errors"
	"strings"
	"testing"
)

// A task user the node's driver refuses is an error at the user attribute.
func TestTaskUserChecked(t *testing.T) {
	src := `job "j" {
  group "g" {
    task "a" {
      driver = "exec"
      user   = "ghost"
      config { command = "/bin/true" }
    }
    task "b" {
      driver = "exec"
      user   = "nobody"
      config { command = "/bin/true" }
    }
  }
}
`
	opts := ParseOptions{
		Drivers: map[string]func(map[string]any) error{"exec": nil},
		Users: map[string]func(string) error{"exec": func(u string) error {
			if u == "ghost" {
				return errors.New("unknown user on this node")
			}
			return nil
		}},
	}
	_, err := Parse([]byte(src), "j.nomad.hcl", opts)
	var diags Diagnostics
	if !errors.As(err, &diags) || len(diags) != 1 {
		t.Fatalf("Parse: %v, want one diagnostic", err)
	}
	d := diags[0]
	if d.Line != 5 || d.Column != 16 || !strings.Contains(d.Summary, `user "ghost"`) || !strings.Contains(d.Summary, "unknown user") {
		t.Fatalf("diagnostic %+v", d)
	}
	opts.Users = nil
	if _, err := Parse([]byte(src), "j.nomad.hcl", opts); err != nil {
		t.Fatalf("without a user check: %v", err)
	}
}
