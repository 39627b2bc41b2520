package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/node"
	"github.com/berth/berth/store"
)

// parseJob parses and validates a job file against the node (its drivers
// and CNI networks), with the job variables of vf and NOMAD_VAR_*. It
// opens nothing: an invalid job leaves no data dir behind. With
// nodeWarnings (validate), what only this node decides (a driver, a user,
// a CNI network it lacks...) is a warning, as Nomad's validate knows no
// node; without (run), an error.
func (g *Globals) parseJob(ctx context.Context, n *node.Node, path string, vf *VarFlags, nodeWarnings bool) (*jobspec.Job, error) {
	opts := n.ParseOptions(ctx)
	opts.AllowFS = true
	opts.NodeWarnings = nodeWarnings
	vf.apply(&opts)
	return jobspec.ParseFileContext(ctx, path, opts)
}

// placeJob is parseJob, then a refusal when this node does not meet the
// job's constraints or node pool, or could never hold one launch of it:
// before anything is created.
func (g *Globals) placeJob(ctx context.Context, n *node.Node, path string, vf *VarFlags) (*jobspec.Job, error) {
	job, err := g.parseJob(ctx, n, path, vf, false)
	if err != nil {
		return nil, err
	}
	if err := n.Place(ctx, job); err != nil {
		return nil, err
	}
	return job, nil
}

// argsEnd is the annotation of a command whose flags end at its first
// positional argument (alloc exec: what follows is the command's own,
// flags included), as Nomad's commands parse.
const argsEnd = "berth.flags-end-at-first-arg"

// NomadArgs rewrites the single-dash long flags Nomad's commands take
// ("-short", "-verbose", "-address=ADDR", "-check-index 3") to the
// double-dash form the flag parser knows, for the command args name in
// root's tree: "-NAME" or "-NAME=VALUE" with a NAME of two or more
// letters that the command (or a parent) has as a long flag. Shorthands
// ("-n 5", "-f", "-it") and unknown words stay as they are; so does
// everything after "--", and after the first positional argument of a
// command marked argsEnd.
func NomadArgs(root *cobra.Command, args []string) []string {
	out := make([]string, 0, len(args))
	cmd := root
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			if sub := subcommand(cmd, a); sub != nil {
				cmd = sub
			} else if cmd.Annotations[argsEnd] != "" {
				return append(out, args[i:]...)
			}
			out = append(out, a)
			continue
		}
		double := strings.HasPrefix(a, "--")
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		switch {
		case name == "help" && !double:
			a = "-" + a
		case len(name) > 1:
			if f = lookupFlag(cmd, name); f != nil && !double {
				a = "-" + a
			}
		case len(name) == 1 && !double:
			f = lookupShorthand(cmd, name)
		}
		out = append(out, a)
		// A flag's value is no subcommand name: skip it.
		if f != nil && f.NoOptDefVal == "" && !hasValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// lookupFlag finds a long flag of cmd: its own, or a parent's persistent
// one.
func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	for c := cmd; c != nil; c = c.Parent() {
		if f := c.PersistentFlags().Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

func lookupShorthand(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().ShorthandLookup(name); f != nil {
		return f
	}
	for c := cmd; c != nil; c = c.Parent() {
		if f := c.PersistentFlags().ShorthandLookup(name); f != nil {
			return f
		}
	}
	return nil
}

// VarFlags are the job-variable flags of validate, run and job run/plan:
// -var NAME=VALUE and -var-file FILE, repeatable, plus NOMAD_VAR_<name>
// from the environment.
type VarFlags struct {
	Vars     []string
	VarFiles []string
}

func (vf *VarFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&vf.Vars, "var", nil, "set a job variable: -var NAME=VALUE (repeatable; a later one wins)")
	cmd.Flags().StringArrayVar(&vf.VarFiles, "var-file", nil, "read job variables from an HCL file, or JSON when named *.json (repeatable)")
}

// apply puts the flags and the environment's NOMAD_VAR_ values in opts;
// a nil VarFlags sets only the environment.
func (vf *VarFlags) apply(opts *jobspec.ParseOptions) {
	opts.Env = os.Environ()
	if vf != nil {
		opts.Vars, opts.VarFiles = vf.Vars, vf.VarFiles
	}
}

