package cli

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
)

func newAllocCmd(g *Globals) *cobra.Command {
	cf := &ClientFlags{}
	cmd := &cobra.Command{
		Use:   "alloc",
		Short: "List, inspect and control allocations in a running berth agent: logs, exec, stop, restart, signal",
	}
	cf.register(cmd)
	cmd.AddCommand(newAllocLsCmd(g, cf), newAllocStatusCmd(g, cf), newAllocLogsCmd(g, cf),
		newAllocExecCmd(g, cf), newAllocStopCmd(g, cf), newAllocRestartCmd(g, cf), newAllocSignalCmd(g, cf))
	return cmd
}

func newAllocLsCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var job string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List allocations, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			allocs, err := agentCall(cf, func(c *api.Client) ([]api.AllocStub, error) { return c.Allocations(cmd.Context(), job) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(allocs)
			}
			if len(allocs) == 0 {
				fmt.Fprintln(g.stdout, "no allocations")
				return nil
			}
			return printAllocTable(g, allocs, verbose)
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "only the allocations of this job")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "full allocation IDs")
	return cmd
}

func newAllocStatusCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "status [-verbose] ALLOC",
		Short: "Show an allocation: status, tasks and exit codes, network status, events (an ID prefix is enough)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := agentCall(cf, func(c *api.Client) (*api.Allocation, error) { return c.Allocation(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(a)
			}
			return printAlloc(g, a)
		},
	}
	// berth's alloc status always shows everything, full IDs included.
	cmd.Flags().BoolVar(&verbose, "verbose", false, "accepted for Nomad's command lines: the output is always complete")
	return cmd
}

func printAlloc(g *Globals, a *api.Allocation) error {
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "ID\t%s\n", a.ID)
	fmt.Fprintf(w, "Job\t%s\n", a.JobID)
	fmt.Fprintf(w, "Group\t%s\n", a.Group)
	fmt.Fprintf(w, "Status\t%s\n", a.Status)
	if a.StatusDesc != "" {
		fmt.Fprintf(w, "Description\t%s\n", a.StatusDesc)
	}
	fmt.Fprintf(w, "Created\t%s\n", a.CreatedAt.Local().Format(time.RFC3339))
	fmt.Fprintf(w, "Modified\t%s\n", a.ModifiedAt.Local().Format(time.RFC3339))
	// Nomad's `alloc status` rows for a reschedule.
	if a.PreviousAllocation != "" {
		fmt.Fprintf(w, "Previous allocation\t%s\n", a.PreviousAllocation)
		fmt.Fprintf(w, "Reschedule attempts\t%d\n", len(a.RescheduleTracker))
	}
	if a.RescheduleAt != nil && a.Status == api.AllocPending {
		fmt.Fprintf(w, "Reschedule at\t%s\n", a.RescheduleAt.Local().Format(time.RFC3339))
	}
	if a.NextAllocation != "" {
		fmt.Fprintf(w, "Replacement allocation\t%s\n", a.NextAllocation)
	}
	if a.TeardownRetries > 0 {
		fmt.Fprintf(w, "Teardown retries\t%d\n", a.TeardownRetries)
	}
	if len(a.Holders) > 0 {
		fmt.Fprintf(w, "Holders seen\t%s\n", strings.Join(a.Holders, "; "))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	if n := a.Network; n != nil {
		fmt.Fprintf(g.stdout, "\nNetwork status\n")
		w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "  Mode\t%s\n", n.Mode)
		if n.Network != "" {
			fmt.Fprintf(w, "  Network\t%s\n", n.Network)
		}
		if n.NetnsPath != "" {
			fmt.Fprintf(w, "  Netns\t%s\n", n.NetnsPath)
		}
		if n.Interface != "" {
			fmt.Fprintf(w, "  Interface\t%s\n", n.Interface)
		}
		if len(n.IPv4) > 0 {
			fmt.Fprintf(w, "  IPv4\t%s\n", strings.Join(n.IPv4, ", "))
		}
		if len(n.IPv6) > 0 {
			fmt.Fprintf(w, "  IPv6\t%s\n", strings.Join(n.IPv6, ", "))
		}
		if len(n.Gateway) > 0 {
			fmt.Fprintf(w, "  Gateway\t%s\n", strings.Join(n.Gateway, ", "))
		}
		if d := n.DNS; d != nil {
			fmt.Fprintf(w, "  DNS\tservers %s; searches %s; options %s\n", dash(strings.Join(d.Servers, ",")), dash(strings.Join(d.Searches, ",")), dash(strings.Join(d.Options, ",")))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}

	if err := printAllocPorts(g.stdout, a); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "\nTasks\n")
	w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NAME\tDRIVER\tSTATE\tFAILED\tEXIT\tSIGNAL\tRESTARTS\tSTARTED\tFINISHED")
	for _, t := range a.Tasks {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%v\t%s\t%d\t%d\t%s\t%s\n", t.Name, t.Driver, t.State, t.Failed, dash(api.ExitText(t.State, t.NotStarted != "", t.ExitCode, 0)), t.Signal, t.Restarts, clock(t.StartedAt), clock(t.FinishedAt))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, t := range a.Tasks {
		if t.NotStarted != "" {
			fmt.Fprintf(g.stdout, "  %s never started: %s\n", t.Name, t.NotStarted)
		}
	}
	if err := printTaskResources(g.stdout, a.Tasks); err != nil {
		return err
	}

	if err := printAllocServices(g.stdout, a.Services); err != nil {
		return err
	}

	if steps := a.Timings.Steps(); len(steps) > 0 {
		var parts []string
		for _, s := range steps {
			parts = append(parts, fmt.Sprintf("%s %.1f", s.Name, s.MS))
		}
		fmt.Fprintf(g.stdout, "\nTimings (ms): %s\n", strings.Join(parts, ", "))
	}

	if len(a.Events) > 0 {
		fmt.Fprintf(g.stdout, "\nEvents\n")
		w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  TIME\tTASK\tTYPE\tMESSAGE")
		for _, e := range a.Events {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), dash(e.Task), e.Type, e.Message)
		}
		return w.Flush()
	}
	return nil
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

