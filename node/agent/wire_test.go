package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

var wireT0 = time.Date(2025, 3, 4, 5, 6, 7, 8000, time.UTC)

func wireFixtureAlloc() *store.Allocation {
	return &store.Allocation{
		ID: "0b1c2d3e-0000-4000-8000-000000000001", Namespace: "default", JobID: "web", Group: "g",
		Status: store.AllocFailed, StatusDesc: "task t exited 3",
		Tasks: []store.TaskState{
			{Name: "t", Driver: "raw_exec", State: "dead", Failed: true, ExitCode: 3, Signal: 9, Restarts: 2, StartedAt: wireT0, FinishedAt: wireT0.Add(time.Second),
				Handle: &store.TaskHandle{Driver: "raw_exec", PID: 42, PIDStartTime: 777, ContainerID: "c1", ContainerName: "n1", CgroupPath: "/sys/fs/cgroup/x"}},
			{Name: "side", Driver: "podman", State: "pending"},
		},
		Network: &store.NetworkStatus{Mode: "cni/private", Network: "private", NetnsPath: "/run/netns/x", Interface: "eth0",
			IPv4: []string{"10.199.110.5"}, IPv6: []string{"fd00::5"}, Gateway: []string{"10.199.110.1"},
			DNS: &store.DNS{Servers: []string{"1.1.1.1"}, Searches: []string{"local"}, Options: []string{"ndots:2"}}},
		Events:   []store.Event{{Time: wireT0, Type: "Received", Message: "allocation created"}},
		OwnerPID: 100, OwnerStartTime: 200, CreatedAt: wireT0, ModifiedAt: wireT0.Add(2 * time.Second),
		TimingsMS: map[string]float64{
			"total": 1, "netns": 2, "add": 3, "berth": 4, "task_start": 5, "task": 6,
			"driver_cleanup": 7, "del": 8, "remove": 9, "exit_to_netns_gone": 10,
		},
		TeardownRetries: 1, Holders: []string{"pid 9 (sh) fd 3"},
	}
}

