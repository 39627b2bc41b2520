package nomadapi_test

import (
	"context"
	"testing"
	"time"

	napi "github.com/hashicorp/nomad/api"
)

// TestNomadAPIEvents: Nomad's Go API client reads berth's event stream:
// an Allocation event of a job submitted after it subscribed (its
// payload Nomad's Allocation, running), a Job event through a keyed
// topic filter, and Service registrations; nothing of a topic it did not
// ask for.
func TestNomadAPIEvents(t *testing.T) {
	e := startNomadEnv(t, "10.199.156.0/24", "10.199.157.0/24")
	c, err := napi.NewClient(&napi.Config{Address: e.addr, SecretID: testToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	allocs, err := c.EventStream().Stream(ctx, map[napi.Topic][]string{napi.TopicAllocation: {"*"}}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.EventStream().Stream(ctx, map[napi.Topic][]string{napi.TopicJob: {"napi-ev"}, napi.TopicService: {"*"}}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.must(t, 0, nil, "var", "put", "nomad/jobs/napi-ev", "user=ev")
	e.submit(t, "napi-ev", varJob("napi-ev", "nomad/jobs/napi-ev"), false)

	running := false
	for !running {
		select {
		case <-ctx.Done():
			t.Fatal("no Allocation event of a running allocation")
		case evs := <-allocs:
			if evs.Err != nil {
				t.Fatalf("stream: %v", evs.Err)
			}
			for _, ev := range evs.Events {
				if ev.Topic != napi.TopicAllocation {
					t.Errorf("event of topic %s on an Allocation stream", ev.Topic)
				}
				a, err := ev.Allocation()
				if err != nil || a == nil {
					t.Fatalf("allocation payload: %v", err)
				}
				t.Logf("event %s %s %s: %s", ev.Topic, ev.Type, ev.Key, a.ClientStatus)
				if a.JobID == "napi-ev" && a.ClientStatus == "running" && ev.Key == a.ID && ev.Index > 0 {
					running = true
				}
			}
		}
	}
	var sawJob, sawService bool
	for !sawJob || !sawService {
		select {
		case <-ctx.Done():
			t.Fatalf("job event %v, service event %v: want both", sawJob, sawService)
		case evs := <-jobs:
			if evs.Err != nil {
				t.Fatalf("stream: %v", evs.Err)
			}
			for _, ev := range evs.Events {
				t.Logf("event %s %s %s", ev.Topic, ev.Type, ev.Key)
				switch ev.Topic {
				case napi.TopicJob:
					j, err := ev.Job()
					if err != nil || j == nil || *j.ID != "napi-ev" {
						t.Fatalf("job payload: %+v, %v", j, err)
					}
					sawJob = true
				case napi.TopicService:
					s, err := ev.Service()
					if err != nil || s == nil || s.ServiceName != "napi-ev-svc" {
						t.Fatalf("service payload: %+v, %v", s, err)
					}
					sawService = true
				default:
					t.Errorf("event of topic %s on a Job/Service stream", ev.Topic)
				}
			}
		}
	}
}
