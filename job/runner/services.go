package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/internal/cleanup"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/service"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// allocExt is what an allocation's services, templates and restarts keep
// beside the lifecycle. Its mutex is never held while calling out (a
// check's Stop, a store write, a driver).
type allocExt struct {
	mu sync.Mutex
	// handles are the running tasks, for a template's change_signal.
	handles  map[int]driver.Handle
	attempts map[int]*attempt
	// taskRegs are each task's registered services; groupRegs the
	// group's, registered once every main task has started.
	taskRegs   map[int][]*registration
	groupRegs  []*registration
	groupDone  bool
	announced  bool
	tmpl       map[int]*taskTemplates
	stopTmpl   []context.CancelFunc
	closed     bool
	watchersWG sync.WaitGroup
}

// registration is one registered service block and its running checks.
type registration struct {
	svc    *store.Service
	checks []*service.Handle
}

// nativeServices are the blocks of ss that berth registers.
func nativeServices(ss []*jobspec.Service) []*jobspec.Service {
	var out []*jobspec.Service
	for _, s := range ss {
		if s.Provider == "nomad" {
			out = append(out, s)
		}
	}
	return out
}

func (a *allocRun) hasServices() bool {
	if a.r.o.Services == nil {
		return false
	}
	for _, s := range a.group.AllServices() {
		if s.Provider == "nomad" {
			return true
		}
	}
	return false
}

// announceLater says whether the allocation's start is told (the started
// callback) once its services are registered rather than when its
// network is up: whoever prints it wants their addresses.
func (a *allocRun) announceLater() bool { return a.hasServices() }

// allocNet is what the allocation's network gives its services and checks.
func (a *allocRun) allocNet(t *jobspec.Task) service.AllocNet {
	netns := ""
	a.mu.Lock()
	if ns := a.alloc.Network; ns != nil {
		netns = ns.NetnsPath
	}
	a.mu.Unlock()
	n := a.net.serviceNet(netns)
	// A podman or docker container lives in the group's namespace (a
	// docker one through its pause container): its address is
	// the allocation's.
	n.DriverNet = t != nil && (t.Driver == "podman" || t.Driver == "docker") && n.NetnsPath != ""
	return n
}

// serviceVars are what a service's name, tags, meta and address are
// interpolated with: the task's runtime variables and Nomad's ${JOB},
// ${TASKGROUP}, ${TASK} and ${BASE}.
func (a *allocRun) serviceVars(t *jobspec.Task) map[string]string {
	tt := t
	if tt == nil {
		tt = &jobspec.Task{}
	}
	vars, _ := a.env(tt, nil)
	vars["JOB"], vars["TASKGROUP"], vars["TASK"] = a.job.ID, a.group.Name, tt.Name
	vars["BASE"] = a.job.ID + "-" + a.group.Name + "-" + tt.Name
	return vars
}

// taskRunning is called when task i has started: its handle is kept for
// signals, its services are registered, and once every main task runs,
// the group's.
func (a *allocRun) taskRunning(ctx context.Context, i int, h driver.Handle) {
	x := &a.ext
	x.mu.Lock()
	if x.handles == nil {
		x.handles = map[int]driver.Handle{}
	}
	x.handles[i] = h
	closed := x.closed
	x.mu.Unlock()
	if closed || a.r.o.Services == nil {
		return
	}
	t := a.group.Tasks[i]
	if regs := a.register(ctx, t, nativeServices(t.Services)); len(regs) > 0 {
		x.mu.Lock()
		if x.taskRegs == nil {
			x.taskRegs = map[int][]*registration{}
		}
		x.taskRegs[i] = append(x.taskRegs[i], regs...)
		x.mu.Unlock()
	}
	if !a.mainStarted() {
		return
	}
	x.mu.Lock()
	first := !x.groupDone && !x.closed
	x.groupDone = true
	x.mu.Unlock()
	if !first {
		return
	}
	regs := a.register(ctx, nil, nativeServices(a.group.Services))
	x.mu.Lock()
	x.groupRegs = regs
	announce := !x.announced && a.started != nil && a.hasServices()
	x.announced = true
	x.mu.Unlock()
	if announce {
		a.started(a.snapshot())
	}
}

