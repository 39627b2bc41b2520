package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
)

// This file's tests use the subnets 10.199.170-173.0/24.

// versionJob is a service job whose parts the tests change: the job's
// meta (in place), the task's args (destructive); comments and layout
// vary without making a change.
func versionJob(owner, args, extra string) string {
	return `# a comment
job "btjv-svc" {
  type = "service"
  meta {
    owner = "` + owner + `"
  }
` + extra + `
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["` + args + `"]
      }
    }
  }
}
`
}

func parseTestJob(t *testing.T, src string) *jobspec.Job {
	t.Helper()
	j, err := jobspec.Parse([]byte(src), "v.hcl", jobspec.ParseOptions{})
	testenv.Must(t, err)
	return j
}

func TestJobVersionClassify(t *testing.T) {
	base := parseTestJob(t, versionJob("a", "600", ""))
	cases := []struct {
		name, src, want string
	}{
		{"same", versionJob("a", "600", ""), api.UpdateNone},
		{"comments and layout", "\n\n" + strings.ReplaceAll(versionJob("a", "600", "  # another comment\n"), "  ", "    "), api.UpdateNone},
		{"job meta", versionJob("b", "600", ""), api.UpdateInPlace},
		{"priority", versionJob("a", "600", "  priority = 70\n"), api.UpdateInPlace},
		{"task args", versionJob("a", "601", ""), api.UpdateDestructive},
		{"meta and args", versionJob("b", "601", ""), api.UpdateDestructive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := classify(base, parseTestJob(t, tc.src))
			testenv.Must(t, err)
			if got != tc.want {
				t.Errorf("classify: %s, want %s", got, tc.want)
			}
		})
	}
}

func TestJobPlanDiff(t *testing.T) {
	base := parseTestJob(t, versionJob("a", "600", ""))
	cases := []struct {
		name      string
		old       *jobspec.Job
		live      bool
		src       string
		typ       string
		changes   bool
		updateKey string
		field     string // a changed field's name, in the job or the task
	}{
		{"new job", nil, false, versionJob("a", "600", ""), api.DiffAdded, true, api.UpdateKeyCreate, "meta.owner"},
		{"unchanged", base, true, versionJob("a", "600", ""), api.DiffNone, false, api.UpdateKeyIgnore, ""},
		{"in place", base, true, versionJob("b", "600", ""), api.DiffEdited, false, api.UpdateKeyInPlace, "meta.owner"},
		{"destructive", base, true, versionJob("a", "601", ""), api.DiffEdited, true, api.UpdateKeyDestructive, "config.args[0]"},
		{"dead job", base, false, versionJob("a", "600", ""), api.DiffNone, true, api.UpdateKeyCreate, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nj := parseTestJob(t, tc.src)
			update := api.UpdateCreate
			if tc.live {
				var err error
				update, err = classify(tc.old, nj)
				testenv.Must(t, err)
			}
			d, ann, changes, err := planDiff(tc.old, nj, tc.live, update)
			testenv.Must(t, err)
			if tc.name == "dead job" {
				// Same spec, nothing live: the diff is empty but the
				// group is placed again.
				tc.typ = d.Type
			}
			if d.Type != tc.typ || changes != tc.changes || len(d.TaskGroups) != 1 || d.TaskGroups[0].Updates[tc.updateKey] != 1 || ann.DesiredTGUpdates["g"] == (api.DesiredUpdates{}) {
				t.Fatalf("diff %+v annotations %+v changes %v; want type %s changes %v %s 1", d, ann, changes, tc.typ, tc.changes, tc.updateKey)
			}
			if tc.field == "" {
				return
			}
			var names []string
			for _, f := range d.Fields {
				names = append(names, f.Name)
			}
			for _, td := range d.TaskGroups[0].Tasks {
				for _, f := range td.Fields {
					names = append(names, f.Name)
				}
			}
			if !strings.Contains(strings.Join(names, " "), tc.field) {
				t.Errorf("changed fields %v lack %s", names, tc.field)
			}
			for _, n := range names {
				if strings.Contains(n, "pos") {
					t.Errorf("a position is a field of the diff: %s", n)
				}
			}
		})
	}
}

// jobAllocs waits for exactly one running allocation of job and returns
// its ID.
func oneRunning(t *testing.T, c *api.Client, job string) string {
	t.Helper()
	var id string
	waitFor(t, job+" to run one allocation", time.Minute, func() (bool, error) {
		l, err := c.Allocations(context.Background(), job)
		if err != nil {
			return false, err
		}
		id = ""
		for _, a := range l {
			if a.Status == api.AllocRunning {
				if id != "" {
					return false, nil
				}
				id = a.ID
			}
		}
		return id != "" && countStatus(l, api.AllocPending) == 0, nil
	})
	return id
}

