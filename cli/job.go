package cli

import (
	"fmt"
	"io"
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
	cmd.AddCommand(newJobRunCmd(g, cf), newJobPlanCmd(g, cf), newJobDispatchCmd(g, cf), newJobStopCmd(g, cf), newJobStatusCmd(g, cf), newJobHistoryCmd(g, cf))
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
	var checkIndex uint64
	var detach bool
	cmd := &cobra.Command{
		Use:   "run [-var NAME=VALUE]... [-var-file FILE]... [-check-index N] JOBFILE",
		Short: "Submit a job to the agent: a new version; the same job again changes nothing",
		Long: `Submit a job to the agent. Its variables go with it: -var, the contents of -var-file and the
NOMAD_VAR_<name> entries of this environment; the agent resolves them (file() and the other
filesystem functions stay disabled there, as in Nomad's API). A parameterized job is registered and
runs only when dispatched (berth job dispatch).

As Nomad's "job run": the same job again (comments and layout do not count) while it runs changes
nothing; a change of only the job's meta, priority or datacenters is a new version applied in place
(the allocations keep running); any other change stops the running allocations and replaces them.
-check-index N (the Job Modify Index "berth job plan" prints) submits only if the job has not
changed since: 0 means it must not exist.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := vf.submitRequest(args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("check-index") {
				req.EnforceIndex, req.JobModifyIndex = true, checkIndex
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
			verb := fmt.Sprintf("submitted (version %d)", resp.Version)
			if resp.Parameterized {
				verb = fmt.Sprintf("registered (parameterized: it runs only when dispatched), version %d", resp.Version)
			}
			switch {
			case resp.Unchanged:
				verb = fmt.Sprintf("unchanged (version %d): nothing was stopped or restarted", resp.Version)
			case resp.Update == api.UpdateInPlace:
				verb = fmt.Sprintf("updated in place to version %d: its allocations keep running", resp.Version)
			case resp.Replaced:
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
	cmd.Flags().Uint64Var(&checkIndex, "check-index", 0, "submit only if the job's modify index is this one (berth job plan prints it; 0: the job must not exist)")
	// berth's job run never waits for the job: -detach is what it does.
	cmd.Flags().BoolVar(&detach, "detach", false, "return once the job is submitted (always so: accepted for Nomad's command lines)")
	cmd.Flags().Bool("verbose", false, "accepted for Nomad's command lines: berth prints the full job ID always")
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

// Exit statuses of `job plan`, as Nomad's.
const (
	planNoChange = 0   // no allocation created or destroyed
	planChanges  = 1   // allocations created or destroyed
	planError    = 255 // the plan failed
)

func newJobPlanCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	vf := &VarFlags{}
	var verbose bool
	diff := true
	cmd := &cobra.Command{
		Use:   "plan [-var NAME=VALUE]... [-var-file FILE]... [-verbose] [-diff=false] JOBFILE",
		Short: "Show what submitting a job would change (a diff against the running version); changes nothing",
		Long: `Plan a job as Nomad's "job plan": the diff against the job's current version ("+" added, "-"
removed, "+/-" changed), per group the allocations created, destroyed, updated in place or
replaced, and the Job Modify Index to pass to "berth job run -check-index". Exit status, as
Nomad's: 0 when no allocation would be created or destroyed, 1 when some would, 255 on an error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fail := func(err error) error { return exitError{code: planError, err: err} }
			req, err := vf.submitRequest(args[0])
			if err != nil {
				return fail(err)
			}
			resp, err := agentCall(cf, func(c *api.Client) (*api.JobPlanResponse, error) {
				return c.Plan(cmd.Context(), req)
			})
			if err != nil {
				return fail(err)
			}
			code := exitCode(planNoChange)
			if resp.CreatesOrDestroys {
				code = planChanges
			}
			if g.JSON {
				if err := g.PrintJSON(resp); err != nil {
					return fail(err)
				}
			} else {
				if !diff {
					resp.Diff = nil
				}
				printPlan(g.stdout, resp, args[0], verbose)
			}
			if code == planNoChange {
				return nil
			}
			return code
		},
	}
	vf.register(cmd)
	cmd.Flags().BoolVar(&verbose, "verbose", false, "show every field of an added job or group, not only the changed ones")
	cmd.Flags().BoolVar(&diff, "diff", true, "print the diff (-diff=false: only the allocations' counts and the modify index)")
	return cmd
}