// mainStarted reports whether every main task has started.
func (a *allocRun) mainStarted() bool {
	a.mu.Lock()
	lc := a.lc
	a.mu.Unlock()
	if lc == nil {
		return true
	}
	return lc.each((*taskCtl).isStarted, roleMain)
}

// taskStopping is called when task i is about to be stopped (before its
// shutdown_delay) or has exited: its services are deregistered.
func (a *allocRun) taskStopping(ctx context.Context, i int) {
	x := &a.ext
	x.mu.Lock()
	regs := x.taskRegs[i]
	delete(x.taskRegs, i)
	delete(x.handles, i)
	x.mu.Unlock()
	a.deregister(ctx, regs, "task "+a.group.Tasks[i].Name+" stopping")
}

// groupStopping is called when the allocation's tasks are about to be
// stopped, before the group's shutdown_delay: its group services go.
func (a *allocRun) groupStopping() {
	x := &a.ext
	x.mu.Lock()
	regs := x.groupRegs
	x.groupRegs = nil
	x.groupDone = true
	x.mu.Unlock()
	ctx, cancel := cleanup.Context(context.Background(), time.Minute)
	defer cancel()
	a.deregister(ctx, regs, "allocation stopping")
}

// servicesGone deregisters whatever is left and stops the templates'
// watchers, before the network is torn down. Nothing registers after it.
func (a *allocRun) servicesGone(ctx context.Context) {
	x := &a.ext
	x.mu.Lock()
	x.closed = true
	regs := x.groupRegs
	x.groupRegs = nil
	for _, r := range x.taskRegs {
		regs = append(regs, r...)
	}
	x.taskRegs = nil
	stops := x.stopTmpl
	x.stopTmpl = nil
	x.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	x.watchersWG.Wait()
	a.deregister(ctx, regs, "allocation ended")
}

// servicesDetached stops the checks and the templates' watchers of an
// allocation left running for the next agent, and keeps its
// registrations: that agent registers them again as it re-adopts the
// tasks (gc deletes them if it never does, their owner being gone).
func (a *allocRun) servicesDetached() {
	x := &a.ext
	x.mu.Lock()
	x.closed = true
	regs := append([]*registration(nil), x.groupRegs...)
	for _, r := range x.taskRegs {
		regs = append(regs, r...)
	}
	stops := x.stopTmpl
	x.stopTmpl = nil
	x.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	x.watchersWG.Wait()
	for _, r := range regs {
		for _, h := range r.checks {
			h.Stop()
		}
	}
}

// register registers the service blocks specs of task t (nil: the
// group's) and starts their checks. A block that cannot be registered
// (an address that does not resolve) is an event, not a failure.
func (a *allocRun) register(ctx context.Context, t *jobspec.Task, specs []*jobspec.Service) []*registration {
	if len(specs) == 0 {
		return nil
	}
	vars := a.serviceVars(t)
	n := a.allocNet(t)
	var regs []*registration
	var svcs []*store.Service
	taskName := ""
	if t != nil {
		taskName = t.Name
	}
	for _, sp := range specs {
		svc, err := a.serviceRecord(sp, taskName, vars, n)
		if err != nil {
			a.event("Service Failure", err.Error())
			continue
		}
		regs = append(regs, &registration{svc: svc})
		svcs = append(svcs, svc)
	}
	if len(svcs) == 0 {
		return nil
	}
	if err := a.r.o.Services.Register(context.WithoutCancel(ctx), svcs...); err != nil {
		a.event("Service Failure", fmt.Sprintf("register %s: %v", serviceNames(svcs), err))
		return nil
	}
	var lines []string
	for i, reg := range regs {
		lines = append(lines, fmt.Sprintf("%s at %s", reg.svc.ServiceName, service.AddressString(reg.svc)))
		a.startChecks(reg, specs[i], vars, n)
	}
	a.event("Services Registered", strings.Join(lines, ", "))
	a.save(ctx)
	return regs
}

func serviceNames(l []*store.Service) string {
	var out []string
	for _, s := range l {
		out = append(out, s.ServiceName)
	}
	return strings.Join(out, ", ")
}

