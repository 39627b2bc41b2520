// Package cli is berth's command line: cobra commands over the packages
// that do the work. cmd/berth only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
)

// Version and Commit are stamped at build time (scripts/install.sh does):
//
//	go build -ldflags "-X github.com/berth/berth/cli.Version=v0.2.0 -X github.com/berth/berth/cli.Commit=<sha>" ./cmd/berth
//
// An unstamped Commit falls back to the revision the go command recorded
// in the binary's build info (go build in a git checkout records it).
var (
	Version = "0.1.0-dev"
	Commit  = ""
)

// Globals are the flags every berth command accepts: the node's settings
// (node.Config, one flag each) and --json.
type Globals struct {
	node.Config
	JSON bool

	// flags are the node's settings as flags, which win over the agent's
	// file.
	flags          *node.Flags
	stdout, stderr io.Writer
	logger         *slog.Logger
	// logOut is where the logger writes: stderr, above a live status line
	// while a command shows one (liveLine).
	logOut *switchWriter
	// runAgent runs the agent with its configuration; tests replace it.
	runAgent func(context.Context, agent.Config) error
}

// Main runs berth with args and returns the process exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(NomadArgs(root, args))
	if err := root.ExecuteContext(ctx); err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			return int(ec)
		}
		var ee exitError
		if errors.As(err, &ee) {
			fmt.Fprintf(os.Stderr, "berth: %v\n", err)
			return ee.code
		}
		fmt.Fprintf(os.Stderr, "berth: %v\n", err)
		return 1
	}
	return 0
}

// exitCode ends a command with a status and no further message (the
// command already printed what went wrong).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exitError is an error printed as any other, with its own exit status
// (job plan's 255, as Nomad's).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	return newRoot(&Globals{Config: node.Default(), stdout: stdout, stderr: stderr})
}

func newRoot(g *Globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "berth",
		Short:         "Run workloads in their own network namespaces, wired with CNI, and leave nothing behind",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return g.setup()
		},
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	pf := root.PersistentFlags()
	g.flags = node.BindFlags(pf, &g.Config)
	pf.BoolVar(&g.JSON, "json", false, "print results as JSON")

	root.AddCommand(
		newVersionCmd(g),
		newNetCmd(g),
		newGCCmd(g),
		newValidateCmd(g),
		newRunCmd(g),
		newDoctorCmd(g),
		newAgentCmd(g),
		newJobCmd(g),
		newAllocCmd(g),
		newServiceCmd(g),
		newNetnsCmd(g),
		newStoreCmd(g),
	)
	return root
}

// setup checks the node's settings (a relative path on the command line
// is taken from the working directory) and makes the logger.
func (g *Globals) setup() error {
	if err := g.Config.Abs(); err != nil {
		return err
	}
	if err := g.Config.Validate(); err != nil {
		return err
	}
	g.logOut = &switchWriter{w: g.stderr}
	log, err := g.Config.NewLogger(g.logOut)
	if err != nil {
		return err
	}
	g.logger = log
	return nil
}

// showLive makes a live status line on the terminal w, with the log
// printed above it; the returned func stops it (keep: its last text stays
// on screen as a line). Nil when w is not a terminal.
func (g *Globals) showLive(w io.Writer) (*liveLine, func(keep bool)) {
	if !isTerminal(w) {
		return nil, func(bool) {}
	}
	l := &liveLine{term: w}
	if g.logOut != nil {
		g.logOut.set(l.writer(g.stderr))
	}
	return l, func(keep bool) {
		if g.logOut != nil {
			g.logOut.set(g.stderr)
		}
		l.clear(keep)
	}
}

// Logger is the logger the flags asked for.
func (g *Globals) Logger() *slog.Logger {
	if g.logger == nil {
		return slog.Default()
	}
	return g.logger
}

// Stdout is where results go.
func (g *Globals) Stdout() io.Writer { return g.stdout }

// newNode builds the node the flags describe, without its store: enough
// to validate jobs.
func (g *Globals) newNode(ctx context.Context) (*node.Node, error) {
	return node.New(ctx, g.Config, node.Options{Logger: g.Logger()})
}

// openNode opens the node the flags describe: store, attachment manager,
// drivers. closeNode ends it.
func (g *Globals) openNode(ctx context.Context) (*node.Node, error) {
	return node.Open(ctx, g.Config, node.Options{Logger: g.Logger()})
}

// closeNode closes the drivers a command made (a podman service berth
// started) and the store; a failure is worth a warning, not the command's
// result.
func (g *Globals) closeNode(ctx context.Context, n *node.Node) {
	if err := n.Close(ctx); err != nil {
		g.Logger().Warn("closing drivers and store", "err", err)
	}
}

// PrintJSON writes v as indented JSON.
func (g *Globals) PrintJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// VersionInfo is what `berth version` reports.
type VersionInfo struct {
	Version string `json:"version"`
	// Commit is the full revision berth was built from, with "-dirty"
	// when the work tree had changes; "unknown" when nobody recorded it.
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
}

// BuildVersion reports the stamped version and commit, or the commit the
// go command recorded when none was stamped.
func BuildVersion() VersionInfo {
	v := VersionInfo{Version: Version, Commit: Commit, GoVersion: runtime.Version()}
	if v.Commit != "" {
		return v
	}
	v.Commit = "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		v.Commit = rev
		if modified == "true" {
			v.Commit += "-dirty"
		}
	}
	return v
}

func newVersionCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print berth's version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := BuildVersion()
			if g.JSON {
				return g.PrintJSON(v)
			}
			fmt.Fprintf(g.stdout, "berth %s\ncommit %s\nbuilt with %s\n", v.Version, v.Commit, v.GoVersion)
			return nil
		},
	}
}
