package nomadapi_test

import (
	"strings"
	"testing"
)

// TestNomadCLIAgent: the real nomad CLI reaches the agent with
// NOMAD_ADDR and NOMAD_TOKEN, and is refused without the token.
func TestNomadCLIAgent(t *testing.T) {
	e := startNomadEnv(t, "10.199.125.0/24", "10.199.126.0/24")
	out, code := e.nomad(t, "agent-info")
	if code != 0 || !strings.Contains(out, "node_id") {
		t.Fatalf("agent-info: exit %d, want 0 and the client's node_id", code)
	}
	out, code = e.nomad(t, "agent-info", "-token", "wrong-token-wrong-token")
	if code == 0 || !strings.Contains(out, "NOMAD_TOKEN") {
		t.Fatalf("agent-info with a wrong token: exit %d, want non-zero naming NOMAD_TOKEN", code)
	}
	out, code = e.nomad(t, "operator", "raft", "list-peers")
	if code == 0 || !strings.Contains(out, "one node") {
		t.Fatalf("operator raft list-peers: exit %d, want non-zero saying why (one node)", code)
	}
}
