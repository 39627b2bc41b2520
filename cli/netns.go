package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/node/agent"
)

func newNetnsCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "netns",
		Short: "Inspect network namespaces (the same as `berth net ls`)",
	}
	cmd.AddCommand(newNetLsCmd(g))
	return cmd
}

// newNetLsCmd is `berth net ls` and `berth netns ls`: the store is shared by
// every berth process on the data dir, so the listing is read here whether
// or not an agent runs.
func newNetLsCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List namespaces: which are berth's, their network, IPs, allocation and the processes holding them",
		Long: `List the namespaces of the netns dir with berth's records: owner, network,
phase, IPs, allocation and holders (open fds, mounts in other mount namespaces,
member processes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var list []api.NetnsEntry
			err := g.withManager(ctx, func(m *attach.Manager) error {
				local, err := attach.ListNamespaces(ctx, m)
				list = agent.WireNamespaces(local)
				return err
			})
			if err != nil {
				return err
			}
			if g.JSON {
				if list == nil {
					list = []api.NetnsEntry{}
				}
				return g.PrintJSON(list)
			}
			return printNetns(g, list)
		},
	}
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