func newValidateCmd(g *Globals) *cobra.Command {
	vf := &VarFlags{}
	cmd := &cobra.Command{
		Use:   "validate [-var NAME=VALUE]... [-var-file FILE]... JOBFILE",
		Short: "Parse and validate a job file; print the normalized job and, for a periodic job, its next launches",
		Long: `Parse and validate a job file as Nomad 1.6.5's "nomad job validate" does. Exit status 0 when
the file is valid; warnings (blocks that do not apply on one node, and what run refuses on this
node: constraints it does not meet, a driver, task user or CNI network it lacks, a template or
driver config it cannot serve) are printed and never change the exit status. Job variables come
from -var, -var-file and NOMAD_VAR_<name> in the environment (a -var wins over a file, a file over
the environment).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := g.newNode(cmd.Context())
			if err != nil {
				return err
			}
			job, err := g.parseJob(cmd.Context(), n, args[0], vf, true)
			if err != nil {
				return err
			}
			// As with constraints: validate warns, run refuses.
			var ee *runner.ExhaustedError
			if err := n.Capacity.Admissible(job); errors.As(err, &ee) {
				d := ee.Diagnostic()
				d.Detail += "; the file is valid, but run refuses the job on this node"
				job.Warnings = append(job.Warnings, d)
			}
			var next []time.Time
			if job.Periodic != nil {
				next = job.Periodic.NextN(time.Now(), 5)
			}
			if g.JSON {
				return g.PrintJSON(map[string]any{"job": job, "next_launches": next})
			}
			w := g.stdout
			fmt.Fprintf(w, "job %q is valid: type %s, %d group(s)\n", job.ID, job.Type, len(job.Groups))
			for _, gr := range job.Groups {
				var tasks []string
				for _, t := range gr.Tasks {
					tasks = append(tasks, t.Name+" ("+t.Driver+")")
				}
				fmt.Fprintf(w, "  group %q: count %d, network %s, restart %d/%s %s, tasks: %s\n", gr.Name, gr.Count, gr.Network.Mode, gr.Restart.Attempts, gr.Restart.Interval, gr.Restart.Mode, strings.Join(tasks, ", "))
				if gr.Reschedule.Set {
					fmt.Fprintf(w, "    reschedule: accepted, does not apply (berth runs on one node)\n")
				}
			}
			for _, d := range job.Warnings {
				fmt.Fprintf(w, "  warning: %s\n", d.String())
			}
			if job.Periodic != nil {
				fmt.Fprintf(w, "  periodic %s (time zone %s, prohibit_overlap %v, enabled %v); next launches:\n", strings.Join(job.Periodic.Crons, " | "), job.Periodic.TimeZone, job.Periodic.ProhibitOverlap, job.Periodic.Enabled)
				for _, t := range next {
					fmt.Fprintf(w, "    %s\n", t.Format(time.RFC3339))
				}
			}
			return nil
		},
	}
	vf.register(cmd)
	return cmd
}

func newRunCmd(g *Globals) *cobra.Command {
	var maxRuns int
	var forDur time.Duration
	var payload string
	vf := &VarFlags{}
	df := &DispatchFlags{}
	cmd := &cobra.Command{
		Use:   "run [-var NAME=VALUE]... [-var-file FILE]... [-meta KEY=VALUE]... [--payload FILE|-] JOBFILE",
		Short: "Run a job on this machine in the foreground; print each allocation and a summary with a leak check",
		Long: `Run a job on this machine in the foreground. Each allocation prints a line (ID, status,
exit codes, network setup and teardown ms); the summary gives allocations by status, setup and
teardown p50/p99, teardown retries and holders, and a leak check of what this run created.
Exit status 0 only if every allocation completed and nothing leaked. Ctrl-C stops launching,
stops running tasks, tears their networks down and prints the summary. A parameterized job is
dispatched once, with -meta and --payload, and the child job runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			n, err := g.newNode(cmd.Context())
			if err != nil {
				return err
			}
			job, err := g.placeJob(ctx, n, args[0], vf)
			if err != nil {
				return err
			}
			if job, err = dispatchForeground(job, df, payload, cmd.InOrStdin()); err != nil {
				return err
			}
			if err := n.OpenStore(ctx); err != nil {
				return err
			}
			defer g.closeNode(ctx, n)
			g.Reconcile(ctx, n)
			r := n.Runner()
			out := newRunOutput(g.stdout, g.JSON)
			if g.logOut != nil {
				// Log records print above the status line, never into it.
				g.logOut.set(out.logTo(g.stderr))
			}
			out.watchServices(n.Services)
			sum, err := r.RunJob(ctx, job, out.options(maxRuns, forDur))
			out.close()
			if g.logOut != nil {
				g.logOut.set(g.stderr)
			}
			if err != nil {
				return err
			}
			out.summary(g, sum)
			if !sum.OK() {
				return exitCode(1)
			}
			return nil
		},
	}
	vf.register(cmd)
	df.register(cmd)
	cmd.Flags().StringVar(&payload, "payload", "", "the dispatch payload of a parameterized job: a file, or - for standard input")
	cmd.Flags().IntVar(&maxRuns, "max-runs", 0, "stop a periodic job after N launches (0: no limit)")
	cmd.Flags().DurationVar(&forDur, "for", 0, "stop launching and stop running tasks after this long (0: no limit)")
	return cmd
}

