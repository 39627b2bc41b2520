// Package metrics exports berth's Prometheus metrics: CNI and namespace
// operations (as an attach.Observer), removals that found a busy
// namespace, CHECK failures and heals, gc runs, allocations, and the HTTP
// API. Nothing is registered globally: the agent passes its own registry.
//
// Labels carry only bounded values (verbs, network names, phases,
// statuses, holder kinds); never an allocation, container or namespace ID.
package metrics

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/netns"
)

const namespace = "berth"

// Result label values.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

var (
	// CNIBuckets span a loopback-only chain (a few ms) to an
	// iptables-heavy chain on a loaded host near its 2 min ADD timeout.
	CNIBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	// NetnsBuckets: create/remove are syscalls (< 2 ms) unless a removal
	// has to wait for stacked mounts, which gives up after 30 s.
	NetnsBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30}
	// PhaseBuckets cover the allocation phases: CNI verbs, a podman
	// container start (~0.5 s here), a driver cleanup that waits for a
	// kill timeout.
	PhaseBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// Metrics holds berth's collectors. All methods are safe for concurrent
// use and never block on I/O.
type Metrics struct {
	gatherer prometheus.Gatherer

	cniOps      *prometheus.CounterVec
	cniDuration *prometheus.HistogramVec

	netnsDuration *prometheus.HistogramVec
	netnsErrors   *prometheus.CounterVec
	removalBusy   prometheus.Counter
	removalRetry  prometheus.Counter
	holdersSeen   *prometheus.CounterVec

	checkFailures *prometheus.CounterVec
	heals         *prometheus.CounterVec

	gcRuns      *prometheus.CounterVec
	gcReclaimed *prometheus.CounterVec

	allocations      *prometheus.GaugeVec
	allocsTotal      *prometheus.CounterVec
	restores         *prometheus.CounterVec
	pendingTeardowns prometheus.Gauge
	allocPhase       *prometheus.HistogramVec

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec

	nomadReclaimed *prometheus.CounterVec
	nomadAPIErrors *prometheus.CounterVec
	nomadLatency   prometheus.Histogram
	nomadConnected *prometheus.GaugeVec

	// allocMu serialises SetAllocations so that a status that disappears
	// from one call to the next is reset to zero, not left at its old value.
	allocMu   sync.Mutex
	allocSeen map[string]bool
}

var _ attach.Observer = (*Metrics)(nil)

// New creates berth's collectors and registers them with reg, which also
// serves them through Handler. A *prometheus.Registry is required (rather
// than a Registerer) so that what Handler serves is exactly what was
// registered. It panics if reg already holds berth's metrics, as
// MustRegister does: that is a programming error.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{gatherer: reg, allocSeen: map[string]bool{}}
	for _, d := range m.table() {
		reg.MustRegister(d.build())
	}
	// The error series exist from the start, so a rate() over them is 0
	// rather than absent until the first failure.
	for _, op := range []string{"create", "remove"} {
		m.netnsErrors.WithLabelValues(op)
	}
	m.gcRuns.WithLabelValues(ResultOK)
	m.gcRuns.WithLabelValues(ResultError)
	for _, call := range NomadCalls {
		m.nomadAPIErrors.WithLabelValues(call)
	}
	return m
}

// metricDef is one of berth's metrics: the field of Metrics its collector
// goes into (its type says the kind: a counter, gauge or histogram, a
// vector of them when labelled) and what it is.
type metricDef struct {
	into       any
	name, help string
	labels     []string
	buckets    []float64 // histograms only
}

// build makes d's collector and stores it where d.into points.
func (d metricDef) build() prometheus.Collector {
	name := prometheus.BuildFQName(namespace, "", d.name)
	switch p := d.into.(type) {
	case *prometheus.Counter:
		*p = prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: d.help})
		return *p
	case **prometheus.CounterVec:
		*p = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: d.help}, d.labels)
		return *p
	case *prometheus.Gauge:
		*p = prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: d.help})
		return *p
	case **prometheus.GaugeVec:
		*p = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: d.help}, d.labels)
		return *p
	case *prometheus.Histogram:
		*p = prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: d.help, Buckets: d.buckets})
		return *p
	case **prometheus.HistogramVec:
		*p = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: d.help, Buckets: d.buckets}, d.labels)
		return *p
	}
	panic(fmt.Sprintf("metrics: %s goes into a %T, not a collector field", d.name, d.into))
}