// serviceRecord builds the registration of one service block.
func (a *allocRun) serviceRecord(sp *jobspec.Service, task string, vars map[string]string, n service.AllocNet) (*store.Service, error) {
	name := sp.Name
	if name == "" {
		name = "${JOB}-${TASKGROUP}"
		if task != "" {
			name += "-${TASK}"
		}
	}
	name = jobspec.Interpolate(name, vars)
	if name == "" || strings.Contains(name, "${") {
		return nil, fmt.Errorf("service %q: the name does not resolve (%s)", sp.Name, name)
	}
	addr, port, err := service.ResolveService(sp.AddressMode, jobspec.Interpolate(sp.Address, vars), sp.Port, n)
	if err != nil {
		return nil, fmt.Errorf("service %q: %w", name, err)
	}
	svc := &store.Service{
		ID:          service.ID(a.alloc.ID, a.group.Name, task, name, sp.Port),
		ServiceName: name, Namespace: a.job.Namespace, JobID: a.job.ID, AllocID: a.alloc.ID,
		Group: a.group.Name, Task: task,
		NodeID: a.r.o.Node["node.unique.id"], NodeName: a.r.o.Node["node.unique.name"], Datacenter: a.r.o.Node["node.datacenter"],
		Address: addr, Port: port,
		OwnerPID: a.r.o.OwnerPID, OwnerStartTime: a.r.o.OwnerStartTime,
	}
	for _, tag := range sp.Tags {
		svc.Tags = append(svc.Tags, jobspec.Interpolate(tag, vars))
	}
	if len(sp.Meta) > 0 {
		svc.Meta = map[string]string{}
		for k, v := range sp.Meta {
			svc.Meta[k] = jobspec.Interpolate(v, vars)
		}
	}
	for _, c := range runnableChecks(sp) {
		st := c.InitialStatus
		if st == "" {
			st = store.CheckPending
		}
		onUpdate := c.OnUpdate
		if onUpdate == "" {
			onUpdate = sp.OnUpdate
		}
		svc.Checks = append(svc.Checks, store.CheckStatus{Name: checkName(c, name, vars), Type: c.Type, Status: st, OnUpdate: onUpdate})
	}
	svc.Health = service.Health(svc.Checks)
	return svc, nil
}

// runnableChecks are the checks the native provider runs.
func runnableChecks(sp *jobspec.Service) []*jobspec.Check {
	var out []*jobspec.Check
	for _, c := range sp.Checks {
		if c.Type == "http" || c.Type == "tcp" {
			out = append(out, c)
		}
	}
	return out
}

// checkName is the check's name, interpolated as Nomad does, or Nomad's
// default one.
func checkName(c *jobspec.Check, svc string, vars map[string]string) string {
	if c.Name != "" {
		return jobspec.Interpolate(c.Name, vars)
	}
	return fmt.Sprintf("service: %q check", svc)
}

// startChecks starts reg's checks. A check whose target does not resolve
// stays at its status, with the reason as its output.
func (a *allocRun) startChecks(reg *registration, sp *jobspec.Service, vars map[string]string, n service.AllocNet) {
	if a.r.o.Checks == nil {
		return
	}
	for idx, c := range runnableChecks(sp) {
		target, err := service.ResolveCheck(c, sp.AddressMode, jobspec.Interpolate(sp.Address, vars), sp.Port, n)
		if err != nil {
			msg := fmt.Sprintf("service %q check %q: %v", reg.svc.ServiceName, reg.svc.Checks[idx].Name, err)
			a.r.o.Services.UpdateCheck(reg.svc.ID, idx, store.CheckCritical, msg, time.Now())
			a.event("Check Failure", msg)
			continue
		}
		hdr := map[string][]string{}
		for k, vs := range c.Header {
			for _, v := range vs {
				hdr[k] = append(hdr[k], jobspec.Interpolate(v, vars))
			}
		}
		probe := service.Probe{
			Type: c.Type, Target: target, Protocol: jobspec.Interpolate(c.Protocol, vars), Path: jobspec.Interpolate(c.Path, vars),
			Method: jobspec.Interpolate(c.Method, vars), Header: hdr, Body: jobspec.Interpolate(c.Body, vars),
			TLSSkipVerify: c.TLSSkipVerify, TLSServerName: c.TLSServerName,
		}
		w := a.newCheckWatch(reg, idx, c, sp)
		h := a.r.o.Checks.Start(service.Spec{
			Probe: probe, Interval: c.Interval, Timeout: c.Timeout, InitialStatus: c.InitialStatus,
			SuccessBeforePassing: c.SuccessBeforePassing, FailuresBeforeCritical: c.FailuresBeforeCritical,
			OnResult: w.result,
		})
		reg.checks = append(reg.checks, h)
	}
}

