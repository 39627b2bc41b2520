package nomadapi

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/api"
	napi "github.com/hashicorp/nomad/api"
)

// berth schedules as a job is submitted: there is no evaluation queue nor
// deployment watcher. Nomad's clients follow both, so the API keeps, in
// memory, one evaluation per register, stop and dispatch, and one
// deployment per registration of a service job; their statuses are read
// off the job's allocations when asked.

// maxEvals bounds the evaluations and deployments kept (the oldest go).
const maxEvals = 512

// evalSettle is how long an evaluation stays pending waiting for the
// allocations it expects before it is reported complete anyway.
const evalSettle = 10 * time.Second

type evalRec struct {
	id, jobID, jobType, trigger string
	created                     time.Time
	expect                      int    // allocations it places
	deployment                  string // the deployment it made, if any
}

type deployRec struct {
	id, jobID string
	created   time.Time
	// done is the terminal status once reached (successful, failed,
	// cancelled): a later change of an allocation does not undo it.
	done string
	at   time.Time
}

// jobsState is what the API keeps of Nomad's objects berth has no
// records of.
type jobsState struct {
	mu      sync.Mutex
	evals   []*evalRec
	deploys []*deployRec
	// jobs are the jobs as Nomad's CLI last registered them, for plan:
	// the CLI sends plan only the JSON job, not its source.
	jobs map[string]registered
}

// registered is a job as the CLI last registered it: the JSON it parsed
// and the source berth parsed.
type registered struct {
	job *napi.Job
	src JobSource
}

func newJobsState() *jobsState { return &jobsState{jobs: map[string]registered{}} }

// newEval records an evaluation of jobID made at t (before the request
// that made it ran: its allocations are newer).
func (js *jobsState) newEval(t time.Time, jobID, jobType, trigger string, expect int, deploy bool) *evalRec {
	e := &evalRec{id: newUUID(), jobID: jobID, jobType: jobType, trigger: trigger, created: t, expect: expect}
	js.mu.Lock()
	defer js.mu.Unlock()
	if deploy {
		d := &deployRec{id: newUUID(), jobID: jobID, created: e.created}
		e.deployment = d.id
		js.deploys = append(js.deploys, d)
		if len(js.deploys) > maxEvals {
			js.deploys = js.deploys[1:]
		}
	}
	js.evals = append(js.evals, e)
	if len(js.evals) > maxEvals {
		js.evals = js.evals[1:]
	}
	return e
}

func (js *jobsState) rememberJob(id string, j *napi.Job, src JobSource) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.jobs[id] = registered{job: j, src: src}
}

// registered is the job id as last registered (ok false: none kept).
func (js *jobsState) registered(id string) (registered, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	r, ok := js.jobs[id]
	return r, ok
}

// stopped forgets what was kept of a stopped job but its evaluations.
func (js *jobsState) stopped(id string) {
	js.mu.Lock()
	defer js.mu.Unlock()
	delete(js.jobs, id)
	for _, d := range js.deploys {
		if d.jobID == id && d.done == "" {
			d.done, d.at = "cancelled", time.Now()
		}
	}
}

