package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/berth/berth/network/netns"
)

var errBoom = errors.New("boom")

func newTest(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return New(reg), reg
}

// histCount returns the number of observations of one histogram series.
func histCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestObserverAndMethods(t *testing.T) {
	tests := []struct {
		name string
		do   func(m *Metrics)
		// counters/gauges: collector picker -> expected value
		want []struct {
			c     func(m *Metrics) prometheus.Collector
			value float64
		}
		hist []struct {
			name   string
			labels map[string]string
			count  uint64
		}
	}{
		{
			name: "CNIOp ok and error",
			do: func(m *Metrics) {
				m.CNIOp("ADD", "private", 50*time.Millisecond, nil)
				m.CNIOp("ADD", "private", 70*time.Millisecond, nil)
				m.CNIOp("DEL", "private", time.Second, errBoom)
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.cniOps.WithLabelValues("ADD", "private", "ok") }, 2},
				{func(m *Metrics) prometheus.Collector { return m.cniOps.WithLabelValues("ADD", "private", "error") }, 0},
				{func(m *Metrics) prometheus.Collector { return m.cniOps.WithLabelValues("DEL", "private", "error") }, 1},
			},
			hist: []struct {
				name   string
				labels map[string]string
				count  uint64
			}{
				{"berth_cni_operation_duration_seconds", map[string]string{"verb": "ADD", "network": "private"}, 2},
				{"berth_cni_operation_duration_seconds", map[string]string{"verb": "DEL", "network": "private"}, 1},
			},
		},
		{
			name: "NetnsOp",
			do: func(m *Metrics) {
				m.NetnsOp("create", time.Millisecond, nil)
				m.NetnsOp("remove", time.Millisecond, errBoom)
				m.NetnsOp("remove", time.Millisecond, nil)
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.netnsErrors.WithLabelValues("create") }, 0},
				{func(m *Metrics) prometheus.Collector { return m.netnsErrors.WithLabelValues("remove") }, 1},
			},
			hist: []struct {
				name   string
				labels map[string]string
				count  uint64
			}{
				{"berth_netns_operation_duration_seconds", map[string]string{"op": "create"}, 1},
				{"berth_netns_operation_duration_seconds", map[string]string{"op": "remove"}, 2},
			},
		},
		{
			name: "Removed",
			do: func(m *Metrics) {
				m.Removed(nil)
				m.Removed(&netns.RemoveReport{Existed: true})
				m.Removed(&netns.RemoveReport{Existed: true, Busy: true, Retries: 3, Holders: []netns.Holder{
					{PID: 1, Kind: netns.HolderFD}, {PID: 2, Kind: netns.HolderFD}, {PID: 3, Kind: netns.HolderMember},
				}})
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.removalBusy }, 1},
				{func(m *Metrics) prometheus.Collector { return m.removalRetry }, 3},
				{func(m *Metrics) prometheus.Collector { return m.holdersSeen.WithLabelValues("fd") }, 2},
				{func(m *Metrics) prometheus.Collector { return m.holdersSeen.WithLabelValues("member") }, 1},
				{func(m *Metrics) prometheus.Collector { return m.holdersSeen.WithLabelValues("mount") }, 0},
			},
		},
		{
			name: "CheckFailed and Healed",
			do: func(m *Metrics) {
				m.CheckFailed("private")
				m.CheckFailed("private")
				m.Healed("private", nil)
				m.Healed("private", errBoom)
				m.Healed("private", errBoom)
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.checkFailures.WithLabelValues("private") }, 2},
				{func(m *Metrics) prometheus.Collector { return m.heals.WithLabelValues("private", "ok") }, 1},
				{func(m *Metrics) prometheus.Collector { return m.heals.WithLabelValues("private", "error") }, 2},
			},
		},
		{
			name: "GCRun",
			do: func(m *Metrics) {
				m.GCRun(nil, map[string]int{"netns": 2, "lease": 1, "rule": 0})
				m.GCRun(errBoom, map[string]int{"netns": 1})
				m.GCRun(nil, nil)
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.gcRuns.WithLabelValues("ok") }, 2},
				{func(m *Metrics) prometheus.Collector { return m.gcRuns.WithLabelValues("error") }, 1},
				{func(m *Metrics) prometheus.Collector { return m.gcReclaimed.WithLabelValues("netns") }, 3},
				{func(m *Metrics) prometheus.Collector { return m.gcReclaimed.WithLabelValues("lease") }, 1},
			},
		},
		{
			name: "SetAllocations resets a vanished status",
			do: func(m *Metrics) {
				m.SetAllocations(map[string]int{"running": 3, "pending": 1})
				m.SetAllocations(map[string]int{"running": 2, "complete": 4})
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.allocations.WithLabelValues("running") }, 2},
				{func(m *Metrics) prometheus.Collector { return m.allocations.WithLabelValues("pending") }, 0},
				{func(m *Metrics) prometheus.Collector { return m.allocations.WithLabelValues("complete") }, 4},
			},
		},
		{
			name: "AllocDone, SetPendingTeardowns, AllocPhase",
			do: func(m *Metrics) {
				m.AllocDone("complete")
				m.AllocDone("complete")
				m.AllocDone("failed")
				m.SetPendingTeardowns(5)
				m.SetPendingTeardowns(2)
				m.AllocPhase("add", 90*time.Millisecond)
				m.AllocPhase("add", 80*time.Millisecond)
				m.AllocPhase("remove", time.Millisecond)
			},
			want: []struct {
				c     func(m *Metrics) prometheus.Collector
				value float64
			}{
				{func(m *Metrics) prometheus.Collector { return m.allocsTotal.WithLabelValues("complete") }, 2},
				{func(m *Metrics) prometheus.Collector { return m.allocsTotal.WithLabelValues("failed") }, 1},
				{func(m *Metrics) prometheus.Collector { return m.pendingTeardowns }, 2},
			},
			hist: []struct {
				name   string
				labels map[string]string
				count  uint64
			}{
				{"berth_alloc_phase_duration_seconds", map[string]string{"phase": "add"}, 2},
				{"berth_alloc_phase_duration_seconds", map[string]string{"phase": "remove"}, 1},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newTest(t)
			tc.do(m)
			for i, w := range tc.want {
				if got := testutil.ToFloat64(w.c(m)); got != w.value {
					t.Errorf("series %d: got %v, want %v", i, got, w.value)
				}
			}
			for _, h := range tc.hist {
				if got := histCount(t, reg, h.name, h.labels); got != h.count {
					t.Errorf("%s%v: %d observations, want %d", h.name, h.labels, got, h.count)
				}
			}
			if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
				t.Errorf("lint: %v %v", err, problems)
			}
		})
	}
}

