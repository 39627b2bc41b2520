package nomadapi

//lint:file-ignore SA1019 Nomad 1.6's CLI reads Allocation.Resources and TaskResources

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	napi "github.com/hashicorp/nomad/api"

	"github.com/berth/berth/api"
)

// AllocsBackend describes and controls allocations: status, logs, exec,
// the alloc dir, stop/restart/signal. An allocation ID may be a unique
// prefix; an unknown one is ErrNotFound.
type AllocsBackend interface {
	// Allocs lists the allocations whose ID starts with prefix ("" for
	// all), newest first.
	Allocs(ctx context.Context, prefix string) ([]AllocInfo, error)
	// Alloc is one allocation.
	Alloc(ctx context.Context, id string) (AllocInfo, error)
	// StopAlloc stops the allocation (as `berth alloc stop`); it returns
	// once the stop was asked.
	StopAlloc(ctx context.Context, id string) error
	// RestartAlloc restarts one task ("" for all) in place.
	RestartAlloc(ctx context.Context, id, task string) error
	// SignalAlloc sends signal (a name, "" for SIGKILL) to one task ("" for
	// all).
	SignalAlloc(ctx context.Context, id, task, signal string) error
	// AllocLogs writes a task's log to out, as req asks.
	AllocLogs(ctx context.Context, req LogsRequest, out LogSink) error
	// AllocExec finds where a command runs in an allocation (task ""
	// is the group's only task), before the connection is upgraded.
	AllocExec(ctx context.Context, id, task string) (Execer, error)
	// AllocFS reads the allocation's directory, sandboxed in it.
	AllocFS(ctx context.Context, id string) (AllocDir, error)
	// Services are the native catalog's registrations, of one service
	// (name) or all ("").
	Services(ctx context.Context, name string) ([]api.ServiceRegistration, error)
	EventsBackend
}

// AllocInfo is an allocation in berth's form with what Nomad's shapes
// add: the job it runs and this node.
type AllocInfo struct {
	Alloc *api.Allocation
	// Job is the job's spec as berth has it (nil when unknown: a job
	// stopped and purged, a source that no longer parses).
	Job *api.Job
	// JobType is the job's type when Job is nil ("" if unknown).
	JobType    string
	JobVersion uint64
	NodeID     string
	NodeName   string
	Datacenter string
}

func (s *Server) allocRoutes() []route {
	return append(s.serviceRoutes(), []route{
		{http.MethodGet, "/v1/allocations", s.handleAllocs},
		{http.MethodGet, "/v1/allocation/{id}", s.handleAlloc},
		{http.MethodPost, "/v1/allocation/{id}/stop", s.handleAllocStop},
		{http.MethodPut, "/v1/allocation/{id}/stop", s.handleAllocStop},
		{http.MethodPost, "/v1/client/allocation/{id}/restart", s.handleAllocRestart},
		{http.MethodPut, "/v1/client/allocation/{id}/restart", s.handleAllocRestart},
		{http.MethodPost, "/v1/client/allocation/{id}/signal", s.handleAllocSignal},
		{http.MethodPut, "/v1/client/allocation/{id}/signal", s.handleAllocSignal},
		{http.MethodGet, "/v1/client/allocation/{id}/stats", s.handleAllocStats},
		{http.MethodGet, "/v1/client/allocation/{id}/checks", s.handleAllocChecks},
		{http.MethodGet, "/v1/allocation/{id}/services", s.handleAllocServices},
		{http.MethodGet, "/v1/client/fs/logs/{id}", s.handleLogs},
		{http.MethodGet, "/v1/client/allocation/{id}/exec", s.handleExec},
		{http.MethodGet, "/v1/client/fs/ls/{id}", s.handleFSList},
		{http.MethodGet, "/v1/client/fs/stat/{id}", s.handleFSStat},
		{http.MethodGet, "/v1/client/fs/cat/{id}", s.handleFSCat},
		{http.MethodGet, "/v1/client/fs/readat/{id}", s.handleFSReadAt},
		{http.MethodGet, "/v1/event/stream", s.handleEventStream},
	}...)
}