func (js *jobsState) eval(prefix string) ([]*evalRec, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	var out []*evalRec
	for _, e := range js.evals {
		if strings.HasPrefix(e.id, prefix) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (js *jobsState) evalsOf(job string) []*evalRec {
	js.mu.Lock()
	defer js.mu.Unlock()
	var out []*evalRec
	for i := len(js.evals) - 1; i >= 0; i-- {
		if js.evals[i].jobID == job {
			out = append(out, js.evals[i])
		}
	}
	return out
}

// evalFor is the evaluation that placed an allocation of job created
// at t: the job's last one with allocations made before it.
func (js *jobsState) evalFor(job string, t time.Time) string {
	js.mu.Lock()
	defer js.mu.Unlock()
	for i := len(js.evals) - 1; i >= 0; i-- {
		if e := js.evals[i]; e.jobID == job && e.expect > 0 && !t.Before(e.created) {
			return e.id
		}
	}
	return ""
}

func (js *jobsState) deploymentsOf(job string) []*deployRec {
	js.mu.Lock()
	defer js.mu.Unlock()
	var out []*deployRec
	for i := len(js.deploys) - 1; i >= 0; i-- {
		if job == "" || js.deploys[i].jobID == job {
			out = append(out, js.deploys[i])
		}
	}
	return out
}

func (js *jobsState) latestDeployment(job string) *deployRec {
	if l := js.deploymentsOf(job); len(l) > 0 {
		return l[0]
	}
	return nil
}

func (js *jobsState) deploymentByPrefix(prefix string) []*deployRec {
	var out []*deployRec
	for _, d := range js.deploymentsOf("") {
		if strings.HasPrefix(d.id, prefix) {
			out = append(out, d)
		}
	}
	return out
}

// since are the allocations created for an evaluation or deployment
// made at t: those of the job created from then on.
func since(allocs []*api.Allocation, t time.Time) []*api.Allocation {
	var out []*api.Allocation
	for _, a := range allocs {
		if !a.CreatedAt.Before(t) {
			out = append(out, a)
		}
	}
	return out
}

// evaluation is e as Nomad shows it: complete once the allocations it
// expects exist (or the job ended, or evalSettle passed).
func (s *Server) evaluation(ctx context.Context, e *evalRec) *napi.Evaluation {
	status := "complete"
	mod := e.created
	if e.expect > 0 {
		allocs, err := s.b.JobAllocations(ctx, e.jobID)
		mine := since(allocs, e.created)
		if err == nil && len(mine) < e.expect && time.Since(e.created) < evalSettle {
			status = "pending"
		}
		for _, a := range mine {
			if a.CreatedAt.After(mod) {
				mod = a.CreatedAt
			}
		}
	}
	return &napi.Evaluation{
		ID: e.id, Priority: 50, Type: e.jobType, TriggeredBy: e.trigger, Namespace: "default",
		JobID: e.jobID, DeploymentID: e.deployment, Status: status,
		CreateIndex: index(e.created), ModifyIndex: index(mod),
		CreateTime: e.created.UnixNano(), ModifyTime: mod.UnixNano(),
	}
}

// deployment is d as Nomad shows it: successful once every group has
// its count of healthy allocations (running, their checks passing),
// failed if one of them failed.
func (s *Server) deployment(ctx context.Context, d *deployRec) *napi.Deployment {
	out := &napi.Deployment{ID: d.id, Namespace: "default", JobID: d.jobID, TaskGroups: map[string]*napi.DeploymentState{},
		CreateIndex: index(d.created), ModifyIndex: index(d.created), JobCreateIndex: index(d.created), JobModifyIndex: index(d.created)}
	st, err := s.b.JobStatus(ctx, d.jobID)
	var allocs []*api.Allocation
	if err == nil {
		allocs, err = s.b.JobAllocations(ctx, d.jobID)
	}
	if st != nil && st.Job != nil {
		for _, g := range st.Job.Groups {
			out.TaskGroups[g.Name] = &napi.DeploymentState{DesiredTotal: g.Count, ProgressDeadline: 10 * time.Minute, RequireProgressBy: d.created.Add(10 * time.Minute)}
		}
	}
	svcs, _ := s.b.JobServices(ctx, d.jobID)
	failed := false
	for _, a := range since(allocs, d.created) {
		ts := out.TaskGroups[a.Group]
		if ts == nil {
			continue
		}
		ts.PlacedAllocs++
		switch {
		case allocHealthy(a, svcs[a.Group]):
			ts.HealthyAllocs++
		case a.Status == api.AllocFailed || a.Status == api.AllocLost:
			ts.UnhealthyAllocs++
			failed = true
		}
		out.ModifyIndex = max(out.ModifyIndex, index(a.ModifiedAt))
	}
	healthy := err == nil && len(out.TaskGroups) > 0
	for _, ts := range out.TaskGroups {
		if ts.HealthyAllocs < ts.DesiredTotal {
			healthy = false
		}
	}
	s.state.mu.Lock()
	newer := false
	for _, o := range s.state.deploys {
		if o.jobID == d.jobID && o.created.After(d.created) {
			newer = true
		}
	}
	if d.done == "" {
		switch {
		case newer:
			d.done, d.at = "cancelled", time.Now()
		case healthy:
			d.done, d.at = "successful", time.Now()
		case failed:
			d.done, d.at = "failed", time.Now()
		}
	}
	status := d.done
	if !d.at.IsZero() {
		out.ModifyIndex = max(out.ModifyIndex, index(d.at))
	}
	s.state.mu.Unlock()
	switch status {
	case "successful":
		out.Status, out.StatusDescription = "successful", "Deployment completed successfully"
	case "failed":
		out.Status, out.StatusDescription = "failed", "Failed due to unhealthy allocations"
	case "cancelled":
		out.Status, out.StatusDescription = "cancelled", "Cancelled because job is stopped or updated"
	default:
		out.Status, out.StatusDescription = "running", "Deployment is running"
	}
	return out
}

// allocHealthy: running, every task running, its services (services of
// them) registered and their checks passing (Nomad's health from checks).
func allocHealthy(a *api.Allocation, services int) bool {
	if a.Status != api.AllocRunning || len(a.Services) < services {
		return false
	}
	for _, t := range a.Tasks {
		if t.State != "running" && !(t.State == "dead" && !t.Failed) {
			return false
		}
	}
	for _, sv := range a.Services {
		if sv.Health != "" && sv.Health != "passing" {
			return false
		}
	}
	return true
}

func (s *Server) handleEvalList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	evs, _ := s.state.eval(q.Get("prefix"))
	job, status := q.Get("job"), q.Get("status")
	out := []*napi.Evaluation{}
	var idx uint64
	for i := len(evs) - 1; i >= 0; i-- {
		e := s.evaluation(r.Context(), evs[i])
		if (job != "" && e.JobID != job) || (status != "" && e.Status != status) {
			continue
		}
		idx = max(idx, e.ModifyIndex)
		out = append(out, e)
	}
	writeJSON(w, idx, out)
}

func (s *Server) oneEval(w http.ResponseWriter, id string) *evalRec {
	evs, _ := s.state.eval(id)
	if len(evs) != 1 || evs[0].id != id {
		writeError(w, http.StatusNotFound, fmt.Errorf("eval not found: %s", id))
		return nil
	}
	return evs[0]
}

func (s *Server) handleEval(w http.ResponseWriter, r *http.Request) {
	e := s.oneEval(w, r.PathValue("id"))
	if e == nil {
		return
	}
	s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
		ne := s.evaluation(ctx, e)
		return ne.ModifyIndex, ne, nil
	})
}

