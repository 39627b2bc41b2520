package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
)

func newJobCmd(g *Globals) *cobra.Command {
	cf := &ClientFlags{}
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Submit, plan, stop and inspect jobs in a running berth agent",
	}
	cf.register(cmd)
	cmd.AddCommand(newJobRunCmd(g, cf), newJobPlanCmd(g, cf), newJobDispatchCmd(g, cf), newJobStopCmd(g, cf), newJobStatusCmd(g, cf))
	return cmd
}

func readJobFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read job file %s: %w", path, err)
	}
	return b, nil
}

func newJobRunCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	vf := &VarFlags{}
	cmd := &cobra.Command{
		Use:   "run [-var NAME=VALUE]... [-var-file FILE]... JOBFILE",
		Short: "Submit a job to the agent (a running job with the same ID is stopped and replaced)",
		Long: `Submit a job to the agent. Its variables go with it: -var, the contents of -var-file and the
NOMAD_VAR_<name> entries of this environment; the agent resolves them (file() and the other
filesystem functions stay disabled there, as in Nomad's API). A parameterized job is registered and
runs only when dispatched (berth job dispatch).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := vf.submitRequest(args[0])
			if err != nil {
				return err
			}
			resp, err := agentCall(cf, func(c *api.Client) (*api.JobSubmitResponse, error) {
				return c.Submit(cmd.Context(), req)
			})
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(resp)
			}
			w := g.stdout
			verb := "submitted"
			if resp.Parameterized {
				verb = "registered (parameterized: it runs only when dispatched)"
			}
			if resp.Replaced {
				verb += "; the running version was stopped and replaced"
			}
			fmt.Fprintf(w, "job %q %s\n", resp.JobID, verb)
			for _, wn := range resp.Warnings {
				fmt.Fprintf(w, "  warning: %s\n", wn)
			}
			printLaunches(g, resp.NextLaunches)
			if resp.Parameterized {
				fmt.Fprintf(w, "dispatch it with: berth job dispatch [-meta KEY=VALUE]... %s [PAYLOAD-FILE|-]\n", resp.JobID)
				return nil
			}
			fmt.Fprintf(w, "follow it with: berth job status %s; berth alloc ls --job %s\n", resp.JobID, resp.JobID)
			return nil
		},
	}
	vf.register(cmd)
	return cmd
}

func printLaunches(g *Globals, next []time.Time) {
	if len(next) == 0 {
		return
	}
	fmt.Fprintf(g.stdout, "  next launches:\n")
	for _, t := range next {
		fmt.Fprintf(g.stdout, "    %s\n", t.Format(time.RFC3339))
	}
}

func newJobPlanCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	vf := &VarFlags{}
	cmd := &cobra.Command{
		Use:   "plan [-var NAME=VALUE]... [-var-file FILE]... JOBFILE",
		Short: "Validate a job in the agent and show what submitting it would do; changes nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := vf.submitRequest(args[0])
			if err != nil {
				return err
			}
			resp, err := agentCall(cf, func(c *api.Client) (*api.JobPlanResponse, error) {
				return c.Plan(cmd.Context(), req)
			})
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(resp)
			}
			w := g.stdout
			j := resp.Job
			switch {
			case resp.Running:
				fmt.Fprintf(w, "job %q (%s) is valid; submitting it stops the running version and starts this one\n", j.ID, j.Type)
			case resp.Exists:
				fmt.Fprintf(w, "job %q (%s) is valid; submitting it replaces the finished version\n", j.ID, j.Type)
			default:
				fmt.Fprintf(w, "job %q (%s) is valid; submitting it creates it\n", j.ID, j.Type)
			}
			for _, gr := range j.Groups {
				var tasks []string
				for _, t := range gr.Tasks {
					tasks = append(tasks, t.Name+" ("+t.Driver+")")
				}
				fmt.Fprintf(w, "  group %q: %d allocation(s) per launch, network %s, tasks: %s\n", gr.Name, gr.Count, gr.Network.Mode, strings.Join(tasks, ", "))
			}
			for _, wn := range resp.Warnings {
				fmt.Fprintf(w, "  warning: %s\n", wn)
			}
			switch {
			case j.Parameterized != nil:
				fmt.Fprintf(w, "  parameterized: registered, runs once per dispatch (payload %s)\n", j.Parameterized.Payload)
			case j.Periodic != nil:
				fmt.Fprintf(w, "  periodic %s (time zone %s)\n", strings.Join(j.Periodic.Crons, " | "), j.Periodic.TimeZone)
				printLaunches(g, resp.NextLaunches)
			default:
				fmt.Fprintf(w, "  launches once, as soon as it is submitted\n")
			}
			return nil
		},
	}
	vf.register(cmd)
	return cmd
}

func newJobStopCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a job: its tasks are stopped, its networks torn down, and the agent forgets it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := agentCall(cf, func(c *api.Client) (*api.JobStopResponse, error) { return c.StopJob(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(resp)
			}
			if !resp.Stopped {
				fmt.Fprintf(g.stdout, "job %q is stopping; the agent forgets it once its tasks and networks are gone\n", resp.JobID)
				return nil
			}
			fmt.Fprintf(g.stdout, "job %q stopped\n", resp.JobID)
			if s := resp.Summary; s != nil {
				printSummary(g, s)
			}
			return nil
		},
	}
}

func newJobStatusCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status [JOB]",
		Short: "List the agent's jobs, or show one job and its allocations",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if len(args) == 0 {
				jobs, err := c.Jobs(cmd.Context())
				if err != nil {
					return agentErr(err)
				}
				if g.JSON {
					return g.PrintJSON(jobs)
				}
				if len(jobs) == 0 {
					fmt.Fprintln(g.stdout, "no jobs")
					return nil
				}
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tTYPE\tSTATUS\tALLOCATIONS\tSUBMITTED\tNEXT LAUNCH")
				for _, j := range jobs {
					next := "-"
					if j.NextLaunch != nil {
						next = j.NextLaunch.Format(time.RFC3339)
					}
					typ := j.Type
					if len(j.Periodic) > 0 {
						typ += "/periodic"
					}
					if j.Parameterized {
						typ += "/parameterized"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, dash(typ), j.Status, counts(j.Allocations), j.SubmittedAt.Local().Format(time.RFC3339), next)
				}
				return w.Flush()
			}
			st, err := c.Job(cmd.Context(), args[0])
			if err != nil {
				return agentErr(err)
			}
			if g.JSON {
				return g.PrintJSON(st)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "ID\t%s\n", st.ID)
			fmt.Fprintf(w, "Type\t%s\n", dash(st.Type))
			fmt.Fprintf(w, "Status\t%s\n", st.Status)
			if st.ParentID != "" {
				fmt.Fprintf(w, "Parent\t%s\n", st.ParentID)
			}
			if len(st.Periodic) > 0 {
				fmt.Fprintf(w, "Periodic\t%s\n", strings.Join(st.Periodic, " | "))
			}
			if st.NextLaunch != nil {
				fmt.Fprintf(w, "Next launch\t%s\n", st.NextLaunch.Format(time.RFC3339))
			}
			fmt.Fprintf(w, "Submitted\t%s\n", st.SubmittedAt.Local().Format(time.RFC3339))
			if st.FinishedAt != nil {
				fmt.Fprintf(w, "Finished\t%s\n", st.FinishedAt.Local().Format(time.RFC3339))
			}
			if st.Error != "" {
				fmt.Fprintf(w, "Error\t%s\n", st.Error)
			}
			fmt.Fprintf(w, "Allocations\t%s\n", counts(st.JobStub.Allocations))
			if err := w.Flush(); err != nil {
				return err
			}
			if len(st.Children) > 0 {
				// Nomad's headings: a periodic job's launches, a
				// parameterized job's dispatches.
				title := "Previously Launched Jobs"
				if st.Parameterized {
					title = "Dispatched Jobs"
				}
				fmt.Fprintf(g.stdout, "\n%s\n", title)
				cw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(cw, "ID\tSTATUS\tALLOCATIONS\tSUBMITTED")
				for _, c := range st.Children {
					fmt.Fprintf(cw, "%s\t%s\t%s\t%s\n", c.ID, c.Status, counts(c.Allocations), c.SubmittedAt.Local().Format(time.RFC3339))
				}
				if err := cw.Flush(); err != nil {
					return err
				}
			}
			if len(st.Allocations) > 0 {
				fmt.Fprintln(g.stdout)
				return printAllocTable(g, st.Allocations)
			}
			return nil
		},
	}
}

// counts formats a status histogram as "complete 3, failed 1".
func counts(by map[string]int) string {
	var parts []string
	for k, v := range by {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// printAllocTable is the table of `alloc ls` and `job status JOB`.
func printAllocTable(g *Globals, allocs []api.AllocStub) error {
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tJOB\tGROUP\tSTATUS\tEXIT\tNETWORK\tIPV4\tCREATED")
	for _, a := range allocs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(a.ID), a.JobID, a.Group, a.Status,
			allocExits(a.Tasks), dash(a.Network), dash(strings.Join(a.IPv4, ",")), a.CreatedAt.Local().Format(time.RFC3339))
	}
	return w.Flush()
}

// allocExits is an allocation's EXIT cell (exitCell) from its tasks.
func allocExits(tasks []api.TaskStub) string {
	exits := make([]string, len(tasks))
	for i, t := range tasks {
		exits[i] = t.Exit()
	}
	return exitCell(exits)
}

// exitCell is the EXIT cell of an allocation whose tasks' exits
// (api.ExitText) are exits: in task order, "-" for one still running (no
// exit yet), "not started" for one that never ran; "-" alone while none
// has ended.
func exitCell(exits []string) string {
	out := make([]string, len(exits))
	ended := false
	for i, e := range exits {
		out[i] = dash(e)
		ended = ended || e != ""
	}
	if !ended {
		return "-"
	}
	return strings.Join(out, ",")
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
