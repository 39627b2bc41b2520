package agent

import (
	"context"
	"fmt"
	"net/http"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
)

// The native service catalog over the API: every registration of the
// node's store (the agent's own as they are now, with their last check
// output), whichever berth process made it.

func (a *Agent) handleServices(w http.ResponseWriter, r *http.Request) {
	l, err := a.node.Services.List(r.Context(), store.ServiceFilter{})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireServiceStubs(l))
}

func (a *Agent) handleService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := validName("service name", name); err != nil {
		writeErr(w, err)
		return
	}
	l, err := a.node.Services.List(r.Context(), store.ServiceFilter{Name: name})
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(l) == 0 {
		writeErr(w, fmt.Errorf("service %q: %w (no instance is registered)", name, store.ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, wireServices(l))
}

// allocWithServices is an allocation in the API's form with its
// registrations; a catalog that cannot be read leaves them out.
func (a *Agent) allocWithServices(ctx context.Context, al *store.Allocation) *api.Allocation {
	out := wireAlloc(al)
	a.taskResources(al, out)
	if l, err := a.node.Services.List(ctx, store.ServiceFilter{AllocID: al.ID}); err == nil && len(l) > 0 {
		out.Services = wireServices(l)
	}
	return out
}

// taskResources fills in the resources of out's tasks from the job the
// agent knows (a periodic launch's from its periodic job).
func (a *Agent) taskResources(al *store.Allocation, out *api.Allocation) {
	a.mu.Lock()
	jr := a.jobs[al.JobID]
	if jr == nil && al.ParentJobID != "" {
		jr = a.jobs[al.ParentJobID]
	}
	var j *jobspec.Job
	if jr != nil {
		j = jr.job
	}
	a.mu.Unlock()
	if j == nil {
		return
	}
	g := j.Group(al.Group)
	if g == nil {
		return
	}
	for i := range out.Tasks {
		for _, t := range g.Tasks {
			if t.Name == out.Tasks[i].Name {
				r := api.Resources{CPU: t.Resources.CPU, Cores: t.Resources.Cores, MemoryMB: t.Resources.MemoryMB, MemoryMaxMB: t.Resources.MemoryMaxMB}
				out.Tasks[i].Resources = &r
			}
		}
	}
}
