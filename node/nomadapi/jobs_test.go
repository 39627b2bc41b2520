package nomadapi_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	napi "github.com/hashicorp/nomad/api"
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

// TestNomadCLIJobService: `nomad job run` of a service job with a check
// monitors its deployment until the allocation is healthy; `job status`
// shows the deployment; `deployment list/status` and `eval list/status`
// show them; plan of the unchanged file exits 0, of a changed one 1.
func TestNomadCLIJobService(t *testing.T) {
	e := startNomadEnv(t, jobsNet, jobsBridge)
	f := e.jobFile(t, "web.nomad.hcl", serviceJob)

	out, code := e.nomad(t, "job", "plan", f)
	wantExit(t, "job plan of a new job", code, 1)
	want(t, "job plan", out, `\+ Job: "nweb"`, `\+ Task Group: "web" \(1 create\)`, `nomad job run -check-index 0`)

	out, code = e.nomad(t, "job", "run", "-check-index", "0", f)
	wantExit(t, "job run", code, 0)
	want(t, "job run", out, `Monitoring evaluation`, `Allocation "[0-9a-f]{8}" created`, `finished with status "complete"`,
		`Monitoring deployment "[0-9a-f]{8}"`, `Status\s+= successful`, `Deployment completed successfully`, `web\s+1\s+1\s+1\s+0`)

	out, code = e.nomad(t, "job", "status", "nweb")
	wantExit(t, "job status", code, 0)
	want(t, "job status", out, `Latest Deployment`, `Status\s+= successful`, `web\s+0\s+0\s+1\s+0\s+0\s+0\s+0`, `run\s+running`)

	out, code = e.nomad(t, "job", "plan", f)
	wantExit(t, "job plan of the unchanged job", code, 0)
	want(t, "job plan unchanged", out, `Job: "nweb"`, `nomad job run -check-index [1-9][0-9]*`)
	m := regexp.MustCompile(`-check-index ([0-9]+)`).FindStringSubmatch(out)

	changed := e.jobFile(t, "web2.nomad.hcl", strings.Replace(serviceJob, "echo hi", "echo hello", 1))
	out, code = e.nomad(t, "job", "plan", changed)
	wantExit(t, "job plan of a changed job", code, 1)
	want(t, "job plan changed", out, `\+/- Job: "nweb"`, `\+/- Task Group: "web"`, `echo hello`)

	out, code = e.nomad(t, "job", "run", "-check-index", "99", changed)
	if code == 0 || !strings.Contains(out, "conflicting job modify index") {
		t.Fatalf("job run with a stale check index: exit %d, want non-zero naming the conflict:\n%s", code, out)
	}
	out, code = e.nomad(t, "job", "run", "-detach", "-check-index", m[1], changed)
	wantExit(t, "job run -detach", code, 0)
	want(t, "job run -detach", out, `Evaluation ID: [0-9a-f-]{36}`)
	evalID := regexp.MustCompile(`Evaluation ID: ([0-9a-f-]{36})`).FindStringSubmatch(out)[1]

	out, code = e.nomad(t, "eval", "status", evalID[:8])
	wantExit(t, "eval status", code, 0)
	want(t, "eval status", out, `ID\s+= `+evalID[:8], `Job ID\s+= nweb`, `TriggeredBy\s+= job-register`)
	out, code = e.nomad(t, "eval", "list")
	wantExit(t, "eval list", code, 0)
	want(t, "eval list", out, evalID[:8]+`\s+50\s+job-register\s+nweb`)

	out, code = e.nomad(t, "deployment", "list")
	wantExit(t, "deployment list", code, 0)
	want(t, "deployment list", out, `(?s)nweb\s+0\s+(running|successful).*nweb\s+0\s+successful`)
	deadline := time.Now().Add(time.Minute)
	for {
		out, _ = e.nomad(t, "job", "status", "nweb")
		if strings.Contains(out, "successful") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	dep := regexp.MustCompile(`ID\s+= ([0-9a-f]{8})`).FindAllStringSubmatch(out, -1)
	out, code = e.nomad(t, "deployment", "status", dep[len(dep)-1][1])
	wantExit(t, "deployment status", code, 0)
	want(t, "deployment status", out, `Status\s+= successful`, `web\s+1\s+1\s+1\s+0`)

	// berth's versions: the change made version 1, the first is kept.
	out, code = e.nomad(t, "job", "history", "nweb")
	wantExit(t, "job history", code, 0)
	want(t, "job history", out, `(?s)Version\s+= 1.*Version\s+= 0`)
	out, code = e.nomad(t, "job", "history", "-p", "nweb")
	wantExit(t, "job history -p", code, 0)
	want(t, "job history -p", out, `echo hello`)
	out, code = e.nomad(t, "job", "inspect", "-version", "0", "nweb")
	wantExit(t, "job inspect -version 0", code, 0)
	want(t, "job inspect -version 0", out, `"Version": 0`, `echo hi >`)
	out, code = e.nomad(t, "job", "inspect", "nweb")
	wantExit(t, "job inspect", code, 0)
	want(t, "job inspect", out, `"Version": 1`, `echo hello`)

	// Running the unchanged file again changes nothing: the evaluation
	// places nothing, the monitor ends with exit 0, the allocation stays.
	out, _ = e.nomad(t, "job", "status", "nweb")
	// (An allocation's Version column is 0: berth does not record which
	// version placed it.)
	alloc := regexp.MustCompile(`(?m)^([0-9a-f]{8})\s+[0-9a-f]{8}\s+web\s+[0-9]+\s+run\s+running`).FindStringSubmatch(out)
	if alloc == nil {
		t.Fatalf("job status: no running allocation:\n%s", out)
	}
	out, code = e.nomad(t, "job", "run", changed)
	wantExit(t, "job run of the unchanged job", code, 0)
	want(t, "job run unchanged", out, `finished with status "complete"`)
	if strings.Contains(out, "created") {
		t.Fatalf("job run of the unchanged job placed an allocation:\n%s", out)
	}
	out, _ = e.nomad(t, "job", "status", "nweb")
	want(t, "job status after the unchanged run", out, alloc[1]+`\s+[0-9a-f]{8}\s+web\s+[0-9]+\s+run\s+running`)

	// A stop keeps the job listed as dead; -purge forgets it.
	out, code = e.nomad(t, "job", "stop", "-yes", "nweb")
	wantExit(t, "job stop", code, 0)
	want(t, "job stop", out, `finished with status "complete"`)
	out, code = e.nomad(t, "job", "status", "nweb")
	wantExit(t, "job status of a stopped job", code, 0)
	want(t, "job status stopped", out, `Status\s+= dead \(stopped\)`)
	_, code = e.nomad(t, "job", "stop", "-purge", "-yes", "nweb")
	wantExit(t, "job stop -purge", code, 0)
	out, code = e.nomad(t, "job", "status", "nweb")
	if code == 0 {
		t.Fatalf("job status of a purged job: exit 0, want non-zero:\n%s", out)
	}
}

// TestNomadCLIJobPeriodic: the seed job (a periodic job launching every
// second; here raw_exec) through `nomad job run`, which prints its next
// launch instead of monitoring, and `nomad job status`, which lists its
// launches as children.
func TestNomadCLIJobPeriodic(t *testing.T) {
	e := startNomadEnv(t, jobsNet, jobsBridge)
	src, err := os.ReadFile("../../examples/jobs/seed-podman-every-second.nomad.hcl")
	testenv.Must(t, err)
	seed := strings.NewReplacer(`driver = "podman"`, `driver = "raw_exec"`,
		`image   = "localhost/busybox:latest"`, ``).Replace(string(src))
	f := e.jobFile(t, "seed.nomad.hcl", seed)

	out, code := e.nomad(t, "job", "run", f)
	wantExit(t, "job run", code, 0)
	want(t, "job run", out, `Job registration successful`, `Approximate next launch time`)

	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ = e.nomad(t, "job", "status", "cni-debug")
		if regexp.MustCompile(`cni-debug/periodic-[0-9]+\s+dead`).MatchString(out) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	want(t, "job status", out, `Periodic\s+= true`, `Next Periodic Launch`, `Children Job Summary`, `Previously Launched Jobs`,
		`cni-debug/periodic-[0-9]+\s+dead`)

	out, code = e.nomad(t, "job", "status")
	wantExit(t, "job status", code, 0)
	want(t, "job status list", out, `cni-debug\s+batch/periodic\s+50\s+running`)
	launch := regexp.MustCompile(`cni-debug/periodic-[0-9]+`).FindString(out)
	out, code = e.nomad(t, "job", "status", launch)
	wantExit(t, "job status of a launch", code, 0)
	want(t, "job status of a launch", out, `ID\s+= `+launch, `debug\s+0\s+run`)

	_, code = e.nomad(t, "job", "stop", "-purge", "-yes", "cni-debug")
	wantExit(t, "job stop", code, 0)

	// `job periodic force` launches a job whose schedule is far away.
	yearly := e.jobFile(t, "yearly.nomad.hcl", strings.NewReplacer(`job "nbatch"`, `job "nyearly"`,
		`type = "batch"`, "type = \"batch\"\n  periodic {\n    crons = [\"0 0 1 1 *\"]\n  }", "sleep 2", "sleep 0").Replace(batchJob))
	_, code = e.nomad(t, "job", "run", yearly)
	wantExit(t, "job run yearly", code, 0)
	out, code = e.nomad(t, "job", "periodic", "force", "nyearly")
	wantExit(t, "job periodic force", code, 0)
	want(t, "job periodic force", out, `finished with status "complete"`)
	deadline = time.Now().Add(20 * time.Second)
	for !regexp.MustCompile(`nyearly/periodic-[0-9]+`).MatchString(out) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		out, _ = e.nomad(t, "job", "status", "nyearly")
	}
	want(t, "job status after a force", out, `nyearly/periodic-[0-9]+`)
	_, code = e.nomad(t, "job", "stop", "-purge", "-yes", "nyearly")
	wantExit(t, "job stop yearly", code, 0)
}