func (s *Server) handleAllocs(w http.ResponseWriter, r *http.Request) {
	l, err := s.b.Allocs(r.Context(), r.URL.Query().Get("prefix"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]*napi.AllocationListStub, 0, len(l))
	var idx uint64
	svcs := map[string]map[string]int{} // by job
	for _, ai := range l {
		job := ai.Alloc.JobID
		if _, ok := svcs[job]; !ok {
			svcs[job], _ = s.b.JobServices(r.Context(), job)
		}
		st := allocListStub(ai, s.evalOf(ai.Alloc), svcs[job][ai.Alloc.Group])
		idx = max(idx, st.ModifyIndex)
		out = append(out, st)
	}
	writeJSON(w, idx, out)
}

func (s *Server) handleAlloc(w http.ResponseWriter, r *http.Request) {
	ai, err := s.b.Alloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	al := allocFull(ai)
	al.EvalID = s.evalOf(ai.Alloc)
	writeJSON(w, al.ModifyIndex, al)
}

// handleAllocStop answers with an evaluation, as Nomad's: berth has no
// scheduler, so the evaluation places nothing and is complete at once;
// it is recorded so that the CLI's monitor (`alloc stop` without
// -detach) finds it.
func (s *Server) handleAllocStop(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ai, err := s.b.Alloc(ctx, r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	t0 := time.Now()
	if err := s.b.StopAlloc(ctx, ai.Alloc.ID); err != nil {
		writeErr(w, err)
		return
	}
	e := s.state.newEval(t0, ai.Alloc.JobID, jobTypeOf(ai), "alloc-stop", 0, false)
	writeJSON(w, index(e.created), napi.AllocStopResponse{EvalID: e.id})
}

func (s *Server) handleAllocRestart(w http.ResponseWriter, r *http.Request) {
	var req napi.AllocationRestartRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	task := req.TaskName
	if req.AllTasks {
		task = ""
	}
	if err := s.b.RestartAlloc(r.Context(), r.PathValue("id"), task); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 1, struct{}{})
}

func (s *Server) handleAllocSignal(w http.ResponseWriter, r *http.Request) {
	var req napi.AllocSignalRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	if err := s.b.SignalAlloc(r.Context(), r.PathValue("id"), req.Task, req.Signal); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 1, napi.GenericResponse{})
}

// handleAllocStats: berth does not sample a task's resource usage; the
// CLI prints the allocation without it (as for a node it cannot reach).
func (s *Server) handleAllocStats(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, fmt.Errorf("berth does not collect allocation resource usage (see the agent's /metrics)"))
}

// handleAllocChecks: the allocation's Nomad service checks, by check ID.
func (s *Server) handleAllocChecks(w http.ResponseWriter, r *http.Request) {
	ai, err := s.b.Alloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := napi.AllocCheckStatuses{}
	for _, svc := range ai.Alloc.Services {
		for _, c := range svc.Checks {
			id := checkID(svc, c.Name)
			st := napi.AllocCheckStatus{
				ID: id, Check: c.Name, Group: ai.Alloc.JobID + "." + ai.Alloc.Group, Mode: "healthiness",
				Output: c.Output, Service: svc.ServiceName, Task: svc.Task, Timestamp: c.Time.Unix(),
				Status: checkStatus(c.Status),
			}
			if c.OnUpdate == "ignore" {
				st.Mode = "readiness"
			}
			out[id] = st
		}
	}
	writeJSON(w, 1, out)
}

func (s *Server) handleAllocServices(w http.ResponseWriter, r *http.Request) {
	ai, err := s.b.Alloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]*napi.ServiceRegistration, 0, len(ai.Alloc.Services))
	for _, svc := range ai.Alloc.Services {
		out = append(out, serviceRegistration(svc))
	}
	writeJSON(w, 1, out)
}

// checkID is a stable ID of one check of one registration.
func checkID(svc api.ServiceRegistration, check string) string {
	return fmt.Sprintf("%x", fnv64(svc.ID+"\x00"+check))
}

// checkStatus is Nomad's word for a check's status: success, failure or
// pending.
func checkStatus(s string) string {
	switch s {
	case "passing":
		return "success"
	case "warning", "critical":
		return "failure"
	}
	return "pending"
}

// allocName is Nomad's allocation name: job.group[index].
func allocName(al *api.Allocation) string {
	return fmt.Sprintf("%s.%s[%d]", al.JobID, al.Group, al.Index)
}

// desiredStatus is what Nomad's scheduler would want of an allocation:
// a terminal one was stopped, but for a finished batch-like one, whose
// job wanted it to run to its end.
func desiredStatus(al *api.Allocation, jobType string) string {
	if terminal(al.Status) && !(al.Status == api.AllocComplete && jobType != "service") {
		return "stop"
	}
	return "run"
}

