package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
)

// newAgentDrainCmd is `berth agent drain`: the way to stop an agent and
// its workloads (SIGTERM leaves the workloads to the next agent).
func newAgentDrainCmd(g *Globals) *cobra.Command {
	var cf ClientFlags
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Stop every job of the agent (tasks stopped, networks torn down), then the agent exits",
		Long: `Ask the agent to drain: no new launches, every job's tasks stopped within their
kill_timeout, every network torn down, then the agent exits 0. Without it, a
SIGTERM or SIGINT (systemctl stop) leaves the workloads running for the next
agent on the data dir, which re-adopts them; drain_on_shutdown = true makes
SIGTERM drain too. The command waits until the agent is gone (--wait).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.Drain(cmd.Context())
			if err != nil {
				return agentErr(err)
			}
			if !g.JSON {
				fmt.Fprintf(g.stdout, "agent (pid %d) draining: stopping %d job(s)\n", resp.PID, resp.Jobs)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			if err := waitGone(ctx, c); err != nil {
				return fmt.Errorf("agent (pid %d) still answers after %s: %w (it may still be stopping tasks with long kill_timeouts; see its log)", resp.PID, wait, err)
			}
			if g.JSON {
				return g.PrintJSON(resp)
			}
			fmt.Fprintln(g.stdout, "drained: every job stopped, the agent exited")
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for the agent to finish the drain and exit")
	return cmd
}

// waitGone polls the agent until it no longer answers.
func waitGone(ctx context.Context, c *api.Client) error {
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			// Refused, or the socket is gone: it exited.
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