func (s *Server) handleEvalAllocs(w http.ResponseWriter, r *http.Request) {
	e := s.oneEval(w, r.PathValue("id"))
	if e == nil {
		return
	}
	s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
		out := []*napi.AllocationListStub{}
		if e.expect == 0 {
			return index(e.created), out, nil
		}
		allocs, err := s.b.JobAllocations(ctx, e.jobID)
		if err != nil && !isNotFound(err) {
			return 0, nil, err
		}
		idx := index(e.created)
		node := s.nodeOf(ctx)
		svcs, _ := s.b.JobServices(ctx, e.jobID)
		job := s.jobSpec(ctx, e.jobID)
		for _, a := range since(allocs, e.created) {
			st := s.stubOf(a, job, e.jobType, node, svcs[a.Group])
			st.EvalID = e.id
			idx = max(idx, st.ModifyIndex)
			out = append(out, st)
		}
		return idx, out, nil
	})
}

func (s *Server) handleDeploymentList(w http.ResponseWriter, r *http.Request) {
	out := []*napi.Deployment{}
	var idx uint64
	for _, d := range s.state.deploymentByPrefix(r.URL.Query().Get("prefix")) {
		nd := s.deployment(r.Context(), d)
		idx = max(idx, nd.ModifyIndex)
		out = append(out, nd)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	writeJSON(w, idx, out)
}

func (s *Server) oneDeployment(w http.ResponseWriter, id string) *deployRec {
	for _, d := range s.state.deploymentByPrefix(id) {
		if d.id == id {
			return d
		}
	}
	writeError(w, http.StatusNotFound, fmt.Errorf("deployment not found: %s", id))
	return nil
}

func (s *Server) handleDeployment(w http.ResponseWriter, r *http.Request) {
	d := s.oneDeployment(w, r.PathValue("id"))
	if d == nil {
		return
	}
	s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
		nd := s.deployment(ctx, d)
		return nd.ModifyIndex, nd, nil
	})
}

func (s *Server) handleDeploymentAllocs(w http.ResponseWriter, r *http.Request) {
	d := s.oneDeployment(w, r.PathValue("id"))
	if d == nil {
		return
	}
	s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
		allocs, err := s.b.JobAllocations(ctx, d.jobID)
		if err != nil && !isNotFound(err) {
			return 0, nil, err
		}
		out := []*napi.AllocationListStub{}
		idx := index(d.created)
		node := s.nodeOf(ctx)
		svcs, _ := s.b.JobServices(ctx, d.jobID)
		job := s.jobSpec(ctx, d.jobID)
		for _, a := range since(allocs, d.created) {
			st := s.stubOf(a, job, "service", node, svcs[a.Group])
			idx = max(idx, st.ModifyIndex)
			out = append(out, st)
		}
		return idx, out, nil
	})
}

// jobSpec is the job's spec as berth has it (nil when unknown).
func (s *Server) jobSpec(ctx context.Context, id string) *api.Job {
	if st, err := s.b.JobStatus(ctx, id); err == nil {
		return st.Job
	}
	return nil
}
