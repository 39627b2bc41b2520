package nomadapi

//lint:file-ignore SA1019 the test checks what Nomad 1.6's CLI reads: Resources and TaskResources

import (
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
)

// allocFull sets every pointer Nomad's CLI dereferences, with or without
// the job (a purged job's allocation), and maps ports and task events.
func TestAllocFull(t *testing.T) {
	now := time.Now()
	al := &api.Allocation{
		ID: "11111111-2222-3333-4444-555555555555", JobID: "web", Group: "g", Index: 2, Status: api.AllocRunning,
		CreatedAt: now, ModifiedAt: now,
		Tasks: []api.TaskState{{Name: "t", State: "dead", ExitCode: 3}},
		Events: []api.Event{
			{Time: now, Type: "Received"},
			{Time: now, Type: "Terminated", Task: "t", Message: "Exit Code: 3"},
		},
		Network: &api.NetworkStatus{Mode: "cni/private", Network: "private", IPv4: []string{"10.0.0.2"},
			Ports: []api.PortMapping{{Label: "http", HostIP: "127.0.0.1", HostPort: 31000, To: 8080}, {Label: "admin", HostIP: "127.0.0.1", HostPort: 9000}}},
	}
	job := &api.Job{ID: "web", Type: "service", Groups: []*api.Group{{Name: "g", Count: 3,
		Network: api.Network{Ports: []api.Port{{Label: "http"}, {Label: "admin", Static: 9000}}},
		Tasks:   []*api.Task{{Name: "t", Driver: "raw_exec", Resources: api.Resources{CPU: 100, MemoryMB: 64}}}}}}
	for _, tc := range []struct {
		name string
		job  *api.Job
	}{{"with its job", job}, {"without its job", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			out := allocFull(AllocInfo{Alloc: al, Job: tc.job, NodeID: "n", Datacenter: "dc1"})
			if out.Job == nil || out.Job.Version == nil || out.Resources == nil || out.Resources.DiskMB == nil || out.Metrics == nil || out.AllocatedResources == nil {
				t.Fatalf("a nil the CLI dereferences: %+v", out)
			}
			if tg := out.Job.LookupTaskGroup("g"); tg == nil || len(tg.Tasks) != 1 || tg.Tasks[0].Name != "t" {
				t.Fatalf("task group: %+v", tg)
			}
			if out.Name != "web.g[2]" {
				t.Errorf("name %q", out.Name)
			}
			ts := out.TaskStates["t"]
			if ts == nil || len(ts.Events) != 1 || ts.Events[0].Type != "Terminated" || ts.Events[0].Details["exit_code"] != "3" {
				t.Fatalf("task state: %+v", ts)
			}
			nr := out.AllocatedResources.Shared.Networks
			if len(nr) != 1 || nr[0].IP != "127.0.0.1" || len(nr[0].DynamicPorts)+len(nr[0].ReservedPorts) != 2 {
				t.Fatalf("network: %+v", nr)
			}
			if tc.job != nil && (len(nr[0].ReservedPorts) != 1 || nr[0].ReservedPorts[0].Label != "admin" || *out.TaskResources["t"].CPU != 100) {
				t.Errorf("a static port is reserved, resources are the task's: %+v %+v", nr[0], out.TaskResources["t"])
			}
		})
	}
}

func TestCheckVarPath(t *testing.T) {
	for _, tc := range []struct{ path, err string }{
		{"nomad/jobs/web", ""},
		{"nomad/jobs", ""},
		{"app/db/creds", ""},
		{"nomad/other", "reserved"},
		{"nomad", "reserved"},
		{"a//b", "empty segment"},
		{"a/../b", "invalid path"},
		{strings.Repeat("a", 129), "invalid path"},
		{"sp ace", "invalid path"},
	} {
		err := checkVarPath(tc.path)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, want %q", tc.path, err, tc.err)
		}
	}
}

func TestTopicFilter(t *testing.T) {
	ev := streamEvent{Topic: "Allocation", Key: "a1", FilterKeys: []string{"job1"}}
	for _, tc := range []struct {
		topics []string
		match  bool
		err    bool
	}{
		{nil, true, false},
		{[]string{"*"}, true, false},
		{[]string{"Allocation"}, true, false},
		{[]string{"Allocation:a1"}, true, false},
		{[]string{"Allocation:job1"}, true, false},
		{[]string{"Allocation:other"}, false, false},
		{[]string{"Job:*"}, false, false},
		{[]string{"Node"}, false, false},
		{[]string{"Bogus"}, false, true},
	} {
		f, err := parseTopics(tc.topics)
		if (err != nil) != tc.err {
			t.Errorf("%v: %v", tc.topics, err)
			continue
		}
		if err == nil && f.match(ev) != tc.match {
			t.Errorf("%v: match %v, want %v", tc.topics, !tc.match, tc.match)
		}
	}
}