// jobTypeOf is the type of an allocation's job ("" if unknown).
func jobTypeOf(ai AllocInfo) string {
	if ai.Job != nil && ai.Job.Type != "" {
		return ai.Job.Type
	}
	return ai.JobType
}

// allocIndex is an allocation's index for Nomad's blocking queries: its
// last change, in nanoseconds (monotonic enough on one node).
func allocIndex(al *api.Allocation) uint64 {
	return uint64(max(al.ModifiedAt.UnixNano(), al.CreatedAt.UnixNano(), 1))
}

// allocListStub is an allocation as Nomad's lists show it
// (AllocationListStub): the one converter of /v1/allocations and of the
// job, evaluation, deployment and node lists. evalID is the evaluation
// that placed it (Server.evalOf); services is how many services its group
// has: a service job's allocation is healthy once they all pass.
func allocListStub(ai AllocInfo, evalID string, services int) *napi.AllocationListStub {
	al := ai.Alloc
	jobType := jobTypeOf(ai)
	s := &napi.AllocationListStub{
		ID: al.ID, EvalID: evalID, Name: allocName(al), Namespace: namespace(al.Namespace),
		NodeID: ai.NodeID, NodeName: ai.NodeName, JobID: al.JobID, JobType: jobType, JobVersion: ai.JobVersion,
		TaskGroup: al.Group, AllocatedResources: allocatedResources(ai),
		DesiredStatus: desiredStatus(al, jobType), ClientStatus: al.Status, ClientDescription: al.StatusDesc,
		TaskStates: taskStates(al), NextAllocation: al.NextAllocation, RescheduleTracker: rescheduleTracker(al),
		CreateIndex: index(al.CreatedAt), ModifyIndex: index(al.ModifiedAt),
		CreateTime: al.CreatedAt.UnixNano(), ModifyTime: al.ModifiedAt.UnixNano(),
	}
	if s.EvalID == "" {
		s.EvalID = evalIDOf(al)
	}
	if al.Status == allocUnreadable {
		s.ClientStatus = "unknown"
	}
	if jobType == "service" && al.Status != api.AllocPending {
		h := allocHealthy(al, services)
		s.DeploymentStatus = &napi.AllocDeploymentStatus{Healthy: &h, Timestamp: al.ModifiedAt}
	}
	return s
}

// evalOf is the evaluation that placed al: the one this API recorded for
// the register or dispatch that made it, else one named after it.
func (s *Server) evalOf(al *api.Allocation) string {
	if id := s.state.evalFor(al.JobID, al.CreatedAt); id != "" {
		return id
	}
	return evalIDOf(al)
}

// stubOf is allocListStub of an allocation of a job known as job (nil
// if unknown) of type jobType, on node n.
func (s *Server) stubOf(a *api.Allocation, job *api.Job, jobType string, n NodeInfo, services int) *napi.AllocationListStub {
	ai := AllocInfo{Alloc: a, Job: job, JobType: jobType, NodeID: n.ID, NodeName: n.Name, Datacenter: n.Datacenter}
	return allocListStub(ai, s.evalOf(a), services)
}

