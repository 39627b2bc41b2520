package nomadapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/api"
	napi "github.com/hashicorp/nomad/api"
)

// JobsBackend runs and describes jobs, evaluations and deployments. It
// speaks berth's API types; this package turns them into Nomad's.
type JobsBackend interface {
	// RegisterJob parses src with berth's own parser (its positioned
	// errors and job semantics) and runs the job.
	RegisterJob(ctx context.Context, src JobSource) (*api.JobSubmitResponse, error)
	// JobList is every job the agent knows, dispatched children included.
	JobList(ctx context.Context) ([]api.JobStub, error)
	// JobStatus is one job (or a periodic launch) with its children.
	JobStatus(ctx context.Context, id string) (*api.JobStatus, error)
	// JobAllocations are the job's allocations with their services,
	// those of a periodic job's launches included, newest first.
	JobAllocations(ctx context.Context, id string) ([]*api.Allocation, error)
	// JobServices counts the services of each group of the job (its
	// tasks' included): an allocation is healthy once that many are
	// registered and passing.
	JobServices(ctx context.Context, id string) (map[string]int, error)
	// StopJob stops the job: it stays listed as dead until a purge
	// forgets it.
	StopJob(ctx context.Context, id string, purge bool) (*api.JobStopResponse, error)
	// JobVersions are the versions the agent keeps of the job, newest
	// first.
	JobVersions(ctx context.Context, id string) (*api.JobVersions, error)
	// PlanJob is what registering src would do: berth's own diff against
	// the current version.
	PlanJob(ctx context.Context, src JobSource) (*api.JobPlanResponse, error)
	// ForcePeriodic launches a running periodic job now.
	ForcePeriodic(ctx context.Context, id string) error
	// DispatchJob runs one dispatch of a parameterized job.
	DispatchJob(ctx context.Context, id string, req api.JobDispatchRequest) (*api.JobDispatchResponse, error)
	// NodeInfo describes this node.
	NodeInfo(ctx context.Context) (NodeInfo, error)
	// NodeAllocations are every allocation the store keeps, newest first.
	NodeAllocations(ctx context.Context) ([]*api.Allocation, error)
}

// JobSource is a job as Nomad's CLI (1.6 and later) registers it: the job
// file's text and the variables given to `nomad job run`.
type JobSource struct {
	JobID    string
	Source   string
	Filename string // for positions: "<job ID>.nomad.hcl"
	// Vars are the -var flags as NAME=VALUE, sorted by name;
	// VarFiles the -var-file contents (the CLI sends them joined).
	Vars     []string
	VarFiles []api.VarFile
	// EnforceIndex (`job run -check-index`): the register fails with
	// ErrConflict unless the job's modify index is JobModifyIndex (0:
	// the job must not exist), checked by the agent as it submits.
	EnforceIndex   bool
	JobModifyIndex uint64
}

// jobRoutes are Nomad's job, evaluation, deployment, node and search
// routes:
//
//	GET    /v1/jobs[?prefix=]                 []JobListStub (a periodic job's launches too)
//	PUT    /v1/jobs, /v1/job/:id              register (needs the Submission: berth parses the source)
//	GET    /v1/job/:id                        Job (its version and modify index berth's)
//	DELETE /v1/job/:id[?purge=]               stop (dead until purged); an evaluation
//	GET    /v1/job/:id/summary|allocations|evaluations|deployment|deployments|versions
//	PUT    /v1/job/:id/plan                   berth's plan, or a JSON diff (handlePlan)
//	PUT    /v1/job/:id/dispatch               a dispatched child; an evaluation
//	PUT    /v1/job/:id/evaluate               a complete evaluation (berth schedules at once)
//	PUT    /v1/job/:id/periodic/force         a launch now; an evaluation
//	GET    /v1/evaluations, /v1/evaluation/:id[/allocations]
//	GET    /v1/deployments, /v1/deployment/:id, /v1/deployment/allocations/:id
//	GET    /v1/nodes, /v1/node/:id[/allocations], /v1/client/stats
//	PUT    /v1/search                         prefix search: jobs, allocs, evals, deployment, nodes
//
// A job ID may hold a '/' (dispatched and periodic children): /v1/job/
// takes the rest of the path and jobPath splits the sub-route off.
func (s *Server) jobRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/jobs", s.handleJobList},
		{http.MethodPut, "/v1/jobs", s.handleRegister},
		{http.MethodPost, "/v1/jobs", s.handleRegister},
		{http.MethodGet, "/v1/job/{id...}", s.handleJobGet},
		{http.MethodPut, "/v1/job/{id...}", s.handleJobPut},
		{http.MethodPost, "/v1/job/{id...}", s.handleJobPut},
		{http.MethodDelete, "/v1/job/{id...}", s.handleJobStop},
		{http.MethodGet, "/v1/evaluations", s.handleEvalList},
		{http.MethodGet, "/v1/evaluation/{id}", s.handleEval},
		{http.MethodGet, "/v1/evaluation/{id}/allocations", s.handleEvalAllocs},
		{http.MethodGet, "/v1/deployments", s.handleDeploymentList},
		{http.MethodGet, "/v1/deployment/{id}", s.handleDeployment},
		{http.MethodGet, "/v1/deployment/allocations/{id}", s.handleDeploymentAllocs},
		{http.MethodGet, "/v1/nodes", s.handleNodeList},
		{http.MethodGet, "/v1/node/{id}", s.handleNode},
		{http.MethodGet, "/v1/node/{id}/allocations", s.handleNodeAllocs},
		{http.MethodGet, "/v1/client/stats", s.handleHostStats},
		{http.MethodPost, "/v1/search", s.handleSearch},
		{http.MethodPut, "/v1/search", s.handleSearch},
	}
}

