package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth/berth/node"
	"github.com/berth/berth/node/doctor"
	"github.com/berth/berth/node/gc"
)

// DoctorOptions builds the doctor's inputs from the node: its settings, its
// CNI client, netns manager and store. leaks may be nil: the read-only
// BasicLeakFinder is used then.
func (g *Globals) DoctorOptions(n *node.Node, leaks doctor.LeakFinder) doctor.Options {
	if leaks == nil {
		leaks = basicLeakFinder(g, n)
	}
	return doctor.Options{
		NetnsDir:  g.NetnsDir,
		ConfDir:   g.CNIConfigDir,
		CNI:       n.CNI,
		DataDir:   g.DataDir,
		OpenStore: n.ReadStore,
		Podman:    doctor.PodmanOptions{Sockets: doctor.DefaultPodmanSockets(g.DataDir)},
		Leaks:     leaks,
		Logger:    g.Logger(),
	}
}

func newDoctorCmd(g *Globals) *cobra.Command {
	var nf nomadFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this node can run berth, and say how to fix what is wrong (exit 1 if a check fails)",
		Long: `Checks privileges and kernel support for network namespaces, the netns
directory's mounts, every CNI configuration and the plugins it names,
iptables, podman, berth's store, and leftovers gc would reclaim. Each
problem is printed with the command or setting that fixes it. Nothing is
changed. Exit status 1 if any check fails; warnings do not fail.

With --nomad it also checks the connection to this node's Nomad client agent
(the --nomad-* flags and NOMAD_* variables, as for gc --nomad).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nf.needSwitch(cmd.Flags(), "nomad"); err != nil {
				return err
			}
			n, err := g.newNode(cmd.Context())
			if err != nil {
				return err
			}
			rep := doctor.Run(cmd.Context(), g.DoctorOptions(n, g.gcLeakFinder(n)))
			if nf.on {
				rep = doctor.NewReport(append(rep.Checks, g.nomadChecks(cmd.Context(), &nf)...))
			}
			if g.JSON {
				if err := g.PrintJSON(rep); err != nil {
					return err
				}
			} else {
				printDoctor(g, rep)
			}
			if rep.Failed {
				return exitCode(1)
			}
			return nil
		},
	}
	nf.register(cmd.Flags(), "nomad", "also check the connection to this node's Nomad client agent")
	return cmd
}

// gcLeakFinder reports what `berth gc --dry-run` would reclaim. When the
// store cannot be opened (an agent owns it, or it is damaged) the
// read-only BasicLeakFinder answers instead.
func (g *Globals) gcLeakFinder(n *node.Node) doctor.LeakFinder {
	basic := basicLeakFinder(g, n)
	return func(ctx context.Context) ([]doctor.Finding, error) {
		n, err := g.openNode(ctx)
		if err != nil {
			return basic(ctx)
		}
		defer g.closeNode(ctx, n)
		opts := n.GCOptions()
		opts.DryRun = true
		// What an idle network keeps for its next attachment is no
		// leftover: only the tidying that reclaims would bring is.
		opts.TidyIdle = -1
		rep, err := gc.Run(ctx, opts)
		if err != nil {
			return nil, err
		}
		var out []doctor.Finding
		for _, it := range rep.Found {
			out = append(out, doctor.Finding{Kind: string(it.Kind), ID: it.ID, Network: it.Network, Path: it.Path, Reason: it.Reason})
		}
		return out, nil
	}
}

// basicLeakFinder is doctor.BasicLeakFinder over the node's netns manager
// and store.
func basicLeakFinder(g *Globals, n *node.Node) doctor.LeakFinder {
	return doctor.BasicLeakFinder(doctor.BasicLeakOptions{
		Netns: n.Netns, OpenStore: n.ReadStore,
		DataDir: g.DataDir, ConfDir: g.CNIConfigDir, CNICacheDir: g.CNICacheDir,
	})
}

func printDoctor(g *Globals, rep *doctor.Report) {
	w := g.stdout
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%-6s %s: %s\n", strings.ToUpper(string(c.Status)), c.Name, c.Message)
		if c.Fix != "" {
			fmt.Fprintf(w, "       fix: %s\n", c.Fix)
		}
	}
	s := rep.Summary
	fmt.Fprintf(w, "\n%d ok, %d warnings, %d failed, %d skipped\n",
		s[doctor.StatusOK], s[doctor.StatusWarn], s[doctor.StatusFail], s[doctor.StatusSkip])
}
