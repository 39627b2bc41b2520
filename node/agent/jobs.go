package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

var (
	// ErrJobNotFound: no job with that ID.
	ErrJobNotFound = errors.New("no such job")
	// ErrDraining: the agent is shutting down and launches nothing new.
	ErrDraining = errors.New("agent is shutting down")
	// ErrInvalidName: an ID or name with characters berth does not accept.
	ErrInvalidName = errors.New("invalid name")
)

// maxNameLen bounds job IDs and task names accepted by the API.
const maxNameLen = 128

// validName accepts what can safely be a file name, a label value and a
// log field: letters, digits, '-', '_' and '.', not "." or "..".
func validName(kind, s string) error {
	if s == "" || len(s) > maxNameLen || s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q: use 1 to %d letters, digits, '-', '_' or '.'", ErrInvalidName, kind, s, maxNameLen)
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return fmt.Errorf("%w: %s %q contains %q: use letters, digits, '-', '_' or '.'", ErrInvalidName, kind, s, r)
		}
	}
	return nil
}

// jobRecord is what the store keeps of a submitted job: its source, so
// that periodic and service jobs resume after a restart with the
// validation of that day.
type jobRecord struct {
	ID          string     `json:"id"`
	Source      string     `json:"source"`
	Filename    string     `json:"filename"`
	SubmittedAt time.Time  `json:"submitted_at"`
	Status      string     `json:"status"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// LastLaunch is a periodic job's last launch: after a restart the
	// schedule goes on from it (a missed launch runs once, none twice).
	LastLaunch *time.Time `json:"last_launch,omitempty"`
	Error      string     `json:"error,omitempty"`
	// The variables it was submitted with, to parse it again alike.
	jobVars
	// A dispatched child keeps its parent's source and variables, and
	// its dispatch: the parent's ID, the meta and payload.
	ParentID string            `json:"parent_id,omitempty"`
	Meta     map[string]string `json:"dispatch_meta,omitempty"`
	Payload  []byte            `json:"dispatch_payload,omitempty"`
	// Version is the current version (Source, Filename, jobVars,
	// SubmittedAt); History the earlier ones kept, newest first, at most
	// api.MaxJobVersions-1. ModifyIndex grows with every version and
	// stop: what -check-index compares.
	Version     uint64       `json:"version,omitempty"`
	ModifyIndex uint64       `json:"modify_index,omitempty"`
	History     []jobVersion `json:"history,omitempty"`
	// Stopped: `job stop` stopped it; it stays dead until purged or
	// submitted again. Purge (with status stopping): forget it once its
	// stop is done.
	Stopped bool `json:"stopped,omitempty"`
	Purge   bool `json:"purge,omitempty"`
	// StopOld: this version was recorded before the allocations of the
	// one it replaces were gone; an agent that resumes it stops those it
	// finds first, never running two versions.
	StopOld bool `json:"stop_old,omitempty"`
}

// modifyIndex is the record's modify index: at least 1 for a known job
// (0 means none; records of an older berth have none).
func (rec jobRecord) modifyIndex() uint64 { return max(rec.ModifyIndex, 1) }

// nextVersion is rec's successor made from a new submission: rec's
// current version goes to the history (stable when it ran and ended
// without error, for replacing it).
func (rec jobRecord) nextVersion(next jobRecord, stable bool) jobRecord {
	next.Version, next.ModifyIndex = rec.Version+1, rec.modifyIndex()+1
	cur := jobVersion{Version: rec.Version, Source: rec.Source, Filename: rec.Filename, SubmittedAt: rec.SubmittedAt, Stable: stable, jobVars: rec.jobVars}
	next.History = append([]jobVersion{cur}, rec.History...)
	if len(next.History) > api.MaxJobVersions-1 {
		next.History = next.History[:api.MaxJobVersions-1]
	}
	return next
}

// jobRun is a job the agent knows, running or not. Fields are guarded by
// Agent.mu.
type jobRun struct {
	rec jobRecord
	job *jobspec.Job // nil if the stored source no longer parses
	// adopt are the allocations a previous agent left running, claimed
	// at start, that this run resumes.
	adopt   []*store.Allocation
	cancel  context.CancelFunc
	done    chan struct{} // closed when the run has finished (nil if never started)
	summary *runner.Summary
	// stopping: a stop was asked (the record is dead, or deleted with
	// rec.Purge, when done); replacing: a new submission waits for this
	// run to end; pending: this run waits for the run it replaces to end
	// before it starts.
	stopping, replacing, pending bool
	// unrecorded counts the allocations the store could not record;
	// recordErr is the first one's cause.
	unrecorded int
	recordErr  string
	// force launches a periodic job now (forcePeriodic); one pending
	// force is enough.
	force chan struct{}
}

func (jr *jobRun) recordError() string {
	if jr.unrecorded <= 1 {
		return jr.recordErr
	}
	return fmt.Sprintf("%d allocations could not be recorded; the first: %s", jr.unrecorded, jr.recordErr)
}

func (jr *jobRun) status() string {
	switch {
	case jr.pending:
		return api.JobRunning
	case jr.cancel == nil && jr.rec.Status == api.JobRegistered:
		return api.JobRegistered
	case jr.cancel == nil:
		return api.JobDead
	case jr.stopping || jr.replacing:
		return api.JobStopping
	}
	return api.JobRunning
}

// parseJob validates a job against this node, its drivers and CNI networks,
// exactly as `berth run` does, and refuses it when this node does not meet
// its constraints or node pool, or could never hold one launch of it.
func (a *Agent) parseJob(ctx context.Context, src []byte, filename string, v jobVars) (*jobspec.Job, error) {
	opts := a.node.ParseOptions(ctx)
	v.apply(&opts)
	// The request's context: evaluation stops when the client leaves.
	job, err := jobspec.ParseContext(ctx, src, filename, opts)
	if err != nil {
		return nil, err
	}
	if err := validName("job ID", job.ID); err != nil {
		// Positioned at the job block, as the parser's own errors.
		return nil, jobspec.Diagnostics{{File: job.Pos.File, Line: job.Pos.Line, Column: job.Pos.Column,
			Summary: strings.TrimPrefix(err.Error(), ErrInvalidName.Error()+": "), Detail: "the agent keeps job IDs usable as file names"}}
	}
	var pe *jobspec.PlacementError
	var ee *runner.ExhaustedError
	switch err := a.node.Place(ctx, job); {
	case errors.As(err, &pe):
		return nil, jobspec.Diagnostics{pe.Diagnostic()}
	case errors.As(err, &ee):
		return nil, jobspec.Diagnostics{ee.Diagnostic()}
	case err != nil:
		return nil, err
	}
	return job, nil
}

func warnings(j *jobspec.Job) []string {
	var out []string
	for _, d := range j.Warnings {
		out = append(out, d.String())
	}
	return out
}

func nextLaunches(j *jobspec.Job, n int) []time.Time {
	if j.Periodic == nil || !j.Periodic.Enabled {
		return nil
	}
	return j.Periodic.NextN(time.Now(), n)
}

// resumes reports whether a job that was running when the agent stopped
// runs again at start: periodic and service jobs do, and a batch job
// whose allocations the last agent left running (they are re-adopted;
// what had finished is not rerun).
func resumes(j *jobspec.Job, adopted int) bool {
	return !j.RunsToCompletion() || (j.Periodic != nil && j.Periodic.Enabled) || adopted > 0
}

// claimAllocs takes over the allocations of job a previous agent left
// (killed, or stopped without draining): recorded as this agent's before
// the reconcile at start, which would otherwise take them for orphans.
func (a *Agent) claimAllocs(ctx context.Context, jobID string, log *slog.Logger) []*store.Allocation {
	allocs, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{JobID: jobID, NonTerminal: true})
	if err != nil {
		log.Error("cannot read the job's allocations; none re-adopted", "err", err)
		return nil
	}
	var out []*store.Allocation
	for _, al := range allocs {
		if !runner.Adoptable(al) {
			continue
		}
		if err := a.runner.Claim(ctx, al); err != nil {
			log.Error("allocation not re-adopted", "alloc_id", al.ID, "err", err)
			continue
		}
		out = append(out, al)
	}
	return out
}

// resumeJobs loads the stored jobs and starts those that resume.
func (a *Agent) resumeJobs(ctx context.Context) {
	recs, err := a.node.Store.ListJobs(ctx)
	if err != nil {
		a.log.Error("cannot read the stored jobs; none resumed", "err", err)
		return
	}
	for _, sr := range recs {
		var rec jobRecord
		if err := json.Unmarshal(sr.Spec, &rec); err != nil || rec.ID != sr.ID {
			a.log.Error("stored job is unreadable; skipped", "job", sr.ID, "err", err)
			continue
		}
		log := a.log.With("job", rec.ID)
		jr := &jobRun{rec: rec}
		job, perr := a.parseRecord(ctx, rec)
		jr.job = job
		if rec.Status == api.JobStopping {
			// Stopped while an earlier agent ran it: the stop is a desired
			// state, finished here (every allocation it left stopped and
			// torn down, then the job forgotten), whatever it was doing.
			if job == nil {
				job = &jobspec.Job{ID: rec.ID, Namespace: "default"}
				jr.job = job
			}
			jr.stopping = true
			jr.adopt = a.claimAllocs(ctx, rec.ID, log)
			a.mu.Lock()
			a.jobs[rec.ID] = jr
			a.mu.Unlock()
			log.Info("finishing the stop of a job an earlier agent was asked to stop", "allocations", len(jr.adopt))
			if err := a.start(jr); err != nil {
				return
			}
			continue
		}
		if rec.Status == api.JobRunning {
			if perr == nil {
				// With StopOld, what is claimed is the replaced
				// version's: start stops it before this one runs. (A
				// job that no longer parses claims nothing: the
				// reconcile stops its allocations as orphans.)
				jr.adopt = a.claimAllocs(ctx, rec.ID, log)
			}
			switch {
			case perr != nil:
				jr.rec.Error = "could not resume after an agent restart: " + perr.Error()
			case !rec.StopOld && !resumes(job, len(jr.adopt)):
				jr.rec.Error = "interrupted by an agent restart; batch jobs are not rerun (submit it again)"
			}
			if jr.rec.Error != "" {
				now := time.Now()
				jr.rec.Status, jr.rec.FinishedAt = api.JobDead, &now
				a.putJob(ctx, jr.rec)
				log.Warn("job not resumed", "reason", jr.rec.Error)
			}
		}
		a.mu.Lock()
		a.jobs[rec.ID] = jr
		a.mu.Unlock()
		if jr.rec.Status == api.JobRunning {
			log.Info("resuming job after agent restart", "type", job.Type, "allocations_re_adopted", len(jr.adopt))
			if err := a.start(jr); err != nil {
				return
			}
		}
	}
}

func (a *Agent) putJob(ctx context.Context, rec jobRecord) {
	b, err := json.Marshal(rec)
	if err == nil {
		err = a.node.Store.PutJob(context.WithoutCancel(ctx), rec.ID, b)
	}
	if err != nil {
		a.log.Error("could not record job", "job", rec.ID, "err", err)
	}
}

// start runs jr's job in its own goroutine, unless the agent drains.
func (a *Agent) start(jr *jobRun) error {
	ctx, cancel := context.WithCancel(a.jobsCtx)
	a.mu.Lock()
	if a.draining {
		// Checked under the lock drain takes before it waits for the
		// runs: no run is added once it waits.
		a.mu.Unlock()
		cancel()
		return ErrDraining
	}
	jr.cancel, jr.done, jr.summary = cancel, make(chan struct{}), nil
	if jr.force == nil {
		jr.force = make(chan struct{}, 1)
	}
	jr.unrecorded, jr.recordErr = 0, ""
	done := jr.done
	a.runs.Add(1)
	a.mu.Unlock()
	job := jr.job
	log := a.log.With("job", job.ID)
	go func() {
		defer a.runs.Done()
		defer close(done)
		defer cancel()
		select {
		case <-a.reconciled:
		case <-ctx.Done():
		}
		a.mu.Lock()
		stopping, replacing := jr.stopping, jr.replacing
		a.mu.Unlock()
		if ctx.Err() != nil || stopping {
			// Stopped (or drained) before it ran, or a stop an earlier
			// agent did not finish: the allocations claimed from an
			// earlier agent are stopped and torn down, not left pending
			// with an owner that is about to be gone (unless the agent
			// detaches: the next one re-adopts them).
			a.mu.Lock()
			adopt := jr.adopt
			jr.adopt = nil
			a.mu.Unlock()
			why := "drain"
			switch {
			case stopping:
				why = "job stop"
			case replacing:
				why = "job replaced"
			}
			for _, al := range adopt {
				if a.runner.Detached() {
					break
				}
				a.allocDone(log, jr, a.runner.StopAdopted(ctx, job, al, "stopped ("+why+") before this agent resumed it"))
			}
			a.finish(jr, nil, nil, false)
			return
		}
		a.mu.Lock()
		if jr.rec.StopOld {
			// Recorded before the version it replaces was gone (an
			// agent died replacing it): what it left is stopped first.
			adopt := jr.adopt
			jr.adopt = nil
			a.mu.Unlock()
			for _, al := range adopt {
				a.allocDone(log, jr, a.runner.StopAdopted(ctx, job, al, "stopped (job replaced by a newer version) before this agent resumed it"))
			}
			a.mu.Lock()
			jr.rec.StopOld = false
			rec := jr.rec
			a.mu.Unlock()
			a.putJob(ctx, rec)
			a.mu.Lock()
		}
		a.mu.Unlock()
		log.Info("job started", "type", job.Type, "groups", len(job.Groups), "version", jr.rec.Version)
		a.mu.Lock()
		o := runner.RunOptions{
			Force:   jr.force,
			OnAlloc: func(al *store.Allocation) { a.allocDone(log, jr, al) },
			Adopt:   jr.adopt,
			Resume:  jr.adopt != nil,
			OnLaunch: func(t time.Time) {
				a.mu.Lock()
				jr.rec.LastLaunch = &t
				rec := jr.rec
				current := a.jobs[rec.ID] == jr
				a.mu.Unlock()
				// A replaced run writes nothing: the record is its
				// successor's.
				if current {
					a.putJob(ctx, rec)
				}
			},
		}
		if jr.rec.LastLaunch != nil {
			o.LastLaunch = *jr.rec.LastLaunch
		}
		jr.adopt = nil
		a.mu.Unlock()
		sum, err := a.runner.RunJob(ctx, job, o)
		// A detach (agent stopped without draining) is no end of the job.
		natural := ctx.Err() == nil && !a.runner.Detached()
		if err != nil {
			log.Error("job run failed", "err", err)
		}
		a.finish(jr, sum, err, natural)
	}()
	return nil
}

// allocDone logs an allocation's end with everything an operator greps
// for: alloc_id, job, netns and network. An allocation the store could
// not record is the job's error, so that its status says why.
func (a *Agent) allocDone(log *slog.Logger, jr *jobRun, al *store.Allocation) {
	a.recordAlloc(al)
	for _, ev := range al.Events {
		if ev.Type != runner.EventNotRecorded {
			continue
		}
		a.mu.Lock()
		jr.unrecorded++
		if jr.recordErr == "" {
			jr.recordErr = fmt.Sprintf("allocation %s could not be recorded: %s", al.ID, ev.Message)
		}
		jr.rec.Error = jr.recordError()
		a.mu.Unlock()
		log.Error("allocation could not be recorded", "alloc_id", al.ID, "err", ev.Message)
		break
	}
	attrs := []any{"alloc_id", al.ID, "group", al.Group, "status", al.Status}
	if n := al.Network; n != nil {
		attrs = append(attrs, "netns", n.NetnsPath, "network", n.Network, "ipv4", strings.Join(n.IPv4, ","))
	}
	var exits []string
	for _, t := range al.Tasks {
		exits = append(exits, fmt.Sprintf("%s=%d", t.Name, t.ExitCode))
	}
	attrs = append(attrs, "exit_codes", strings.Join(exits, ","),
		"setup_ms", al.TimingsMS["netns"]+al.TimingsMS["add"], "teardown_ms", al.TimingsMS["del"]+al.TimingsMS["remove"])
	if al.Status == store.AllocComplete {
		log.Info("allocation finished", attrs...)
		return
	}
	log.Warn("allocation finished", append(attrs, "desc", al.StatusDesc)...)
}

// finish records how a run ended. A stopped job is forgotten; one that
// ended by itself is dead; one interrupted by the drain stays "running"
// in the store so that it resumes at the next start.
func (a *Agent) finish(jr *jobRun, sum *runner.Summary, runErr error, natural bool) {
	log := a.log.With("job", jr.rec.ID)
	if sum != nil {
		by := map[string]int{}
		for k, v := range sum.ByStatus {
			by[string(k)] = v
		}
		log.Info("job finished", "launches", sum.Launches, "allocations", by, "teardown_retries", sum.TeardownRetries, "natural_end", natural)
		if len(sum.Leaks) > 0 {
			log.Error("job left things behind (gc retries them)", "leaks", strings.Join(sum.Leaks, "; "))
		}
	}
	ctx := context.WithoutCancel(a.jobsCtx)
	// Decided under the lock, written after it: submit and stop wait for
	// this run's done, which closes only once finish has returned, so the
	// store sees these writes before any newer one of the same job.
	var del bool
	var put *jobRecord
	a.mu.Lock()
	jr.cancel = nil
	jr.summary = sum
	switch {
	case a.jobs[jr.rec.ID] != jr:
	case jr.stopping && jr.rec.Purge:
		delete(a.jobs, jr.rec.ID)
		del = true
	case jr.stopping:
		// Kept as dead until a purge, as Nomad's stopped jobs; never
		// resumed by a later agent.
		now := time.Now()
		jr.stopping = false
		jr.rec.Status, jr.rec.FinishedAt, jr.rec.Stopped = api.JobDead, &now, true
		if runErr != nil {
			jr.rec.Error = runErr.Error()
		}
		rec := jr.rec
		put = &rec
	case a.draining && !natural:
		// Stays "running" in the store: it resumes at the next start.
	default:
		now := time.Now()
		jr.rec.Status, jr.rec.FinishedAt = api.JobDead, &now
		switch {
		case runErr != nil:
			jr.rec.Error = runErr.Error()
		case jr.recordErr != "":
			jr.rec.Error = jr.recordError()
		case jr.replacing:
			jr.rec.Error = "replaced by a new submission"
		}
		rec := jr.rec
		put = &rec
	}
	a.mu.Unlock()
	if del {
		if err := a.node.Store.DeleteJob(ctx, jr.rec.ID); err != nil {
			log.Error("could not delete stopped job", "err", err)
		}
	}
	if put != nil {
		a.putJob(ctx, *put)
	}
}

// submit parses and starts a job. A live job with the same ID is left
// alone when the new one is the same (api.UpdateNone), gets the new
// version recorded and keeps its allocations when only in-place fields
// changed (api.UpdateInPlace), and is otherwise replaced: the new
// version is recorded first (StopOld), the old run stopped, then the new
// one started, so that an agent killed in between stops what is left of
// the old version before it runs the new one.
func (a *Agent) submit(ctx context.Context, req api.JobSubmitRequest) (*api.JobSubmitResponse, error) {
	job, err := a.parseJob(ctx, []byte(req.JobHCL), req.Filename, varsOf(req))
	if err != nil {
		return nil, err
	}
	return a.submitParsed(ctx, job, req)
}

// submitParsed is submit of job, parsed (parseJob) from req's source and
// variables, which the record keeps to parse it again after a restart.
func (a *Agent) submitParsed(ctx context.Context, job *jobspec.Job, req api.JobSubmitRequest) (*api.JobSubmitResponse, error) {
	vars := varsOf(req)
	var err error
	unlock := a.keys.Lock(job.ID)
	defer unlock()
	if a.isDraining() {
		return nil, ErrDraining
	}
	resp := &api.JobSubmitResponse{JobID: job.ID, Warnings: warnings(job), NextLaunches: nextLaunches(job, 5), Parameterized: job.IsParameterized()}

	a.mu.Lock()
	old := a.jobs[job.ID]
	var prev jobRecord
	var prevJob *jobspec.Job
	live, running, pending := false, false, false
	if old != nil {
		prev, prevJob, pending = old.rec, old.job, old.pending
		running = old.cancel != nil && !old.stopping && !old.replacing
		live = running || (old.cancel == nil && old.rec.Status == api.JobRegistered)
	}
	a.mu.Unlock()
	if req.EnforceIndex {
		have := uint64(0)
		if old != nil {
			have = prev.modifyIndex()
		}
		if err := checkIndex(job.ID, have, req.JobModifyIndex); err != nil {
			return nil, err
		}
	}
	if pending {
		return nil, fmt.Errorf("job %s: the version before the last one is still stopping; submit again once `berth job status %s` shows the last one running", job.ID, job.ID)
	}
	update := api.UpdateCreate
	if live {
		if update, err = classify(prevJob, job); err != nil {
			return nil, err
		}
	}
	rec := jobRecord{
		ID: job.ID, Source: req.JobHCL, Filename: req.Filename, SubmittedAt: time.Now().UTC(), Status: api.JobRunning,
		jobVars: vars,
	}
	if job.IsParameterized() {
		// Kept, never run: each dispatch runs a child job.
		rec.Status = api.JobRegistered
	}
	if old != nil {
		rec = prev.nextVersion(rec, running && prev.Error == "")
	} else {
		rec.ModifyIndex = 1
	}
	resp.Update, resp.Version, resp.JobModifyIndex = update, rec.Version, rec.ModifyIndex
	switch update {
	case api.UpdateNone:
		resp.Unchanged, resp.Version, resp.JobModifyIndex = true, prev.Version, prev.modifyIndex()
		a.log.Info("job unchanged: nothing to do", "job", job.ID, "version", prev.Version)
		return resp, nil
	case api.UpdateInPlace:
		// The runner goes on with the job it started with: its running
		// allocations keep the job meta they started with until they are
		// replaced (tasks read it as NOMAD_META_*). The run's record is
		// the new version's before it is written, so that nothing the
		// run writes meanwhile (a launch, its end) puts the old one back.
		a.mu.Lock()
		savedRec, savedJob := old.rec, old.job
		rec.LastLaunch = old.rec.LastLaunch
		old.rec, old.job = rec, job
		a.mu.Unlock()
		if err := a.putRecord(ctx, rec); err != nil {
			a.mu.Lock()
			old.rec, old.job = savedRec, savedJob
			a.mu.Unlock()
			return nil, err
		}
		a.log.Info("job updated in place", "job", job.ID, "version", rec.Version)
		return resp, nil
	}

	jr := &jobRun{job: job, rec: rec}
	var oldDone chan struct{}
	// The new run takes the old one's place before the new version is
	// written: the old run, ending meanwhile, then writes nothing over it.
	a.mu.Lock()
	replacing := old != nil && old.cancel != nil
	if replacing {
		oldDone = old.done
		// Status running while it waits for the old run to end.
		jr.rec.StopOld, jr.pending = true, true
		old.replacing = true
	}
	a.jobs[job.ID] = jr
	a.mu.Unlock()
	// Recorded before anything of the old version stops.
	if err := a.putRecord(ctx, jr.rec); err != nil {
		a.mu.Lock()
		if old != nil {
			a.jobs[job.ID] = old
			old.replacing = false
		} else {
			delete(a.jobs, job.ID)
		}
		a.mu.Unlock()
		return nil, err
	}
	if replacing {
		fault.Point(fault.ReplaceRecorded)
	}
	a.mu.Lock()
	if replacing && old.cancel != nil {
		old.cancel()
	}
	resp.Replaced = replacing
	a.mu.Unlock()
	if jr.rec.Status == api.JobRegistered {
		return resp, nil
	}
	if oldDone != nil {
		a.log.Info("replacing running job: stopping the old version", "job", job.ID, "version", rec.Version)
		if err := a.wait(ctx, oldDone); err != nil {
			// Started once the old run is gone; the record already
			// says so for a later agent.
			go func() {
				select {
				case <-oldDone:
				case <-a.jobsCtx.Done():
					return
				}
				a.mu.Lock()
				jr.pending = false
				a.mu.Unlock()
				if err := a.start(jr); err != nil {
					a.log.Warn("replacing job not started", "job", job.ID, "err", err)
				}
			}()
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("the previous version is still stopping (%v); this one starts once it is gone", err))
			return resp, nil
		}
	}
	a.mu.Lock()
	jr.pending = false
	a.mu.Unlock()
	if err := a.start(jr); err != nil {
		// Recorded as running: it starts with the next agent.
		return nil, err
	}
	return resp, nil
}

// putRecord writes rec to the store.
func (a *Agent) putRecord(ctx context.Context, rec jobRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("job %s: encode record: %w", rec.ID, err)
	}
	if err := a.node.Store.PutJob(ctx, rec.ID, b); err != nil {
		return fmt.Errorf("job %s: %w", rec.ID, err)
	}
	return nil
}

// wait waits for done, at most stop_timeout and as long as ctx lasts.
func (a *Agent) wait(ctx context.Context, done <-chan struct{}) error {
	t := time.NewTimer(a.set.stopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("stop_timeout %s passed", a.set.stopTimeout)
	}
}

// plan parses a job and says what submitting it would do: the diff
// against the current version and, per group, the allocations created,
// destroyed or updated.
func (a *Agent) plan(ctx context.Context, req api.JobSubmitRequest) (*api.JobPlanResponse, error) {
	job, err := a.parseJob(ctx, []byte(req.JobHCL), req.Filename, varsOf(req))
	if err != nil {
		return nil, err
	}
	return a.planParsed(job)
}

// planParsed is plan of a parsed job (parseJob).
func (a *Agent) planParsed(job *jobspec.Job) (*api.JobPlanResponse, error) {
	var err error
	resp := &api.JobPlanResponse{Job: wireJob(job), Warnings: warnings(job), NextLaunches: nextLaunches(job, 5), Update: api.UpdateCreate}
	var cur *jobspec.Job
	live := false
	a.mu.Lock()
	if jr := a.jobs[job.ID]; jr != nil {
		resp.Exists, resp.Running = true, jr.cancel != nil
		resp.JobModifyIndex, resp.Version = jr.rec.modifyIndex(), jr.rec.Version
		cur = jr.job
		live = jr.pending || (jr.cancel != nil && !jr.stopping && !jr.replacing) || (jr.cancel == nil && jr.rec.Status == api.JobRegistered)
	}
	a.mu.Unlock()
	if live {
		if resp.Update, err = classify(cur, job); err != nil {
			return nil, err
		}
	}
	resp.Diff, resp.Annotations, resp.CreatesOrDestroys, err = planDiff(cur, job, live, resp.Update)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// stop stops a job: it stays known as dead (Stopped) until a purge
// (o.Purge) forgets it, as Nomad's. It waits for the tasks and networks
// to be gone up to stop_timeout (not with o.Detach); Stopped is false if
// it did not (the job goes on stopping).
func (a *Agent) stop(ctx context.Context, id string, o api.JobStopOptions) (*api.JobStopResponse, error) {
	if err := validJobID(id); err != nil {
		return nil, err
	}
	unlock := a.keys.Lock(id)
	defer unlock()
	a.mu.Lock()
	jr := a.jobs[id]
	if jr == nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	}
	if jr.pending {
		a.mu.Unlock()
		return nil, fmt.Errorf("job %s: a new version waits for the previous one to stop; stop it again once `berth job status %s` shows it running", id, id)
	}
	if jr.cancel == nil {
		// Not running: marked stopped, or forgotten with a purge.
		sum := jr.summary
		resp := &api.JobStopResponse{JobID: id, Stopped: true, Summary: WireSummary(sum)}
		if o.Purge {
			delete(a.jobs, id)
			a.mu.Unlock()
			if err := a.node.Store.DeleteJob(ctx, id); err != nil {
				return nil, err
			}
			resp.Purged = true
			return resp, nil
		}
		if !jr.rec.Stopped {
			now := time.Now()
			jr.rec.Stopped, jr.rec.Status, jr.rec.ModifyIndex = true, api.JobDead, jr.rec.modifyIndex()+1
			if jr.rec.FinishedAt == nil {
				jr.rec.FinishedAt = &now
			}
		}
		rec := jr.rec
		a.mu.Unlock()
		if err := a.putRecord(ctx, rec); err != nil {
			return nil, err
		}
		return resp, nil
	}
	jr.stopping = true
	jr.rec.Status, jr.rec.Purge, jr.rec.ModifyIndex = api.JobStopping, o.Purge, jr.rec.modifyIndex()+1
	// The stop is recorded before anything stops (under a.mu, so that
	// the run's end, which records it dead or deletes it, comes after):
	// an agent killed meanwhile leaves it to the next one, which
	// finishes it.
	a.putJob(ctx, jr.rec)
	fault.Point(fault.StopRequested)
	done := jr.done
	a.mu.Unlock()
	a.runner.RequestStops(ctx, id, "job stop")
	a.mu.Lock()
	if jr.cancel != nil {
		jr.cancel()
	}
	a.mu.Unlock()
	a.log.Info("stopping job", "job", id, "purge", o.Purge)
	resp := &api.JobStopResponse{JobID: id}
	if o.Detach {
		return resp, nil
	}
	if err := a.wait(ctx, done); err != nil {
		a.log.Warn("job still stopping; it is recorded dead (or forgotten, with a purge) once its tasks and networks are gone", "job", id, "err", err)
		return resp, nil
	}
	a.mu.Lock()
	resp.Stopped, resp.Purged, resp.Summary = true, o.Purge, WireSummary(jr.summary)
	a.mu.Unlock()
	return resp, nil
}

func (a *Agent) allocCounts(ctx context.Context, job string) (map[string]int, []*store.Allocation, error) {
	allocs, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{JobID: job})
	if err != nil {
		return nil, nil, err
	}
	by := map[string]int{}
	for _, al := range allocs {
		by[string(al.Status)]++
	}
	return by, allocs, nil
}

// stubLocked describes jr; the caller holds a.mu.
func stubLocked(jr *jobRun) api.JobStub {
	s := api.JobStub{
		ID: jr.rec.ID, Status: jr.status(), SubmittedAt: jr.rec.SubmittedAt,
		FinishedAt: jr.rec.FinishedAt, Error: jr.rec.Error,
		Stopped: jr.rec.Stopped, Version: jr.rec.Version, JobModifyIndex: jr.rec.modifyIndex(),
	}
	s.ParentID = jr.rec.ParentID
	if j := jr.job; j != nil {
		s.Type, s.Namespace, s.Parameterized = j.Type, j.Namespace, j.IsParameterized()
		if j.Periodic != nil {
			s.Periodic = j.Periodic.Crons
			if s.Status == api.JobRunning && j.Periodic.Enabled {
				if t := j.Periodic.Next(time.Now()); !t.IsZero() {
					s.NextLaunch = &t
				}
			}
		}
	}
	return s
}

// listJobs returns every job the agent knows, sorted by ID.
func (a *Agent) listJobs(ctx context.Context) ([]api.JobStub, error) {
	a.mu.Lock()
	stubs := make([]api.JobStub, 0, len(a.jobs))
	for _, jr := range a.jobs {
		stubs = append(stubs, stubLocked(jr))
	}
	a.mu.Unlock()
	allocs, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		return nil, err
	}
	perJob := map[string]map[string]int{}
	for _, al := range allocs {
		// A periodic launch's allocations count under the periodic
		// job, as its status lists them.
		id := al.JobID
		if al.ParentJobID != "" {
			id = al.ParentJobID
		}
		if perJob[id] == nil {
			perJob[id] = map[string]int{}
		}
		perJob[id][string(al.Status)]++
	}
	for i := range stubs {
		stubs[i].Allocations = perJob[stubs[i].ID]
		if stubs[i].Allocations == nil {
			stubs[i].Allocations = map[string]int{}
		}
	}
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].ID < stubs[j].ID })
	return stubs, nil
}

// jobStatus is a job's summary, its spec and its allocations.
func (a *Agent) jobStatus(ctx context.Context, id string) (*api.JobStatus, error) {
	if err := validJobID(id); err != nil {
		return nil, err
	}
	a.mu.Lock()
	jr := a.jobs[id]
	var st api.JobStatus
	var dispatched []api.JobStub
	var proto api.JobStub
	if jr != nil {
		st.JobStub, st.Job, st.Summary = stubLocked(jr), wireJob(jr.job), WireSummary(jr.summary)
		proto = childProtoLocked(jr)
		for _, c := range a.jobs {
			if c.rec.ParentID == id {
				dispatched = append(dispatched, stubLocked(c))
			}
		}
	}
	a.mu.Unlock()
	if jr == nil {
		return a.periodicChildStatus(ctx, id)
	}
	by, allocs, err := a.allocCounts(ctx, id)
	if err != nil {
		return nil, err
	}
	st.JobStub.Allocations = by
	st.Allocations = wireAllocStubs(allocs)
	st.Children = append(periodicChildren(proto, allocs), dispatched...)
	sort.Slice(st.Children, func(i, j int) bool { return st.Children[i].ID < st.Children[j].ID })
	return &st, nil
}

// periodicChildren are the launches of a periodic job (proto:
// childProtoLocked) that allocs (the job's allocations, its children's
// included) still show.
func periodicChildren(proto api.JobStub, allocs []*store.Allocation) []api.JobStub {
	var out []api.JobStub
	at := map[string]int{}
	for _, al := range allocs {
		if al.ParentJobID != proto.ParentID {
			continue
		}
		i, ok := at[al.JobID]
		if !ok {
			i = len(out)
			at[al.JobID] = i
			out = append(out, childStub(proto, al.JobID))
		}
		countChildAlloc(&out[i], al)
	}
	return out
}

// childProtoLocked is what every launch of jr's job shares: its parent,
// type and namespace. The caller holds a.mu.
func childProtoLocked(jr *jobRun) api.JobStub {
	s := api.JobStub{ParentID: jr.rec.ID}
	if j := jr.job; j != nil {
		s.Type, s.Namespace = j.Type, j.Namespace
	}
	return s
}

// childStub is the stub of the periodic launch id (proto:
// childProtoLocked), its allocations not yet counted (countChildAlloc):
// dead until one of them is not terminal.
func childStub(proto api.JobStub, id string) api.JobStub {
	s := proto
	s.ID, s.Status, s.Allocations = id, api.JobDead, map[string]int{}
	if _, launch, ok := jobspec.ParsePeriodicChildID(id); ok {
		s.SubmittedAt = launch
	}
	return s
}

func countChildAlloc(s *api.JobStub, al *store.Allocation) {
	s.Allocations[string(al.Status)]++
	if !al.Status.Terminal() {
		s.Status = api.JobRunning
	}
}

// periodicChildStatus is the status of one launch of a periodic job the
// agent knows: its own job (the periodic one's, with the child's ID) and
// allocations.
func (a *Agent) periodicChildStatus(ctx context.Context, id string) (*api.JobStatus, error) {
	parent, launch, ok := jobspec.ParsePeriodicChildID(id)
	a.mu.Lock()
	var jr *jobRun
	if ok {
		jr = a.jobs[parent]
	}
	var pj *jobspec.Job
	var proto api.JobStub
	if jr != nil {
		pj, proto = jr.job, childProtoLocked(jr)
	}
	a.mu.Unlock()
	if jr == nil {
		return nil, fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	}
	allocs, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{JobID: id})
	if err != nil {
		return nil, err
	}
	if len(allocs) == 0 {
		// Never launched, or its allocations were pruned: Nomad's GC
		// forgets such a child too.
		return nil, fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	}
	st := api.JobStatus{JobStub: childStub(proto, id)}
	for _, al := range allocs {
		countChildAlloc(&st.JobStub, al)
	}
	if pj != nil && pj.Periodic != nil {
		if c, err := pj.PeriodicChild(launch); err == nil {
			st.Job = wireJob(c)
		}
	}
	st.Allocations = wireAllocStubs(allocs)
	return &st, nil
}

func (a *Agent) jobCounts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	by := map[string]int{}
	for _, jr := range a.jobs {
		by[jr.status()]++
	}
	return by
}

// forcePeriodic launches a running periodic job now, out of its
// schedule, as `nomad job periodic force`; the launch's checks
// (prohibit_overlap, pending launches) still apply.
func (a *Agent) forcePeriodic(id string) error {
	if err := validJobID(id); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	jr := a.jobs[id]
	switch {
	case jr == nil:
		return fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	case jr.job == nil || jr.job.Periodic == nil || !jr.job.Periodic.Enabled:
		return fmt.Errorf("%w: job %s is not a periodic job (or its periodic block is disabled)", errBadRequest, id)
	case jr.cancel == nil || jr.stopping || jr.replacing || jr.force == nil:
		return fmt.Errorf("%w: job %s is not running: run it first", errBadRequest, id)
	}
	select {
	case jr.force <- struct{}{}:
	default: // a force is pending already
	}
	return nil
}
