package cli

import (
	"fmt"
	"strings"

	"github.com/berth/berth/job/service"
	"github.com/berth/berth/node/agent"
	"github.com/berth/berth/store"
)

// serviceWatch prints, while `berth run` runs, a line each time one of its
// services changes health: the start line said where they are, this says
// when they become usable (or stop being).
type serviceWatch struct {
	reg  *service.Registry
	seen map[string]string // registration ID -> health printed; guarded by runOutput.mu
	stop chan struct{}
	done chan struct{}
}

// watchServices starts following reg (nil: nothing to follow).
func (o *runOutput) watchServices(reg *service.Registry) {
	if reg == nil {
		return
	}
	sw := &serviceWatch{reg: reg, seen: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	o.mu.Lock()
	o.svc = sw
	o.mu.Unlock()
	go func() {
		defer close(sw.done)
		for {
			ch := reg.Changed()
			o.serviceLines()
			select {
			case <-sw.stop:
				return
			case <-ch:
			}
		}
	}()
}

// stopServices ends the watch (before the summary).
func (o *runOutput) stopServices() {
	o.mu.Lock()
	sw := o.svc
	o.mu.Unlock()
	if sw == nil {
		return
	}
	close(sw.stop)
	<-sw.done
}

// serviceLines prints the changes of health since the last call, for the
// allocations whose start was printed.
func (o *runOutput) serviceLines() {
	o.mu.Lock()
	defer o.mu.Unlock()
	sw := o.svc
	now := map[string]bool{}
	var ls []string
	for _, s := range sw.reg.Own(store.ServiceFilter{}) {
		now[s.ID] = true
		if !o.started[s.AllocID] || sw.seen[s.ID] == s.Health {
			continue
		}
		sw.seen[s.ID] = s.Health
		if o.json {
			o.jsonLine(map[string]any{"event": "service", "service": agent.WireService(s)})
			continue
		}
		ls = append(ls, fmt.Sprintf("%-36s  %-8s  %s %s %s", s.AllocID, "service", s.ServiceName, service.AddressString(s), s.Health))
	}
	for id := range sw.seen {
		if !now[id] {
			delete(sw.seen, id)
		}
	}
	if len(ls) > 0 {
		o.lines(ls...)
	}
}

// startServices is the part of an allocation's start line that says where
// its services are, and marks them printed. The caller holds mu.
func (o *runOutput) startServices(allocID string) string {
	if o.svc == nil {
		return ""
	}
	var parts []string
	for _, s := range o.svc.reg.Own(store.ServiceFilter{AllocID: allocID}) {
		o.svc.seen[s.ID] = s.Health
		parts = append(parts, fmt.Sprintf("%s %s (%s)", s.ServiceName, service.AddressString(s), s.Health))
	}
	if len(parts) == 0 {
		return ""
	}
	return "  services: " + strings.Join(parts, ", ")
}

// startedJSON is the allocation of a "started" line, with its services.
// The caller holds mu.
func (o *runOutput) startedJSON(a *store.Allocation) any {
	w := agent.WireAllocation(a)
	if o.svc != nil {
		for _, s := range o.svc.reg.Own(store.ServiceFilter{AllocID: a.ID}) {
			o.svc.seen[s.ID] = s.Health
			w.Services = append(w.Services, agent.WireService(s))
		}
	}
	return w
}