const paramJob = `job "nparam" {
  type = "batch"
  parameterized {
    meta_required = ["who"]
  }
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello ${NOMAD_META_who}"]
      }
    }
  }
}
`

// TestNomadCLIJobDispatch: `nomad job dispatch` runs a child of a
// parameterized job and monitors it; `job status` lists it as a
// dispatched job.
func TestNomadCLIJobDispatch(t *testing.T) {
	e := startNomadEnv(t, jobsNet, jobsBridge)
	f := e.jobFile(t, "param.nomad.hcl", paramJob)
	out, code := e.nomad(t, "job", "run", f)
	wantExit(t, "job run", code, 0)
	want(t, "job run", out, `Job registration successful`)

	out, code = e.nomad(t, "job", "dispatch", "-meta", "who=berth", "nparam")
	wantExit(t, "job dispatch", code, 0)
	want(t, "job dispatch", out, `Dispatched Job ID = nparam/dispatch-[0-9]+-[0-9a-f]{8}`, `Allocation "[0-9a-f]{8}" created`, `finished with status "complete"`)

	out, code = e.nomad(t, "job", "dispatch", "nparam")
	if code == 0 || !strings.Contains(out, "who") {
		t.Fatalf("job dispatch without the required meta: exit %d, want non-zero naming it:\n%s", code, out)
	}

	out, code = e.nomad(t, "job", "status", "nparam")
	wantExit(t, "job status", code, 0)
	want(t, "job status", out, `Parameterized\s+= true`, `Dispatched Jobs`, `nparam/dispatch-[0-9]+-[0-9a-f]{8}`)
	child := regexp.MustCompile(`nparam/dispatch-[0-9]+-[0-9a-f]{8}`).FindString(out)
	out, code = e.nomad(t, "job", "status", child)
	wantExit(t, "job status of the dispatched job", code, 0)
	want(t, "job status of the dispatched job", out, `ID\s+= `+regexp.QuoteMeta(child), `g\s+0\s+run`)
	out, code = e.nomad(t, "job", "allocs", child)
	wantExit(t, "job allocs", code, 0)
	want(t, "job allocs", out, `[0-9a-f]{8}\s+[0-9a-f]{8}\s+g\s+0\s+run`)
	_, code = e.nomad(t, "job", "stop", "-purge", "-yes", "nparam")
	wantExit(t, "job stop", code, 0)
}