func TestConcurrentObservers(t *testing.T) {
	m, reg := newTest(t)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var err error
				if i%2 == 1 {
					err = errBoom
				}
				m.CNIOp("ADD", "private", time.Millisecond, err)
				m.NetnsOp("remove", time.Millisecond, err)
				m.Removed(&netns.RemoveReport{Busy: true, Retries: 1, Holders: []netns.Holder{{Kind: netns.HolderMount}}})
				m.CheckFailed("private")
				m.Healed("private", err)
				m.GCRun(err, map[string]int{"netns": 1})
				m.SetAllocations(map[string]int{"running": i, "pending": w})
				m.AllocDone("complete")
				m.SetPendingTeardowns(i)
				m.AllocPhase("task", time.Millisecond)
			}
		}(w)
	}
	// Scrapes run concurrently with the writers, as in the agent.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	<-done

	total := float64(workers * each)
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"cni ok", m.cniOps.WithLabelValues("ADD", "private", "ok"), total / 2},
		{"cni error", m.cniOps.WithLabelValues("ADD", "private", "error"), total / 2},
		{"netns errors", m.netnsErrors.WithLabelValues("remove"), total / 2},
		{"busy", m.removalBusy, total},
		{"retries", m.removalRetry, total},
		{"holders", m.holdersSeen.WithLabelValues("mount"), total},
		{"check failures", m.checkFailures.WithLabelValues("private"), total},
		{"heals ok", m.heals.WithLabelValues("private", "ok"), total / 2},
		{"gc error", m.gcRuns.WithLabelValues("error"), total / 2},
		{"gc reclaimed", m.gcReclaimed.WithLabelValues("netns"), total},
		{"alloc done", m.allocsTotal.WithLabelValues("complete"), total},
	}
	for _, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	if got := histCount(t, reg, "berth_cni_operation_duration_seconds", map[string]string{"verb": "ADD", "network": "private"}); got != uint64(total) {
		t.Errorf("cni duration observations: %d, want %v", got, total)
	}
}

func TestInstrumentHandlerAndHandler(t *testing.T) {
	m, reg := newTest(t)
	h := m.InstrumentHandler("/v1/allocation/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		io.WriteString(w, "ok")
	}))
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/v1/allocation/a1", nil),
		httptest.NewRequest(http.MethodGet, "/v1/allocation/a2", nil),
		httptest.NewRequest(http.MethodDelete, "/v1/allocation/a3", nil),
		httptest.NewRequest("BREW", "/v1/allocation/a4", nil),
	} {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	want := []struct {
		labels []string
		value  float64
	}{
		{[]string{"/v1/allocation/{id}", "get", "200"}, 2},
		{[]string{"/v1/allocation/{id}", "delete", "404"}, 1},
		{[]string{"/v1/allocation/{id}", "unknown", "200"}, 1},
	}
	for _, w := range want {
		if got := testutil.ToFloat64(m.httpRequests.WithLabelValues(w.labels...)); got != w.value {
			t.Errorf("requests%v: got %v, want %v", w.labels, got, w.value)
		}
	}
	if got := histCount(t, reg, "berth_http_request_duration_seconds", map[string]string{"route": "/v1/allocation/{id}", "method": "get"}); got != 2 {
		t.Errorf("duration observations for get: %d, want 2", got)
	}

	// The exposition names no request path: IDs never become labels.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics handler: %d\n%s", rec.Code, body)
	}
	for _, s := range []string{"berth_http_requests_total{", "berth_gc_runs_total{result=\"ok\"} 0", "berth_netns_operation_errors_total{op=\"create\"} 0"} {
		if !strings.Contains(body, s) {
			t.Errorf("exposition lacks %q", s)
		}
	}
	if strings.Contains(body, "/v1/allocation/a1") {
		t.Error("a request path leaked into the labels")
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry did not panic")
		}
	}()
	New(reg)
}

func BenchmarkCNIOp(b *testing.B) {
	m := New(prometheus.NewRegistry())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.CNIOp("ADD", "private", 80*time.Millisecond, nil)
		}
	})
}
