package agent

import (
	"context"
	"fmt"
	"net/http"

	"github.com/berth/berth/api"
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
	if l, err := a.node.Services.List(ctx, store.ServiceFilter{AllocID: al.ID}); err == nil && len(l) > 0 {
		out.Services = wireServices(l)
	}
	return out
}
