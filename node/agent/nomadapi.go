package agent

import (
	"context"
	"net/http"

	"github.com/berth/berth/node/nomadapi"
)

// nomadBackend is what package nomadapi calls of the agent: Nomad's API
// over the agent's jobs, allocations and store. Its methods live beside
// the berth routes they mirror (nomad_*.go).
type nomadBackend struct{ a *Agent }

var _ nomadapi.Backend = nomadBackend{}

// nomadHandler is the Nomad API listener's handler: every request needs
// the API token (X-Nomad-Token, as NOMAD_TOKEN sends it, or a bearer).
func (a *Agent) nomadHandler() http.Handler {
	s := nomadapi.New(nomadBackend{a}, a.log.With("api", "nomad"))
	h := s.Handler(func(pattern string, h http.Handler) http.Handler {
		return a.met.InstrumentHandler(pattern, a.logRequests(pattern, h))
	})
	return nomadapi.RequireToken(a.tokenOK, h)
}

func (b nomadBackend) Self(ctx context.Context) (nomadapi.Self, error) {
	a := b.a
	attrs := a.node.Attrs
	return nomadapi.Self{
		NodeID: nodeUUID(attrs["node.unique.id"]), NodeName: attrs["node.unique.name"],
		Datacenter: attrs["node.datacenter"], Region: attrs["node.region"],
		Version: a.version, Addr: a.nomadAddr, StartedAt: a.started,
	}, nil
}

// nodeUUID shows the node's ID (the machine ID, 32 hex digits) as the
// UUID Nomad's clients expect.
func nodeUUID(id string) string {
	if len(id) != 32 {
		return id
	}
	return id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32]
}

func (a *Agent) nomadAPIBanner() string {
	if a.nomadAddr == "" {
		return "(off)"
	}
	scheme := "http://"
	if a.set.tls != nil {
		scheme = "https://"
	}
	return scheme + a.nomadAddr + " (for the nomad CLI: NOMAD_ADDR=" + scheme + a.nomadAddr + " NOMAD_TOKEN=<the API token>)"
}
