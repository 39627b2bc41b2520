// Package agenttest runs a berth agent inside a test binary, for the
// tests of other packages that need a real one (the status page's, the
// Prometheus examples').
package agenttest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/berth/berth/agent"
	"github.com/berth/berth/internal/testenv"
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
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(5 * time.Minute):
			t.Errorf("agent did not stop within 5 minutes")
		}
	})
	select {
	case <-a.Ready():
	case err := <-errc:
		t.Fatalf("agent stopped before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("agent not ready after 2 minutes")
	}
	return a
}