func wireFixtureJob() *jobspec.Job {
	pos := func(l int) jobspec.Pos { return jobspec.Pos{File: "j.hcl", Line: l, Column: 2} }
	return &jobspec.Job{
		ID: "web", Type: "service", Namespace: "default", Region: "global", Datacenters: []string{"dc1"}, Priority: 50,
		Meta:        map[string]string{"k": "v"},
		Constraints: []jobspec.Constraint{{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux", Pos: pos(2)}},
		Periodic:    &jobspec.Periodic{Crons: []string{"* * * * *"}, ProhibitOverlap: true, TimeZone: "UTC", Enabled: true, Pos: pos(3)},
		Groups: []*jobspec.Group{{
			Name: "g", Count: 2, Meta: map[string]string{"gk": "gv"},
			Restart: jobspec.RestartPolicy{Attempts: 2, Interval: 30 * time.Minute, Delay: 15 * time.Second, Mode: "fail"},
			Reschedule: jobspec.ReschedulePolicy{Attempts: 1, Interval: time.Hour, Delay: 5 * time.Second, DelayFunction: "exponential",
				MaxDelay: time.Minute, Unlimited: true, Set: true},
			Network: jobspec.Network{Mode: "cni/private", CNI: "private", Hostname: "h",
				Ports:   []jobspec.Port{{Label: "http", Static: 8080, To: -1, HostNetwork: "default", Pos: pos(5)}},
				DNS:     &jobspec.DNS{Servers: []string{"1.1.1.1"}, Searches: []string{"s"}, Options: []string{"o"}},
				CNIArgs: map[string]string{"a": "b"}, Pos: pos(4), ModePos: pos(4)},
			Tasks: []*jobspec.Task{{
				Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/sh", "args": []any{"-c", "x"}, "n": int64(3)},
				Env: map[string]string{"E": "1"}, KillTimeout: 5 * time.Second,
				Resources: jobspec.Resources{CPU: 100, Cores: 1, MemoryMB: 300, MemoryMaxMB: 400},
				Meta:      map[string]string{"tk": "tv"}, Leader: true, User: "nobody", Restart: jobspec.RestartPolicy{Attempts: 1, Mode: "delay"},
				Constraints: []jobspec.Constraint{{Operator: "is_set", Attribute: "${attr.x}", Pos: pos(7)}},
				Pos:         pos(6), ConfigPos: pos(8), DriverPos: pos(9),
			}},
			Pos: pos(4),
		}},
		Warnings: []jobspec.Diagnostic{{File: "j.hcl", Line: 10, Column: 1, Summary: "reschedule does nothing"}},
		Pos:      pos(1),
	}
}

// Each conversion's JSON is pinned by a file in testdata/wire: those files
// are API v1 as clients see it (they were taken from the agent's answers
// before the wire types existed). A failure here is an API change: make it
// only by adding fields. Decoding the file into the wire type and encoding
// it again must give it back too, so a client reads what the agent writes.
func TestWireJSON(t *testing.T) {
	cases := []struct {
		golden string
		got    any
	}{
		{"allocation", wireAlloc(wireFixtureAlloc())},
		{"allocation-minimal", wireAlloc(&store.Allocation{ID: "a", JobID: "j", Group: "g", Status: store.AllocPending,
			Tasks: []store.TaskState{}, TimingsMS: map[string]float64{}})},
		{"alloc-stub", wireAllocStub(wireFixtureAlloc())},
		{"alloc-stub-host", wireAllocStub(&store.Allocation{ID: "a", Status: store.AllocPending, Network: &store.NetworkStatus{Mode: "host"}})},
		{"namespaces", WireNamespaces([]attach.NetEntry{
			{Name: "x", Path: "/run/netns/x", Pinned: true, Berth: true, Network: "private", Phase: store.PhaseReady,
				IPv4: []string{"10.199.110.5"}, AllocID: "a1", LastError: "busy",
				Holders: []netns.Holder{{PID: 9, Comm: "sh", Cmdline: "sh -c x", Kind: netns.HolderFD, Detail: "3"}}},
			{Name: "y", Path: "/run/netns/y"},
		})},
		{"summary", WireSummary(&runner.Summary{Job: "web", Launches: 3, Skipped: 1,
			ByStatus: map[store.AllocStatus]int{store.AllocComplete: 2, store.AllocFailed: 1},
			SetupP50: 1.5, SetupP99: 2.5, TeardownP50: 3.5, TeardownP99: 4.5, ExitToGoneP50: 5.5, TeardownRetries: 2,
			Holders: []string{"h"}, Leaks: []string{"l"}, Duration: 6.5, Failed: []string{"f"}})},
		{"summary-minimal", WireSummary(&runner.Summary{Job: "web", ByStatus: map[store.AllocStatus]int{}})},
		{"gc-report", wireGCReport(&gc.Report{DryRun: true, StoreUnavailable: "locked", Reboot: true,
			Found:     []gc.Item{{Kind: gc.KindNetns, ID: "x", Network: "private", Path: "/run/netns/x", Reason: "no owner"}},
			Reclaimed: []gc.Item{{Kind: gc.KindLease, ID: "y", Reason: "r"}}, Errors: []string{"e"}, DurationMS: 12.5})},
		{"diagnostics", wireDiagnostics(jobspec.Diagnostics{
			{File: "a.hcl", Line: 3, Column: 4, Summary: "bad", Detail: "worse"}, {File: "a.hcl", Line: 5, Column: 1, Summary: "also"}})},
		{"services", wireServices([]*store.Service{{
			ID: "_nomad-task-0b1c2d3e-0000-4000-8000-000000000001-group-g-web-http", ServiceName: "web", Namespace: "default",
			JobID: "j", AllocID: "0b1c2d3e-0000-4000-8000-000000000001", Group: "g", NodeID: "n1", NodeName: "host", Datacenter: "dc1",
			Address: "10.199.110.5", Port: 8080, Tags: []string{"v1"}, Meta: map[string]string{"k": "v"}, Health: store.CheckPassing,
			Checks:   []store.CheckStatus{{Name: "alive", Type: "http", Status: store.CheckPassing, Output: "HTTP GET http://10.199.110.5:8080/: 200 OK", Time: wireT0, OnUpdate: "require_healthy"}},
			OwnerPID: 1, OwnerStartTime: 2, CreatedAt: wireT0, ModifiedAt: wireT0.Add(time.Second),
		}, {ID: "t", ServiceName: "w2", Namespace: "default", JobID: "j", AllocID: "a", Group: "g", Task: "t", Address: "127.0.0.1", Health: store.CheckPending, CreatedAt: wireT0, ModifiedAt: wireT0}})},
		{"service-stubs", wireServiceStubs([]*store.Service{
			{ServiceName: "web", Namespace: "default", Tags: []string{"v2", "v1"}, Health: store.CheckPassing},
			{ServiceName: "web", Namespace: "default", Tags: []string{"v1"}, Health: store.CheckCritical},
			{ServiceName: "x", Namespace: "default"},
		})},
		{"job", wireJob(wireFixtureJob())},
		{"job-minimal", wireJob(&jobspec.Job{ID: "b", Type: "batch", Groups: []*jobspec.Group{{Name: "g", Tasks: []*jobspec.Task{{Name: "t", Driver: "exec"}}}}})},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "wire", tc.golden+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(tc.got)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got, want) {
				t.Errorf("JSON differs from testdata/wire/%s.json:\ngot  %s\nwant %s", tc.golden, got, compact(t, want))
			}
			back := reflect.New(reflect.TypeOf(tc.got))
			if err := json.Unmarshal(want, back.Interface()); err != nil {
				t.Fatalf("decode the golden into %T: %v", tc.got, err)
			}
			again, err := json.Marshal(back.Elem().Interface())
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, again, want) {
				t.Errorf("decoding and encoding again changes it:\ngot  %s\nwant %s", again, compact(t, want))
			}
		})
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// The wire values are copies: changing a record after converting it does
// not change what was converted (the agent keeps jobs and gc reports).
func TestWireCopies(t *testing.T) {
	al := wireFixtureAlloc()
	w := wireAlloc(al)
	al.Network.IPv4[0] = "changed"
	al.Holders[0] = "changed"
	al.Tasks[0].Handle.PID = 1
	job := wireFixtureJob()
	wj := wireJob(job)
	job.Meta["k"] = "changed"
	job.Groups[0].Tasks[0].Env["E"] = "changed"
	job.Groups[0].Network.Ports[0].Label = "changed"
	if w.Network.IPv4[0] != "10.199.110.5" || w.Holders[0] != "pid 9 (sh) fd 3" || w.Tasks[0].Handle.PID != 42 {
		t.Errorf("allocation wire value aliases the record: %+v", w)
	}
	if wj.Meta["k"] != "v" || wj.Groups[0].Tasks[0].Env["E"] != "1" || wj.Groups[0].Network.Ports[0].Label != "http" {
		t.Errorf("job wire value aliases the spec: %+v", wj)
	}
}

