package ui

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/berth/berth/api"
)

// fixture is a Source over fixed data: an agent with a service, a
// periodic and a dead job, allocations in every status, namespaces with
// holders, a pending teardown, and an hour of history.
type fixture struct {
	self   api.AgentSelf
	jobs   []api.JobStatus
	allocs []api.Allocation // newest first
	nss    []api.NetnsEntry
	logs   map[string]string // "<alloc>/<task>.<stream>"
	err    error             // returned by every method when set
}

var _ Source = (*fixture)(nil)

// fixtureNow is the fixtures' clock: a fixed instant, so pages and
// history are the same on every run.
var fixtureNow = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func newFixture() *fixture {
	now := fixtureNow
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	next := now.Add(34 * time.Second)
	finished := ago(50 * time.Minute)
	f := &fixture{logs: map[string]string{}}
	timings := func(netns, add, task, del, remove float64) *api.Timings {
		return &api.Timings{Netns: netns, Add: add, Berth: 3.1, TaskStart: 12, Task: task, DriverCleanup: 4.2, Del: del, Remove: remove,
			ExitToNetnsGone: del + remove + 5, Total: netns + add + 3.1 + 12 + task + 4.2 + del + remove}
	}
	network := func(ip string, ports ...api.PortMapping) *api.NetworkStatus {
		return &api.NetworkStatus{Mode: "cni/private", Network: "private", NetnsPath: "/run/netns/" + ip, Interface: "eth0",
			IPv4: []string{ip}, Gateway: []string{"10.199.165.1"}, DNS: &api.DNS{Servers: []string{"10.199.165.1"}}, Ports: ports}
	}
	id := func(n int) string { return fmt.Sprintf("%08x-1f2e-4d3c-8b7a-%012x", 0x3fa85f64+n, n) }
	web := api.Allocation{
		ID: id(1), Namespace: "default", JobID: "web", Group: "frontend", Status: api.AllocRunning,
		Tasks: []api.TaskState{{Name: "server", Driver: "raw_exec", State: "running", StartedAt: ago(20 * time.Minute),
			Handle: &api.TaskHandle{Driver: "raw_exec", PID: 4242, PIDStartTime: 99}}},
		Network: network("10.199.165.7", api.PortMapping{Label: "http", HostIP: "127.0.0.1", HostPort: 28080, To: 8080}, api.PortMapping{Label: "metrics", HostPort: 29100, To: 9100}),
		Events: []api.Event{
			{Time: ago(20*time.Minute + 2*time.Second), Type: "Received", Message: "Task received by client"},
			{Time: ago(20*time.Minute + time.Second), Type: "Network", Message: "netns /run/netns/x, eth0 10.199.165.7/24 (CNI ADD 88 ms)"},
			{Time: ago(20 * time.Minute), Type: "Started", Message: "Task started by client"},
		},
		OwnerPID: 1234, CreatedAt: ago(20 * time.Minute), ModifiedAt: ago(20 * time.Minute),
		Timings: &api.Timings{Netns: 1.9, Add: 88.4, Berth: 2.2, TaskStart: 3.5},
		Services: []api.ServiceRegistration{
			{ID: "_nomad-task-" + id(1) + "-server-web-http", ServiceName: "web", JobID: "web", AllocID: id(1), Group: "frontend", Task: "server",
				Address: "10.199.165.7", Port: 8080, Tags: []string{"http"}, Health: "passing", Checks: []api.CheckStatus{
					{Name: "alive", Type: "http", Status: "passing", Output: "HTTP GET http://10.199.165.7:8080/health: 200 OK", Time: ago(3 * time.Second)},
				}},
			{ID: "_nomad-group-" + id(1) + "-frontend-metrics-metrics", ServiceName: "web-metrics", JobID: "web", AllocID: id(1), Group: "frontend",
				Address: "10.199.165.7", Port: 9100, Health: "critical", Checks: []api.CheckStatus{
					{Name: "scrape", Type: "tcp", Status: "critical", Output: "dial tcp 10.199.165.7:9100: connect: connection refused", Time: ago(2 * time.Second)},
				}},
		},
	}
	f.allocs = append(f.allocs, web)
	for i := 0; i < 6; i++ {
		st, desc, exit := api.AllocComplete, "All tasks have completed", 0
		if i == 2 {
			st, desc, exit = api.AllocFailed, "Failed tasks: tick (exit code 3)", 3
		}
		a := api.Allocation{
			ID: id(10 + i), Namespace: "default", JobID: "tick", Group: "tick", Status: st, StatusDesc: desc,
			Tasks: []api.TaskState{{Name: "tick", Driver: "raw_exec", State: "dead", Failed: exit != 0, ExitCode: exit,
				StartedAt: ago(time.Duration(i)*time.Minute + 3*time.Second), FinishedAt: ago(time.Duration(i)*time.Minute + 2*time.Second)}},
			Network: network(fmt.Sprintf("10.199.165.%d", 20+i), api.PortMapping{Label: "probe", HostPort: 30000 + i}),
			Events: []api.Event{
				{Time: ago(time.Duration(i)*time.Minute + 4*time.Second), Type: "Received", Message: "Task received by client"},
				{Time: ago(time.Duration(i)*time.Minute + 2*time.Second), Type: "Terminated", Message: fmt.Sprintf("Exit Code: %d", exit)},
				{Time: ago(time.Duration(i) * time.Minute), Type: "Network removed", Message: "CNI DEL 81 ms, netns removed"},
			},
			CreatedAt: ago(time.Duration(i)*time.Minute + 4*time.Second), ModifiedAt: ago(time.Duration(i) * time.Minute),
			Timings: timings(1.7+float64(i)/10, 85+float64(i), 1010, 79+float64(i), 2.4),
		}
		f.allocs = append(f.allocs, a)
		f.logs[a.ID+"/tick.stdout"] = fmt.Sprintf("tick %d at %s\nhello from tick\n", i, a.CreatedAt.Format(time.RFC3339))
	}
	lost := api.Allocation{
		ID: id(30), Namespace: "default", JobID: "broken", Group: "g", Status: api.AllocLost,
		StatusDesc: "its berth (pid 777) died; reclaimed by gc",
		Tasks:      []api.TaskState{{Name: "main", Driver: "podman", State: "dead", Failed: true, ExitCode: 137, Signal: 9}},
		CreatedAt:  ago(55 * time.Minute), ModifiedAt: ago(50 * time.Minute), TeardownRetries: 2,
		Holders: []string{"pid 5150 (podman) fd 7"},
	}
	f.allocs = append(f.allocs, lost)
	f.logs[web.ID+"/server.stdout"] = "listening on :8080\n"
	f.logs[web.ID+"/server.stderr"] = "GET / 200\n"

	stub := func(a api.Allocation) api.AllocStub {
		return api.AllocStub{ID: a.ID, JobID: a.JobID, Group: a.Group, Status: a.Status, CreatedAt: a.CreatedAt, ModifiedAt: a.ModifiedAt}
	}
	byJob := func(job string) ([]api.AllocStub, map[string]int) {
		var out []api.AllocStub
		by := map[string]int{}
		for _, a := range f.allocs {
			if a.JobID == job {
				out = append(out, stub(a))
				by[a.Status]++
			}
		}
		return out, by
	}
	group := func(name, mode string, ports []api.Port, tasks ...*api.Task) *api.Group {
		return &api.Group{Name: name, Count: 1, Network: api.Network{Mode: mode, Ports: ports}, Tasks: tasks,
			Restart: api.RestartPolicy{Attempts: 2, Interval: api.Duration(30 * time.Minute), Delay: api.Duration(15 * time.Second), Mode: "fail"}}
	}
	for _, j := range []struct {
		id, typ, status string
		periodic        []string
		next, finished  *time.Time
		errText         string
		group           *api.Group
		summary         *api.JobSummary
	}{
		{id: "web", typ: "service", status: api.JobRunning,
			group: group("frontend", "cni/private", []api.Port{{Label: "http", To: 8080}, {Label: "metrics", Static: 29100, To: 9100}}, &api.Task{Name: "server", Driver: "raw_exec"})},
		{id: "tick", typ: "batch", status: api.JobRunning, periodic: []string{"*/20 * * * * * *"}, next: &next,
			group: group("tick", "cni/private", []api.Port{{Label: "probe"}}, &api.Task{Name: "tick", Driver: "raw_exec"})},
		{id: "broken", typ: "batch", status: api.JobDead, finished: &finished,
			errText: "could not resume after an agent restart: network \"gone\" not found in /etc/cni/net.d",
			group:   group("g", "bridge", nil, &api.Task{Name: "main", Driver: "podman"}),
			summary: &api.JobSummary{Job: "broken", Launches: 1, ByStatus: map[string]int{"lost": 1}, SetupP50: 90, SetupP99: 120,
				TeardownP50: 80, TeardownP99: 95, ExitToGoneP50: 99, TeardownRetries: 2, Holders: []string{"pid 5150 (podman) fd 7"},
				Leaks: []string{"netns /run/netns/x still mounted"}, Duration: 12.5, Failed: []string{"3fa85f82: lost"}}},
	} {
		allocs, by := byJob(j.id)
		st := api.JobStatus{
			JobStub: api.JobStub{ID: j.id, Type: j.typ, Namespace: "default", Status: j.status, Periodic: j.periodic,
				SubmittedAt: ago(time.Hour), FinishedAt: j.finished, NextLaunch: j.next, Allocations: by, Error: j.errText},
			Job:         &api.Job{ID: j.id, Type: j.typ, Namespace: "default", Groups: []*api.Group{j.group}},
			Summary:     j.summary,
			Allocations: allocs,
		}
		f.jobs = append(f.jobs, st)
	}

	f.nss = []api.NetnsEntry{
		{Name: web.ID, Path: "/run/netns/" + web.ID, Pinned: true, Berth: true, Network: "private", Phase: "ready",
			IPv4: []string{"10.199.165.7"}, AllocID: web.ID, Holders: []api.Holder{
				{PID: 4242, Comm: "server", Cmdline: "/usr/bin/server --port 8080", Kind: api.HolderMember},
			}},
		{Name: id(40), Path: "/run/netns/" + id(40), Pinned: true, Berth: true, Network: "private", Phase: "tearing-down",
			AllocID: id(40), LastError: "CNI DEL on private: plugin firewall: running [/usr/sbin/iptables -t filter -D CNI-FORWARD]: exit status 4: Another app is currently holding the xtables lock",
			Holders: []api.Holder{{PID: 5150, Comm: "podman", Kind: api.HolderFD, Detail: "fd 7"}}},
		{Name: "stray", Path: "/run/netns/stray", Pinned: true, Holders: []api.Holder{}},
	}
	// The host's other runtimes' namespaces, listed among berth's by the
	// netns dir (as on a host with 47 of them).
	var others []api.NetnsEntry
	for i := 0; i < 5; i++ {
		n := fmt.Sprintf("cni-%08x-0000-0000-0000-%012x", i, i)
		others = append(others, api.NetnsEntry{Name: n, Path: "/run/netns/" + n, Pinned: true, Holders: []api.Holder{}})
	}
	f.nss = append(append(f.nss[:1:1], others...), f.nss[1:]...)

	by := map[string]int{}
	for _, a := range f.allocs {
		by[a.Status]++
	}
	f.self = api.AgentSelf{
		Version: "0.2.0 (abc1234)", PID: 1234, StartedAt: ago(3*time.Hour + 25*time.Minute),
		Jobs: map[string]int{api.JobRunning: 2, api.JobDead: 1}, Allocations: by,
		Config: api.ConfigSummary{Socket: "/run/berth/berth.sock", TCPAddress: "127.0.0.1:4646", TokenSet: true},
	}
	return f
}