// deregister stops regs' checks, then removes them from the catalog.
func (a *allocRun) deregister(ctx context.Context, regs []*registration, why string) {
	if len(regs) == 0 {
		return
	}
	var ids, names []string
	for _, r := range regs {
		for _, h := range r.checks {
			h.Stop()
		}
		ids = append(ids, r.svc.ID)
		names = append(names, r.svc.ServiceName)
	}
	if err := a.r.o.Services.Deregister(context.WithoutCancel(ctx), ids...); err != nil {
		a.event("Service Failure", fmt.Sprintf("deregister %s (gc removes them): %v", strings.Join(names, ", "), err))
		return
	}
	a.event("Services Deregistered", fmt.Sprintf("%s: %s", why, strings.Join(names, ", ")))
}

// checkWatch follows one check's results: records them, makes an event
// of each change of status and restarts tasks as its check_restart says.
type checkWatch struct {
	a       *allocRun
	reg     *registration
	idx     int
	name    string
	restart *jobspec.CheckRestart
	tasks   []int // what check_restart restarts

	mu         sync.Mutex
	last       string // the status before the latest change
	graceUntil time.Time
	unhealthy  int
}

func (a *allocRun) newCheckWatch(reg *registration, idx int, c *jobspec.Check, sp *jobspec.Service) *checkWatch {
	w := &checkWatch{a: a, reg: reg, idx: idx, name: reg.svc.Checks[idx].Name, restart: c.CheckRestart, last: reg.svc.Checks[idx].Status}
	if w.restart == nil {
		w.restart = sp.CheckRestart
	}
	if w.restart == nil || w.restart.Limit <= 0 {
		w.restart = nil
		return w
	}
	w.graceUntil = time.Now().Add(w.restart.Grace)
	// A task's service restarts its task; a group's, the task its check
	// or the service names, else the main tasks.
	target := reg.svc.Task
	if target == "" {
		target = c.Task
	}
	if target == "" {
		target = sp.Task
	}
	for i, t := range a.group.Tasks {
		if t.Name == target || target == "" && t.IsMain() {
			w.tasks = append(w.tasks, i)
		}
	}
	return w
}

func (w *checkWatch) result(r service.Result) {
	a := w.a
	a.r.o.Services.UpdateCheck(w.reg.svc.ID, w.idx, r.Status, r.Output, r.Time)
	if r.Changed {
		w.mu.Lock()
		old := w.last
		w.last = r.Status
		w.mu.Unlock()
		a.event("Check Status", fmt.Sprintf("service %q check %q: %s -> %s: %s", w.reg.svc.ServiceName, w.name, old, r.Status, r.Output))
		a.save(context.Background())
	}
	if w.restart == nil {
		return
	}
	w.mu.Lock()
	now := time.Now()
	bad := r.Status == store.CheckCritical || r.Status == store.CheckWarning && !w.restart.IgnoreWarnings
	restart := false
	switch {
	case now.Before(w.graceUntil):
		w.unhealthy = 0
	case !bad:
		w.unhealthy = 0
	default:
		w.unhealthy++
		if w.unhealthy >= w.restart.Limit {
			w.unhealthy = 0
			w.graceUntil = now.Add(w.restart.Grace)
			restart = true
		}
	}
	w.mu.Unlock()
	if !restart {
		return
	}
	why := fmt.Sprintf("healthcheck: check %q of service %q unhealthy (%s %d times in a row)", w.name, w.reg.svc.ServiceName, r.Status, w.restart.Limit)
	for _, i := range w.tasks {
		a.restartTask(i, true, false, why)
	}
}
