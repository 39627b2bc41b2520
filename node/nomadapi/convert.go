package nomadapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/berth/berth/api"
	napi "github.com/hashicorp/nomad/api"
)

// The converters from berth's API types to Nomad's. berth has no
// evaluations nor deployments of its own; a job's Version and
// JobModifyIndex are berth's, its other indexes the Unix milliseconds of
// its changes.

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// nomadStatus is a berth job status as Nomad's (pending, running, dead).
func nomadStatus(s string) string {
	switch s {
	case api.JobRunning, api.JobStopping, api.JobRegistered:
		// A parameterized job is "running" in Nomad while registered.
		return "running"
	}
	return "dead"
}

const allocUnreadable = "unreadable"

func terminal(status string) bool {
	return status == api.AllocComplete || status == api.AllocFailed || status == api.AllocLost
}

func nsOr(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// nomadJob is berth's job as Nomad's Job: its Version and
// JobModifyIndex are berth's (a version counter, +1 per change or stop,
// as `-check-index` compares); its other indexes are times (index).
func nomadJob(st *api.JobStatus) *napi.Job {
	sub := index(st.SubmittedAt)
	mod := sub
	if st.FinishedAt != nil {
		mod = max(mod, index(*st.FinishedAt))
	}
	jmi := st.JobModifyIndex
	if jmi == 0 {
		jmi = 1 // a child job (a launch, a dispatch): never changed
	}
	j := &napi.Job{
		ID: ptr(st.ID), Name: ptr(st.ID), Type: ptr(st.Type), Namespace: ptr(nsOr(st.Namespace)),
		Status: ptr(nomadStatus(st.Status)), StatusDescription: ptr(st.Error),
		Stop: ptr(st.Status == api.JobStopping || st.Stopped), Version: ptr(st.Version), Stable: ptr(true),
		SubmitTime: ptr(st.SubmittedAt.UnixNano()), CreateIndex: ptr(sub), ModifyIndex: ptr(mod), JobModifyIndex: ptr(jmi),
		Priority: ptr(50), Region: ptr("global"), NodePool: ptr("default"), AllAtOnce: ptr(false),
	}
	if st.ParentID != "" {
		j.ParentID = ptr(st.ParentID)
		j.Dispatched = strings.Contains(st.ID, "/dispatch-")
	}
	bj := st.Job
	if bj == nil {
		return j
	}
	j.Type, j.Priority, j.Datacenters, j.Meta = ptr(bj.Type), ptr(bj.Priority), bj.Datacenters, bj.Meta
	if bj.Region != "" {
		j.Region = ptr(bj.Region)
	}
	if bj.Namespace != "" {
		j.Namespace = ptr(bj.Namespace)
	}
	for _, c := range bj.Constraints {
		j.Constraints = append(j.Constraints, &napi.Constraint{LTarget: c.Attribute, RTarget: c.Value, Operand: c.Operator})
	}
	if p := bj.Periodic; p != nil && st.ParentID == "" {
		j.Periodic = &napi.PeriodicConfig{Enabled: ptr(p.Enabled), Specs: p.Crons, SpecType: ptr("cron"), ProhibitOverlap: ptr(p.ProhibitOverlap), TimeZone: ptr(p.TimeZone)}
		if len(p.Crons) > 0 {
			j.Periodic.Spec = ptr(p.Crons[0])
		}
	}
	if p := bj.Parameterized; p != nil && st.ParentID == "" {
		j.ParameterizedJob = &napi.ParameterizedJobConfig{Payload: p.Payload, MetaRequired: p.MetaRequired, MetaOptional: p.MetaOptional}
	}
	for _, g := range bj.Groups {
		tg := &napi.TaskGroup{Name: ptr(g.Name), Count: ptr(g.Count), Meta: g.Meta,
			RestartPolicy: &napi.RestartPolicy{Attempts: ptr(g.Restart.Attempts), Interval: ptr(time.Duration(g.Restart.Interval)), Delay: ptr(time.Duration(g.Restart.Delay)), Mode: ptr(g.Restart.Mode)},
		}
		nw := &napi.NetworkResource{Mode: g.Network.Mode, Hostname: g.Network.Hostname}
		for _, p := range g.Network.Ports {
			port := napi.Port{Label: p.Label, Value: p.Static, To: p.To, HostNetwork: p.HostNetwork}
			if p.Static != 0 {
				nw.ReservedPorts = append(nw.ReservedPorts, port)
			} else {
				nw.DynamicPorts = append(nw.DynamicPorts, port)
			}
		}
		tg.Networks = []*napi.NetworkResource{nw}
		for _, t := range g.Tasks {
			nt := &napi.Task{Name: t.Name, Driver: t.Driver, Config: t.Config, Env: t.Env, Meta: t.Meta, Leader: t.Leader, User: t.User,
				KillTimeout: ptr(time.Duration(t.KillTimeout)), KillSignal: t.KillSignal, ShutdownDelay: time.Duration(t.ShutdownDelay),
				Resources: &napi.Resources{CPU: ptr(t.Resources.CPU), Cores: ptr(t.Resources.Cores), MemoryMB: ptr(t.Resources.MemoryMB), MemoryMaxMB: ptr(t.Resources.MemoryMaxMB)},
			}
			if l := t.Lifecycle; l != nil {
				nt.Lifecycle = &napi.TaskLifecycle{Hook: l.Hook, Sidecar: l.Sidecar}
			}
			tg.Tasks = append(tg.Tasks, nt)
		}
		j.TaskGroups = append(j.TaskGroups, tg)
	}
	return j
}

// jobSummary counts a job's allocations by group and status, and a
// periodic or parameterized job's children.
func jobSummary(st *api.JobStatus, allocs []*api.Allocation) *napi.JobSummary {
	sum := &napi.JobSummary{JobID: st.ID, Namespace: nsOr(st.Namespace), Summary: map[string]napi.TaskGroupSummary{},
		CreateIndex: index(st.SubmittedAt), ModifyIndex: maxIndex(st, allocs)}
	if st.Job != nil {
		for _, g := range st.Job.Groups {
			sum.Summary[g.Name] = napi.TaskGroupSummary{}
		}
	}
	parent := len(st.Periodic) > 0 || st.Parameterized
	for _, a := range allocs {
		if parent && a.JobID != st.ID {
			continue // a child's: counted under Children
		}
		tg := sum.Summary[a.Group]
		switch a.Status {
		case api.AllocPending:
			tg.Starting++
		case api.AllocRunning:
			tg.Running++
		case api.AllocComplete:
			tg.Complete++
		case api.AllocFailed:
			tg.Failed++
		case api.AllocLost:
			tg.Lost++
		default:
			tg.Unknown++
		}
		sum.Summary[a.Group] = tg
	}
	if parent {
		sum.Children = &napi.JobChildrenSummary{}
		for _, c := range st.Children {
			switch c.Status {
			case api.JobRunning, api.JobStopping:
				sum.Children.Running++
			default:
				sum.Children.Dead++
			}
		}
	}
	return sum
}

// jobListStub is one line of Nomad's job list.
func jobListStub(st *api.JobStatus, allocs []*api.Allocation) *napi.JobListStub {
	j := nomadJob(st)
	status := *j.Status
	if st.ParentID != "" && st.Status == api.JobDead && st.Job == nil {
		status = "dead"
	}
	return &napi.JobListStub{
		ID: st.ID, ParentID: st.ParentID, Name: st.ID, Namespace: *j.Namespace, Datacenters: j.Datacenters,
		Type: st.Type, Priority: *j.Priority, Periodic: len(st.Periodic) > 0 && st.ParentID == "", ParameterizedJob: st.Parameterized,
		Stop: *j.Stop, Status: status, StatusDescription: st.Error, JobSummary: jobSummary(st, allocs),
		CreateIndex: *j.CreateIndex, ModifyIndex: maxIndex(st, allocs), JobModifyIndex: *j.JobModifyIndex,
		SubmitTime: *j.SubmitTime, Meta: j.Meta,
	}
}

// jobDiff is plan's diff of job (the plan's) against prev (the job as
// last registered through this API; nil when unknown): typ is Added,
// Edited or None. versions: berth's own diff replaces it.
func jobDiff(typ string, job, prev *napi.Job) *napi.JobDiff {
	d := &napi.JobDiff{Type: typ, ID: deref(job.ID)}
	if typ == "Edited" && prev != nil {
		d.Fields = fieldDiffs(flatten(topLevel(prev)), flatten(topLevel(job)))
	}
	old := map[string]*napi.TaskGroup{}
	if prev != nil {
		for _, tg := range prev.TaskGroups {
			old[deref(tg.Name)] = tg
		}
	}
	for _, tg := range job.TaskGroups {
		name := deref(tg.Name)
		count := uint64(1)
		if tg.Count != nil {
			count = uint64(*tg.Count)
		}
		gd := &napi.TaskGroupDiff{Type: typ, Name: name, Updates: map[string]uint64{}}
		if job.Periodic == nil && job.ParameterizedJob == nil {
			switch typ {
			case "Added":
				gd.Updates["create"] = count
			case "None":
				gd.Updates["ignore"] = count
			default:
				gd.Updates["create/destroy update"] = count
			}
		}
		o := old[name]
		if typ == "Edited" && o != nil {
			if sameJSON(o, tg) {
				gd.Type = "None"
			}
		} else if typ == "Edited" && prev != nil {
			gd.Type = "Added"
		}
		oldTasks := map[string]*napi.Task{}
		if o != nil {
			for _, t := range o.Tasks {
				oldTasks[t.Name] = t
			}
		}
		for _, t := range tg.Tasks {
			td := &napi.TaskDiff{Type: gd.Type, Name: t.Name}
			switch gd.Type {
			case "Added":
				td.Annotations = []string{"forces create"}
			case "Edited":
				if ot := oldTasks[t.Name]; ot != nil && !sameJSON(ot, t) {
					td.Fields = fieldDiffs(flatten(ot), flatten(t))
					td.Annotations = []string{"forces create/destroy update"}
				} else if ot == nil {
					td.Type, td.Annotations = "Added", []string{"forces create"}
				} else {
					td.Type = "None"
				}
			}
			gd.Tasks = append(gd.Tasks, td)
		}
		d.TaskGroups = append(d.TaskGroups, gd)
	}
	return d
}

// topLevel is a job without its groups: the job's own fields.
func topLevel(j *napi.Job) *napi.Job {
	c := *j
	c.TaskGroups = nil
	return &c
}

func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// flatten is v's JSON as "path" → value, for field diffs.
func flatten(v any) map[string]string {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var x any
	if json.Unmarshal(b, &x) != nil {
		return nil
	}
	out := map[string]string{}
	var walk func(p string, x any)
	walk = func(p string, x any) {
		switch x := x.(type) {
		case map[string]any:
			for k, v := range x {
				walk(strings.TrimPrefix(p+"."+k, "."), v)
			}
		case []any:
			for i, v := range x {
				walk(fmt.Sprintf("%s[%d]", p, i), v)
			}
		case nil:
		default:
			s := fmt.Sprint(x)
			if _, ok := x.(string); !ok {
				b, _ := json.Marshal(x)
				s = string(b)
			}
			out[p] = s
		}
	}
	walk("", x)
	return out
}

func fieldDiffs(old, new map[string]string) []*napi.FieldDiff {
	var out []*napi.FieldDiff
	for k, nv := range new {
		ov, ok := old[k]
		switch {
		case !ok:
			out = append(out, &napi.FieldDiff{Type: "Added", Name: k, New: nv})
		case ov != nv:
			out = append(out, &napi.FieldDiff{Type: "Edited", Name: k, Old: ov, New: nv})
		}
	}
	for k, ov := range old {
		if _, ok := new[k]; !ok {
			out = append(out, &napi.FieldDiff{Type: "Deleted", Name: k, Old: ov})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
