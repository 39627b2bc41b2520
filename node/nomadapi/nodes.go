package nomadapi

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/berth/berth/api"
	napi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/api/contexts"
)

// NodeInfo is this node as Nomad's node routes describe it: berth is one
// node, always ready and eligible.
type NodeInfo struct {
	ID         string // a UUID
	Name       string
	Datacenter string
	HTTPAddr   string // the Nomad API's listener
	Attrs      map[string]string
	Drivers    []string // the task drivers it runs
	CPUMHz     int      // total compute, as Nomad's cpu.totalcompute
	MemoryMB   int
	// MemAvailableMB is the memory available now (host stats).
	MemAvailableMB int
	StartedAt      time.Time
}

// nodeOf is this node, for the node ID and name of allocations; empty
// when it cannot be read (the allocation is still shown).
func (s *Server) nodeOf(ctx context.Context) NodeInfo {
	n, _ := s.b.NodeInfo(ctx)
	return n
}

func nodeResources(n NodeInfo) *napi.NodeResources {
	return &napi.NodeResources{
		Cpu:    napi.NodeCpuResources{CpuShares: int64(n.CPUMHz), TotalCpuCores: uint16(max(atoiOr(n.Attrs["attr.cpu.numcores"]), 0))},
		Memory: napi.NodeMemoryResources{MemoryMB: int64(n.MemoryMB)},
	}
}

func atoiOr(s string) int {
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		v = v*10 + int(c-'0')
	}
	return v
}

func nodeDrivers(n NodeInfo) map[string]*napi.DriverInfo {
	out := map[string]*napi.DriverInfo{}
	for _, d := range n.Drivers {
		out[d] = &napi.DriverInfo{Detected: true, Healthy: true, HealthDescription: "Healthy", UpdateTime: n.StartedAt,
			Attributes: map[string]string{"driver." + d: "1"}}
	}
	return out
}

func nodeAttributes(n NodeInfo) map[string]string {
	out := map[string]string{}
	for k, v := range n.Attrs {
		// Nomad's node attributes drop the "attr." of constraints.
		if rest, ok := strings.CutPrefix(k, "attr."); ok {
			out[rest] = v
		}
	}
	for _, d := range n.Drivers {
		out["driver."+d] = "1"
	}
	out["nomad.version"] = NomadVersion
	if n.CPUMHz > 0 {
		out["cpu.totalcompute"] = fmt.Sprint(n.CPUMHz)
	}
	if n.MemoryMB > 0 {
		out["memory.totalbytes"] = fmt.Sprint(int64(n.MemoryMB) << 20)
	}
	return out
}

func nodeListStub(n NodeInfo) *napi.NodeListStub {
	return &napi.NodeListStub{
		Address: n.Attrs["attr.unique.network.ip-address"], ID: n.ID, Datacenter: n.Datacenter, Name: n.Name,
		NodePool: "default", Version: NomadVersion, SchedulingEligibility: "eligible", Status: "ready",
		Drivers: nodeDrivers(n), NodeResources: nodeResources(n), Attributes: nodeAttributes(n),
		CreateIndex: index(n.StartedAt), ModifyIndex: index(n.StartedAt),
	}
}

