package nomadapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	napi "github.com/hashicorp/nomad/api"

	"github.com/berth/berth/api"
)

// EventsBackend is what the event stream watches: berth keeps no event
// log, so /v1/event/stream compares snapshots of the node's allocations,
// jobs and services and sends each change as Nomad's event.
type EventsBackend interface {
	EventSnapshot(ctx context.Context) (EventSnapshot, error)
}

// EventSnapshot is the node's state that events are of.
type EventSnapshot struct {
	Allocs   []AllocInfo
	Jobs     []api.JobStub
	Services []api.ServiceRegistration
}

// eventPoll is how often the stream looks for changes; heartbeatEvery
// (logs.go) how often an idle stream sends Nomad's "{}".
const eventPoll = 500 * time.Millisecond

// eventTopics are Nomad's topics. berth sends Allocation, Job and
// Service; the others are accepted and send nothing (no evaluations,
// deployments, node changes or ACLs on one berth node).
var eventTopics = []string{"Allocation", "Job", "Service", "Evaluation", "Deployment", "Node", "NodeDrain", "NodePool", "ACLToken", "ACLPolicy", "ACLRole", "*"}

// streamEvents and streamEvent are Nomad's wire form of the stream
// (api.Events, api.Event, with the namespace Nomad's server sends).
type streamEvents struct {
	Index  uint64
	Events []streamEvent
}

type streamEvent struct {
	Topic      string
	Type       string
	Key        string
	Namespace  string
	FilterKeys []string
	Index      uint64
	Payload    map[string]any
}

// topicFilter is the ?topic= of a stream: topic -> keys ("*" any).
type topicFilter map[string][]string

func parseTopics(vals []string) (topicFilter, error) {
	f := topicFilter{}
	if len(vals) == 0 {
		f["*"] = []string{"*"}
	}
	for _, v := range vals {
		topic, key, ok := strings.Cut(v, ":")
		if !ok || key == "" {
			key = "*"
		}
		if !slices.Contains(eventTopics, topic) {
			return nil, fmt.Errorf("unknown topic %q: Nomad's are %s", topic, strings.Join(eventTopics[:len(eventTopics)-1], ", "))
		}
		f[topic] = append(f[topic], key)
	}
	return f, nil
}

func (f topicFilter) match(e streamEvent) bool {
	for _, t := range []string{string(e.Topic), "*"} {
		for _, k := range f[t] {
			if k == "*" || k == e.Key || slices.Contains(e.FilterKeys, k) {
				return true
			}
		}
	}
	return false
}

// eventState is what the stream last saw, to tell what changed.
type eventState struct {
	allocs   map[string]uint64 // ID -> modify index
	jobs     map[string]string // ID -> status
	services map[string]uint64 // ID -> modify index
}

