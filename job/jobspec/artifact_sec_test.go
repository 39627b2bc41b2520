package jobspec

import (
	"strings"
	"testing"
)

// A local artifact source that can only name a host file is refused at
// parse (validate, submit), at its source's position; one inside the
// allocation, with interpolations, or a URL is not.
func TestArtifactSecHostSource(t *testing.T) {
	for _, tc := range []struct{ source, err string }{
		{"/etc/shadow", `artifact.hcl:7:18: artifact source "/etc/shadow" in task "t" in group "g" reads /etc/shadow on the host`},
		{"file:///etc/shadow", `reads /etc/shadow on the host`},
		{"file::/etc/shadow", `reads /etc/shadow on the host`},
		{"/root/", `reads /root on the host`},
		{"../../etc/shadow", `reads <task dir>/../../etc/shadow on the host`},
		{"local/app.tgz", ""},
		{"../alloc/data/app.tgz", ""},
		{"${NOMAD_ALLOC_DIR}/data/app.tgz", ""},
		{"file://${NOMAD_TASK_DIR}/x", ""},
		{"https://example.com/etc/shadow", ""},
	} {
		_, err := Parse([]byte(`job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "`+tc.source+`"
      }
      config {
        command = "/bin/true"
      }
    }
  }
}`), "artifact.hcl", ParseOptions{})
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.source, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want %q", tc.source, err, tc.err)
		}
	}
}