// TestJobRunUnchangedInPlace: an unchanged job is a no-op, a meta change
// is in place (the allocation keeps running), a task change replaces it;
// each change is a version, -check-index guards the submission.
func TestJobRunUnchangedInPlace(t *testing.T) {
	e := newTestEnv(t, "10.199.170.0/24")
	e.cfg.Bridge.Subnet = "10.199.171.0/24"
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 4*time.Minute)
	t.Cleanup(func() {
		_, _ = c.StopJobWith(testenv.Context(t, time.Minute), "btjv-svc", api.JobStopOptions{Purge: true})
	})
	submit := func(src string) *api.JobSubmitResponse {
		t.Helper()
		r, err := c.SubmitJob(ctx, []byte(e.jobSource(t, src)), "v.hcl")
		testenv.Must(t, err)
		return r
	}
	r := submit(versionJob("a", "600", ""))
	if r.Update != api.UpdateCreate || r.Version != 0 || r.JobModifyIndex != 1 {
		t.Errorf("first submit: %+v", r)
	}
	first := oneRunning(t, c, "btjv-svc")

	t.Run("TestJobRunUnchanged", func(t *testing.T) {
		r := submit("// changed comments only\n" + versionJob("a", "600", "  # x\n"))
		if !r.Unchanged || r.Replaced || r.Update != api.UpdateNone || r.Version != 0 {
			t.Errorf("unchanged submit: %+v", r)
		}
		if id := oneRunning(t, c, "btjv-svc"); id != first {
			t.Errorf("unchanged submit replaced the allocation %s by %s", first, id)
		}
	})
	t.Run("TestJobInPlace", func(t *testing.T) {
		r := submit(versionJob("b", "600", ""))
		if r.Unchanged || r.Replaced || r.Update != api.UpdateInPlace || r.Version != 1 {
			t.Errorf("in-place submit: %+v", r)
		}
		if id := oneRunning(t, c, "btjv-svc"); id != first {
			t.Errorf("in-place submit replaced the allocation %s by %s", first, id)
		}
		st, err := c.Job(ctx, "btjv-svc")
		testenv.Must(t, err)
		if st.Version != 1 || st.Job.Meta["owner"] != "b" || st.Status != api.JobRunning {
			t.Errorf("status after the in-place update: version %d meta %v status %s", st.Version, st.Job.Meta, st.Status)
		}
	})
	t.Run("TestJobVersionCheckIndex", func(t *testing.T) {
		plan, err := c.Plan(ctx, api.JobSubmitRequest{JobHCL: e.jobSource(t, versionJob("b", "601", "")), Filename: "v.hcl"})
		testenv.Must(t, err)
		if !plan.CreatesOrDestroys || plan.Update != api.UpdateDestructive || plan.Diff == nil || plan.Diff.Type != api.DiffEdited || plan.JobModifyIndex != 2 {
			t.Errorf("plan of a task change: %+v", plan)
		}
		_, err = c.Submit(ctx, api.JobSubmitRequest{JobHCL: e.jobSource(t, versionJob("b", "601", "")), Filename: "v.hcl", EnforceIndex: true, JobModifyIndex: plan.JobModifyIndex + 5})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict || !strings.Contains(ae.Message, "modify index") {
			t.Fatalf("submit with a stale index: %v", err)
		}
		r, err := c.Submit(ctx, api.JobSubmitRequest{JobHCL: e.jobSource(t, versionJob("b", "601", "")), Filename: "v.hcl", EnforceIndex: true, JobModifyIndex: plan.JobModifyIndex})
		testenv.Must(t, err)
		if !r.Replaced || r.Update != api.UpdateDestructive || r.Version != 2 {
			t.Errorf("destructive submit: %+v", r)
		}
		if id := oneRunning(t, c, "btjv-svc"); id == first {
			t.Errorf("a task change kept the allocation %s", first)
		}
		vs, err := c.JobVersions(ctx, "btjv-svc")
		testenv.Must(t, err)
		var got []uint64
		for _, v := range vs.Versions {
			got = append(got, v.Version)
		}
		if len(got) != 3 || got[0] != 2 || got[2] != 0 || !vs.Versions[0].Current || vs.Versions[0].Job == nil || !strings.Contains(vs.Versions[2].Source, `owner = "a"`) {
			t.Errorf("versions %v: %+v", got, vs)
		}
	})
}