func (s *Server) handleEventStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topics, err := parseTopics(q["topic"])
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var since uint64
	if v := q.Get("index"); v != "" {
		if since, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("index %q: use a number", v))
			return
		}
	}
	// berth runs every job in the default namespace: ?namespace= filters
	// nothing out.
	ctx := r.Context()
	snap, err := s.b.EventSnapshot(ctx)
	if err != nil {
		writeErr(w, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()

	// With index 0 the stream starts now; with an index, what changed
	// after it is sent first.
	st := &eventState{allocs: map[string]uint64{}, jobs: map[string]string{}, services: map[string]uint64{}}
	send := func(evs []streamEvent) bool {
		var out []streamEvent
		var index uint64
		for _, e := range evs {
			if topics.match(e) && e.Index > since {
				if e.Namespace == "" {
					e.Namespace = "default"
				}
				out = append(out, e)
				index = max(index, e.Index)
			}
		}
		if len(out) == 0 {
			return true
		}
		b, err := json.Marshal(streamEvents{Index: index, Events: out})
		if err != nil {
			return false
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if evs := st.diff(snap); since > 0 && !send(evs) {
		return
	}
	poll := time.NewTicker(eventPoll)
	defer poll.Stop()
	hb := time.NewTicker(heartbeatEvery)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			if _, err := w.Write([]byte("{}\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-poll.C:
			snap, err := s.b.EventSnapshot(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("event stream: reading the node's state", "err", err)
				}
				continue
			}
			if !send(st.diff(snap)) {
				return
			}
		}
	}
}

// diff returns the events from the last snapshot to snap and remembers
// snap.
func (st *eventState) diff(snap EventSnapshot) []streamEvent {
	var out []streamEvent
	seen := map[string]bool{}
	for _, ai := range snap.Allocs {
		al := ai.Alloc
		idx := allocIndex(al)
		seen[al.ID] = true
		if st.allocs[al.ID] == idx {
			continue
		}
		st.allocs[al.ID] = idx
		out = append(out, streamEvent{
			Topic: "Allocation", Type: "AllocationUpdated", Key: al.ID,
			FilterKeys: []string{al.JobID}, Index: idx, Payload: payload("Allocation", allocFull(ai)),
		})
	}
	for id := range st.allocs {
		if !seen[id] {
			delete(st.allocs, id)
		}
	}
	now := uint64(time.Now().UnixNano())
	jobSeen := map[string]bool{}
	for _, j := range snap.Jobs {
		jobSeen[j.ID] = true
		if st.jobs[j.ID] == j.Status {
			continue
		}
		typ := "JobRegistered"
		if _, known := st.jobs[j.ID]; known {
			typ = "JobUpdated"
		}
		st.jobs[j.ID] = j.Status
		out = append(out, streamEvent{
			Topic: "Job", Type: typ, Key: j.ID, Index: max(uint64(j.SubmittedAt.UnixNano()), now),
			Payload: payload("Job", jobOfStub(j)),
		})
	}
	for id := range st.jobs {
		if !jobSeen[id] {
			delete(st.jobs, id)
			out = append(out, streamEvent{Topic: "Job", Type: "JobDeregistered", Key: id, Index: now,
				Payload: payload("Job", &napi.Job{ID: ptr(id), Name: ptr(id), Status: ptr("dead")})})
		}
	}
	svcSeen := map[string]bool{}
	for _, svc := range snap.Services {
		sr := serviceRegistration(svc)
		svcSeen[svc.ID] = true
		if st.services[svc.ID] == sr.ModifyIndex {
			continue
		}
		st.services[svc.ID] = sr.ModifyIndex
		out = append(out, streamEvent{Topic: "Service", Type: "ServiceRegistration", Key: svc.ServiceName,
			FilterKeys: []string{svc.JobID, svc.AllocID}, Index: sr.ModifyIndex, Payload: payload("Service", sr)})
	}
	for id := range st.services {
		if !svcSeen[id] {
			delete(st.services, id)
			out = append(out, streamEvent{Topic: "Service", Type: "ServiceDeregistration", Key: id, Index: now,
				Payload: payload("Service", &napi.ServiceRegistration{ID: id})})
		}
	}
	slices.SortStableFunc(out, func(a, b streamEvent) int {
		switch {
		case a.Index < b.Index:
			return -1
		case a.Index > b.Index:
			return 1
		}
		return 0
	})
	return out
}

// payload is an event's payload: {name: v} as JSON objects.
func payload(name string, v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{name: nil}
	}
	var m any
	_ = json.Unmarshal(b, &m)
	return map[string]any{name: m}
}

// jobOfStub is the little a Job event says of a job.
func jobOfStub(j api.JobStub) *napi.Job {
	status := "running"
	switch j.Status {
	case api.JobDead:
		status = "dead"
	case api.JobRegistered:
		status = "pending"
	}
	out := &napi.Job{ID: ptr(j.ID), Name: ptr(j.ID), Type: ptr(j.Type), Namespace: ptr(namespace(j.Namespace)), Status: ptr(status)}
	if j.ParentID != "" {
		out.ParentID = ptr(j.ParentID)
	}
	return out
}