// table is berth's metrics, each pointing at its field of m.
func (m *Metrics) table() []metricDef {
	return []metricDef{
		{into: &m.cniOps, name: "cni_operations_total", help: "CNI operations by verb, network and result (ok or error).",
			labels: []string{"verb", "network", "result"}},
		{into: &m.cniDuration, name: "cni_operation_duration_seconds", help: "Duration of CNI operations (the whole plugin chain) by verb and network.",
			labels: []string{"verb", "network"}, buckets: CNIBuckets},
		{into: &m.netnsDuration, name: "netns_operation_duration_seconds", help: "Duration of network namespace operations (create, remove).",
			labels: []string{"op"}, buckets: NetnsBuckets},
		{into: &m.netnsErrors, name: "netns_operation_errors_total", help: "Failed network namespace operations (create, remove).",
			labels: []string{"op"}},
		{into: &m.removalBusy, name: "netns_removal_busy_total", help: "Namespace removals whose plain unmount was refused (EBUSY) because something held the namespace; it was detached instead."},
		{into: &m.removalRetry, name: "netns_removal_retries_total", help: "Unlink attempts of namespace pins that had to be repeated (stacked mounts)."},
		{into: &m.holdersSeen, name: "netns_holders_seen_total", help: "Processes found holding a namespace being removed, by kind (fd, mount, member).",
			labels: []string{"kind"}},
		{into: &m.checkFailures, name: "cni_check_failures_total", help: "CNI CHECKs that found an existing attachment misconfigured, by network.",
			labels: []string{"network"}},
		{into: &m.heals, name: "cni_heals_total", help: "Attempts to recreate an attachment whose CHECK failed, by network and result.",
			labels: []string{"network", "result"}},
		{into: &m.gcRuns, name: "gc_runs_total", help: "Garbage collection runs by result (ok or error).",
			labels: []string{"result"}},
		{into: &m.gcReclaimed, name: "gc_reclaimed_total", help: "Leftovers reclaimed by garbage collection, by kind.",
			labels: []string{"kind"}},
		{into: &m.allocations, name: "allocations", help: "Allocations known to this agent, by client status.",
			labels: []string{"status"}},
		{into: &m.allocsTotal, name: "allocations_total", help: "Allocations that reached a final client status, by status.",
			labels: []string{"status"}},
		{into: &m.restores, name: "restore_actions_total", help: "What agents found and did when taking over what a killed or stopped agent left, by action (the allocation event types: Re-attached, Not Re-attached, Adopted Unrecorded, Removed Unrecorded, Exit Recorded, Exit Unknown, Stop Finished).",
			labels: []string{"action"}},
		{into: &m.pendingTeardowns, name: "pending_teardowns", help: "Attachments whose teardown failed and is waiting to be retried."},
		{into: &m.allocPhase, name: "alloc_phase_duration_seconds", help: "Duration of allocation phases (netns, add, task, driver_cleanup, del, remove).",
			labels: []string{"phase"}, buckets: PhaseBuckets},
		{into: &m.httpRequests, name: "http_requests_total", help: "HTTP API requests by route, method and status code.",
			labels: []string{"route", "method", "code"}},
		{into: &m.httpDuration, name: "http_request_duration_seconds", help: "HTTP API request duration by route and method.",
			labels: []string{"route", "method"}, buckets: prometheus.DefBuckets},
		{into: &m.nomadReclaimed, name: "nomad_reclaimed_total", help: "Leftovers of Nomad allocations reclaimed (a nomad block), by kind (netns, cni-cache, lease, iptables) and by the rule that proved them dead (e.g. teardown-failed:alloc-dir, client-gone:cni-cache, teardown-deadline:cni-cache).",
			labels: []string{"kind", "rule"}},
		{into: &m.nomadAPIErrors, name: "nomad_api_errors_total", help: "Calls to the Nomad API that failed, by call (agent_self, node_allocations, allocation, event_stream); nothing is reclaimed on a failed answer.",
			labels: []string{"call"}},
		{into: &m.nomadLatency, name: "nomad_reclaim_seconds", help: "Time from a Nomad allocation turning terminal until berth had removed the namespace it leaked.", buckets: []float64{.1, .25, .5, 1, 2, 3, 5, 10, 30, 60, 120, 300}},
		// A vector without labels: exported only by agents with a nomad
		// block, so that an alert on 0 means "configured and disconnected".
		{into: &m.nomadConnected, name: "nomad_connected", help: "1 while the agent follows the Nomad client's event stream, 0 while Nomad does not answer (nothing of Nomad's is reclaimed then); absent without a nomad block."},
	}
}

// NomadCalls are the calls of package nomad, the values of
// nomad_api_errors_total's label (nomad.Call*; listed here so that the
// series exist from the start).
var NomadCalls = []string{"agent_self", "node_allocations", "allocation", "event_stream"}

func result(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultOK
}

