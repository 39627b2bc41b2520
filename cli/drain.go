package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/pidfd"
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
SIGTERM drain too. The command waits until the agent is gone (--wait). It
lists what it stopped, and exits non-zero naming each allocation it could
not fully stop (LEFT: its network teardown failed, a task not destroyed):
the next agent or berth gc finishes those.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			// The agent's process, when it runs on this host: the drain is
			// over once it has exited, not once its API stops answering.
			var proc *pidfd.Process
			if self, err := c.Self(ctx); err == nil {
				proc, _ = pidfd.Open(self.PID, isBerthAgent)
			}
			if proc != nil {
				defer proc.Close()
			}
			resp, err := c.DrainWait(ctx)
			if err != nil {
				return agentErr(err)
			}
			if !g.JSON {
				if resp.Done {
					fmt.Fprintf(g.stdout, "agent (pid %d) drained: %d job(s), %d allocation(s) stopped\n", resp.PID, resp.Jobs, len(resp.Stopped))
					for _, al := range resp.Stopped {
						fmt.Fprintf(g.stdout, "  stopped %s (job %s): %s\n", al.ID, al.JobID, al.Status)
					}
					for _, al := range resp.Left {
						fmt.Fprintf(g.stdout, "  LEFT %s (job %s): %s: %s\n", al.ID, al.JobID, al.Status, leftWhy(al))
					}
				} else {
					fmt.Fprintf(g.stdout, "agent (pid %d) draining: stopping %d job(s)\n", resp.PID, resp.Jobs)
				}
			}
			if proc != nil {
				err = proc.Wait(ctx)
			} else {
				err = waitGone(ctx, c)
			}
			if err != nil {
				return fmt.Errorf("agent (pid %d) still runs after %s: %w (it may still be stopping tasks with long kill_timeouts; see its log)", resp.PID, wait, err)
			}
			if g.JSON {
				if err := g.PrintJSON(resp); err != nil {
					return err
				}
			}
			if len(resp.Left) > 0 {
				// Non-zero: an operator (or a script) must not take the
				// host for clean.
				var whys []string
				for _, al := range resp.Left {
					whys = append(whys, fmt.Sprintf("%s (job %s): %s", al.ID, al.JobID, leftWhy(al)))
				}
				return fmt.Errorf("the agent exited, but %d allocation(s) were not fully stopped: %s (the next agent or berth gc finishes them)", len(resp.Left), strings.Join(whys, "; "))
			}
			if g.JSON {
				return nil
			}
			fmt.Fprintln(g.stdout, "drained: every job stopped, the agent exited")
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for the agent to finish the drain and exit")
	return cmd
}

// leftWhy is what a drain left of al (an older agent says nothing).
func leftWhy(al api.DrainedAlloc) string {
	if al.Why != "" {
		return al.Why
	}
	return "not stopped (see the agent's log)"
}

// isBerthAgent reports whether pid is a `berth agent` process.
func isBerthAgent(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(b), "\x00")
	return err == nil && len(args) > 1 && strings.Contains(filepath.Base(args[0]), "berth") && args[1] == "agent"
}

// waitGone polls an agent on another host until its API refuses
// connections (a draining agent may answer errors meanwhile).
func waitGone(ctx context.Context, c *api.Client) error {
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err != nil && ctx.Err() == nil && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT)) {
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