// jobPath splits /v1/job/<id>[/<sub>...]: a job ID may hold a '/' (a
// dispatched or periodic child), so the sub-route is found from the end.
func jobPath(p string) (id, sub string) {
	for _, s := range []string{"/summary", "/allocations", "/evaluations", "/deployments", "/deployment",
		"/versions", "/plan", "/dispatch", "/periodic/force", "/submission", "/scale", "/stable", "/revert", "/evaluate"} {
		if rest, ok := strings.CutSuffix(p, s); ok && rest != "" {
			return rest, s[1:]
		}
	}
	return p, ""
}

func (s *Server) handleJobGet(w http.ResponseWriter, r *http.Request) {
	id, sub := jobPath(r.PathValue("id"))
	switch sub {
	case "":
		s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
			st, err := s.b.JobStatus(ctx, id)
			if err != nil {
				return 0, nil, err
			}
			j := nomadJob(st)
			return *j.ModifyIndex, j, nil
		})
	case "summary":
		s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
			st, allocs, err := s.jobAndAllocs(ctx, id)
			if err != nil {
				return 0, nil, err
			}
			sum := jobSummary(st, allocs)
			return sum.ModifyIndex, sum, nil
		})
	case "allocations":
		s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
			st, allocs, err := s.jobAndAllocs(ctx, id)
			if err != nil {
				return 0, nil, err
			}
			all := r.URL.Query().Get("all") == "true"
			svcs, _ := s.b.JobServices(ctx, id)
			node := s.nodeOf(ctx)
			out := []*napi.AllocationListStub{}
			for _, a := range allocs {
				if !all && a.JobID != id && a.ParentJobID != id {
					continue
				}
				out = append(out, s.stubOf(a, st.Job, st.Type, node, svcs[a.Group]))
			}
			return maxIndex(st, allocs), out, nil
		})
	case "evaluations":
		s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
			if _, err := s.b.JobStatus(ctx, id); err != nil {
				return 0, nil, err
			}
			evs := s.state.evalsOf(id)
			out := []*napi.Evaluation{}
			var idx uint64
			for _, e := range evs {
				ne := s.evaluation(ctx, e)
				idx = max(idx, ne.ModifyIndex)
				out = append(out, ne)
			}
			return idx, out, nil
		})
	case "deployment":
		s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
			if _, err := s.b.JobStatus(ctx, id); err != nil {
				return 0, nil, err
			}
			d := s.state.latestDeployment(id)
			if d == nil {
				return 1, nil, nil
			}
			nd := s.deployment(ctx, d)
			return nd.ModifyIndex, nd, nil
		})
	case "deployments":
		s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
			if _, err := s.b.JobStatus(ctx, id); err != nil {
				return 0, nil, err
			}
			out := []*napi.Deployment{}
			var idx uint64
			for _, d := range s.state.deploymentsOf(id) {
				nd := s.deployment(ctx, d)
				idx = max(idx, nd.ModifyIndex)
				out = append(out, nd)
			}
			return idx, out, nil
		})
	case "versions":
		s.handleVersions(w, r, id)
	case "submission":
		writeError(w, http.StatusNotFound, fmt.Errorf("job %s: berth does not serve job submissions through Nomad's API (berth job status shows the job)", id))
	default:
		writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method GET not allowed on /v1/job/%s/%s", id, sub))
	}
}

