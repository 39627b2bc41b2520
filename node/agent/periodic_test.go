package agent

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

// The periodic tests (this file) use the subnet 10.199.244.0/24.

// periodicJob launches every second a task that runs until stopped; with
// prohibit_overlap only its first launch runs.
const periodicJob = `job "btag-pchild" {
  type = "batch"
  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = true
  }
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
`

var periodicChildRE = regexp.MustCompile(`^btag-pchild/periodic-[0-9]+$`)

// A periodic launch is a child job ("<job>/periodic-<unix>", as Nomad's):
// its allocation is named after it, the job's status lists it among its
// children and the child's status reads on its own; an agent SIGKILLed
// while it runs leaves the next agent an allocation it re-adopts under the
// same child, listed as before; stopping the periodic job stops it.
func TestPeriodicChildrenSurviveSIGKILL(t *testing.T) {
	e := newTestEnv(t, "10.199.244.0/24")
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	ctx := testenv.Context(t, 5*time.Minute)
	_, err = c.SubmitJob(ctx, []byte(e.jobSource(t, periodicJob)), "pchild.hcl")
	testenv.Must(t, err)
	old := runningAlloc(t, c, "btag-pchild")
	child := old.JobID
	if !periodicChildRE.MatchString(child) {
		t.Fatalf("allocation %s of job %q: want a periodic child's ID", old.ID, child)
	}
	checkChildren := func(when string) {
		t.Helper()
		st, err := c.Job(ctx, "btag-pchild")
		testenv.Must(t, err)
		if len(st.Children) != 1 || st.Children[0].ID != child || st.Children[0].ParentID != "btag-pchild" ||
			st.Children[0].Status != api.JobRunning || st.Children[0].Allocations[api.AllocRunning] != 1 {
			t.Errorf("%s: children of btag-pchild: %+v", when, st.Children)
		}
		cs, err := c.Job(ctx, child)
		testenv.Must(t, err)
		if cs.ID != child || cs.ParentID != "btag-pchild" || cs.Status != api.JobRunning || len(cs.Allocations) != 1 ||
			cs.Allocations[0].ID != old.ID || cs.Job == nil || cs.Job.ID != child || cs.Job.Periodic != nil {
			t.Errorf("%s: status of child %s: %+v", when, child, cs)
		}
	}
	checkChildren("first agent")
	jobs, err := c.Jobs(ctx)
	testenv.Must(t, err)
	if len(jobs) != 1 || jobs[0].ID != "btag-pchild" || jobs[0].Allocations[api.AllocRunning] != 1 {
		t.Errorf("job list: %+v, want the periodic job with its launch's running allocation", jobs)
	}

	st, err := p.signal(syscall.SIGKILL, time.Minute)
	testenv.Must(t, err)
	if st.Success() {
		t.Fatalf("agent exit %v after SIGKILL", st)
	}
	e.startBinary(t, cfgPath, c)
	cur := readopted(t, c, old.ID)
	if cur.JobID != child || !sameTask(cur, old.Tasks[0].Handle) {
		t.Errorf("re-adopted allocation: job %q task %+v, want job %q task %+v", cur.JobID, cur.Tasks[0].Handle, child, old.Tasks[0].Handle)
	}
	checkChildren("next agent")

	stop, err := c.StopJobWith(ctx, "btag-pchild", api.JobStopOptions{Purge: true})
	testenv.Must(t, err)
	if !stop.Stopped {
		t.Fatalf("stop: %+v", stop)
	}
	al, err := c.Allocation(ctx, old.ID)
	testenv.Must(t, err)
	if al.Status == api.AllocRunning || al.Status == api.AllocPending || !taskGone(t, old.Tasks[0].Handle) {
		t.Errorf("after the job's stop its child's allocation is %s, task gone %v", al.Status, taskGone(t, old.Tasks[0].Handle))
	}
	if _, err := c.Job(ctx, child); !api.IsNotFound(err) {
		t.Errorf("child of a purged job still known: %v", err)
	}
}
