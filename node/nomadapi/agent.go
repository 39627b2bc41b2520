package nomadapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	napi "github.com/hashicorp/nomad/api"
)

// AgentBackend describes the node and its agent.
type AgentBackend interface {
	Self(ctx context.Context) (Self, error)
}

// Self is this node as Nomad's agent routes describe it. berth is one
// node that is its own server and leader.
type Self struct {
	NodeID     string // a UUID (Nomad's CLI takes prefixes of it)
	NodeName   string
	Datacenter string
	Region     string
	Version    string // berth's
	Addr       string // the Nomad API's listener, host:port
	StartedAt  time.Time
	// Stats are the sections `nomad agent-info` prints, beside the ones
	// built here ("client", "nomad", "runtime").
	Stats map[string]map[string]string
}

// NomadVersion is the Nomad release whose API berth serves: what the CLI
// reads of the agent's version (some of its commands check it).
const NomadVersion = "1.6.5"

func (s *Server) agentRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/agent/self", s.handleAgentSelf},
		{http.MethodGet, "/v1/agent/health", s.handleAgentHealth},
		{http.MethodGet, "/v1/agent/members", s.handleAgentMembers},
		{http.MethodGet, "/v1/status/leader", s.handleLeader},
		{http.MethodGet, "/v1/status/peers", s.handlePeers},
		{http.MethodGet, "/v1/regions", s.handleRegions},
	}
}

func (s *Server) self(w http.ResponseWriter, r *http.Request) (Self, bool) {
	me, err := s.b.Self(r.Context())
	if err != nil {
		writeErr(w, err)
		return me, false
	}
	return me, true
}

func (s *Server) member(me Self) napi.AgentMember {
	host, port := splitAddr(me.Addr)
	return napi.AgentMember{
		Name: me.NodeName + "." + me.Region, Addr: host, Port: port, Status: "alive",
		Tags: map[string]string{"role": "nomad", "region": me.Region, "dc": me.Datacenter, "build": NomadVersion, "berth": me.Version},
	}
}

func (s *Server) handleAgentSelf(w http.ResponseWriter, r *http.Request) {
	me, ok := s.self(w, r)
	if !ok {
		return
	}
	stats := map[string]map[string]string{
		"client":  {"node_id": me.NodeID, "known_servers": me.Addr, "num_allocations": "0"},
		"nomad":   {"leader": "true", "server": "true", "bootstrap": "true", "known_regions": "1", "leader_addr": me.Addr},
		"runtime": {"version": "berth " + me.Version, "uptime": time.Since(me.StartedAt).Round(time.Second).String()},
	}
	for k, v := range me.Stats {
		if stats[k] == nil {
			stats[k] = map[string]string{}
		}
		for kk, vv := range v {
			stats[k][kk] = vv
		}
	}
	writeJSON(w, 1, napi.AgentSelf{
		Config: map[string]any{
			"Region": me.Region, "Datacenter": me.Datacenter, "NodeName": me.NodeName, "Version": map[string]any{"Version": NomadVersion, "VersionMetadata": "berth"},
			"Client": map[string]any{"Enabled": true}, "Server": map[string]any{"Enabled": true},
		},
		Member: s.member(me),
		Stats:  stats,
	})
}

func (s *Server) handleAgentHealth(w http.ResponseWriter, r *http.Request) {
	ok := &napi.AgentHealth{Ok: true, Message: "ok"}
	writeJSON(w, 1, napi.AgentHealthResponse{Client: ok, Server: ok})
}

func (s *Server) handleAgentMembers(w http.ResponseWriter, r *http.Request) {
	me, ok := s.self(w, r)
	if !ok {
		return
	}
	writeJSON(w, 1, napi.ServerMembers{ServerName: me.NodeName, ServerRegion: me.Region, ServerDC: me.Datacenter, Members: []*napi.AgentMember{ptr(s.member(me))}})
}

func (s *Server) handleLeader(w http.ResponseWriter, r *http.Request) {
	me, ok := s.self(w, r)
	if !ok {
		return
	}
	writeJSON(w, 1, me.Addr)
}

func (s *Server) handlePeers(w http.ResponseWriter, r *http.Request) {
	me, ok := s.self(w, r)
	if !ok {
		return
	}
	writeJSON(w, 1, []string{me.Addr})
}

func (s *Server) handleRegions(w http.ResponseWriter, r *http.Request) {
	me, ok := s.self(w, r)
	if !ok {
		return
	}
	writeJSON(w, 1, []string{me.Region})
}

func splitAddr(addr string) (string, uint16) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			p, _ := strconv.ParseUint(addr[i+1:], 10, 16)
			return addr[:i], uint16(p)
		}
	}
	return addr, 0
}

func ptr[T any](v T) *T { return &v }