// allocFull is Nomad's Allocation of an allocation: every pointer the
// CLI dereferences is set. Nomad 1.6's CLI still reads the deprecated
// Resources and TaskResources (alloc status's Task Resources).
func allocFull(ai AllocInfo) *napi.Allocation {
	al := ai.Alloc
	out := &napi.Allocation{
		ID: al.ID, Namespace: namespace(al.Namespace), EvalID: evalIDOf(al), Name: allocName(al),
		NodeID: ai.NodeID, NodeName: ai.NodeName, JobID: al.JobID, Job: allocJob(ai), TaskGroup: al.Group,
		Resources: &napi.Resources{CPU: ptr(0), MemoryMB: ptr(0), DiskMB: ptr(diskMB)}, TaskResources: map[string]*napi.Resources{},
		AllocatedResources: allocatedResources(ai),
		Metrics: &napi.AllocationMetric{
			NodesEvaluated: 1, NodesInPool: 1, NodePool: "default", NodesAvailable: map[string]int{ai.Datacenter: 1},
		},
		DesiredStatus: desiredStatus(al, jobTypeOf(ai)), ClientStatus: al.Status, ClientDescription: al.StatusDesc,
		TaskStates: taskStates(al), PreviousAllocation: al.PreviousAllocation, NextAllocation: al.NextAllocation,
		RescheduleTracker: rescheduleTracker(al),
		CreateIndex:       uint64(max(al.CreatedAt.UnixNano(), 1)), ModifyIndex: allocIndex(al), AllocModifyIndex: allocIndex(al),
		CreateTime: al.CreatedAt.UnixNano(), ModifyTime: al.ModifiedAt.UnixNano(),
	}
	if n := al.Network; n != nil && (len(n.IPv4) > 0 || len(n.IPv6) > 0) {
		ns := &napi.AllocNetworkStatus{InterfaceName: n.Interface}
		if len(n.IPv4) > 0 {
			ns.Address = n.IPv4[0]
		}
		if len(n.IPv6) > 0 {
			ns.AddressIPv6 = n.IPv6[0]
		}
		if d := n.DNS; d != nil {
			ns.DNS = &napi.DNSConfig{Servers: d.Servers, Searches: d.Searches, Options: d.Options}
		}
		out.NetworkStatus = ns
	}
	if len(al.Services) > 0 {
		out.Services = map[string]string{}
		for _, svc := range al.Services {
			out.Services[svc.ServiceName] = svc.Health
		}
	}
	var cpu, mem int
	for _, t := range groupTasks(ai) {
		res := t.Resources
		out.TaskResources[t.Name] = &napi.Resources{CPU: ptr(res.CPU), Cores: ptr(res.Cores), MemoryMB: ptr(res.MemoryMB), MemoryMaxMB: ptr(res.MemoryMaxMB), DiskMB: ptr(0)}
		cpu += res.CPU
		mem += res.MemoryMB
	}
	out.Resources.CPU, out.Resources.MemoryMB = ptr(cpu), ptr(mem)
	return out
}

// diskMB is the group's ephemeral disk as Nomad's default: berth does not
// bound the alloc dir.
const diskMB = 300

func namespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// evalIDOf is an evaluation ID for an allocation: berth places without
// evaluations, so one is derived from the allocation (stable, a UUID).
func evalIDOf(al *api.Allocation) string {
	return uuidFrom("eval/" + al.ID)
}

func groupOf(ai AllocInfo) *api.Group {
	if ai.Job == nil {
		return nil
	}
	for _, g := range ai.Job.Groups {
		if g.Name == ai.Alloc.Group {
			return g
		}
	}
	return nil
}

func groupTasks(ai AllocInfo) []*api.Task {
	if g := groupOf(ai); g != nil {
		return g.Tasks
	}
	return nil
}

// allocJob is the allocation's job as Nomad's (what the CLI reads of it:
// version, type, the group's tasks and their lifecycles); from the
// allocation's own tasks when berth no longer has the job.
func allocJob(ai AllocInfo) *napi.Job {
	al := ai.Alloc
	j := &napi.Job{
		ID: ptr(al.JobID), Name: ptr(al.JobID), Namespace: ptr(namespace(al.Namespace)), Version: ptr(ai.JobVersion),
		Type: ptr("service"), Status: ptr("running"), Region: ptr("global"), Datacenters: []string{ai.Datacenter}, Priority: ptr(50),
	}
	tg := &napi.TaskGroup{Name: ptr(al.Group), Count: ptr(1)}
	if src := ai.Job; src != nil {
		j.Type, j.Region, j.Datacenters, j.Priority, j.Meta = ptr(src.Type), ptr(src.Region), src.Datacenters, ptr(src.Priority), src.Meta
		if src.ParentID != "" {
			j.ParentID = ptr(src.ParentID)
		}
	}
	if g := groupOf(ai); g != nil {
		tg.Count, tg.Meta = ptr(g.Count), g.Meta
		for _, t := range g.Tasks {
			nt := &napi.Task{
				Name: t.Name, Driver: t.Driver, Config: t.Config, Env: t.Env, Meta: t.Meta, User: t.User, Leader: t.Leader,
				Resources: &napi.Resources{CPU: ptr(t.Resources.CPU), Cores: ptr(t.Resources.Cores), MemoryMB: ptr(t.Resources.MemoryMB), MemoryMaxMB: ptr(t.Resources.MemoryMaxMB)},
			}
			if lc := t.Lifecycle; lc != nil {
				nt.Lifecycle = &napi.TaskLifecycle{Hook: lc.Hook, Sidecar: lc.Sidecar}
			}
			tg.Tasks = append(tg.Tasks, nt)
		}
	} else {
		for _, t := range al.Tasks {
			tg.Tasks = append(tg.Tasks, &napi.Task{Name: t.Name, Driver: t.Driver})
		}
	}
	j.TaskGroups = []*napi.TaskGroup{tg}
	return j
}