func (s *Server) handleJobPut(w http.ResponseWriter, r *http.Request) {
	id, sub := jobPath(r.PathValue("id"))
	switch sub {
	case "":
		s.handleRegister(w, r)
	case "plan":
		s.handlePlan(w, r, id)
	case "dispatch":
		s.handleDispatch(w, r, id)
	case "periodic/force":
		s.handleForce(w, r, id)
	case "evaluate":
		s.handleEvaluate(w, r, id)
	default:
		writeError(w, http.StatusNotImplemented, fmt.Errorf("%s /v1/job/%s/%s is not served by berth", r.Method, id, sub))
	}
}

func (s *Server) jobAndAllocs(ctx context.Context, id string) (*api.JobStatus, []*api.Allocation, error) {
	st, err := s.b.JobStatus(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	allocs, err := s.b.JobAllocations(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return st, allocs, nil
}

func (s *Server) handleJobList(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	s.blocking(w, r, func(ctx context.Context) (uint64, any, error) {
		stubs, err := s.b.JobList(ctx)
		if err != nil {
			return 0, nil, err
		}
		out := []*napi.JobListStub{}
		var idx uint64
		seen := map[string]bool{}
		add := func(st *api.JobStatus, allocs []*api.Allocation) {
			if seen[st.ID] || !strings.HasPrefix(st.ID, prefix) {
				return
			}
			seen[st.ID] = true
			l := jobListStub(st, allocs)
			idx = max(idx, l.ModifyIndex)
			out = append(out, l)
		}
		for _, stub := range stubs {
			// A periodic job's launches are jobs of their own in Nomad's
			// list (`job status` finds them by the prefix "<id>/periodic-").
			if !strings.HasPrefix(stub.ID, prefix) && !strings.HasPrefix(prefix, stub.ID+"/") {
				continue
			}
			st, allocs, err := s.jobAndAllocs(ctx, stub.ID)
			if errors.Is(err, ErrNotFound) {
				continue // stopped meanwhile
			}
			if err != nil {
				return 0, nil, err
			}
			add(st, allocs)
			if len(stub.Periodic) == 0 {
				continue
			}
			for _, c := range st.Children {
				if c.ParentID != stub.ID || !strings.Contains(c.ID, "/periodic-") {
					continue
				}
				var mine []*api.Allocation
				for _, a := range allocs {
					if a.JobID == c.ID {
						mine = append(mine, a)
					}
				}
				add(&api.JobStatus{JobStub: c, Job: st.Job}, mine)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return idx, out, nil
	})
}

// handleRegister is `nomad job run`: the CLI sends the job it parsed and,
// since Nomad 1.6, the file's source, which berth parses itself.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	var req napi.JobRegisterRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Job == nil || req.Job.ID == nil || *req.Job.ID == "" {
		writeError(w, http.StatusBadRequest, errors.New("job register: the request has no job (or no job ID)"))
		return
	}
	id := *req.Job.ID
	src, err := jobSource(id, req.Submission)
	if err != nil {
		writeErr(w, err)
		return
	}
	src.EnforceIndex, src.JobModifyIndex = req.EnforceIndex, req.JobModifyIndex
	ctx := r.Context()
	t0 := time.Now()
	resp, err := s.b.RegisterJob(ctx, src)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.state.rememberJob(resp.JobID, req.Job, src)
	st, err := s.b.JobStatus(ctx, resp.JobID)
	if err != nil {
		writeErr(w, err)
		return
	}
	nj := nomadJob(st)
	out := napi.JobRegisterResponse{JobModifyIndex: *nj.JobModifyIndex, Warnings: strings.Join(resp.Warnings, "\n")}
	// Nomad makes no evaluation for a periodic or parameterized job: the
	// CLI then prints the next launch instead of monitoring.
	// An unchanged job (berth did nothing) or one updated in place (its
	// allocations keep running) gets an evaluation that places nothing,
	// as Nomad's: the CLI's monitor ends at once, with no deployment.
	if !resp.Parameterized && len(st.Periodic) == 0 {
		expect, deploy := s.expected(st), st.Type == "service"
		if resp.Unchanged || resp.Update == api.UpdateInPlace {
			expect, deploy = 0, false
		}
		e := s.state.newEval(t0, id, st.Type, "job-register", expect, deploy)
		out.EvalID, out.EvalCreateIndex = e.id, index(e.created)
	}
	writeJSON(w, out.JobModifyIndex, out)
}

// jobSource is the submission berth parses; without one (a client that
// sends only Nomad's JSON) there is nothing berth can parse.
func jobSource(id string, sub *napi.JobSubmission) (JobSource, error) {
	if sub == nil || sub.Source == "" {
		return JobSource{}, fmt.Errorf("%w: job %s: berth runs a job from its source: send the job file's HCL (the nomad CLI 1.6 and later does; Nomad's Go client: Jobs().RegisterOpts with RegisterOptions.Submission)", ErrBadRequest, id)
	}
	switch sub.Format {
	case "", "hcl2":
	default:
		return JobSource{}, fmt.Errorf("%w: job %s: source format %q: berth parses HCL2 job files only (not JSON or HCL1)", ErrBadRequest, id, sub.Format)
	}
	src := JobSource{JobID: id, Source: sub.Source, Filename: id + ".nomad.hcl"}
	for k, v := range sub.VariableFlags {
		src.Vars = append(src.Vars, k+"="+v)
	}
	sort.Strings(src.Vars)
	if strings.TrimSpace(sub.Variables) != "" {
		src.VarFiles = []api.VarFile{{Name: "variables.hcl", Content: sub.Variables}}
	}
	return src, nil
}

// expected is how many allocations one launch of the job places.
func (s *Server) expected(st *api.JobStatus) int {
	n := 0
	if st.Job != nil {
		for _, g := range st.Job.Groups {
			n += g.Count
		}
	}
	return n
}

func (s *Server) handleJobStop(w http.ResponseWriter, r *http.Request) {
	id, sub := jobPath(r.PathValue("id"))
	if sub != "" {
		writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method DELETE not allowed on /v1/job/%s/%s", id, sub))
		return
	}
	purge := r.URL.Query().Get("purge") == "true"
	ctx := r.Context()
	st, err := s.b.JobStatus(ctx, id)
	if err != nil {
		writeErr(w, err)
		return
	}
	// Without purge the job stays listed as dead (Stop true), as Nomad's.
	e := s.state.newEval(time.Now(), id, st.Type, "job-deregister", 0, false)
	if _, err := s.b.StopJob(ctx, id, purge); err != nil {
		writeErr(w, err)
		return
	}
	s.state.stopped(id)
	writeJSON(w, index(e.created), napi.JobDeregisterResponse{EvalID: e.id, EvalCreateIndex: index(e.created), JobModifyIndex: index(time.Now())})
}

// handlePlan is `nomad job plan`. Nomad's CLI sends the job it parsed,
// not its source, so berth's parser has nothing to parse: when the plan's
// job is the one last registered here, berth plans that registration's
// source (its own diff against the current version, which may be newer
// through berth's own API); otherwise the diff compares the plan's job
// with the last registered one as JSON, and counts any change as a
// destructive update.
func (s *Server) handlePlan(w http.ResponseWriter, r *http.Request, id string) {
	var req napi.JobPlanRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Job == nil {
		writeError(w, http.StatusBadRequest, errors.New("job plan: the request has no job"))
		return
	}
	ctx := r.Context()
	st, err := s.b.JobStatus(ctx, id)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		writeErr(w, err)
		return
	}
	reg, known := s.state.registered(id)
	if exists && known && sameJob(reg.job, req.Job) {
		if bp, err := s.b.PlanJob(ctx, reg.src); err == nil && bp.Job != nil && bp.Job.ID == id {
			resp := napi.JobPlanResponse{JobModifyIndex: bp.JobModifyIndex, Diff: nomadDiff(bp.Diff), Annotations: nomadAnnotations(bp.Annotations)}
			if len(bp.NextLaunches) > 0 {
				resp.NextPeriodicLaunch = bp.NextLaunches[0]
			}
			writeJSON(w, index(time.Now()), resp)
			return
		}
	}
	resp := napi.JobPlanResponse{Annotations: &napi.PlanAnnotations{DesiredTGUpdates: map[string]*napi.DesiredUpdates{}}}
	var prev *napi.Job
	if exists {
		resp.JobModifyIndex = *nomadJob(st).JobModifyIndex
		prev = reg.job
		if st.NextLaunch != nil && req.Job.Periodic != nil {
			// The registered job's schedule: berth has not parsed this one.
			resp.NextPeriodicLaunch = *st.NextLaunch
		}
	}
	switch {
	case !exists:
		resp.Diff = jobDiff("Added", req.Job, nil)
	case prev != nil && sameJob(prev, req.Job):
		resp.Diff = jobDiff("None", req.Job, prev)
	default:
		resp.Diff = jobDiff("Edited", req.Job, prev)
	}
	periodic := req.Job.Periodic != nil || req.Job.ParameterizedJob != nil
	for _, tg := range req.Job.TaskGroups {
		name := deref(tg.Name)
		count := 1
		if tg.Count != nil {
			count = *tg.Count
		}
		du := &napi.DesiredUpdates{}
		switch {
		case periodic:
		case !exists:
			du.Place = uint64(count)
		case resp.Diff.Type == "None":
			du.Ignore = uint64(count)
		default:
			// Without the source berth cannot tell an in-place change.
			du.DestructiveUpdate = uint64(count)
		}
		resp.Annotations.DesiredTGUpdates[name] = du
	}
	writeJSON(w, index(time.Now()), resp)
}

// nomadDiff is berth's plan diff with Nomad's types.
func nomadDiff(d *api.JobDiff) *napi.JobDiff {
	if d == nil {
		return nil
	}
	fields := func(l []api.FieldDiff) []*napi.FieldDiff {
		var out []*napi.FieldDiff
		for _, f := range l {
			out = append(out, &napi.FieldDiff{Type: f.Type, Name: f.Name, Old: f.Old, New: f.New, Annotations: f.Annotations})
		}
		return out
	}
	out := &napi.JobDiff{Type: d.Type, ID: d.ID, Fields: fields(d.Fields)}
	for _, g := range d.TaskGroups {
		ng := &napi.TaskGroupDiff{Type: g.Type, Name: g.Name, Fields: fields(g.Fields), Updates: g.Updates}
		for _, t := range g.Tasks {
			ng.Tasks = append(ng.Tasks, &napi.TaskDiff{Type: t.Type, Name: t.Name, Fields: fields(t.Fields), Annotations: t.Annotations})
		}
		out.TaskGroups = append(out.TaskGroups, ng)
	}
	return out
}

func nomadAnnotations(a *api.PlanAnnotations) *napi.PlanAnnotations {
	out := &napi.PlanAnnotations{DesiredTGUpdates: map[string]*napi.DesiredUpdates{}}
	if a == nil {
		return out
	}
	for g, u := range a.DesiredTGUpdates {
		out.DesiredTGUpdates[g] = &napi.DesiredUpdates{Ignore: u.Ignore, Place: u.Place, Stop: u.Stop, InPlaceUpdate: u.InPlaceUpdate, DestructiveUpdate: u.DestructiveUpdate}
	}
	return out
}

// handleVersions is `job history` and `job inspect -version`: the
// versions berth keeps, newest first, each as Nomad's job, with the diff
// of each against the one before it (Nomad's Diffs).
func (s *Server) handleVersions(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	st, err := s.b.JobStatus(ctx, id)
	if err != nil {
		writeErr(w, err)
		return
	}
	// A child job (a launch, a dispatch) has no versions of its own: the
	// agent knows none (or refuses its ID); it is its only version.
	vs, err := s.b.JobVersions(ctx, id)
	out := napi.JobVersionsResponse{Versions: []*napi.Job{}}
	if err != nil || vs == nil || len(vs.Versions) == 0 {
		out.Versions = append(out.Versions, nomadJob(st))
		writeJSON(w, *out.Versions[0].ModifyIndex, out)
		return
	}
	for _, v := range vs.Versions {
		vst := *st
		vst.Job, vst.Version, vst.SubmittedAt = v.Job, v.Version, v.SubmittedAt
		if !v.Current {
			// An earlier version: replaced, not the job's state now.
			vst.Status, vst.Error, vst.Stopped, vst.FinishedAt = api.JobDead, v.ParseError, false, nil
		}
		j := nomadJob(&vst)
		j.Stable = ptr(v.Stable || v.Current)
		out.Versions = append(out.Versions, j)
	}
	if r.URL.Query().Get("diffs") == "true" {
		for i := 0; i+1 < len(out.Versions); i++ {
			typ := "Edited"
			if sameJob(topVersionless(out.Versions[i+1]), topVersionless(out.Versions[i])) {
				typ = "None"
			}
			out.Diffs = append(out.Diffs, jobDiff(typ, topVersionless(out.Versions[i]), topVersionless(out.Versions[i+1])))
		}
	}
	writeJSON(w, *out.Versions[0].ModifyIndex, out)
}

// topVersionless is a version's job without what differs between any
// two versions (version, times, status), for their diff.
func topVersionless(j *napi.Job) *napi.Job {
	c := *j
	c.Version, c.SubmitTime, c.CreateIndex, c.ModifyIndex, c.JobModifyIndex = nil, nil, nil, nil, nil
	c.Status, c.StatusDescription, c.Stable, c.Stop = nil, nil, nil, nil
	return &c
}

// handleForce is `nomad job periodic force`: the launch happens at once
// in berth's runner; its evaluation places nothing the monitor waits for.
func (s *Server) handleForce(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	st, err := s.b.JobStatus(ctx, id)
	if err != nil {
		writeErr(w, err)
		return
	}
	t0 := time.Now()
	if err := s.b.ForcePeriodic(ctx, id); err != nil {
		writeErr(w, err)
		return
	}
	e := s.state.newEval(t0, id, st.Type, "periodic-job", 0, false)
	// Nomad's api package keeps its periodic force response unexported.
	writeJSON(w, index(e.created), struct {
		EvalID          string
		EvalCreateIndex uint64
	}{e.id, index(e.created)})
}

func (s *Server) handleDispatch(w http.ResponseWriter, r *http.Request, id string) {
	var req napi.JobDispatchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	ctx := r.Context()
	t0 := time.Now()
	resp, err := s.b.DispatchJob(ctx, id, api.JobDispatchRequest{Meta: req.Meta, Payload: req.Payload})
	if err != nil {
		writeErr(w, err)
		return
	}
	st, err := s.b.JobStatus(ctx, resp.DispatchedJobID)
	if err != nil {
		writeErr(w, err)
		return
	}
	e := s.state.newEval(t0, resp.DispatchedJobID, st.Type, "job-register", s.expected(st), false)
	writeJSON(w, index(e.created), napi.JobDispatchResponse{DispatchedJobID: resp.DispatchedJobID, EvalID: e.id, EvalCreateIndex: index(e.created), JobCreateIndex: index(st.SubmittedAt)})
}

// handleEvaluate is `nomad job eval`: berth schedules continuously, so an
// evaluation has nothing to do; it is complete at once.
func (s *Server) handleEvaluate(w http.ResponseWriter, r *http.Request, id string) {
	st, err := s.b.JobStatus(r.Context(), id)
	if err != nil {
		writeErr(w, err)
		return
	}
	e := s.state.newEval(time.Now(), id, st.Type, "job-eval", 0, false)
	writeJSON(w, index(e.created), napi.JobRegisterResponse{EvalID: e.id, EvalCreateIndex: index(e.created)})
}

// index is a time as an index: berth's indexes are the Unix milliseconds
// of the last change, so that they grow as Nomad's Raft indexes do.
func index(t time.Time) uint64 {
	if t.IsZero() {
		return 1
	}
	return uint64(max(t.UnixMilli(), 1))
}

// maxIndex is the last change of a job and its allocations.
func maxIndex(st *api.JobStatus, allocs []*api.Allocation) uint64 {
	i := index(st.SubmittedAt)
	if st.FinishedAt != nil {
		i = max(i, index(*st.FinishedAt))
	}
	for _, a := range allocs {
		i = max(i, index(a.ModifiedAt))
	}
	return i
}

// blocking answers a Nomad blocking query (?index=N&wait=D): get is
// polled until its index passes N or the wait ends, as Nomad's server
// holds the request until the state changes.
func (s *Server) blocking(w http.ResponseWriter, r *http.Request, get func(ctx context.Context) (uint64, any, error)) {
	ctx := r.Context()
	want, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	wait := 5 * time.Minute
	if d, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && d > 0 {
		wait = min(d, 10*time.Minute)
	}
	// The CLI's own timeout is its HTTP client's; answer well before.
	wait = min(wait, 30*time.Second)
	deadline := time.Now().Add(wait)
	for {
		idx, v, err := get(ctx)
		if err != nil {
			writeErr(w, err)
			return
		}
		if want == 0 || idx > want || time.Now().After(deadline) {
			writeJSON(w, idx, v)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sameJob compares two jobs as Nomad's CLI sent them (it parses a file
// alike each time): equal JSON is an unchanged job.
func sameJob(a, b *napi.Job) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
