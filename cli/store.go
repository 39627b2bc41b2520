package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newStoreCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Inspect berth's store: find and remove damaged records",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "List the records that cannot be decoded (exit 1 if there are any)",
		Long: `check reads every record of the store in the data dir. A record that cannot be
decoded (a damaged disk block, a bug) is listed by listings as "unreadable" and
kept: gc never takes its attachment for nobody's. Remove one with
` + "`berth store rm KIND ID`" + ` (for an attachment, ` + "`berth net down ID`" + ` first tears it
down from libcni's cache).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			n, err := g.openNode(ctx)
			if err != nil {
				return err
			}
			defer g.closeNode(ctx, n)
			st := n.Store
			bad, err := st.Unreadable(ctx)
			if err != nil {
				return err
			}
			if g.JSON {
				if err := g.PrintJSON(map[string]any{"path": st.Path(), "unreadable": bad}); err != nil {
					return err
				}
			} else if len(bad) == 0 {
				fmt.Fprintf(g.stdout, "store %s: every record decodes\n", st.Path())
			} else {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "KIND\tID\tERROR")
				for _, b := range bad {
					fmt.Fprintf(w, "%s\t%s\t%s\n", b.Kind, b.ID, b.Err)
				}
				_ = w.Flush()
				fmt.Fprintf(g.stdout, "%d unreadable record(s) in %s; remove one with: berth store rm KIND ID\n", len(bad), st.Path())
			}
			if len(bad) > 0 {
				return exitCode(1)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "rm KIND ID",
		Short: "Remove one record (attachment, allocation, job, network, service or variable), whatever its bytes",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			n, err := g.openNode(ctx)
			if err != nil {
				return err
			}
			defer g.closeNode(ctx, n)
			st := n.Store
			if err := st.DeleteRecord(ctx, a[0], a[1]); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%s %s: removed from %s\n", a[0], a[1], st.Path())
			return nil
		},
	})
	return cmd
}
