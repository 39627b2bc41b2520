package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
)

// ErrIndexMismatch: a submission with EnforceIndex (-check-index) named
// another modify index than the job's.
var ErrIndexMismatch = errors.New("job modify index mismatch")

// jobVersion is an earlier version of a job, as the store keeps it in
// its job's record (jobRecord.History).
type jobVersion struct {
	Version     uint64    `json:"version"`
	Source      string    `json:"source"`
	Filename    string    `json:"filename"`
	SubmittedAt time.Time `json:"submitted_at"`
	Stable      bool      `json:"stable,omitempty"`
	jobVars
}

// jobShape is a parsed job as a comparable value: its JSON without
// positions and warnings, so that comments, layout and the order of
// blocks in the file do not make a change.
func jobShape(j *jobspec.Job) (map[string]any, error) {
	if j == nil {
		return nil, nil
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("job %s: encode: %w", j.ID, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("job %s: decode: %w", j.ID, err)
	}
	stripPositions(m)
	return m, nil
}

// stripPositions removes what says where a value was written, not what
// it is: positions ("pos", "*_pos") and the parser's warnings.
func stripPositions(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == "pos" || strings.HasSuffix(k, "_pos") || k == "warnings" {
				delete(v, k)
				continue
			}
			stripPositions(e)
		}
	case []any:
		for _, e := range v {
			stripPositions(e)
		}
	}
}

// inPlaceKeys are the job-level fields (JSON names) whose change Nomad
// applies without touching allocations and that reach no task on berth.
// Conservative: anything else (a group's or task's meta included) is
// destructive. The job's meta is in place as in the brief,
// though tasks see it as NOMAD_META_*: a running allocation keeps the
// meta it started with until it is replaced.
var inPlaceKeys = []string{"meta", "priority", "datacenters"}

// classify says what replacing old (the live job) by new does:
// api.UpdateNone, api.UpdateInPlace or api.UpdateDestructive.
func classify(old, new *jobspec.Job) (string, error) {
	if old == nil {
		return api.UpdateDestructive, nil
	}
	oldShape, err := jobShape(old)
	if err != nil {
		return "", err
	}
	newShape, err := jobShape(new)
	if err != nil {
		return "", err
	}
	if reflect.DeepEqual(oldShape, newShape) {
		return api.UpdateNone, nil
	}
	for _, k := range inPlaceKeys {
		delete(oldShape, k)
		delete(newShape, k)
	}
	if reflect.DeepEqual(oldShape, newShape) {
		return api.UpdateInPlace, nil
	}
	return api.UpdateDestructive, nil
}

// flatten turns a JSON value into path -> text leaves: "meta.owner",
// "network.ports[0].to".
func flatten(prefix string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		for i, e := range v {
			flatten(prefix+"["+strconv.Itoa(i)+"]", e, out)
		}
	case nil:
	case string:
		out[prefix] = v
	default:
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
}

