package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/node"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad"
	"github.com/berth/berth/store"
)

func newGCCmd(g *Globals) *cobra.Command {
	var dryRun, detached bool
	var prefixes, networks, only []string
	var nf nomadFlags
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Reclaim what crashes, reboots and failed teardowns left: tasks of dead owners, namespaces, CNI cache entries, leases, iptables rules",
		Long: `gc drives every unfinished attachment to a clean state and sweeps the host for
berth's leftovers. It touches only what is provably berth's (its store, libcni
cache entries carrying BERTH_ID, leases and iptables markers of berth's networks
whose ID nobody knows) unless --foreign-prefix or --foreign-network name more.
It exits 0 when it ran, even if it found things, and 1 if something could not
be reclaimed.

With --nomad it reclaims what Nomad left on this node instead, with Nomad as
the owner that says what is live: namespaces in /var/run/netns named by an
allocation ID, and that allocation's libcni cache entries, host-local leases
and iptables rules in Nomad's networks (its CNI config dir's, and "nomad" of
bridge mode), when the allocation is complete, failed or lost, or Nomad no
longer knows it and its evidence is older than --nomad-grace-period; never
anything of a pending or running allocation, nor a namespace a process lives
in. A libcni cache entry is Nomad's teardown still to come: it is left to
Nomad until its client is gone, restarted or done with the allocation, or
--nomad-teardown-deadline passed. The client's identity is checked in
Nomad's data dir (--nomad-data-dir), and a namespace goes only with host
evidence that it was Nomad's (its alloc dir there, or the client holding it
open) or --nomad-reclaim-without-evidence; each item names the rule that
decided. If the Nomad client agent cannot be reached, answers with an error
or is not this node's client, nothing is touched and gc exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := nf.needSwitch(cmd.Flags(), "nomad"); err != nil {
				return err
			}
			var owner *nomad.Owner
			if nf.on {
				// Before anything else: without Nomad's answer nothing may go.
				var err error
				if owner, err = g.connectNomad(ctx, &nf); err != nil {
					return err
				}
			}
			n, err := g.newNode(cmd.Context())
			if err != nil {
				return err
			}
			switch err := n.OpenStore(ctx); {
			case err == nil:
			case errors.Is(err, store.ErrCorrupt):
				// The host must still be swept: what the lost store knew
				// is found through the cache and the markers.
				n.OpenWithoutStore(err)
			default:
				return err
			}
			defer g.closeNode(ctx, n)
			opts := n.GCOptions()
			opts.DryRun = dryRun
			opts.ReclaimDetached = detached
			opts.IgnoreBackoff = true
			opts.ForeignPrefixes = prefixes
			opts.ForeignNetworks = networks
			opts.IDs = only
			if owner != nil {
				opts.Owners, opts.OwnersOnly = []gc.Owner{owner}, true
			}
			stopProgress := g.gcProgress(&opts)
			rep, err := gc.Run(ctx, opts)
			stopProgress()
			if rep != nil {
				if perr := g.printGCReport(rep); perr != nil {
					return perr
				}
			}
			if err != nil {
				return err
			}
			if rep.Failed() {
				return exitCode(1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "report what would be reclaimed and change nothing")
	f.BoolVar(&detached, "detached", false, "also reclaim the allocations a stopped agent left running for the next agent to re-adopt (stops their tasks)")
	f.StringArrayVar(&prefixes, "foreign-prefix", nil, "also reclaim namespaces in --netns-dir whose name starts with this prefix (repeatable; e.g. for a host another orchestrator left dirty)")
	f.StringArrayVar(&networks, "foreign-network", nil, "also reclaim attachments of this CNI network that berth has no record of (repeatable)")
	f.StringArrayVar(&only, "only", nil, "limit the sweep to this container ID or namespace name, e.g. one allocation (repeatable); berth's records are then not replayed")
	nf.register(f, "nomad", "reclaim what Nomad left on this node, with the local Nomad client agent saying which allocations are live (instead of berth's own sweep)")
	return cmd
}

// ReplayPending finishes, in a quick command, what earlier berth processes
// left half-done (see gc.ReplayPending). With nothing to do it reads the
// store and /proc only.
func (g *Globals) ReplayPending(ctx context.Context, n *node.Node) {
	rep, err := gc.ReplayPending(ctx, n.GCOptions())
	if err != nil {
		g.Logger().Warn("replaying pending work failed", "err", err)
		return
	}
	if len(rep.Errors) > 0 {
		g.Logger().Warn("pending work could not be finished; run `berth gc`", "errors", strings.Join(rep.Errors, "; "))
	}
}

// gcProgress shows, on a terminal, a progress line for a collection that
// takes longer than a second: items done of planned and the current one.
// gc.Run then plans first. The returned func removes the line.
func (g *Globals) gcProgress(opts *gc.Options) func() {
	if opts.DryRun || g.JSON || !isTerminal(g.stderr) {
		return func() {}
	}
	l, stop := g.showLive(g.stderr)
	var mu sync.Mutex
	var cur gc.Progress
	start := time.Now()
	opts.Progress = func(p gc.Progress) {
		mu.Lock()
		cur = p
		mu.Unlock()
	}
	done := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if time.Since(start) < time.Second {
				continue
			}
			mu.Lock()
			p := cur
			mu.Unlock()
			l.set(progressText(p))
		}
	}()
	return func() {
		close(done)
		<-ticked
		stop(false)
	}
}

// progressText is the progress line of a collection.
func progressText(p gc.Progress) string {
	if p.Planned == 0 {
		return "gc: planning..."
	}
	s := fmt.Sprintf("gc: %d of %d", p.Done, p.Planned)
	if p.Current.Kind != "" {
		s += " · " + p.Current.Kind
		if p.Current.ID != "" {
			s += " " + p.Current.ID
		}
		if p.Current.Network != "" {
			s += " (" + p.Current.Network + ")"
		}
	}
	return s
}

// gcStateText is how a row's state reads in the table.
func gcStateText(row gc.Row) string {
	if row.Kind == gc.KindCNIGC {
		switch row.State {
		case gc.StatePlanned:
			return "would send"
		case gc.StateReclaimed:
			return "sent"
		}
	}
	return row.State
}

// printGCReport prints a collection's rows: a dry run's are its plan, a
// real run's the same rows with their outcome; the summary counts them.
func (g *Globals) printGCReport(rep *gc.Report) error {
	if g.JSON {
		return g.PrintJSON(rep)
	}
	out := g.stdout
	if rep.StoreUnavailable != "" {
		fmt.Fprintf(out, "store unreadable: swept with host evidence only (libcni cache, leases, iptables markers); namespaces that still exist were kept\n  %s\n", rep.StoreUnavailable)
	}
	if rep.Reboot {
		fmt.Fprintln(out, "reboot detected: no namespace of berth's attachments exists any more")
	}
	if len(rep.Rows) == 0 {
		fmt.Fprintf(out, "nothing to reclaim (%.1f ms)\n", rep.DurationMS)
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tID\tNETWORK\tSTATE\tWHAT / WHY")
	for _, r := range rep.Rows {
		why := r.Reason
		if r.Path != "" && !strings.Contains(why, r.Path) {
			why = r.Path + ": " + why
		}
		if r.Rule != "" {
			why += " [rule " + r.Rule + "]"
		}
		if r.Age != "" {
			why += " [age " + r.Age + "]"
		}
		if r.Holders != "" {
			why += " [in it: " + r.Holders + "]"
		}
		if r.Error != "" && r.Kind != gc.KindError {
			why += " [error: " + r.Error + "]"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Kind, dash(r.ID), dash(r.Network), gcStateText(r), why)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	c := rep.Counts
	sent := ""
	if c.GCSent > 0 {
		sent = fmt.Sprintf(", CNI GC sent to %d network(s)", c.GCSent)
	}
	if rep.DryRun {
		if sent != "" {
			sent = fmt.Sprintf(", CNI GC would be sent to %d network(s)", c.GCSent)
		}
		fmt.Fprintf(out, "found %d, would reclaim %d, kept %d, errors %d%s (%.1f ms, dry run: nothing changed)\n", c.Found, c.Found, c.Kept, c.Errors, sent, rep.DurationMS)
		return nil
	}
	fmt.Fprintf(out, "found %d, reclaimed %d, kept %d, errors %d%s (%.1f ms)\n", c.Found, c.Reclaimed, c.Kept, c.Errors, sent, rep.DurationMS)
	return nil
}

// Reconcile runs the whole garbage collection at the start of a berth
// process that owns state (`berth run`): what a crashed berth left is
// finished or undone before anything new starts. It logs what it reclaimed
// and never fails the command: `berth gc` reports in detail.
func (g *Globals) Reconcile(ctx context.Context, n *node.Node) {
	opts := n.GCOptions()
	opts.TidyIdle = gc.DefaultTidyIdle
	rep, err := gc.Run(ctx, opts)
	switch {
	case err != nil:
		g.Logger().Warn("reconcile at start failed; run `berth gc`", "err", err)
	case len(rep.Errors) > 0:
		g.Logger().Warn("reconcile at start could not reclaim everything; run `berth gc`", "errors", strings.Join(rep.Errors, "; "))
	case len(rep.Reclaimed) > 0:
		g.Logger().Info("reconciled what an earlier berth left", "reclaimed", len(rep.Reclaimed))
	}
}
