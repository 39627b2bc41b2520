package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/node/nomadapi"
	"github.com/berth/berth/store"
)

// The Nomad API's jobs, evaluations, deployments and node: berth's own
// job calls (submit, stop, dispatch, status), their errors as nomadapi's
// sentinels.

// nomadJobErr maps the agent's errors to nomadapi's: a job file that does
// not parse or place is the request's fault (400, with berth's
// positioned diagnostics), an unknown job 404.
func nomadJobErr(err error) error {
	if err == nil {
		return nil
	}
	var diags jobspec.Diagnostics
	switch {
	case errors.As(err, &diags):
		return fmt.Errorf("%w: %s", nomadapi.ErrBadRequest, diags.Error())
	case errors.Is(err, ErrInvalidName), errors.Is(err, errBadRequest), errors.Is(err, jobspec.ErrDispatch):
		return fmt.Errorf("%w: %w", nomadapi.ErrBadRequest, err)
	case errors.Is(err, ErrJobNotFound), errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %w", nomadapi.ErrNotFound, err)
	case errors.Is(err, ErrIndexMismatch):
		// Nomad's words ("conflicting job modify index"), which scripts
		// match, before berth's.
		return fmt.Errorf("%w: conflicting job modify index: %w", nomadapi.ErrConflict, err)
	}
	return err
}

func (b nomadBackend) RegisterJob(ctx context.Context, src nomadapi.JobSource) (*api.JobSubmitResponse, error) {
	req := api.JobSubmitRequest{JobHCL: src.Source, Filename: src.Filename, Vars: src.Vars, VarFiles: src.VarFiles,
		EnforceIndex: src.EnforceIndex, JobModifyIndex: src.JobModifyIndex}
	if err := checkVarFiles(&req); err != nil {
		return nil, nomadJobErr(err)
	}
	resp, err := b.a.submit(ctx, req)
	if err != nil {
		return nil, nomadJobErr(err)
	}
	if resp.JobID != src.JobID {
		// The CLI's parse and berth's disagree (a variable from the
		// CLI's environment, which the submission does not carry).
		b.a.log.Warn("job registered through Nomad's API under another ID than the CLI parsed", "job", resp.JobID, "cli_job", src.JobID)
	}
	return resp, nil
}

func (b nomadBackend) JobList(ctx context.Context) ([]api.JobStub, error) {
	l, err := b.a.listJobs(ctx)
	return l, nomadJobErr(err)
}

func (b nomadBackend) JobStatus(ctx context.Context, id string) (*api.JobStatus, error) {
	st, err := b.a.jobStatus(ctx, id)
	return st, nomadJobErr(err)
}

func (b nomadBackend) JobAllocations(ctx context.Context, id string) ([]*api.Allocation, error) {
	if err := validJobID(id); err != nil {
		return nil, nomadJobErr(err)
	}
	l, err := b.a.node.Store.ListAllocations(ctx, store.AllocFilter{JobID: id})
	if err != nil {
		return nil, err
	}
	return b.withServices(ctx, l)
}

func (b nomadBackend) NodeAllocations(ctx context.Context) ([]*api.Allocation, error) {
	l, err := b.a.node.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		return nil, err
	}
	return b.withServices(ctx, l)
}

// withServices converts allocations with their service registrations
// (their checks' health makes a deployment's healthy count).
func (b nomadBackend) withServices(ctx context.Context, l []*store.Allocation) ([]*api.Allocation, error) {
	svcs, err := b.a.node.Services.List(ctx, store.ServiceFilter{})
	if err != nil {
		return nil, err
	}
	by := map[string][]*store.Service{}
	for _, s := range svcs {
		by[s.AllocID] = append(by[s.AllocID], s)
	}
	out := make([]*api.Allocation, 0, len(l))
	for _, al := range l {
		w := wireAlloc(al)
		if s := by[al.ID]; len(s) > 0 {
			w.Services = wireServices(s)
		}
		out = append(out, w)
	}
	return out, nil
}

// StopJob stops the job; it stays listed as dead until purged.
func (b nomadBackend) StopJob(ctx context.Context, id string, purge bool) (*api.JobStopResponse, error) {
	resp, err := b.a.stop(ctx, id, api.JobStopOptions{Purge: purge})
	return resp, nomadJobErr(err)
}

func (b nomadBackend) JobVersions(ctx context.Context, id string) (*api.JobVersions, error) {
	v, err := b.a.JobVersions(ctx, id)
	return v, nomadJobErr(err)
}

// PlanJob plans src with berth's parser: the diff against the current
// version, as `berth job plan`.
func (b nomadBackend) PlanJob(ctx context.Context, src nomadapi.JobSource) (*api.JobPlanResponse, error) {
	req := api.JobSubmitRequest{JobHCL: src.Source, Filename: src.Filename, Vars: src.Vars, VarFiles: src.VarFiles}
	if err := checkVarFiles(&req); err != nil {
		return nil, nomadJobErr(err)
	}
	resp, err := b.a.plan(ctx, req)
	return resp, nomadJobErr(err)
}

func (b nomadBackend) ForcePeriodic(ctx context.Context, id string) error {
	return nomadJobErr(b.a.forcePeriodic(id))
}

func (b nomadBackend) DispatchJob(ctx context.Context, id string, req api.JobDispatchRequest) (*api.JobDispatchResponse, error) {
	resp, err := b.a.dispatch(ctx, id, req)
	return resp, nomadJobErr(err)
}

func (b nomadBackend) NodeInfo(ctx context.Context) (nomadapi.NodeInfo, error) {
	a := b.a
	attrs := map[string]string{}
	for k, v := range a.node.Attrs {
		attrs[k] = v
	}
	var drivers []string
	for d := range a.node.Drivers.Validators() {
		drivers = append(drivers, d)
	}
	sort.Strings(drivers)
	mhz, mem, avail := hostCompute()
	return nomadapi.NodeInfo{
		ID: nodeUUID(attrs["node.unique.id"]), Name: attrs["node.unique.name"], Datacenter: attrs["node.datacenter"],
		HTTPAddr: a.nomadAddr, Attrs: attrs, Drivers: drivers, CPUMHz: mhz, MemoryMB: mem, MemAvailableMB: avail, StartedAt: a.started,
	}, nil
}

// hostCompute is the machine's total CPU (cores times the clock, as
// Nomad's cpu.totalcompute), its memory and the memory available now,
// read from /proc; 0 when unknown.
func hostCompute() (cpuMHz, memMB, availMB int) {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "cpu MHz" {
				if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					cpuMHz = int(mhz) * runtime.NumCPU()
				}
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			switch {
			case err != nil:
			case k == "MemTotal":
				memMB = kb / 1024
			case k == "MemAvailable":
				availMB = kb / 1024
			}
		}
		f.Close()
	}
	return cpuMHz, memMB, availMB
}

func (b nomadBackend) JobServices(ctx context.Context, id string) (map[string]int, error) {
	a := b.a
	a.mu.Lock()
	defer a.mu.Unlock()
	jr := a.jobs[id]
	if jr == nil || jr.job == nil {
		return nil, fmt.Errorf("job %q: %w", id, nomadapi.ErrNotFound)
	}
	out := map[string]int{}
	for _, g := range jr.job.Groups {
		n := len(g.Services)
		for _, t := range g.Tasks {
			n += len(t.Services)
		}
		out[g.Name] = n
	}
	return out, nil
}
