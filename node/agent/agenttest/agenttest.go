// Package agenttest runs a berth agent inside a test binary, for the
// tests of other packages that need a real one (the status page's, the
// Prometheus examples').
package agenttest

import (
	"log/slog"
	"os"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/agent"
)

// Start runs an agent with cfg in this process until the test ends,
// logging at debug level into logPath (shown when the test fails), and
// returns once it serves its API (its reconcile at start may still run:
// see agent.Agent.Reconciled). The test's end stops it and waits for it.
func Start(t *testing.T, cfg agent.Config, logPath string) *agent.Agent {
	t.Helper()
	logf, err := os.Create(logPath)
	testenv.Must(t, err)
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", b)
		}
	})
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug})), agent.WithVersion("test"))
	testenv.Must(t, err)
	testenv.Serve(t, "agent", a.Run, a.Ready())
	return a
}
