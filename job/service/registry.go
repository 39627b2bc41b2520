package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/template"
)

// Store is where registrations are kept: *store.Store, or nil for a
// registry that lives only in memory.
type Store interface {
	PutServices(ctx context.Context, svcs []*store.Service) error
	DeleteServices(ctx context.Context, ids ...string) error
	ListServices(ctx context.Context, f store.ServiceFilter) ([]*store.Service, error)
}

// Registry is this process's registrations, written through to the store.
// Registering and deregistering write at once; a change of health is
// written by a background flush (one transaction for all the changes of
// the moment), so that many checks changing together cost one write.
//
// It is the catalog templates read (template.Catalog): the instances this
// process registered, which is every one of a `berth run` and every one of
// an agent's jobs.
type Registry struct {
	st  Store
	log *slog.Logger

	// wmu orders writes to the store: a flush never writes back a
	// registration that a deregistration has deleted meanwhile.
	wmu sync.Mutex

	mu      sync.Mutex
	own     map[string]*store.Service
	dirty   map[string]bool
	changed chan struct{} // closed at the next change of the catalog
	flushc  chan struct{}
	done    chan struct{}
	closed  bool
}

// NewRegistry returns a registry over st (nil: memory only) and starts its
// flusher; Close stops it.
func NewRegistry(st Store, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	r := &Registry{st: st, log: log, own: map[string]*store.Service{}, dirty: map[string]bool{},
		changed: make(chan struct{}), flushc: make(chan struct{}, 1), done: make(chan struct{})}
	go r.flushLoop()
	return r
}

// Close writes the pending health changes and stops the flusher.
func (r *Registry) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	close(r.flushc)
	<-r.done
}

// notifyLocked wakes whoever waits on Changed. The caller holds mu.
func (r *Registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of the catalog: a
// registration, a deregistration or a change of health.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Register records svcs (whole registrations, their checks pending or at
// their initial status). It writes them to the store before they are
// visible.
func (r *Registry) Register(ctx context.Context, svcs ...*store.Service) error {
	if len(svcs) == 0 {
		return nil
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.st != nil {
		cp := make([]*store.Service, len(svcs))
		for i, s := range svcs {
			cp[i] = s.Clone()
		}
		if err := r.st.PutServices(ctx, cp); err != nil {
			return err
		}
		for i := range svcs {
			svcs[i].CreatedAt, svcs[i].ModifiedAt = cp[i].CreatedAt, cp[i].ModifiedAt
		}
	}
	r.mu.Lock()
	for _, s := range svcs {
		r.own[s.ID] = s.Clone()
	}
	r.notifyLocked()
	r.mu.Unlock()
	return nil
}

// Deregister removes registrations: at once from what templates see, then
// from the store.
func (r *Registry) Deregister(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.Lock()
	for _, id := range ids {
		delete(r.own, id)
		delete(r.dirty, id)
	}
	r.notifyLocked()
	r.mu.Unlock()
	if r.st == nil {
		return nil
	}
	return r.st.DeleteServices(ctx, ids...)
}

// UpdateCheck records a check's result on registration id: its status and
// output. A change of status (or of the instance's health) wakes the
// catalog's watchers and is written to the store; the output alone stays
// in memory until then. It reports the instance's health and whether the
// check's status changed.
func (r *Registry) UpdateCheck(id string, check int, status, output string, at time.Time) (health string, changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.own[id]
	if s == nil || check < 0 || check >= len(s.Checks) {
		return "", false
	}
	c := &s.Checks[check]
	changed = c.Status != status
	c.Status, c.Output, c.Time = status, output, at
	h := Health(s.Checks)
	if changed || h != s.Health {
		s.Health = h
		r.dirty[id] = true
		r.notifyLocked()
		if !r.closed {
			select {
			case r.flushc <- struct{}{}:
			default:
			}
		}
	}
	return h, changed
}

// flushDelay gathers the health changes of a moment into one write.
const flushDelay = 50 * time.Millisecond

func (r *Registry) flushLoop() {
	defer close(r.done)
	for range r.flushc {
		time.Sleep(flushDelay)
		r.flush()
	}
	r.flush()
}

func (r *Registry) flush() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.Lock()
	var batch []*store.Service
	for id := range r.dirty {
		if s := r.own[id]; s != nil {
			batch = append(batch, s.Clone())
		}
	}
	clear(r.dirty)
	r.mu.Unlock()
	if len(batch) == 0 || r.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.st.PutServices(ctx, batch); err != nil {
		r.log.Warn("could not record service health; the catalog in the store is behind", "services", len(batch), "err", err)
	}
}

// Health is an instance's health from its checks: the worst status of
// those that count (on_update "ignore" does not, "ignore_warnings" counts
// a warning as passing); passing without any.
func Health(checks []store.CheckStatus) string {
	rank := map[string]int{store.CheckPassing: 0, store.CheckWarning: 1, store.CheckPending: 2, store.CheckCritical: 3}
	worst := store.CheckPassing
	for _, c := range checks {
		st := c.Status
		switch c.OnUpdate {
		case "ignore":
			continue
		case "ignore_warnings":
			if st == store.CheckWarning {
				st = store.CheckPassing
			}
		}
		if rank[st] > rank[worst] {
			worst = st
		}
	}
	return worst
}

// Own returns this process's registrations matching f, sorted.
func (r *Registry) Own(f store.ServiceFilter) []*store.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*store.Service
	for _, s := range r.own {
		if (f.Name == "" || s.ServiceName == f.Name) && (f.AllocID == "" || s.AllocID == f.AllocID) {
			out = append(out, s.Clone())
		}
	}
	store.SortServices(out)
	return out
}

