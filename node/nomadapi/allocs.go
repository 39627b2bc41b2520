package nomadapi

//lint:file-ignore SA1019 Nomad 1.6's CLI reads Allocation.Resources and TaskResources

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

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
	Job        *api.Job
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
	var index uint64
	for _, ai := range l {
		st := allocListStub(ai)
		index = max(index, st.ModifyIndex)
		out = append(out, st)
	}
	writeJSON(w, index, out)
}

func (s *Server) handleAlloc(w http.ResponseWriter, r *http.Request) {
	ai, err := s.b.Alloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	al := allocFull(ai)
	writeJSON(w, al.ModifyIndex, al)
}

// handleAllocStop answers with an evaluation ID, as Nomad's: berth has
// no scheduler, so it names the stop and nothing else waits on it.
func (s *Server) handleAllocStop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.b.StopAlloc(r.Context(), id); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 1, napi.AllocStopResponse{EvalID: newUUID()})
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

// desiredStatus: berth asks every allocation to run until it is stopped;
// a terminal one is not asked anything any more.
func desiredStatus(al *api.Allocation) string {
	if al.Status == api.AllocLost {
		return "stop"
	}
	return "run"
}

// allocIndex is an allocation's index for Nomad's blocking queries: its
// last change, in nanoseconds (monotonic enough on one node).
func allocIndex(al *api.Allocation) uint64 {
	return uint64(max(al.ModifiedAt.UnixNano(), al.CreatedAt.UnixNano(), 1))
}

// allocListStub is Nomad's AllocationListStub of an allocation.
func allocListStub(ai AllocInfo) *napi.AllocationListStub {
	al := ai.Alloc
	jobType := ""
	if ai.Job != nil {
		jobType = ai.Job.Type
	}
	return &napi.AllocationListStub{
		ID: al.ID, EvalID: evalIDOf(al), Name: allocName(al), Namespace: namespace(al.Namespace),
		NodeID: ai.NodeID, NodeName: ai.NodeName, JobID: al.JobID, JobType: jobType, JobVersion: ai.JobVersion,
		TaskGroup: al.Group, AllocatedResources: allocatedResources(ai),
		DesiredStatus: desiredStatus(al), ClientStatus: al.Status, ClientDescription: al.StatusDesc,
		TaskStates: taskStates(al), NextAllocation: al.NextAllocation, RescheduleTracker: rescheduleTracker(al),
		CreateIndex: uint64(max(al.CreatedAt.UnixNano(), 1)), ModifyIndex: allocIndex(al),
		CreateTime: al.CreatedAt.UnixNano(), ModifyTime: al.ModifiedAt.UnixNano(),
	}
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
		DesiredStatus: desiredStatus(al), ClientStatus: al.Status, ClientDescription: al.StatusDesc,
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