// startLine says where a started allocation can be reached: a user running
// a service in the foreground needs its address before it ends.
func startLine(a *store.Allocation) string {
	addr := "-"
	var ports []string
	if n := a.Network; n != nil {
		if len(n.IPv4) > 0 {
			addr = strings.Join(n.IPv4, ",")
		} else if n.Mode == "host" {
			addr = "host"
		}
		for _, p := range n.Ports {
			ports = append(ports, fmt.Sprintf("%s %s:%d -> %d", p.Label, p.HostIP, p.HostPort, p.To))
		}
	}
	line := fmt.Sprintf("%-36s  %-8s  %s", a.ID, "started", addr)
	if len(ports) > 0 {
		line += "  " + strings.Join(ports, ", ")
	}
	return line
}

// exitCodes is the EXIT cell (exitCell) of a run's allocation line.
func exitCodes(a *store.Allocation) string {
	var c []string
	for _, t := range a.Tasks {
		c = append(c, api.ExitText(t.State, t.NotStarted != "", t.ExitCode, 0))
	}
	return exitCell(c)
}

func printSummary(g *Globals, s *api.JobSummary) {
	w := g.stdout
	var st []string
	for k, v := range s.ByStatus {
		st = append(st, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(st)
	fmt.Fprintf(w, "\nsummary of job %q: %d launch(es), %d skipped (prohibit_overlap), %.1f s\n", s.Job, s.Launches, s.Skipped, s.Duration)
	fmt.Fprintf(w, "  allocations: %s\n", strings.Join(st, ", "))
	fmt.Fprintf(w, "  network setup    p50 %.1f ms, p99 %.1f ms\n", s.SetupP50, s.SetupP99)
	fmt.Fprintf(w, "  network teardown p50 %.1f ms, p99 %.1f ms\n", s.TeardownP50, s.TeardownP99)
	fmt.Fprintf(w, "  task exit to namespace gone p50 %.1f ms\n", s.ExitToGoneP50)
	fmt.Fprintf(w, "  teardown retries: %d\n", s.TeardownRetries)
	if len(s.Holders) > 0 {
		fmt.Fprintf(w, "  holders seen: %s\n", strings.Join(s.Holders, "; "))
	}
	if len(s.Leaks) == 0 {
		fmt.Fprintf(w, "  leak check: nothing left (namespaces, attachments, services, CNI cache, leases, iptables rules, containers)\n")
	} else {
		fmt.Fprintf(w, "  LEAK CHECK FAILED: %d left:\n    %s\n", len(s.Leaks), strings.Join(s.Leaks, "\n    "))
	}
	if len(s.Networks) > 0 {
		fmt.Fprintf(w, "  kept for the next run: the bridge and shared CNI chains of network %s (`berth gc` removes them once no interface uses them)\n",
			strings.Join(s.Networks, ", "))
	}
	for _, f := range s.Failed {
		fmt.Fprintf(w, "  failed: %s\n", f)
	}
}
