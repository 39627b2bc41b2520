package cli

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
)

func newServiceCmd(g *Globals) *cobra.Command {
	cf := &ClientFlags{}
	cmd := &cobra.Command{
		Use:   "service",
		Short: "List and inspect the native services (provider \"nomad\") registered on this node",
	}
	cf.register(cmd)
	cmd.AddCommand(newServiceListCmd(g, cf), newServiceInfoCmd(g, cf))
	return cmd
}

func newServiceListCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the registered services: name, tags, and how many instances pass their checks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := agentCall(cf, func(c *api.Client) ([]api.ServiceStub, error) { return c.Services(cmd.Context()) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(l)
			}
			if len(l) == 0 {
				fmt.Fprintln(g.stdout, "No services found")
				return nil
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "Service Name\tTags\tPassing")
			for _, s := range l {
				fmt.Fprintf(w, "%s\t[%s]\t%d/%d\n", s.ServiceName, strings.Join(s.Tags, ","), s.Passing, s.Instances)
			}
			return w.Flush()
		},
	}
}

func newServiceInfoCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "info [-verbose] NAME",
		Short: "Show the instances of a service: job, address, tags, node, allocation and health",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := agentCall(cf, func(c *api.Client) ([]api.ServiceRegistration, error) { return c.Service(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(l)
			}
			if verbose {
				return printServicesVerbose(g.stdout, l)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "Job ID\tAddress\tTags\tNode ID\tAlloc ID\tHealth")
			for _, s := range l {
				fmt.Fprintf(w, "%s\t%s\t[%s]\t%s\t%s\t%s\n", s.JobID, serviceAddress(s), strings.Join(s.Tags, ","),
					dash(shortID(s.NodeID)), shortID(s.AllocID), s.Health)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&verbose, "verbose", false, "show every field of each instance, with its checks")
	return cmd
}

func serviceAddress(s api.ServiceRegistration) string {
	if s.Port == 0 {
		return s.Address
	}
	return net.JoinHostPort(s.Address, strconv.Itoa(s.Port))
}

// printServicesVerbose is Nomad's `service info -verbose`: a block of
// "Key = Value" lines per instance, here with its checks.
func printServicesVerbose(out io.Writer, l []api.ServiceRegistration) error {
	for i, s := range l {
		if i > 0 {
			fmt.Fprintln(out)
		}
		w := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
		task := s.Task
		if task == "" {
			task = "(group " + s.Group + ")"
		}
		for _, kv := range [][2]string{
			{"ID", s.ID}, {"Service Name", s.ServiceName}, {"Namespace", s.Namespace}, {"Job ID", s.JobID},
			{"Alloc ID", s.AllocID}, {"Task", task}, {"Node ID", dash(s.NodeID)}, {"Node Name", dash(s.NodeName)},
			{"Datacenter", dash(s.Datacenter)}, {"Address", serviceAddress(s)}, {"Tags", "[" + strings.Join(s.Tags, ",") + "]"},
			{"Meta", metaString(s.Meta)}, {"Health", s.Health},
		} {
			fmt.Fprintf(w, "%s\t= %s\n", kv[0], kv[1])
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(s.Checks) > 0 {
			w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "Checks\n  NAME\tTYPE\tSTATUS\tLAST RUN\tOUTPUT")
			for _, c := range s.Checks {
				last := "-"
				if !c.Time.IsZero() {
					last = c.Time.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Name, c.Type, c.Status, last, dash(oneLine(c.Output)))
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func metaString(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// printAllocServices is the Services section of `berth alloc status`.
func printAllocServices(out io.Writer, l []api.ServiceRegistration) error {
	if len(l) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\nServices\n")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NAME\tTASK\tADDRESS\tTAGS\tHEALTH\tCHECKS")
	for _, s := range l {
		var checks []string
		for _, c := range s.Checks {
			checks = append(checks, c.Name+": "+c.Status)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t[%s]\t%s\t%s\n", s.ServiceName, dash(s.Task), serviceAddress(s), strings.Join(s.Tags, ","), s.Health, dash(strings.Join(checks, "; ")))
	}
	return w.Flush()
}