// fixtureHistory is an hour of a periodic job: a few allocations a
// minute, slower at minute 40, failures now and then, and gc runs.
func fixtureHistory() *History {
	h := NewHistory()
	for m := 59; m >= 0; m-- {
		if m%17 == 5 {
			continue // a quiet minute
		}
		base := fixtureNow.Add(-time.Duration(m) * time.Minute).Truncate(time.Minute)
		n := 3 + (m*7)%5
		for i := 0; i < n; i++ {
			st := api.AllocComplete
			switch {
			case (m+i)%23 == 0:
				st = api.AllocFailed
			case m == 50 && i == 0:
				st = api.AllocLost
			}
			slow := 1.0
			if m >= 18 && m <= 22 {
				slow = 2.5
			}
			jitter := 1 + 0.3*math.Sin(float64(m*n+i))
			add := 85 * slow * jitter
			del := 78 * slow * (2 - jitter)
			h.RecordAlloc(base.Add(time.Duration(i)*7*time.Second), &api.Allocation{
				Status:  st,
				Timings: &api.Timings{Netns: 1.8, Add: add, Del: del, Remove: 2.5},
			})
		}
	}
	h.RecordGC(fixtureNow.Add(-3*time.Hour), "start", &api.GCReport{DurationMS: 35}, nil)
	h.RecordGC(fixtureNow.Add(-10*time.Minute), "periodic", &api.GCReport{
		Found:      []api.GCItem{{Kind: api.GCNetns, ID: "stray", Reason: "no record"}},
		Reclaimed:  []api.GCItem{{Kind: api.GCLease, ID: "10.199.165.9", Network: "private", Reason: "no owner"}},
		Errors:     []string{"netns " + strings.Repeat("x", 8) + ": busy (pid 5150 (podman) fd 7)"},
		DurationMS: 412,
	}, nil)
	h.RecordGC(fixtureNow.Add(-5*time.Minute), "api", &api.GCReport{DryRun: true, DurationMS: 20}, nil)
	return h
}