func (s *Server) handleNodeList(w http.ResponseWriter, r *http.Request) {
	n, err := s.b.NodeInfo(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []*napi.NodeListStub{}
	if strings.HasPrefix(n.ID, r.URL.Query().Get("prefix")) {
		out = append(out, nodeListStub(n))
	}
	writeJSON(w, index(n.StartedAt), out)
}

// thisNode answers 404 unless id is this node's ID.
func (s *Server) thisNode(w http.ResponseWriter, r *http.Request) (NodeInfo, bool) {
	n, err := s.b.NodeInfo(r.Context())
	if err != nil {
		writeErr(w, err)
		return n, false
	}
	if id := r.PathValue("id"); id != n.ID {
		writeError(w, http.StatusNotFound, fmt.Errorf("node not found: %s (berth is one node: %s)", id, n.ID))
		return n, false
	}
	return n, true
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request) {
	n, ok := s.thisNode(w, r)
	if !ok {
		return
	}
	res := &napi.Resources{CPU: ptr(n.CPUMHz), MemoryMB: ptr(n.MemoryMB), DiskMB: ptr(0)}
	writeJSON(w, index(n.StartedAt), napi.Node{
		Resources: res, Reserved: &napi.Resources{CPU: ptr(0), MemoryMB: ptr(0), DiskMB: ptr(0)},
		ID: n.ID, Datacenter: n.Datacenter, Name: n.Name, HTTPAddr: n.HTTPAddr, Attributes: nodeAttributes(n),
		NodeResources: nodeResources(n), ReservedResources: &napi.NodeReservedResources{},
		Meta: map[string]string{}, NodePool: "default", SchedulingEligibility: "eligible", Status: "ready",
		StatusUpdatedAt: n.StartedAt.Unix(), Drivers: nodeDrivers(n),
		Events:      []*napi.NodeEvent{{Message: "Node registered", Subsystem: "Cluster", Timestamp: n.StartedAt}},
		CreateIndex: index(n.StartedAt), ModifyIndex: index(n.StartedAt),
	})
}

// handleHostStats is /v1/client/stats, the host's use `node status`
// prints.
func (s *Server) handleHostStats(w http.ResponseWriter, r *http.Request) {
	n, err := s.b.NodeInfo(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	total, avail := uint64(n.MemoryMB)<<20, uint64(n.MemAvailableMB)<<20
	writeJSON(w, index(time.Now()), napi.HostStats{
		Memory: &napi.HostMemoryStats{Total: total, Available: avail, Used: total - min(avail, total), Free: avail},
		Uptime: uint64(time.Since(n.StartedAt).Seconds()),
	})
}

func (s *Server) handleNodeAllocs(w http.ResponseWriter, r *http.Request) {
	n, ok := s.thisNode(w, r)
	if !ok {
		return
	}
	allocs, err := s.b.NodeAllocations(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []*napi.Allocation{}
	var idx uint64
	for _, a := range allocs {
		out = append(out, s.nodeAlloc(a, n))
		idx = max(idx, index(a.ModifiedAt))
	}
	writeJSON(w, idx, out)
}

// nodeAlloc is an allocation as the node's list of them shows it (full
// allocations in Nomad's API; the fields `node status` prints).
func (s *Server) nodeAlloc(a *api.Allocation, n NodeInfo) *napi.Allocation {
	st := s.stubOf(a, nil, "", n, 0)
	return &napi.Allocation{
		ID: st.ID, Namespace: st.Namespace, EvalID: st.EvalID, Name: st.Name, NodeID: st.NodeID, NodeName: st.NodeName,
		JobID: st.JobID, TaskGroup: st.TaskGroup, DesiredStatus: st.DesiredStatus, ClientStatus: st.ClientStatus,
		ClientDescription: st.ClientDescription, TaskStates: st.TaskStates, NextAllocation: st.NextAllocation,
		PreviousAllocation: a.PreviousAllocation,
		Job:                &napi.Job{ID: ptr(a.JobID), Name: ptr(a.JobID), Version: ptr(uint64(0))},
		// berth does not reserve resources for allocations: none are
		// counted as allocated. The 1.6 CLI's node status reads this
		// field (nil: it crashes).
		//lint:ignore SA1019 the nomad 1.6 CLI reads it
		Resources:   &napi.Resources{CPU: ptr(0), MemoryMB: ptr(0), DiskMB: ptr(0)},
		CreateIndex: st.CreateIndex, ModifyIndex: st.ModifyIndex, AllocModifyIndex: st.ModifyIndex,
		CreateTime: st.CreateTime, ModifyTime: st.ModifyTime,
	}
}

// handleSearch is Nomad's prefix search (`nomad status <prefix>`): jobs,
// allocations, evaluations, deployments and this node.
func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	var req napi.SearchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	ctx := r.Context()
	resp := napi.SearchResponse{Matches: map[contexts.Context][]string{}, Truncations: map[contexts.Context]bool{}}
	want := func(c contexts.Context) bool {
		return req.Context == contexts.All || req.Context == "" || req.Context == c
	}
	add := func(c contexts.Context, id string) {
		if strings.HasPrefix(id, req.Prefix) {
			if len(resp.Matches[c]) >= 20 {
				resp.Truncations[c] = true
				return
			}
			resp.Matches[c] = append(resp.Matches[c], id)
		}
	}
	switch req.Context {
	case contexts.All, "", contexts.Jobs, contexts.Allocs, contexts.Evals, contexts.Deployments, contexts.Nodes:
	default:
		writeError(w, http.StatusBadRequest, fmt.Errorf("search context %q: berth searches jobs, allocs, evals, deployment and nodes", req.Context))
		return
	}
	if want(contexts.Jobs) {
		stubs, err := s.b.JobList(ctx)
		if err != nil {
			writeErr(w, err)
			return
		}
		for _, st := range stubs {
			add(contexts.Jobs, st.ID)
		}
	}
	if want(contexts.Allocs) || want(contexts.Nodes) {
		if want(contexts.Allocs) {
			allocs, err := s.b.NodeAllocations(ctx)
			if err != nil {
				writeErr(w, err)
				return
			}
			for _, a := range allocs {
				add(contexts.Allocs, a.ID)
			}
		}
		if want(contexts.Nodes) {
			add(contexts.Nodes, s.nodeOf(ctx).ID)
		}
	}
	if want(contexts.Evals) {
		evs, _ := s.state.eval(req.Prefix)
		for _, e := range evs {
			add(contexts.Evals, e.id)
		}
	}
	if want(contexts.Deployments) {
		for _, d := range s.state.deploymentByPrefix(req.Prefix) {
			add(contexts.Deployments, d.id)
		}
	}
	for c := range resp.Matches {
		sort.Strings(resp.Matches[c])
	}
	writeJSON(w, index(time.Now()), resp)
}
