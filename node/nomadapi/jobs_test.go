package nomadapi_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The test networks of these tests (sequential: each test's agent and
// network are gone before the next starts).
const (
	jobsNet    = "10.199.127.0/24"
	jobsBridge = "10.199.128.0/24"
)

const batchJob = `variable "msg" {
  type    = string
  default = "default"
}

job "nbatch" {
  type = "batch"

  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ${var.msg}; sleep 2"]
      }
    }
  }
}
`

const serviceJob = `job "nweb" {
  type = "service"

  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name         = "nweb"
      port         = "http"
      provider     = "nomad"
      address_mode = "alloc"
      check {
        type         = "http"
        path         = "/index.html"
        interval     = "1s"
        timeout      = "1s"
        address_mode = "alloc"
      }
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "mkdir -p $NOMAD_TASK_DIR/www && echo hi > $NOMAD_TASK_DIR/www/index.html && exec /bin/busybox httpd -f -p 8080 -h $NOMAD_TASK_DIR/www"]
      }
    }
  }
}
`

// want fails the test unless out matches every pattern.
func want(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Fatalf("%s: output does not match %q:\n%s", what, p, out)
		}
	}
}

func wantExit(t *testing.T, what string, got, exp int) {
	t.Helper()
	if got != exp {
		t.Fatalf("%s: exit %d, want %d", what, got, exp)
	}
}

// TestNomadCLIJobRun: `nomad job run` of a batch job monitors its
// evaluation to the allocation placed and exits 0; -var and -var-file
// reach berth's own parse; `job status` (list, one, -short, -verbose),
// `job inspect`, `job history`, `nomad status <prefix>` and `job stop`
// follow it.
func TestNomadCLIJobRun(t *testing.T) {
	e := startNomadEnv(t, jobsNet, jobsBridge)
	f := e.jobFile(t, "batch.nomad.hcl", batchJob)
	vf := e.jobFile(t, "vars.hcl", "msg = \"from-file\"\n")

	out, code := e.nomad(t, "job", "run", "-var-file", vf, f)
	wantExit(t, "job run", code, 0)
	want(t, "job run", out, `Monitoring evaluation "[0-9a-f]{8}"`, `Allocation "[0-9a-f]{8}" created: node "[0-9a-f]{8}", group "g"`,
		`Evaluation "[0-9a-f]{8}" finished with status "complete"`)

	out, code = e.nomad(t, "job", "status")
	wantExit(t, "job status", code, 0)
	want(t, "job status", out, `ID\s+Type\s+Priority\s+Status\s+Submit Date`, `nbatch\s+batch\s+50\s+(running|dead)`)

	out, code = e.nomad(t, "job", "status", "nbatch")
	wantExit(t, "job status nbatch", code, 0)
	want(t, "job status nbatch", out, `ID\s+= nbatch`, `Type\s+= batch`, `Summary`, `Allocations`, `[0-9a-f]{8}\s+[0-9a-f]{8}\s+g\s+0\s+run\s+(running|complete|pending)`)

	out, code = e.nomad(t, "job", "status", "-short", "nbat")
	wantExit(t, "job status -short", code, 0)
	if strings.Contains(out, "Summary") {
		t.Fatalf("job status -short shows the summary:\n%s", out)
	}
	out, code = e.nomad(t, "job", "status", "-verbose", "nbatch")
	wantExit(t, "job status -verbose", code, 0)
	want(t, "job status -verbose", out, `Evaluations`, `job-register`)

	out, code = e.nomad(t, "job", "inspect", "nbatch")
	wantExit(t, "job inspect", code, 0)
	want(t, "job inspect", out, `"ID": "nbatch"`, `from-file`)

	out, code = e.nomad(t, "job", "history", "nbatch")
	wantExit(t, "job history", code, 0)
	want(t, "job history", out, `Version\s+= 0`)

	out, code = e.nomad(t, "status", "nbat")
	wantExit(t, "status prefix", code, 0)
	want(t, "status prefix", out, `ID\s+= nbatch`)

	// The allocation finishes: the job is complete.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ = e.nomad(t, "job", "status", "nbatch")
		if strings.Contains(out, "complete") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	want(t, "job status after the run", out, `g\s+0\s+0\s+0\s+0\s+1\s+0`)

	out, code = e.nomad(t, "job", "stop", "-purge", "-yes", "nbatch")
	wantExit(t, "job stop -purge", code, 0)
	want(t, "job stop", out, `Evaluation "[0-9a-f]{8}" finished with status "complete"`)
	out, code = e.nomad(t, "job", "status", "nbatch")
	if code == 0 {
		t.Fatalf("job status of a purged job: exit 0, want non-zero:\n%s", out)
	}
}