// printAllocPorts is Nomad's "Allocation Addresses": each port label, the
// host address that reaches it and the port inside the namespace.
func printAllocPorts(out io.Writer, a *api.Allocation) error {
	if a.Network == nil || len(a.Network.Ports) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\nAllocation Addresses\n")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  LABEL\tHOST ADDRESS\tTO")
	for _, p := range a.Network.Ports {
		host := p.HostIP
		if host == "" {
			host = "0.0.0.0"
		}
		to := p.To
		if to <= 0 {
			to = p.HostPort
		}
		fmt.Fprintf(w, "  %s\t%s\t%d\n", p.Label, net.JoinHostPort(host, strconv.Itoa(p.HostPort)), to)
	}
	return w.Flush()
}

// printTaskResources is Nomad's "Task Resources": what each task's
// resources block asks (the agent's job, current version).
func printTaskResources(out io.Writer, tasks []api.TaskState) error {
	some := false
	for _, t := range tasks {
		some = some || t.Resources != nil
	}
	if !some {
		return nil
	}
	fmt.Fprintf(out, "\nTask Resources\n")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  TASK\tCPU\tMEMORY\tMEMORY MAX")
	for _, t := range tasks {
		r := t.Resources
		if r == nil {
			continue
		}
		cpu := fmt.Sprintf("%d MHz", r.CPU)
		if r.Cores > 0 {
			cpu = fmt.Sprintf("%d cores", r.Cores)
		}
		memMax := "-"
		switch {
		case r.MemoryMaxMB > 0:
			memMax = fmt.Sprintf("%d MiB", r.MemoryMaxMB)
		case r.MemoryMaxMB < 0:
			memMax = "unlimited"
		}
		fmt.Fprintf(w, "  %s\t%s\t%d MiB\t%s\n", t.Name, cpu, r.MemoryMB, memMax)
	}
	return w.Flush()
}