// List returns every registration on the node matching f: the store's
// (other berth processes' too), with this process's own as they are now
// (their last check output, not only the last written).
func (r *Registry) List(ctx context.Context, f store.ServiceFilter) ([]*store.Service, error) {
	own := r.Own(f)
	if r.st == nil {
		return own, nil
	}
	recs, err := r.st.ListServices(ctx, f)
	if err != nil {
		return nil, err
	}
	byID := map[string]*store.Service{}
	for _, s := range recs {
		byID[s.ID] = s
	}
	for _, s := range own {
		byID[s.ID] = s
	}
	out := make([]*store.Service, 0, len(byID))
	for _, s := range byID {
		out = append(out, s)
	}
	store.SortServices(out)
	return out, nil
}

// Instances implements template.Catalog: this process's instances,
// passing or not (Nomad's catalog has no health).
func (r *Registry) Instances(namespace, name string) []*template.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*template.Service
	for _, s := range r.own {
		if s.ServiceName == name && s.Namespace == namespace {
			out = append(out, TemplateService(s))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Names implements template.Catalog: the services with an instance,
// with the union of their tags.
func (r *Registry) Names(namespace string) []template.ServiceSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	tags := map[string][]string{}
	for _, s := range r.own {
		if s.Namespace != namespace {
			continue
		}
		l := tags[s.ServiceName]
		for _, t := range s.Tags {
			if !slices.Contains(l, t) {
				l = append(l, t)
			}
		}
		tags[s.ServiceName] = l
	}
	out := make([]template.ServiceSummary, 0, len(tags))
	for n, l := range tags {
		sort.Strings(l)
		out = append(out, template.ServiceSummary{Name: n, Namespace: namespace, Tags: l})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TemplateService is a registration as a template sees it.
func TemplateService(s *store.Service) *template.Service {
	return &template.Service{
		ID: s.ID, Name: s.ServiceName, Namespace: s.Namespace, Node: s.NodeID, Datacenter: s.Datacenter,
		JobID: s.JobID, AllocID: s.AllocID, Address: s.Address, Port: s.Port,
		Tags: slices.Clone(s.Tags), Meta: s.Meta,
	}
}

// ID is Nomad's registration ID: _nomad-task-<alloc>-<task>-<service>-<port>
// for a task's service, with "group-<group>" for the task of a group's.
func ID(allocID, group, task, name, portLabel string) string {
	owner := task
	if task == "" {
		owner = "group-" + group
	}
	return fmt.Sprintf("_nomad-task-%s-%s-%s-%s", allocID, owner, name, portLabel)
}

func netJoin(addr string, port int) string {
	if port == 0 {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

// AddressString is a registration's address:port as Nomad prints it.
func AddressString(s *store.Service) string { return netJoin(s.Address, s.Port) }
