package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/pty"
)

// taskOf is the task a command names (-task or the argument), or the
// allocation's only one.
func taskOf(ctx context.Context, c *api.Client, alloc, task string) (string, error) {
	if task != "" {
		return task, nil
	}
	a, err := c.Allocation(ctx, alloc)
	if err != nil {
		return "", err
	}
	if len(a.Tasks) == 1 {
		return a.Tasks[0].Name, nil
	}
	var names []string
	for _, t := range a.Tasks {
		names = append(names, t.Name)
	}
	return "", fmt.Errorf("allocation %s has %d tasks (%s): name one with -task", a.ID, len(names), strings.Join(names, ", "))
}

func newAllocLogsCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var (
		stderr, tail, follow bool
		lines                int
		bytes                int64
		task                 string
	)
	cmd := &cobra.Command{
		Use:   "logs [-f] [-tail] [-n LINES | -c BYTES] [-stderr] ALLOC [TASK]",
		Short: "Print a task's stdout (or -stderr); -f follows it until the task is dead",
		Long: `Print a task's stdout (or -stderr), as "nomad alloc logs" does. -tail prints the end only: the
last -n lines (10 by default) or the last -c bytes; -n or -c alone imply -tail. -f keeps printing
what the task writes, across log rotation, until the task is dead and its log read to the end, or
Ctrl-C. The task is the argument, -task, or the allocation's only task.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if task != "" && task != args[1] {
					return fmt.Errorf("task %q given twice (-task %s): give one", args[1], task)
				}
				task = args[1]
			}
			fl := cmd.Flags()
			if fl.Changed("lines") && fl.Changed("bytes") {
				return errors.New("-n (lines) and -c (bytes) both given: give one")
			}
			if (fl.Changed("lines") && lines < 1) || (fl.Changed("bytes") && bytes < 1) {
				return fmt.Errorf("-n %d / -c %d: give a positive number", lines, bytes)
			}
			o := api.LogsOptions{Stderr: stderr, Follow: follow}
			switch {
			case fl.Changed("bytes"):
				o.TailBytes = bytes
			case fl.Changed("lines") || tail:
				o.TailLines = lines
			}
			_, err := agentCall(cf, func(c *api.Client) (struct{}, error) {
				t, err := taskOf(cmd.Context(), c, args[0], task)
				if err != nil {
					return struct{}{}, err
				}
				err = c.StreamAllocLogs(cmd.Context(), args[0], t, o, g.stdout)
				if errors.Is(err, context.Canceled) {
					// Ctrl-C ends a follow: not an error.
					err = nil
				}
				return struct{}{}, err
			})
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	f.BoolVar(&tail, "tail", false, "print the end only: the last -n lines (default 10) or -c bytes")
	f.IntVarP(&lines, "lines", "n", 10, "with -tail: the last LINES lines")
	f.Int64VarP(&bytes, "bytes", "c", 0, "with -tail: the last BYTES bytes")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing what the task writes until it is dead (or Ctrl-C)")
	f.StringVar(&task, "task", "", "the task (default: the allocation's only task)")
	return cmd
}

func newAllocExecCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var (
		stdin, tty bool
		task       string
	)
	cmd := &cobra.Command{
		Use:   "exec [-i] [-t] [-task T] ALLOC CMD [ARGS...]",
		Short: "Run a command in an allocation's task context: its network namespace, user, cgroup and filesystem",
		Long: `Run a command beside a running task, as "nomad alloc exec" does: in the allocation's network
namespace, as the task's user, in its cgroup and working directory; for an exec task also in its
root and its PID and IPC namespaces; for a podman task through "podman exec". -i (default on)
sends this terminal's input; -t gives the command a terminal (default: when stdin and stdout are
terminals). The exit status is the command's. As with Nomad's, flags end at the allocation: what
follows is the command with its own flags ("berth alloc exec ID /bin/sh -c 'echo hi'"); a "--"
before the command is accepted.`,
		Args:        cobra.MinimumNArgs(2),
		Annotations: map[string]string{argsEnd: "the command"},
		RunE: func(cmd *cobra.Command, args []string) error {
			alloc, command := args[0], args[1:]
			if d := cmd.ArgsLenAtDash(); d > 1 {
				return fmt.Errorf("one allocation before --, got %q: the command comes after --", args[:d])
			}
			// Flags end at the allocation (SetInterspersed(false)): a "--"
			// after it is the parser's, not the command's.
			if command[0] == "--" {
				command = command[1:]
			}
			if len(command) == 0 {
				return fmt.Errorf("no command after the allocation %s", alloc)
			}
			in := os.Stdin
			if !cmd.Flags().Changed("tty") {
				tty = stdin && pty.IsTerminal(in) && pty.IsTerminal(os.Stdout)
			}
			o := api.ExecOptions{Task: task, Cmd: command, TTY: tty, Stdout: g.stdout, Stderr: g.stderr}
			if stdin {
				r, closeIn := interruptibleStdin(in)
				defer closeIn()
				o.Stdin = r
			}
			if tty && pty.IsTerminal(in) {
				if rows, cols, err := pty.Size(in); err == nil {
					o.Rows, o.Cols = rows, cols
				}
				restore, err := pty.MakeRaw(in)
				if err != nil {
					return fmt.Errorf("put the terminal in raw mode: %w", err)
				}
				// Best effort on the way out: the exit status is the command's.
				defer func() { _ = restore() }()
				resize := make(chan [2]uint16, 1)
				o.Resize = resize
				defer forwardResize(func() (uint16, uint16, error) { return pty.Size(in) }, resize)()
			}
			code, err := agentCall(cf, func(c *api.Client) (int, error) { return c.Exec(cmd.Context(), alloc, o) })
			var ee *api.ExecError
			if errors.As(err, &ee) {
				fmt.Fprintf(g.stderr, "berth: %v\n", err)
				return exitCode(ee.Result.ExitCode)
			}
			if err != nil {
				return err
			}
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.BoolVarP(&stdin, "stdin", "i", true, "send this terminal's input to the command")
	f.BoolVarP(&tty, "tty", "t", false, "give the command a terminal (default: when stdin and stdout are terminals)")
	f.StringVar(&task, "task", "", "the task (default: the allocation's only task)")
	return cmd
}

// forwardResize sends the terminal's size (from size) on resize at each
// SIGWINCH, dropping a size when the last one is still unsent. The
// function it returns stops it and waits for its goroutine to end
// (signal.Stop does not close the channel, so a range over it never ends).
func forwardResize(size func() (rows, cols uint16, err error), resize chan<- [2]uint16) (stop func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-winch:
			}
			if rows, cols, err := size(); err == nil {
				select {
				case resize <- [2]uint16{rows, cols}:
				default:
				}
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		close(done)
		<-ended
	}
}

// interruptibleStdin opens stdin a second time when it is a terminal or a
// pipe: an open file description of its own can be non-blocking, so that
// api.Exec can interrupt a Read still waiting when the command has exited
// (and the shell's stdin stays as it was). Anything else is stdin itself:
// a regular file's Read does not wait, and reopening it would lose its
// offset.
func interruptibleStdin(in *os.File) (r *os.File, closeFn func()) {
	st, err := in.Stat()
	if err != nil || st.Mode()&(os.ModeCharDevice|os.ModeNamedPipe) == 0 {
		return in, func() {}
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", in.Fd()), os.O_RDONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		return in, func() {}
	}
	// Only read from: closing it loses nothing.
	return f, func() { _ = f.Close() }
}

func newAllocStopCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stop ALLOC",
		Short: "Stop an allocation (its tasks and network); a service or system job replaces it, a batch job does not",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := agentCall(cf, func(c *api.Client) (*api.AllocStopResponse, error) { return c.StopAlloc(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(r)
			}
			if !r.Stopped {
				fmt.Fprintf(g.stdout, "allocation %s is stopping still (see `berth alloc status %s`)\n", r.AllocID, shortID(r.AllocID))
				return nil
			}
			fmt.Fprintf(g.stdout, "allocation %s stopped\n", r.AllocID)
			return nil
		},
	}
}

func newAllocRestartCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var task string
	cmd := &cobra.Command{
		Use:   "restart [-task T] ALLOC [TASK]",
		Short: "Restart an allocation's running tasks in place (same namespace; not counted against the restart policy)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				task = args[1]
			}
			r, err := agentCall(cf, func(c *api.Client) (*api.AllocRestartResponse, error) {
				return c.RestartAlloc(cmd.Context(), args[0], task)
			})
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(r)
			}
			fmt.Fprintf(g.stdout, "allocation %s: restarted %s\n", r.AllocID, strings.Join(r.Tasks, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&task, "task", "", "restart only this task")
	return cmd
}

func newAllocSignalCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	var task, sig string
	cmd := &cobra.Command{
		Use:   "signal [-s SIGNAL] [-task T] ALLOC [TASK]",
		Short: "Send a signal (default SIGKILL, as Nomad) to the main process of an allocation's running tasks",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				task = args[1]
			}
			r, err := agentCall(cf, func(c *api.Client) (*api.AllocSignalResponse, error) {
				return c.SignalAlloc(cmd.Context(), args[0], task, sig)
			})
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(r)
			}
			fmt.Fprintf(g.stdout, "allocation %s: sent %s to %s\n", r.AllocID, r.Signal, strings.Join(r.Tasks, ", "))
			return nil
		},
	}
	cmd.Flags().StringVarP(&sig, "signal", "s", "SIGKILL", "the signal: a name (SIGUSR1, USR1) or a number")
	cmd.Flags().StringVar(&task, "task", "", "signal only this task")
	return cmd
}
