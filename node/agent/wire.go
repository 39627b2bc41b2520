package agent

import (
	"maps"
	"slices"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

// This file is the one place where berth's internal records become the
// API's wire types (package api). Each conversion names every field, so a
// field renamed or added inside berth changes nothing a client sees until
// it is added here, and wire_test.go pins the JSON of each.
//
// Slices and maps are copied: a wire value never aliases a record the
// agent keeps (a job's spec, the last gc report). nil stays nil, so that
// "omitempty" and null keep their meaning.

func wireAllocStub(a *store.Allocation) api.AllocStub {
	s := api.AllocStub{
		ID: a.ID, JobID: a.JobID, Group: a.Group, Status: string(a.Status), StatusDesc: a.StatusDesc,
		CreatedAt: a.CreatedAt, ModifiedAt: a.ModifiedAt, Tasks: make([]api.TaskStub, 0, len(a.Tasks)),
	}
	for _, t := range a.Tasks {
		s.Tasks = append(s.Tasks, api.TaskStub{Name: t.Name, State: t.State, Failed: t.Failed, ExitCode: t.ExitCode, Restarts: t.Restarts, NotStarted: t.NotStarted})
	}
	if n := a.Network; n != nil {
		s.Network, s.NetnsPath, s.IPv4 = n.Network, n.NetnsPath, slices.Clone(n.IPv4)
		if s.Network == "" {
			s.Network = n.Mode
		}
	}
	return s
}

func wireAllocStubs(allocs []*store.Allocation) []api.AllocStub {
	out := make([]api.AllocStub, 0, len(allocs))
	for _, a := range allocs {
		out = append(out, wireAllocStub(a))
	}
	return out
}

func wireAlloc(a *store.Allocation) *api.Allocation {
	out := &api.Allocation{
		ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.Group,
		Status: string(a.Status), StatusDesc: a.StatusDesc,
		OwnerPID: a.OwnerPID, OwnerStartTime: a.OwnerStartTime, Index: a.Index, Detached: a.Detached,
		CreatedAt: a.CreatedAt, ModifiedAt: a.ModifiedAt,
		Timings:         wireTimings(a.TimingsMS),
		TeardownRetries: a.TeardownRetries, Holders: slices.Clone(a.Holders),
		ParentJobID: a.ParentJobID, PreviousAllocation: a.PreviousAllocation, NextAllocation: a.NextAllocation,
	}
	for _, e := range a.RescheduleTracker {
		out.RescheduleTracker = append(out.RescheduleTracker, api.RescheduleEvent{RescheduleTime: e.RescheduleTime, PrevAllocID: e.PrevAllocID, Delay: api.Duration(e.Delay)})
	}
	if !a.RescheduleAt.IsZero() {
		t := a.RescheduleAt
		out.RescheduleAt = &t
	}
	if a.Tasks != nil {
		out.Tasks = make([]api.TaskState, 0, len(a.Tasks))
	}
	for _, t := range a.Tasks {
		ts := api.TaskState{
			Name: t.Name, Driver: t.Driver, State: t.State, Failed: t.Failed, ExitCode: t.ExitCode,
			Signal: t.Signal, Restarts: t.Restarts, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, NotStarted: t.NotStarted,
		}
		if h := t.Handle; h != nil {
			ts.Handle = &api.TaskHandle{
				Driver: h.Driver, PID: h.PID, PIDStartTime: h.PIDStartTime,
				ContainerID: h.ContainerID, ContainerName: h.ContainerName, CgroupPath: h.CgroupPath,
			}
		}
		out.Tasks = append(out.Tasks, ts)
	}
	if n := a.Network; n != nil {
		out.Network = &api.NetworkStatus{
			Mode: n.Mode, Network: n.Network, NetnsPath: n.NetnsPath, Interface: n.Interface,
			IPv4: slices.Clone(n.IPv4), IPv6: slices.Clone(n.IPv6), Gateway: slices.Clone(n.Gateway),
		}
		if d := n.DNS; d != nil {
			out.Network.DNS = wireDNS(d.Servers, d.Searches, d.Options)
		}
		for _, p := range n.Ports {
			out.Network.Ports = append(out.Network.Ports, api.PortMapping{Label: p.Label, HostIP: p.HostIP, HostPort: p.HostPort, To: p.To})
		}
	}
	if a.Events != nil {
		out.Events = make([]api.Event, 0, len(a.Events))
	}
	for _, e := range a.Events {
		out.Events = append(out.Events, api.Event{Time: e.Time, Type: e.Type, Task: e.Task, Message: e.Message})
	}
	return out
}

func wireDNS(servers, searches, options []string) *api.DNS {
	return &api.DNS{Servers: slices.Clone(servers), Searches: slices.Clone(searches), Options: slices.Clone(options)}
}

// wireTimings maps the runner's step names to api.Timings; nil when
// nothing was timed. A step name the API does not know is not shown:
// add it to api.Timings and here.
func wireTimings(ms map[string]float64) *api.Timings {
	if len(ms) == 0 {
		return nil
	}
	var t api.Timings
	for k, v := range ms {
		switch k {
		case "netns":
			t.Netns = v
		case "add":
			t.Add = v
		case "berth":
			t.Berth = v
		case "task_start":
			t.TaskStart = v
		case "task":
			t.Task = v
		case "driver_cleanup":
			t.DriverCleanup = v
		case "del":
			t.Del = v
		case "remove":
			t.Remove = v
		case "exit_to_netns_gone":
			t.ExitToNetnsGone = v
		case "total":
			t.Total = v
		}
	}
	return &t
}

// WireNamespaces is the API's form of a namespace listing; `berth netns
// ls` and `berth net ls` print a local listing through it too. It never
// returns nil (JSON shows an empty list), nor an entry with nil holders.
func WireNamespaces(list []attach.NetEntry) []api.NetnsEntry {
	out := make([]api.NetnsEntry, 0, len(list))
	for _, e := range list {
		w := api.NetnsEntry{
			Name: e.Name, Path: e.Path, Pinned: e.Pinned, Berth: e.Berth, Network: e.Network,
			Phase: string(e.Phase), IPv4: slices.Clone(e.IPv4), AllocID: e.AllocID, LastError: e.LastError,
			Holders: make([]api.Holder, 0, len(e.Holders)),
		}
		for _, h := range e.Holders {
			w.Holders = append(w.Holders, api.Holder{PID: h.PID, Comm: h.Comm, Cmdline: h.Cmdline, Kind: string(h.Kind), Detail: h.Detail})
		}
		out = append(out, w)
	}
	return out
}

// WireSummary is the API's form of a job run's summary; `berth run`
// prints its own run through it too. nil stays nil.
// WireAllocation is an allocation in the API's form, for the CLI's own
// output (`berth run --json`).
func WireAllocation(a *store.Allocation) *api.Allocation { return wireAlloc(a) }

func WireSummary(s *runner.Summary) *api.JobSummary {
	if s == nil {
		return nil
	}
	out := &api.JobSummary{
		Job: s.Job, Launches: s.Launches, Skipped: s.Skipped,
		SetupP50: s.SetupP50, SetupP99: s.SetupP99, TeardownP50: s.TeardownP50, TeardownP99: s.TeardownP99,
		ExitToGoneP50: s.ExitToGoneP50, TeardownRetries: s.TeardownRetries, Holders: slices.Clone(s.Holders),
		Leaks: slices.Clone(s.Leaks), Duration: s.Duration, Failed: slices.Clone(s.Failed),
		Networks: slices.Clone(s.Networks),
	}
	if s.ByStatus != nil {
		out.ByStatus = make(map[string]int, len(s.ByStatus))
	}
	for k, v := range s.ByStatus {
		out.ByStatus[string(k)] = v
	}
	return out
}

func wireGCReport(r *gc.Report) *api.GCReport {
	items := func(in []gc.Item) []api.GCItem {
		out := make([]api.GCItem, 0, len(in))
		for _, it := range in {
			out = append(out, api.GCItem{Kind: it.Kind, ID: it.ID, Network: it.Network, Path: it.Path, Reason: it.Reason})
		}
		return out
	}
	out := &api.GCReport{
		DryRun: r.DryRun, StoreUnavailable: r.StoreUnavailable, Reboot: r.Reboot,
		Found: items(r.Found), Reclaimed: items(r.Reclaimed), Kept: items(r.Kept),
		Errors: append([]string{}, r.Errors...), DurationMS: r.DurationMS,
		FoundTotal: len(r.Found), ReclaimedTotal: len(r.Reclaimed), KeptTotal: len(r.Kept), ErrorsTotal: len(r.Errors),
	}
	for _, it := range r.Reclaimed {
		if out.ReclaimedByKind == nil {
			out.ReclaimedByKind = map[string]int{}
		}
		out.ReclaimedByKind[it.Kind]++
	}
	return out
}

// boundedGCReport is r with at most n items in each list (the totals
// still count them all): what the agent keeps of its last collection, so
// that /v1/agent/self does not grow with what one collection found.
func boundedGCReport(r *api.GCReport, n int) *api.GCReport {
	c := *r
	cut := func(l []api.GCItem) []api.GCItem {
		if len(l) > n {
			c.Omitted = true
			return append([]api.GCItem(nil), l[:n]...)
		}
		return l
	}
	c.Found, c.Reclaimed, c.Kept = cut(r.Found), cut(r.Reclaimed), cut(r.Kept)
	if len(r.Errors) > n {
		c.Omitted = true
		c.Errors = append([]string(nil), r.Errors[:n]...)
	}
	return &c
}

func wireDiagnostics(ds []jobspec.Diagnostic) []api.Diagnostic {
	if ds == nil {
		return nil
	}
	out := make([]api.Diagnostic, 0, len(ds))
	for _, d := range ds {
		out = append(out, api.Diagnostic{File: d.File, Line: d.Line, Column: d.Column, Summary: d.Summary, Detail: d.Detail})
	}
	return out
}

func wirePos(p jobspec.Pos) api.Pos { return api.Pos{File: p.File, Line: p.Line, Column: p.Column} }

func wireConstraints(cs []jobspec.Constraint) []api.Constraint {
	if cs == nil {
		return nil
	}
	out := make([]api.Constraint, 0, len(cs))
	for _, c := range cs {
		out = append(out, api.Constraint{Attribute: c.Attribute, Operator: c.Operator, Value: c.Value, Pos: wirePos(c.Pos)})
	}
	return out
}

func wireRestart(r jobspec.RestartPolicy) api.RestartPolicy {
	return api.RestartPolicy{Attempts: r.Attempts, Interval: api.Duration(r.Interval), Delay: api.Duration(r.Delay), Mode: r.Mode}
}

// wireJob is the API's form of a parsed job; nil stays nil (a stored job
// that no longer parses).
func wireJob(j *jobspec.Job) *api.Job {
	if j == nil {
		return nil
	}
	out := &api.Job{
		ID: j.ID, Type: j.Type, Namespace: j.Namespace, Region: j.Region,
		Datacenters: slices.Clone(j.Datacenters), Priority: j.Priority, Meta: maps.Clone(j.Meta),
		Constraints: wireConstraints(j.Constraints), Warnings: wireDiagnostics(j.Warnings), Pos: wirePos(j.Pos),
	}
	if p := j.Periodic; p != nil {
		out.Periodic = &api.Periodic{
			Crons: slices.Clone(p.Crons), ProhibitOverlap: p.ProhibitOverlap, TimeZone: p.TimeZone,
			Enabled: p.Enabled, Pos: wirePos(p.Pos),
		}
	}
	if p := j.Parameterized; p != nil {
		out.Parameterized = &api.Parameterized{Payload: p.Payload, MetaRequired: slices.Clone(p.MetaRequired), MetaOptional: slices.Clone(p.MetaOptional)}
	}
	out.ParentID = j.ParentID
	if j.Groups != nil {
		out.Groups = make([]*api.Group, 0, len(j.Groups))
	}
	for _, g := range j.Groups {
		out.Groups = append(out.Groups, wireGroup(g))
	}
	return out
}

func wireGroup(g *jobspec.Group) *api.Group {
	rs := g.Reschedule
	n := g.Network
	out := &api.Group{
		Name: g.Name, Count: g.Count, Meta: maps.Clone(g.Meta), Constraints: wireConstraints(g.Constraints),
		Restart: wireRestart(g.Restart),
		Reschedule: api.ReschedulePolicy{
			Attempts: rs.Attempts, Interval: api.Duration(rs.Interval), Delay: api.Duration(rs.Delay),
			DelayFunction: rs.DelayFunction, MaxDelay: api.Duration(rs.MaxDelay), Unlimited: rs.Unlimited,
			Applies: rs.Applies, Set: rs.Set,
		},
		Network: api.Network{
			Mode: n.Mode, CNI: n.CNI, Hostname: n.Hostname, CNIArgs: maps.Clone(n.CNIArgs),
			Pos: wirePos(n.Pos), ModePos: wirePos(n.ModePos),
		},
		Pos: wirePos(g.Pos),
	}
	if n.Ports != nil {
		out.Network.Ports = make([]api.Port, 0, len(n.Ports))
	}
	for _, p := range n.Ports {
		out.Network.Ports = append(out.Network.Ports, api.Port{Label: p.Label, Static: p.Static, To: p.To, HostNetwork: p.HostNetwork, Pos: wirePos(p.Pos)})
	}
	if d := n.DNS; d != nil {
		out.Network.DNS = wireDNS(d.Servers, d.Searches, d.Options)
	}
	if g.Tasks != nil {
		out.Tasks = make([]*api.Task, 0, len(g.Tasks))
	}
	for _, t := range g.Tasks {
		out.Tasks = append(out.Tasks, &api.Task{
			Name: t.Name, Driver: t.Driver,
			// The driver config's values are immutable once parsed (strings,
			// numbers, bools and lists/maps of them, never written to):
			// a shallow copy is enough.
			Config: maps.Clone(t.Config), Env: maps.Clone(t.Env), KillTimeout: api.Duration(t.KillTimeout),
			Resources: api.Resources{CPU: t.Resources.CPU, Cores: t.Resources.Cores, MemoryMB: t.Resources.MemoryMB, MemoryMaxMB: t.Resources.MemoryMaxMB},
			Meta:      maps.Clone(t.Meta), Leader: t.Leader, User: t.User, Restart: wireRestart(t.Restart),
			Constraints: wireConstraints(t.Constraints),
			Lifecycle:   wireLifecycle(t.Lifecycle), KillSignal: t.KillSignal,
			ShutdownDelay: api.Duration(t.ShutdownDelay), MaxRunDuration: api.Duration(t.MaxRunDuration),
			Pos: wirePos(t.Pos), ConfigPos: wirePos(t.ConfigPos), DriverPos: wirePos(t.DriverPos),
		})
	}
	return out
}

func wireLifecycle(l *jobspec.Lifecycle) *api.Lifecycle {
	if l == nil || l.Hook == "" {
		return nil
	}
	return &api.Lifecycle{Hook: l.Hook, Sidecar: l.Sidecar}
}

// WireService is a registration of the native catalog in the API's form;
// `berth run` prints its own through it too.
func WireService(s *store.Service) api.ServiceRegistration {
	out := api.ServiceRegistration{
		ID: s.ID, ServiceName: s.ServiceName, Namespace: s.Namespace, NodeID: s.NodeID, NodeName: s.NodeName,
		Datacenter: s.Datacenter, JobID: s.JobID, AllocID: s.AllocID, Group: s.Group, Task: s.Task,
		Address: s.Address, Port: s.Port, Tags: slices.Clone(s.Tags), Meta: maps.Clone(s.Meta),
		Health: s.Health, CreatedAt: s.CreatedAt, ModifiedAt: s.ModifiedAt,
	}
	for _, c := range s.Checks {
		out.Checks = append(out.Checks, api.CheckStatus{Name: c.Name, Type: c.Type, Status: c.Status, Output: c.Output, Time: c.Time, OnUpdate: c.OnUpdate})
	}
	return out
}

// wireServices never returns nil (JSON shows an empty list).
func wireServices(l []*store.Service) []api.ServiceRegistration {
	out := make([]api.ServiceRegistration, 0, len(l))
	for _, s := range l {
		out = append(out, WireService(s))
	}
	return out
}

// wireServiceStubs groups registrations by namespace and name, in that
// order (l is sorted by name).
func wireServiceStubs(l []*store.Service) []api.ServiceStub {
	out := []api.ServiceStub{}
	idx := map[[2]string]int{}
	for _, s := range l {
		k := [2]string{s.Namespace, s.ServiceName}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, api.ServiceStub{ServiceName: s.ServiceName, Namespace: s.Namespace, Tags: []string{}})
		}
		st := &out[i]
		st.Instances++
		if s.Health == store.CheckPassing {
			st.Passing++
		}
		for _, t := range s.Tags {
			if !slices.Contains(st.Tags, t) {
				st.Tags = append(st.Tags, t)
			}
		}
	}
	for i := range out {
		slices.Sort(out[i].Tags)
	}
	slices.SortStableFunc(out, func(a, b api.ServiceStub) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}
