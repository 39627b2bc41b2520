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
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth/berth/attach"
	"github.com/berth/berth/cni"
	"github.com/berth/berth/hostclean"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/netns"
	"github.com/berth/berth/store"
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

// DefaultDataDir is where berth keeps its store.
const DefaultDataDir = "/var/lib/berth"

// Globals are the flags every berth command accepts.
type Globals struct {
	CNIConfigDir string
	CNIPath      string
	CNICacheDir  string
	NetnsDir     string
	DataDir      string
	LockDir      string
	LogLevel     string
	LogFormat    string
	JSON         bool

	stdout, stderr io.Writer
	logger         *slog.Logger
}

// Main runs berth with args and returns the process exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(NomadArgs(args))
	if err := root.ExecuteContext(ctx); err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			return int(ec)
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

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &Globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "berth",
		Short:         "Run workloads in their own network namespaces, wired with CNI, and leave nothing behind",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return g.setupLogging()
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.CNIConfigDir, "cni-config-dir", cni.DefaultConfDir, "directory of CNI network configurations (.conflist, .conf, .json)")
	pf.StringVar(&g.CNIPath, "cni-path", strings.Join(cni.DefaultPluginPath(), ":"), "colon-separated directories searched for CNI plugins")
	pf.StringVar(&g.CNICacheDir, "cni-cache-dir", cni.DefaultCacheDir, "libcni cache directory (shared with other CNI runtimes)")
	pf.StringVar(&g.NetnsDir, "netns-dir", netns.DefaultDir, "directory where network namespaces are pinned")
	pf.StringVar(&g.DataDir, "data-dir", DefaultDataDir, "directory of berth's state")
	pf.StringVar(&g.LockDir, "lock-dir", attach.DefaultLockDir, "directory of the cross-process network locks")
	pf.StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.LogFormat, "log-format", "text", "log format: text or json")
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
		newNetnsCmd(g),
		newStoreCmd(g),
	)
	return root
}

func (g *Globals) setupLogging() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", g.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch g.LogFormat {
	case "text":
		g.logger = slog.New(slog.NewTextHandler(g.stderr, opts))
	case "json":
		g.logger = slog.New(slog.NewJSONHandler(g.stderr, opts))
	default:
		return fmt.Errorf("--log-format %q: use text or json", g.LogFormat)
	}
	return nil
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

// PluginPath splits --cni-path.
func (g *Globals) PluginPath() []string {
	var out []string
	for _, p := range filepath.SplitList(g.CNIPath) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CNIClient builds the CNI client the flags describe.
func (g *Globals) CNIClient() *cni.Client {
	return cni.NewClient(cni.Options{PluginPath: g.PluginPath(), CacheDir: g.CNICacheDir, Rules: hostclean.Rules{}, Logger: g.Logger()})
}

// OpenStore opens berth's store in the data dir, with an error that says
// what to do when another berth owns it or it is damaged.
func (g *Globals) OpenStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, g.DataDir, store.Options{Logger: g.Logger()})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Manager builds the attachment manager over an open store.
func (g *Globals) Manager(st *store.Store) *attach.Manager {
	start, _ := proc.SelfStartTime()
	return attach.New(attach.Options{
		Netns:          netns.NewManager(g.NetnsDir),
		CNI:            g.CNIClient(),
		ConfDir:        g.CNIConfigDir,
		Store:          st,
		Logger:         g.Logger(),
		LockDir:        g.LockDir,
		OwnerPID:       os.Getpid(),
		OwnerStartTime: start,
	})
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
