package nomadapi

import (
	"fmt"
	"net/http"
)

// notOnOneNode are Nomad's routes that mean nothing on a single berth
// node, each with why; they answer 501 with that reason.
var notOnOneNode = []struct{ path, why string }{
	{"/v1/acl/", "berth has no ACL system: one token, the agent's (api.token_file), grants everything"},
	{"/v1/operator/raft/", "berth is one node with no Raft cluster"},
	{"/v1/operator/autopilot/", "berth is one node with no servers to manage"},
	{"/v1/operator/snapshot", "berth's state is its data dir's store, backed up as a file (berth store)"},
	{"/v1/operator/keyring/", "berth has no gossip or workload-identity keyring"},
	{"/v1/agent/join", "berth is one node: there is no cluster to join"},
	{"/v1/agent/force-leave", "berth is one node: there are no other members"},
	{"/v1/agent/servers", "berth is one node and its own server"},
	{"/v1/namespace/", "berth runs every job in the default namespace"},
	{"/v1/quota", "berth has no quotas (Nomad Enterprise)"},
	{"/v1/sentinel/", "berth has no Sentinel policies (Nomad Enterprise)"},
	{"/v1/volumes", "berth has no CSI volumes; use host volumes (client { host_volume })"},
	{"/v1/volume/", "berth has no CSI volumes; use host volumes (client { host_volume })"},
	{"/v1/plugins", "berth has no CSI plugins"},
	{"/v1/scaling/", "berth does not scale task groups (one node: set count)"},
}

func (s *Server) oneNodeRoutes() []route {
	var rs []route
	for _, n := range notOnOneNode {
		why := n.why
		h := func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotImplemented, fmt.Errorf("%s %s is not served by berth: %s", r.Method, r.URL.Path, why))
		}
		// A pattern without a method: every method gets the reason.
		rs = append(rs, route{"", n.path, h})
	}
	return rs
}