// diffMark is Nomad's prefix of a diff line.
func diffMark(typ string) string {
	switch typ {
	case api.DiffAdded:
		return "+"
	case api.DiffDeleted:
		return "-"
	case api.DiffEdited:
		return "+/-"
	}
	return ""
}

func printFields(w io.Writer, indent string, fields []api.FieldDiff) {
	for _, f := range fields {
		switch f.Type {
		case api.DiffAdded:
			fmt.Fprintf(w, "%s+ %s: %q\n", indent, f.Name, f.New)
		case api.DiffDeleted:
			fmt.Fprintf(w, "%s- %s: %q\n", indent, f.Name, f.Old)
		default:
			fmt.Fprintf(w, "%s+/- %s: %q => %q\n", indent, f.Name, f.Old, f.New)
		}
	}
}

// updateKeys is the order Nomad prints a group's updates in.
var updateKeys = []string{api.UpdateKeyCreate, api.UpdateKeyDestroy, api.UpdateKeyInPlace, api.UpdateKeyDestructive, api.UpdateKeyIgnore}

// printPlan prints a plan as Nomad's `job plan` does.
func printPlan(w io.Writer, p *api.JobPlanResponse, file string, verbose bool) {
	if d := p.Diff; d != nil {
		printDiff(w, d, verbose)
	}
	fmt.Fprintf(w, "\nScheduler dry-run:\n- All tasks successfully allocated.\n")
	for _, wn := range p.Warnings {
		fmt.Fprintf(w, "- warning: %s\n", wn)
	}
	if j := p.Job; j != nil && j.Periodic != nil && len(p.NextLaunches) > 0 {
		fmt.Fprintf(w, "- If submitted now, next periodic launch would be at %s.\n", p.NextLaunches[0].Format(time.RFC3339))
	}
	fmt.Fprintf(w, "\nJob Modify Index: %d\n", p.JobModifyIndex)
	fmt.Fprintf(w, "To submit the job with version verification run:\n\nberth job run -check-index %d %s\n\n", p.JobModifyIndex, file)
	fmt.Fprintf(w, "When running the job with the check-index flag, the job will only be run if the\n"+
		"job modify index given matches the agent's. If the index has changed, another\n"+
		"user has modified the job and the plan's results are potentially invalid.\n")
}

func newJobStopCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var o api.JobStopOptions
	var yes bool
	cmd := &cobra.Command{
		Use:   "stop [-purge] [-detach] [-yes] JOB",
		Short: "Stop a job: its tasks are stopped, its networks torn down; it stays listed as dead until -purge",
		Long: `Stop a job as Nomad's "job stop": its tasks are stopped and its networks torn down; the job stays
known as dead (stopped), with its allocations, until "berth job stop -purge" forgets it. Run again,
a stopped job starts as a new version. -detach returns at once, without waiting for the tasks and
networks to be gone; -yes is accepted for Nomad's command lines (berth never asks).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := agentCall(cf, func(c *api.Client) (*api.JobStopResponse, error) { return c.StopJobWith(cmd.Context(), args[0], o) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(resp)
			}
			if !resp.Stopped {
				what := "recorded dead"
				if o.Purge {
					what = "forgotten"
				}
				fmt.Fprintf(g.stdout, "job %q is stopping; it is %s once its tasks and networks are gone\n", resp.JobID, what)
				return nil
			}
			if resp.Purged {
				fmt.Fprintf(g.stdout, "job %q stopped and purged\n", resp.JobID)
			} else {
				fmt.Fprintf(g.stdout, "job %q stopped; it stays listed as dead until: berth job stop -purge %s\n", resp.JobID, resp.JobID)
			}
			if s := resp.Summary; s != nil {
				printSummary(g, s)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Purge, "purge", false, "forget the job once stopped (otherwise it stays listed as dead)")
	f.BoolVar(&o.Detach, "detach", false, "return at once, without waiting for the tasks and networks to be gone")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask (berth never asks; accepted for Nomad's command lines)")
	return cmd
}

func newJobHistoryCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var full bool
	cmd := &cobra.Command{
		Use:   "history [-full] JOB",
		Short: "List the versions the agent keeps of a job (the last 6), newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vs, err := agentCall(cf, func(c *api.Client) (*api.JobVersions, error) { return c.JobVersions(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(vs)
			}
			for i, v := range vs.Versions {
				if i > 0 {
					fmt.Fprintln(g.stdout)
				}
				w := tabwriter.NewWriter(g.stdout, 0, 4, 1, ' ', 0)
				fmt.Fprintf(w, "Version\t= %d\n", v.Version)
				fmt.Fprintf(w, "Stable\t= %v\n", v.Stable)
				fmt.Fprintf(w, "Submit Date\t= %s\n", v.SubmittedAt.Local().Format(time.RFC3339))
				if v.Current {
					fmt.Fprintf(w, "Current\t= true\n")
				}
				if v.ParseError != "" {
					fmt.Fprintf(w, "Parse Error\t= %s\n", v.ParseError)
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if full {
					fmt.Fprintf(g.stdout, "Source (%s):\n%s\n", v.Filename, strings.TrimRight(v.Source, "\n"))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "print each version's job file")
	return cmd
}

func newJobStatusCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var short, verbose bool
	cmd := &cobra.Command{
		Use:   "status [-short] [-verbose] [JOB]",
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
			status := st.Status
			if st.Stopped {
				status += " (stopped)"
			}
			fmt.Fprintf(w, "Status\t%s\n", status)
			fmt.Fprintf(w, "Version\t%d\n", st.Version)
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
			if len(st.Allocations) > 0 && !short {
				fmt.Fprintln(g.stdout)
				return printAllocTable(g, st.Allocations, verbose)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&short, "short", false, "leave out the allocations")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "full allocation IDs")
	return cmd
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
func printAllocTable(g *Globals, allocs []api.AllocStub, verbose bool) error {
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tJOB\tGROUP\tSTATUS\tEXIT\tNETWORK\tIPV4\tCREATED")
	for _, a := range allocs {
		id := shortID(a.ID)
		if verbose {
			id = a.ID
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, a.JobID, a.Group, a.Status,
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

// printDiff prints a job's diff as Nomad's plan does.
func printDiff(w io.Writer, d *api.JobDiff, verbose bool) {
	fmt.Fprintf(w, "%s Job: %q\n", diffMark(d.Type), d.ID)
	if d.Type == api.DiffEdited || verbose {
		printFields(w, "", d.Fields)
	}
	for _, tg := range d.TaskGroups {
		var ups []string
		for _, k := range updateKeys {
			if n := tg.Updates[k]; n > 0 {
				ups = append(ups, fmt.Sprintf("%d %s", n, k))
			}
		}
		fmt.Fprintf(w, "%s Task Group: %q", diffMark(tg.Type), tg.Name)
		if len(ups) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(ups, ", "))
		}
		fmt.Fprintln(w)
		if tg.Type == api.DiffEdited || verbose {
			printFields(w, "  ", tg.Fields)
		}
		for _, t := range tg.Tasks {
			fmt.Fprintf(w, "  %s Task: %q", diffMark(t.Type), t.Name)
			if len(t.Annotations) > 0 {
				fmt.Fprintf(w, " (%s)", strings.Join(t.Annotations, ", "))
			}
			fmt.Fprintln(w)
			if t.Type == api.DiffEdited || verbose {
				printFields(w, "    ", t.Fields)
			}
		}
	}
}