// CNIOp records one CNI operation (attach.Observer).
func (m *Metrics) CNIOp(verb, network string, d time.Duration, err error) {
	m.cniOps.WithLabelValues(verb, network, result(err)).Inc()
	m.cniDuration.WithLabelValues(verb, network).Observe(d.Seconds())
}

// NetnsOp records a namespace create or remove (attach.Observer).
func (m *Metrics) NetnsOp(op string, d time.Duration, err error) {
	m.netnsDuration.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.netnsErrors.WithLabelValues(op).Inc()
	}
}

// Removed records what a namespace removal ran into (attach.Observer).
func (m *Metrics) Removed(rep *netns.RemoveReport) {
	if rep == nil {
		return
	}
	if rep.Busy {
		m.removalBusy.Inc()
	}
	if rep.Retries > 0 {
		m.removalRetry.Add(float64(rep.Retries))
	}
	for _, h := range rep.Holders {
		m.holdersSeen.WithLabelValues(string(h.Kind)).Inc()
	}
}

// CheckFailed records a CHECK that found an attachment misconfigured
// (attach.Observer).
func (m *Metrics) CheckFailed(network string) {
	m.checkFailures.WithLabelValues(network).Inc()
}

// Healed records an attempt to recreate a misconfigured attachment
// (attach.Observer).
func (m *Metrics) Healed(network string, err error) {
	m.heals.WithLabelValues(network, result(err)).Inc()
}

// GCRun records one garbage collection run and what it reclaimed, by
// kind. Reclaimed counts are added even when the run failed part-way:
// what was removed is gone either way.
func (m *Metrics) GCRun(err error, reclaimed map[string]int) {
	m.gcRuns.WithLabelValues(result(err)).Inc()
	for kind, n := range reclaimed {
		if n > 0 {
			m.gcReclaimed.WithLabelValues(kind).Add(float64(n))
		}
	}
}

// SetAllocations sets the number of allocations per status. A status
// present in an earlier call and missing now is set to zero.
func (m *Metrics) SetAllocations(byStatus map[string]int) {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	for status := range m.allocSeen {
		if _, ok := byStatus[status]; !ok {
			m.allocations.WithLabelValues(status).Set(0)
		}
	}
	for status, n := range byStatus {
		m.allocSeen[status] = true
		m.allocations.WithLabelValues(status).Set(float64(n))
	}
}

// Restore counts one thing an agent found and did when taking over an
// allocation an earlier agent left (runner.RestoreMetrics).
func (m *Metrics) Restore(action string) {
	m.restores.WithLabelValues(action).Inc()
}

// AllocDone counts an allocation that reached a final status.
func (m *Metrics) AllocDone(status string) {
	m.allocsTotal.WithLabelValues(status).Inc()
}

// SetPendingTeardowns sets the number of teardowns waiting for a retry.
func (m *Metrics) SetPendingTeardowns(n int) {
	m.pendingTeardowns.Set(float64(n))
}

// AllocPhase records how long one phase of an allocation took.
func (m *Metrics) AllocPhase(phase string, d time.Duration) {
	m.allocPhase.WithLabelValues(phase).Observe(d.Seconds())
}

// InstrumentHandler counts and times the requests h serves under route.
// route must be the route's pattern (e.g. "/v1/allocation/{id}"), never
// the request path, or IDs would become label values. Methods outside
// the standard set are counted as "unknown" by promhttp.
func (m *Metrics) InstrumentHandler(route string, h http.Handler) http.Handler {
	labels := prometheus.Labels{"route": route}
	return promhttp.InstrumentHandlerCounter(m.httpRequests.MustCurryWith(labels),
		promhttp.InstrumentHandlerDuration(m.httpDuration.MustCurryWith(labels), h))
}

// Handler serves the registry passed to New in the Prometheus exposition
// formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{})
}

// NomadReclaimed counts leftovers of Nomad's reclaimed, by kind and rule.
func (m *Metrics) NomadReclaimed(kind, rule string, n int) {
	if n > 0 {
		m.nomadReclaimed.WithLabelValues(kind, rule).Add(float64(n))
	}
}

// NomadAPIError counts a failed call to Nomad.
func (m *Metrics) NomadAPIError(call string) { m.nomadAPIErrors.WithLabelValues(call).Inc() }

// NomadReclaimLatency observes terminal-to-namespace-gone of one allocation.
func (m *Metrics) NomadReclaimLatency(d time.Duration) { m.nomadLatency.Observe(d.Seconds()) }

// NomadConnected sets whether Nomad's event stream is followed.
func (m *Metrics) NomadConnected(up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.nomadConnected.WithLabelValues().Set(v)
}
