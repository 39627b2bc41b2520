package jobspec

import (
	"errors"
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

// A checksum written with ${...} is Nomad's run-time interpolation: read
// after it, not at validate.
func TestArtifactChecksumInterpolated(t *testing.T) {
	src := `job "j" {
  meta {
    sum = "sha256:` + strings.Repeat("a", 64) + `"
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      artifact {
        source = "https://127.0.0.1/app.tgz"
        options {
          checksum = "${NOMAD_META_sum}"
        }
      }
    }
  }
}`
	j, err := Parse([]byte(src), "j.hcl", ParseOptions{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	a := j.Groups[0].Tasks[0].Artifacts[0]
	if a.ChecksumType != "" || a.Options["checksum"] != "${NOMAD_META_sum}" {
		t.Errorf("artifact: %+v", a)
	}
	if _, _, err := ParseChecksum("sha256:xyz", "artifact x"); !errors.Is(err, ErrChecksum) {
		t.Errorf("ParseChecksum of a bad value: %v", err)
	}
}