// fieldDiffs compares two flattened values, sorted by name.
func fieldDiffs(old, new map[string]string) []api.FieldDiff {
	var out []api.FieldDiff
	for k, o := range old {
		n, ok := new[k]
		switch {
		case !ok:
			out = append(out, api.FieldDiff{Type: api.DiffDeleted, Name: k, Old: o})
		case n != o:
			out = append(out, api.FieldDiff{Type: api.DiffEdited, Name: k, Old: o, New: n})
		}
	}
	for k, n := range new {
		if _, ok := old[k]; !ok {
			out = append(out, api.FieldDiff{Type: api.DiffAdded, Name: k, New: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// named splits a list of JSON objects by their "name".
func named(v any) (map[string]map[string]any, []string) {
	m := map[string]map[string]any{}
	var order []string
	l, _ := v.([]any)
	for _, e := range l {
		o, _ := e.(map[string]any)
		name, _ := o["name"].(string)
		if o == nil {
			continue
		}
		if _, dup := m[name]; !dup {
			order = append(order, name)
		}
		m[name] = o
	}
	return m, order
}

// without is m's leaves except those under the keys drop.
func without(m map[string]any, drop ...string) map[string]string {
	c := map[string]any{}
	for k, v := range m {
		c[k] = v
	}
	for _, k := range drop {
		delete(c, k)
	}
	out := map[string]string{}
	flatten("", c, out)
	return out
}

func diffType(old, new map[string]any, fields int) string {
	switch {
	case old == nil:
		return api.DiffAdded
	case new == nil:
		return api.DiffDeleted
	case fields > 0:
		return api.DiffEdited
	}
	return api.DiffNone
}

func count(g map[string]any) uint64 {
	if g == nil {
		return 0
	}
	f, _ := g["count"].(float64)
	if f < 0 {
		return 0
	}
	return uint64(f)
}

// planDiff is Nomad's plan of new against old (the current version; nil
// for none). live says old has allocations running or to run: when it
// has not, every group of new is placed afresh. update is classify's
// verdict (api.UpdateCreate when there is no live job). It returns the
// diff, the per-group annotations, and whether allocations would be
// created or destroyed (`job plan` exits 1).
func planDiff(old, new *jobspec.Job, live bool, update string) (*api.JobDiff, *api.PlanAnnotations, bool, error) {
	newS, err := jobShape(new)
	if err != nil {
		return nil, nil, false, err
	}
	var oldS map[string]any
	if old != nil {
		if oldS, err = jobShape(old); err != nil {
			return nil, nil, false, err
		}
	}
	d := &api.JobDiff{ID: new.ID}
	ann := &api.PlanAnnotations{DesiredTGUpdates: map[string]api.DesiredUpdates{}}
	d.Fields = fieldDiffs(without(oldS, "groups"), without(newS, "groups"))
	if oldS == nil {
		d.Fields = fieldDiffs(nil, without(newS, "groups"))
	}
	og, _ := named(oldS["groups"])
	ng, order := named(newS["groups"])
	for name := range og {
		if _, ok := ng[name]; !ok {
			order = append(order, name)
		}
	}
	changes := false
	// A parameterized job places nothing itself: its dispatches do.
	places := !new.IsParameterized()
	for _, name := range order {
		o, n := og[name], ng[name]
		gd := api.TaskGroupDiff{Name: name, Fields: fieldDiffs(without(o, "tasks", "name"), without(n, "tasks", "name")), Updates: map[string]uint64{}}
		ot, _ := named(o["tasks"])
		nt, torder := named(n["tasks"])
		for tn := range ot {
			if _, ok := nt[tn]; !ok {
				torder = append(torder, tn)
			}
		}
		tasksChanged := 0
		for _, tn := range torder {
			td := api.TaskDiff{Name: tn, Fields: fieldDiffs(without(ot[tn], "name"), without(nt[tn], "name"))}
			td.Type = diffType(ot[tn], nt[tn], len(td.Fields))
			switch td.Type {
			case api.DiffAdded:
				td.Annotations = []string{"forces create"}
			case api.DiffDeleted:
				td.Annotations = []string{"forces destroy"}
			case api.DiffEdited:
				td.Annotations = []string{"forces create/destroy update"}
			}
			if td.Type != api.DiffNone {
				tasksChanged++
			}
			gd.Tasks = append(gd.Tasks, td)
		}
		gd.Type = diffType(o, n, len(gd.Fields)+tasksChanged)
		var du api.DesiredUpdates
		oc, nc := count(o), count(n)
		if !live || old == nil || old.IsParameterized() {
			oc = 0
		}
		if !places {
			nc = 0
		}
		switch {
		case n == nil:
			du.Stop = oc
		case update == api.UpdateNone:
			du.Ignore = min(oc, nc)
		case update == api.UpdateInPlace:
			du.InPlaceUpdate = min(oc, nc)
		default:
			// berth replaces every allocation of a job it updates
			// destructively, its unchanged groups' too.
			du.DestructiveUpdate = min(oc, nc)
		}
		if n != nil && nc > oc {
			du.Place = nc - oc
		}
		if n != nil && oc > nc {
			du.Stop = oc - nc
		}
		for k, v := range map[string]uint64{
			api.UpdateKeyCreate: du.Place, api.UpdateKeyDestroy: du.Stop, api.UpdateKeyIgnore: du.Ignore,
			api.UpdateKeyInPlace: du.InPlaceUpdate, api.UpdateKeyDestructive: du.DestructiveUpdate,
		} {
			if v > 0 {
				gd.Updates[k] = v
			}
		}
		if du.Place+du.Stop+du.DestructiveUpdate > 0 {
			changes = true
		}
		ann.DesiredTGUpdates[name] = du
		d.TaskGroups = append(d.TaskGroups, gd)
	}
	switch {
	case oldS == nil:
		d.Type = api.DiffAdded
	case update == api.UpdateNone && !changes:
		d.Type = api.DiffNone
	default:
		d.Type = api.DiffEdited
	}
	return d, ann, changes, nil
}

// checkIndex is -check-index: want must be the job's modify index (0:
// no job known under the ID).
func checkIndex(id string, have, want uint64) error {
	if have == want {
		return nil
	}
	if want == 0 {
		return fmt.Errorf("%w: job %q exists (modify index %d) and -check-index 0 asks that it does not; plan again and pass its Job Modify Index", ErrIndexMismatch, id, have)
	}
	return fmt.Errorf("%w: job %q has modify index %d, not %d: it changed since the plan; plan again and pass its Job Modify Index", ErrIndexMismatch, id, have, want)
}

// VersionedJob is one kept version of a job, parsed again on this node:
// Job is nil and Err says why when it no longer parses. The Nomad API
// converts Job to Nomad's job; berth's API to api.Job.
type VersionedJob struct {
	Version     uint64
	Stable      bool
	Current     bool
	SubmittedAt time.Time
	Source      string
	Filename    string
	Vars        api.JobSubmitRequest // only EnvVars, VarFiles and Vars are set
	Job         *jobspec.Job
	Err         error
}

// jobVersions lists the kept versions of a job's record, newest first,
// each parsed again.
func (a *Agent) jobVersions(ctx context.Context, rec jobRecord) []VersionedJob {
	cur := jobVersion{Version: rec.Version, Source: rec.Source, Filename: rec.Filename, SubmittedAt: rec.SubmittedAt, jobVars: rec.jobVars}
	all := append([]jobVersion{cur}, rec.History...)
	out := make([]VersionedJob, 0, len(all))
	for i, v := range all {
		vj := VersionedJob{
			Version: v.Version, Stable: v.Stable, Current: i == 0, SubmittedAt: v.SubmittedAt, Source: v.Source, Filename: v.Filename,
			Vars: api.JobSubmitRequest{EnvVars: v.EnvVars, VarFiles: v.VarFiles, Vars: v.Vars},
		}
		r := rec
		r.Source, r.Filename, r.jobVars = v.Source, v.Filename, v.jobVars
		vj.Job, vj.Err = a.parseRecord(ctx, r)
		out = append(out, vj)
	}
	return out
}

// JobVersionsOf is the kept versions of the job id, newest first, parsed
// again (for the Nomad API's job versions, inspect and history).
func (a *Agent) JobVersionsOf(ctx context.Context, id string) ([]VersionedJob, error) {
	if err := validJobID(id); err != nil {
		return nil, err
	}
	a.mu.Lock()
	jr := a.jobs[id]
	var rec jobRecord
	if jr != nil {
		rec = jr.rec
	}
	a.mu.Unlock()
	if jr == nil {
		return nil, fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	}
	return a.jobVersions(ctx, rec), nil
}

// JobVersions is GET /v1/job/{id}/versions: the kept versions of a job,
// newest first.
func (a *Agent) JobVersions(ctx context.Context, id string) (*api.JobVersions, error) {
	vs, err := a.JobVersionsOf(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &api.JobVersions{JobID: id, Versions: []api.JobVersion{}}
	for _, v := range vs {
		jv := api.JobVersion{
			Version: v.Version, Stable: v.Stable, Current: v.Current, SubmittedAt: v.SubmittedAt, Source: v.Source, Filename: v.Filename,
			EnvVars: v.Vars.EnvVars, VarFiles: v.Vars.VarFiles, Vars: v.Vars.Vars,
		}
		if v.Err != nil {
			jv.ParseError = v.Err.Error()
		} else {
			jv.Job = wireJob(v.Job)
		}
		out.Versions = append(out.Versions, jv)
	}
	return out, nil
}