// Every step name the runner records has a field in api.Timings; the
// agent-side names and the API's are pinned to each other here.
func TestWireTimings(t *testing.T) {
	cases := []struct {
		step string
		get  func(*api.Timings) float64
	}{
		{"netns", func(t *api.Timings) float64 { return t.Netns }},
		{"add", func(t *api.Timings) float64 { return t.Add }},
		{"berth", func(t *api.Timings) float64 { return t.Berth }},
		{"task_start", func(t *api.Timings) float64 { return t.TaskStart }},
		{"task", func(t *api.Timings) float64 { return t.Task }},
		{"driver_cleanup", func(t *api.Timings) float64 { return t.DriverCleanup }},
		{"del", func(t *api.Timings) float64 { return t.Del }},
		{"remove", func(t *api.Timings) float64 { return t.Remove }},
		{"exit_to_netns_gone", func(t *api.Timings) float64 { return t.ExitToNetnsGone }},
		{"total", func(t *api.Timings) float64 { return t.Total }},
	}
	for _, tc := range cases {
		t.Run(tc.step, func(t *testing.T) {
			w := wireTimings(map[string]float64{tc.step: 2.5})
			if got := tc.get(w); got != 2.5 {
				t.Errorf("step %s: field is %v, want 2.5", tc.step, got)
			}
			steps := w.Steps()
			if len(steps) != 1 || steps[0] != (api.Step{Name: tc.step, MS: 2.5}) {
				t.Errorf("Steps() = %+v, want only %s", steps, tc.step)
			}
		})
	}
	if w := wireTimings(map[string]float64{}); w != nil {
		t.Errorf("no timings: %+v, want nil (the field is omitted)", w)
	}
}

// The values of enumerated wire fields are the internal packages' strings:
// if one of them changes, the API changes with it, and this says so.
func TestWireEnumerations(t *testing.T) {
	cases := []struct{ internal, wire string }{
		{string(store.AllocPending), api.AllocPending},
		{string(store.AllocRunning), api.AllocRunning},
		{string(store.AllocComplete), api.AllocComplete},
		{string(store.AllocFailed), api.AllocFailed},
		{string(store.AllocLost), api.AllocLost},
		{string(netns.HolderFD), api.HolderFD},
		{string(netns.HolderMount), api.HolderMount},
		{string(netns.HolderMember), api.HolderMember},
		{gc.KindAllocOwner, api.GCAllocOwner},
		{gc.KindAttachment, api.GCAttachment},
		{gc.KindNetns, api.GCNetns},
		{gc.KindCNICache, api.GCCNICache},
		{gc.KindCNIGC, api.GCCNIGC},
		{gc.KindLease, api.GCLease},
		{gc.KindIptables, api.GCIptables},
		{gc.KindBridge, api.GCBridge},
		{gc.KindService, api.GCService},
		{store.CheckPassing, api.CheckPassing},
		{store.CheckWarning, api.CheckWarning},
		{store.CheckCritical, api.CheckCritical},
		{store.CheckPending, api.CheckPending},
		{string(store.PhaseIntent), "intent"},
		{string(store.PhaseReady), "ready"},
		{string(store.PhaseTearingDown), "tearing-down"},
	}
	for _, tc := range cases {
		if tc.internal != tc.wire {
			t.Errorf("internal value %q is %q on the wire", tc.internal, tc.wire)
		}
	}
	// A holder prints as netns prints it, in logs and in the CLI.
	h := netns.Holder{PID: 9, Comm: "sh", Kind: netns.HolderMount, Detail: "/x"}
	if got := WireNamespaces([]attach.NetEntry{{Holders: []netns.Holder{h}}})[0].Holders[0].String(); got != h.String() {
		t.Errorf("holder prints %q on the wire, %q in netns", got, h.String())
	}
}