// TestJobStopPurge: a stopped job stays listed as dead (never resumed by
// a restarted agent) until purged; run again it starts a new version.
func TestJobStopPurge(t *testing.T) {
	e := newTestEnv(t, "10.199.172.0/24")
	e.cfg.Bridge.Subnet = "10.199.173.0/24"
	a, c := e.startAgent(t)
	ctx := testenv.Context(t, 4*time.Minute)
	src := e.jobSource(t, versionJob("a", "600", ""))
	_, err := c.SubmitJob(ctx, []byte(src), "v.hcl")
	testenv.Must(t, err)
	oneRunning(t, c, "btjv-svc")
	st, err := c.StopJob(ctx, "btjv-svc")
	testenv.Must(t, err)
	if !st.Stopped || st.Purged {
		t.Fatalf("stop: %+v", st)
	}
	js, err := c.Job(ctx, "btjv-svc")
	testenv.Must(t, err)
	if js.Status != api.JobDead || !js.Stopped || len(js.Allocations) != 1 || js.Allocations[0].Status != api.AllocComplete {
		t.Errorf("stopped job: %+v", js)
	}
	// A restart's resume reads the same records: the stopped job stays
	// dead.
	a.resumeJobs(ctx)
	if js, err := c.Job(ctx, "btjv-svc"); err != nil || js.Status != api.JobDead {
		t.Errorf("stopped job after a resume: %+v %v", js, err)
	}
	if l := allocsOf(t, c, "btjv-svc"); countStatus(l, api.AllocRunning)+countStatus(l, api.AllocPending) != 0 {
		t.Errorf("stopped job resumed: %+v", l)
	}
	r, err := c.SubmitJob(ctx, []byte(src), "v.hcl")
	testenv.Must(t, err)
	if r.Unchanged || r.Update != api.UpdateCreate || r.Version != 1 {
		t.Errorf("run of a stopped job: %+v", r)
	}
	oneRunning(t, c, "btjv-svc")
	st, err = c.StopJobWith(ctx, "btjv-svc", api.JobStopOptions{Purge: true})
	testenv.Must(t, err)
	if !st.Stopped || !st.Purged {
		t.Errorf("stop -purge: %+v", st)
	}
	if _, err := c.Job(ctx, "btjv-svc"); !api.IsNotFound(err) {
		t.Errorf("purged job still known: %v", err)
	}
	if l := allocsOf(t, c, "btjv-svc"); countStatus(l, api.AllocRunning)+countStatus(l, api.AllocPending) != 0 {
		t.Errorf("purged job left allocations: %+v", l)
	}
}

// TestJobVersionReplaceCrash: the agent dies after recording a new
// version, before the old one stopped. The next agent stops the old
// version's allocation, then runs the new version's: never both.
func TestJobVersionReplaceCrash(t *testing.T) {
	e := newTestEnv(t, "10.199.170.0/24")
	e.cfg.Bridge.Subnet = "10.199.171.0/24"
	before := hostSnapshot(t)
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	const job = "btjv-svc"
	pa := e.startArmed(t, cfgPath, c, fault.ReplaceRecorded, true)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, versionJob("a", "600", ""))), "v.hcl")
	testenv.Must(t, err)
	old := oneRunning(t, c, job)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _ = c.SubmitJob(ctx, []byte(e.jobSource(t, versionJob("a", "601", ""))), "v.hcl") // the agent dies answering it
	}()
	diedAt(t, pa, fault.ReplaceRecorded)
	p := e.startBinary(t, cfgPath, c)
	cur := oneRunning(t, c, job)
	if cur == old {
		t.Errorf("the next agent resumed the old version's allocation %s", old)
	}
	al, err := c.Allocation(context.Background(), old)
	testenv.Must(t, err)
	if al.Status == api.AllocRunning || al.Status == api.AllocPending {
		t.Errorf("the old version's allocation is %s", al.Status)
	}
	st, err := c.Job(context.Background(), job)
	testenv.Must(t, err)
	if st.Version != 1 || st.Status != api.JobRunning || countStatus(st.Allocations, api.AllocRunning) != 1 {
		t.Errorf("after the restart: version %d status %s allocations %+v", st.Version, st.Status, st.Allocations)
	}
	if st.Job == nil || len(st.Job.Groups) != 1 || st.Job.Groups[0].Tasks[0].Config["args"] == nil || !strings.Contains(fmt.Sprint(st.Job.Groups[0].Tasks[0].Config["args"]), "601") {
		t.Errorf("the running version is not the new one: %+v", st.Job)
	}
	e.stopAndDrain(t, c, p, []string{job}, before)
}
