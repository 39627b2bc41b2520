package agent

import (
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

const paramJob = `variable "greeting" {
  type = string
}
variable "suffix" {
  type    = string
  default = "none"
}
variable "count" {
  type    = number
  default = 0
}
job "btag-transcode" {
  type = "batch"
  meta {
    priority = "normal"
  }
  parameterized {
    payload       = "required"
    meta_required = ["input"]
    meta_optional = ["priority"]
  }
  group "work" {
    task "t" {
      driver = "raw_exec"
      dispatch_payload {
        file = "job.json"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cat $NOMAD_TASK_DIR/job.json; echo ${var.greeting} ${var.suffix} ${var.count} $NOMAD_META_input $NOMAD_META_priority $NOMAD_JOB_PARENT_ID"]
      }
    }
  }
}
`

// A parameterized job submitted with its variables (environment, file,
// -var) is registered and not run; each dispatch (client and raw API)
// runs a child job of its own ID with the meta and payload, checked
// against the parameterized block.
func TestDispatch(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.133.0/24")
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 3*time.Minute)

	req := api.JobSubmitRequest{
		JobHCL: paramJob, Filename: "transcode.hcl",
		EnvVars:  []string{"NOMAD_VAR_greeting=from-env", "NOMAD_VAR_suffix=env-suffix", "HOME=/ignored"},
		VarFiles: []api.VarFile{{Name: "vars.json", Content: `{"suffix": "from-file"}`}},
		Vars:     []string{"count=3"},
	}
	plan, err := c.Plan(ctx, req)
	testenv.Must(t, err)
	if plan.Job.Parameterized == nil || plan.Job.Parameterized.Payload != "required" {
		t.Errorf("plan: %+v", plan.Job)
	}
	if _, err := c.Plan(ctx, api.JobSubmitRequest{JobHCL: paramJob, Filename: "transcode.hcl"}); err == nil || !strings.Contains(err.Error(), `variable "greeting" is required`) {
		t.Errorf("plan without the variable: %v", err)
	}
	resp, err := c.Submit(ctx, req)
	testenv.Must(t, err)
	if !resp.Parameterized {
		t.Errorf("submit: %+v", resp)
	}
	st, err := c.Job(ctx, "btag-transcode")
	testenv.Must(t, err)
	if st.Status != api.JobRegistered || !st.Parameterized || len(st.Allocations) != 0 {
		t.Errorf("registered job: %+v", st.JobStub)
	}

	for _, tc := range []struct {
		name string
		req  api.JobDispatchRequest
		want string
	}{
		{"no meta", api.JobDispatchRequest{Payload: []byte("x")}, "did not provide required meta keys: input"},
		{"extra meta", api.JobDispatchRequest{Meta: map[string]string{"input": "a", "color": "red"}, Payload: []byte("x")}, "unpermitted meta keys: color"},
		{"no payload", api.JobDispatchRequest{Meta: map[string]string{"input": "a"}}, "requires a payload"},
	} {
		if _, err := c.DispatchJob(ctx, "btag-transcode", tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := c.DispatchJob(ctx, "btag-nope", api.JobDispatchRequest{}); !api.IsNotFound(err) {
		t.Errorf("dispatch of an unknown job: %v", err)
	}

	d, err := c.DispatchJob(ctx, "btag-transcode", api.JobDispatchRequest{Meta: map[string]string{"input": "a.mp4"}, Payload: []byte(`{"codec":"av1"}` + "\n")})
	testenv.Must(t, err)
	if !regexp.MustCompile(`^btag-transcode/dispatch-[0-9]+-[0-9a-f]{8}$`).MatchString(d.DispatchedJobID) || d.ParentJobID != "btag-transcode" {
		t.Fatalf("dispatch: %+v", d)
	}
	// The raw API, as a client of Nomad's would call it: base64 payload.
	code, body := post(t, c, "/v1/job/btag-transcode/dispatch", strings.NewReader(`{"meta":{"input":"b.mp4","priority":"high"},"payload":"`+base64.StdEncoding.EncodeToString([]byte("raw\n"))+`"}`))
	if code != http.StatusOK || !strings.Contains(body, `"dispatched_job_id": "btag-transcode/dispatch-`) {
		t.Fatalf("raw dispatch: %d %s", code, body)
	}

	want := map[string]string{
		d.DispatchedJobID: "{\"codec\":\"av1\"}\nfrom-env from-file 3 a.mp4 normal btag-transcode\n",
	}
	for _, id := range []string{d.DispatchedJobID} {
		var child *api.JobStatus
		waitFor(t, "the dispatched job to finish", 2*time.Minute, func() (bool, error) {
			child, err = c.Job(ctx, id)
			return err == nil && child.Status == api.JobDead, err
		})
		if child.ParentID != "btag-transcode" || len(child.Allocations) != 1 || child.Allocations[0].Status != api.AllocComplete {
			t.Fatalf("child %s: %+v", id, child)
		}
		logs, err := c.AllocLogs(ctx, child.Allocations[0].ID, "t", false, 0)
		testenv.Must(t, err)
		if string(logs) != want[id] {
			t.Errorf("child output %q, want %q", logs, want[id])
		}
		if _, err := c.Allocations(ctx, id); err != nil {
			t.Errorf("allocations of %s: %v", id, err)
		}
	}
	jobs, err := c.Jobs(ctx)
	testenv.Must(t, err)
	children := 0
	for _, j := range jobs {
		if j.ParentID == "btag-transcode" {
			children++
		}
	}
	if children != 2 {
		t.Errorf("%d children listed, want 2: %+v", children, jobs)
	}
	if _, err := c.Job(ctx, "btag-transcode/dispatch-x"); err == nil || !strings.Contains(err.Error(), "a dispatched job's ID is") {
		t.Errorf("bad child ID: %v", err)
	}
	if _, err := c.DispatchJob(ctx, d.DispatchedJobID, api.JobDispatchRequest{}); err == nil || !strings.Contains(err.Error(), "is not a parameterized job") {
		t.Errorf("dispatch of a child: %v", err)
	}
	if st, err := c.StopJobWith(ctx, d.DispatchedJobID, api.JobStopOptions{Purge: true}); err != nil || !st.Stopped {
		t.Errorf("stop of a child: %+v %v", st, err)
	}
	if _, err := c.Job(ctx, d.DispatchedJobID); !api.IsNotFound(err) {
		t.Errorf("purged child still known: %v", err)
	}
}

// A registered parameterized job and a finished dispatched child are known
// again after an agent restart, parsed from their records with their
// variables; the job can still be dispatched.
func TestDispatchAfterRestart(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.133.0/24")
	start := func() (*api.Client, func()) {
		a, err := New(e.cfg, testLogger(t), WithVersion("test"))
		testenv.Must(t, err)
		stop := testenv.Serve(t, "agent", a.Run, a.Ready())
		c, err := api.NewClient("unix://"+a.SocketPath(), "")
		testenv.Must(t, err)
		return c, func() {
			c.Close()
			stop()
		}
	}
	ctx := testenv.Context(t, 3*time.Minute)
	c, stop := start()
	_, err := c.Submit(ctx, api.JobSubmitRequest{JobHCL: paramJob, Filename: "transcode.hcl", Vars: []string{"greeting=kept"}})
	testenv.Must(t, err)
	d, err := c.DispatchJob(ctx, "btag-transcode", api.JobDispatchRequest{Meta: map[string]string{"input": "x"}, Payload: []byte("p\n")})
	testenv.Must(t, err)
	waitFor(t, "the child to finish", time.Minute, func() (bool, error) {
		st, err := c.Job(ctx, d.DispatchedJobID)
		return err == nil && st.Status == api.JobDead, err
	})
	stop()

	c, stop = start()
	defer stop()
	st, err := c.Job(ctx, "btag-transcode")
	testenv.Must(t, err)
	if st.Status != api.JobRegistered || st.Job == nil {
		t.Errorf("parameterized job after restart: %+v", st.JobStub)
	}
	child, err := c.Job(ctx, d.DispatchedJobID)
	testenv.Must(t, err)
	if child.Status != api.JobDead || child.ParentID != "btag-transcode" || child.Job == nil || child.Job.ID != d.DispatchedJobID || child.Job.Meta["input"] != "x" {
		t.Errorf("child after restart: %+v %+v", child.JobStub, child.Job)
	}
	d2, err := c.DispatchJob(ctx, "btag-transcode", api.JobDispatchRequest{Meta: map[string]string{"input": "y"}, Payload: []byte("q\n")})
	testenv.Must(t, err)
	var st2 *api.JobStatus
	waitFor(t, "the second child to finish", time.Minute, func() (bool, error) {
		st2, err = c.Job(ctx, d2.DispatchedJobID)
		return err == nil && st2.Status == api.JobDead, err
	})
	logs, err := c.AllocLogs(ctx, st2.Allocations[0].ID, "t", false, 0)
	testenv.Must(t, err)
	if string(logs) != "q\nkept none 0 y normal btag-transcode\n" {
		t.Errorf("second child output %q", logs)
	}
}