func (f *fixture) Self(context.Context) (*api.AgentSelf, error) {
	if f.err != nil {
		return nil, f.err
	}
	s := f.self
	return &s, nil
}

func (f *fixture) Jobs(context.Context) ([]api.JobStub, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []api.JobStub
	for _, j := range f.jobs {
		out = append(out, j.JobStub)
	}
	return out, nil
}

func (f *fixture) Job(_ context.Context, id string) (*api.JobStatus, error) {
	if f.err != nil {
		return nil, f.err
	}
	for _, j := range f.jobs {
		if j.ID == id {
			return &j, nil
		}
	}
	return nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
}

func (f *fixture) Allocations(_ context.Context, job string) ([]api.Allocation, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []api.Allocation
	for _, a := range f.allocs {
		if job == "" || a.JobID == job {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fixture) Allocation(_ context.Context, id string) (*api.Allocation, error) {
	if f.err != nil {
		return nil, f.err
	}
	for _, a := range f.allocs {
		if strings.HasPrefix(a.ID, id) {
			return &a, nil
		}
	}
	return nil, fmt.Errorf("allocation %s: %w", id, ErrNotFound)
}

func (f *fixture) Namespaces(context.Context) ([]api.NetnsEntry, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.nss, nil
}

func (f *fixture) LogTail(_ context.Context, alloc, task, stream string, max int64) ([]byte, error) {
	s, ok := f.logs[alloc+"/"+task+"."+stream]
	if !ok {
		return nil, fmt.Errorf("no %s log: %w", stream, ErrNotFound)
	}
	if int64(len(s)) > max {
		s = s[int64(len(s))-max:]
	}
	return []byte(s), nil
}
