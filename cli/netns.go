package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth/berth/agent"
	"github.com/berth/berth/api"
	"github.com/berth/berth/attach"
	"github.com/berth/berth/store"
)

func newNetnsCmd(g *Globals) *cobra.Command {
	cf := &ClientFlags{}
	cmd := &cobra.Command{
		Use:   "netns",
		Short: "Inspect network namespaces through the agent (or locally when no agent runs)",
	}
	cf.register(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List namespaces: which are berth's, their network, IPs, allocation and the processes holding them",
		Long: `List the namespaces of the netns dir with berth's records: owner, network,
phase, IPs, allocation and holders (open fds, mounts in other mount namespaces,
member processes). Asks the agent at --address; when none answers there, reads
the store and the netns dir itself (which needs the data dir to be free).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var list []api.NetnsEntry
			c, ok, err := agentClient(ctx, cf)
			switch {
			case err != nil:
				return agentErr(err)
			case ok:
				defer c.Close()
				if list, err = c.Namespaces(ctx); err != nil {
					return agentErr(err)
				}
			default:
				g.Logger().Debug("no agent answers; listing locally", "address", cf.Address)
				err = g.withManager(ctx, func(m *attach.Manager, _ *store.Store) error {
					local, err := attach.ListNamespaces(ctx, m)
					list = agent.WireNamespaces(local)
					return err
				})
				if err != nil {
					return err
				}
			}
			if g.JSON {
				if list == nil {
					list = []api.NetnsEntry{}
				}
				return g.PrintJSON(list)
			}
			return printNetns(g, list)
		},
	})
	return cmd
}

// printNetEntries prints a local listing (`berth net ls`) as the agent's.
func printNetEntries(g *Globals, list []attach.NetEntry) error {
	return printNetns(g, agent.WireNamespaces(list))
}

func printNetns(g *Globals, list []api.NetnsEntry) error {
	if len(list) == 0 {
		fmt.Fprintln(g.stdout, "no namespaces")
		return nil
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tOWNER\tNETWORK\tPHASE\tIPV4\tALLOC\tHOLDERS")
	for _, e := range list {
		owner := "other"
		if e.Berth {
			owner = "berth"
		}
		if !e.Pinned {
			owner += " (not mounted)"
		}
		var hs []string
		for _, h := range e.Holders {
			hs = append(hs, h.String())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, owner, dash(e.Network), dash(e.Phase),
			dash(strings.Join(e.IPv4, ",")), dash(shortID(e.AllocID)), dash(strings.Join(hs, "; ")))
	}
	return w.Flush()
}
