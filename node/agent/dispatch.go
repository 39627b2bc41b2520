package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
)

// jobVars are the variables a job was submitted with (see
// api.JobSubmitRequest), kept in its record.
type jobVars struct {
	EnvVars  []string      `json:"env_vars,omitempty"`
	VarFiles []api.VarFile `json:"var_files,omitempty"`
	Vars     []string      `json:"vars,omitempty"`
}

func varsOf(req api.JobSubmitRequest) jobVars {
	return jobVars{EnvVars: req.EnvVars, VarFiles: req.VarFiles, Vars: req.Vars}
}

// apply puts the variables in opts. Only NOMAD_VAR_ entries of EnvVars
// count; the agent's own environment never does, as in Nomad's API.
func (v jobVars) apply(opts *jobspec.ParseOptions) {
	opts.Env = nil
	for _, e := range v.EnvVars {
		if strings.HasPrefix(e, jobspec.VarEnvPrefix) {
			opts.Env = append(opts.Env, e)
		}
	}
	for _, f := range v.VarFiles {
		opts.VarFileSources = append(opts.VarFileSources, jobspec.VarFile{Name: f.Name, Src: []byte(f.Content)})
	}
	opts.Vars = v.Vars
}

// checkVarFiles cleans the names of a submission's var files as its
// filename: only ever used in positions, a base name without control
// characters.
func checkVarFiles(req *api.JobSubmitRequest) error {
	for i, f := range req.VarFiles {
		name := filepath.Base(f.Name)
		if f.Name == "" || len(name) > 255 || strings.IndexFunc(name, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0 {
			return fmt.Errorf("%w: var_files[%d].name %q: use a plain file name (it says the format: *.json is JSON)", errBadRequest, i, f.Name)
		}
		req.VarFiles[i].Name = name
	}
	return nil
}

// parseRecord parses a stored job as it was submitted; a dispatched child
// is derived again from its parent's source with its own ID.
func (a *Agent) parseRecord(ctx context.Context, rec jobRecord) (*jobspec.Job, error) {
	job, err := a.parseJob(ctx, []byte(rec.Source), rec.Filename, rec.jobVars)
	if err != nil || rec.ParentID == "" {
		return job, err
	}
	child, err := job.Dispatch(rec.Meta, rec.Payload, rec.SubmittedAt, nil)
	if err != nil {
		return nil, fmt.Errorf("job %s dispatched from %s: %w", rec.ID, rec.ParentID, err)
	}
	child.ID, child.Name = rec.ID, rec.ID
	return child, nil
}

// dispatchSuffix is what follows jobspec.DispatchIDSeparator in a
// dispatched job's ID.
var dispatchSuffix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{1,19}-[0-9a-f]{8}$`) })

// validJobID accepts a job ID (validName), a dispatched child's,
// "<parent>/dispatch-<unix seconds>-<8 hex digits>", or a periodic
// launch's, "<parent>/periodic-<unix seconds>".
func validJobID(id string) error {
	if parent, _, ok := jobspec.ParsePeriodicChildID(id); ok {
		return validName("job ID", parent)
	}
	parent, suffix, ok := strings.Cut(id, jobspec.DispatchIDSeparator)
	if !ok {
		return validName("job ID", id)
	}
	if err := validName("job ID", parent); err != nil {
		return err
	}
	if !dispatchSuffix().MatchString(suffix) {
		return fmt.Errorf("%w: job ID %q: a dispatched job's ID is <parent>%s<unix seconds>-<8 hex digits>", ErrInvalidName, id, jobspec.DispatchIDSeparator)
	}
	return nil
}

// dispatch runs one dispatch of the parameterized job id: a child job of
// its own ID (jobspec.Job.Dispatch: meta and payload checked against the
// parameterized block), recorded and started as any submitted job.
func (a *Agent) dispatch(ctx context.Context, id string, req api.JobDispatchRequest) (*api.JobDispatchResponse, error) {
	if err := validJobID(id); err != nil {
		return nil, err
	}
	a.mu.Lock()
	jr := a.jobs[id]
	var parent *jobspec.Job
	var prec jobRecord
	if jr != nil {
		parent, prec = jr.job, jr.rec
	}
	a.mu.Unlock()
	switch {
	case jr == nil:
		return nil, fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	case parent == nil:
		return nil, fmt.Errorf("%w: job %q: its stored source no longer parses (%s); submit it again", errBadRequest, id, prec.Error)
	case prec.Stopped:
		return nil, fmt.Errorf("%w: job %q is stopped; run it again to dispatch it", errBadRequest, id)
	}
	now := time.Now()
	child, err := parent.Dispatch(req.Meta, req.Payload, now, nil)
	if err != nil {
		return nil, err
	}
	unlock := a.keys.Lock(child.ID)
	defer unlock()
	if a.isDraining() {
		return nil, ErrDraining
	}
	cjr := &jobRun{job: child, rec: jobRecord{
		ID: child.ID, Source: prec.Source, Filename: prec.Filename, SubmittedAt: now.UTC(), Status: api.JobRunning,
		jobVars: prec.jobVars, ParentID: id, Meta: req.Meta, Payload: req.Payload,
	}}
	b, err := json.Marshal(cjr.rec)
	if err != nil {
		return nil, fmt.Errorf("job %s: encode record: %w", child.ID, err)
	}
	if err := a.node.Store.PutJob(ctx, child.ID, b); err != nil {
		return nil, fmt.Errorf("job %s: %w", child.ID, err)
	}
	a.mu.Lock()
	a.jobs[child.ID] = cjr
	a.mu.Unlock()
	a.log.Info("job dispatched", "job", id, "dispatched_job", child.ID, "payload_bytes", len(req.Payload))
	if err := a.start(cjr); err != nil {
		return nil, err
	}
	return &api.JobDispatchResponse{DispatchedJobID: child.ID, ParentJobID: id}, nil
}

func (a *Agent) handleDispatch(w http.ResponseWriter, r *http.Request) {
	var req api.JobDispatchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	resp, err := a.dispatch(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