// taskStates are the allocation's tasks with their events (each task's
// own, oldest first), as Nomad's TaskStates.
func taskStates(al *api.Allocation) map[string]*napi.TaskState {
	out := make(map[string]*napi.TaskState, len(al.Tasks))
	for _, t := range al.Tasks {
		ts := &napi.TaskState{State: t.State, Failed: t.Failed, Restarts: uint64(max(t.Restarts, 0)), StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, Events: []*napi.TaskEvent{}}
		out[t.Name] = ts
	}
	for _, e := range al.Events {
		ts := out[e.Task]
		if ts == nil {
			continue
		}
		ev := &napi.TaskEvent{Type: e.Type, Time: e.Time.UnixNano(), DisplayMessage: e.Message, Message: e.Message, Details: map[string]string{}}
		if e.Type == "Restarting" || e.Type == "Restart Signaled" {
			ts.LastRestart = e.Time
		}
		ts.Events = append(ts.Events, ev)
	}
	for _, t := range al.Tasks {
		// The exit code in Terminated's details, as Nomad's.
		for _, ev := range out[t.Name].Events {
			if ev.Type == "Terminated" {
				ev.ExitCode = t.ExitCode
				ev.Details["exit_code"] = fmt.Sprint(t.ExitCode)
			}
		}
	}
	return out
}

func rescheduleTracker(al *api.Allocation) *napi.RescheduleTracker {
	if len(al.RescheduleTracker) == 0 {
		return nil
	}
	rt := &napi.RescheduleTracker{}
	for _, e := range al.RescheduleTracker {
		rt.Events = append(rt.Events, &napi.RescheduleEvent{RescheduleTime: e.RescheduleTime.UnixNano(), PrevAllocID: e.PrevAllocID})
	}
	return rt
}

// allocatedResources are the tasks' resources and the group's network:
// its address and the ports as mapped on the host (a port the group
// gave a static number is reserved, as in Nomad; others dynamic).
func allocatedResources(ai AllocInfo) *napi.AllocatedResources {
	al := ai.Alloc
	ar := &napi.AllocatedResources{Tasks: map[string]*napi.AllocatedTaskResources{}, Shared: napi.AllocatedSharedResources{DiskMB: diskMB}}
	for _, t := range groupTasks(ai) {
		ar.Tasks[t.Name] = &napi.AllocatedTaskResources{
			Cpu:    napi.AllocatedCpuResources{CpuShares: int64(t.Resources.CPU)},
			Memory: napi.AllocatedMemoryResources{MemoryMB: int64(t.Resources.MemoryMB), MemoryMaxMB: int64(t.Resources.MemoryMaxMB)},
		}
	}
	n := al.Network
	if n == nil {
		return ar
	}
	static := map[string]bool{}
	if g := groupOf(ai); g != nil {
		for _, p := range g.Network.Ports {
			static[p.Label] = p.Static > 0
		}
	}
	mode := n.Mode
	if strings.HasPrefix(mode, "cni/") || mode == "" {
		mode = "cni/" + n.Network
		if n.Network == "" {
			mode = n.Mode
		}
	}
	// The address the CLI prints beside each port is where it is
	// reached: the host's, for a mapped port; else the allocation's.
	nr := &napi.NetworkResource{Mode: mode}
	if len(n.IPv4) > 0 {
		nr.IP = n.IPv4[0]
	}
	ports := append([]api.PortMapping(nil), n.Ports...)
	sort.Slice(ports, func(i, j int) bool { return ports[i].Label < ports[j].Label })
	for i, p := range ports {
		if i == 0 && p.HostIP != "" {
			nr.IP = p.HostIP
		}
		np := napi.Port{Label: p.Label, Value: p.HostPort, To: p.To}
		if static[p.Label] {
			nr.ReservedPorts = append(nr.ReservedPorts, np)
		} else {
			nr.DynamicPorts = append(nr.DynamicPorts, np)
		}
		ar.Shared.Ports = append(ar.Shared.Ports, napi.PortMapping{Label: p.Label, Value: p.HostPort, To: p.To, HostIP: p.HostIP})
	}
	ar.Shared.Networks = []*napi.NetworkResource{nr}
	return ar
}