// TestNomadCLIJobSource: berth parses the job's source itself: a file
// Nomad's CLI accepts but berth refuses fails `job run` with berth's
// positioned error, nothing registered; Nomad's Go client without a
// Submission is told to send the source; with one, the job runs.
func TestNomadCLIJobSource(t *testing.T) {
	e := startNomadEnv(t, jobsNet, jobsBridge)
	bad := e.jobFile(t, "bad.nomad.hcl", strings.Replace(batchJob, `command = "/bin/sh"`, `command = "/bin/sh"
        no_such_option = true`, 1))
	out, code := e.nomad(t, "job", "run", bad)
	wantExit(t, "job run of a file berth refuses", code, 1)
	want(t, "job run refused", out, `Unexpected response code: 400`, `nbatch\.nomad\.hcl:[0-9]+:[0-9]+`, `no_such_option`)

	out, code = e.nomad(t, "status")
	wantExit(t, "status", code, 0)
	want(t, "status", out, `No running jobs`)

	c, err := napi.NewClient(&napi.Config{Address: e.addr, SecretID: testToken})
	testenv.Must(t, err)
	job := napi.NewBatchJob("ngo", "ngo", "global", 50)
	_, _, err = c.Jobs().Register(job, nil)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "Submission") {
		t.Fatalf("register without a submission: %v, want 400 saying to send the source", err)
	}
	src := strings.ReplaceAll(strings.Replace(batchJob, `"nbatch"`, `"ngo"`, 1), "cni/private", "cni/"+e.net.Name)
	resp, _, err := c.Jobs().RegisterOpts(job, &napi.RegisterOptions{Submission: &napi.JobSubmission{Source: src, Format: "hcl2", VariableFlags: map[string]string{"msg": "go"}}}, nil)
	testenv.Must(t, err)
	if resp.EvalID == "" {
		t.Fatal("register: no evaluation")
	}
	info, _, err := c.Jobs().Info("ngo", nil)
	testenv.Must(t, err)
	if got := info.TaskGroups[0].Tasks[0].Config["args"]; !strings.Contains(fmt.Sprint(got), "echo go") {
		t.Fatalf("job's args %v: want the -var msg=go applied by berth's parse", got)
	}
	_, _, err = c.Jobs().Deregister("ngo", true, nil)
	testenv.Must(t, err)
}
