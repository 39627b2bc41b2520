package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/berth/berth/api"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
	"github.com/berth/berth/node/nomad"
)

func newAgentCmd(g *Globals) *cobra.Command {
	var file string
	// own are the agent's own settings as flags; the node's are the
	// global flags (g.flags).
	d := agent.DefaultConfig()
	var own *node.Flags
	var applyNomad func(*agent.Config)
	cmd := &cobra.Command{
		Use:   "agent [-config FILE] [flags]",
		Short: "Run berth as a service: run submitted jobs, serve the HTTP API and /metrics, collect garbage",
		Long: `Run berth as a long-running agent. It owns the data dir, reconciles what a
previous agent left (tasks of a killed agent, half-made or pending teardowns),
re-adopts the allocations a previous agent left running (tasks re-attached,
namespaces CHECKed and healed), resumes periodic and service jobs, serves the
HTTP API on a unix socket (mode 0600) and optionally on TCP with a bearer
token, and collects garbage periodically. SIGTERM or SIGINT stops the agent
and leaves its workloads running for the next agent (an upgrade: stop,
replace the binary, start); 'berth agent drain' (or drain_on_shutdown = true)
stops every task within its kill_timeout and tears every network down first.

Settings come from the HCL file given with -config (see
examples/agent/berth.hcl); every setting but api.token is also a flag, named
as in the file with '-' for '_' (a block's settings with the block's name in
front: bridge { subnet } is --bridge-subnet, api { socket } --api-socket), and
a flag given on the command line wins over the file. Both -config and
--config are accepted.`,
		// Checked after parsing: flags arrive as arguments.
		Args: cobra.ArbitraryArgs,
		// Parsed in RunE, so that Go-style single-dash long flags
		// (-config) work as Nomad's do.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// cobra's ParseFlags does nothing with DisableFlagParsing;
			// InheritedFlags merges the global flags into Flags first.
			cmd.InheritedFlags()
			if err := cmd.Flags().Parse(longFlags(cmd, args)); err != nil {
				if errors.Is(err, pflag.ErrHelp) {
					return cmd.Help()
				}
				return err
			}
			if help, _ := cmd.Flags().GetBool("help"); help {
				return cmd.Help()
			}
			if rest := cmd.Flags().Args(); len(rest) > 0 {
				return fmt.Errorf("berth agent takes no arguments, got %q", rest)
			}
			cfg := agent.DefaultConfig()
			if file != "" {
				var err error
				if cfg, err = agent.LoadConfig(file); err != nil {
					return err
				}
			}
			g.flags.Overlay(&cfg.Config)
			own.Overlay(&cfg)
			applyNomad(&cfg)
			if g.runAgent != nil {
				return g.runAgent(cmd.Context(), cfg)
			}
			return runAgent(cmd.Context(), g, cfg)
		},
	}
	f := cmd.Flags()
	// The deprecation notes of old flag spellings go to the user.
	f.SetOutput(g.stderr)
	f.StringVar(&file, "config", "", "HCL configuration file (settings given as flags win over it)")
	own = node.BindFlags(f, &d)
	// The nomad block's flags; its other settings come from the file or
	// the nomad CLI's environment (the token never from a flag).
	var nomadAddr, nomadGrace, nomadDataDir, nomadDeadline string
	f.StringVar(&nomadAddr, "nomad-address", "", "reclaim what Nomad leaves on this node, asking this node's Nomad client agent at this address (as a nomad block; other settings from NOMAD_* variables)")
	f.StringVar(&nomadGrace, "nomad-grace-period", "", "with a nomad block: reclaim what Nomad no longer knows once its evidence is older than this (default 1h)")
	f.StringVar(&nomadDataDir, "nomad-data-dir", "", "with a nomad block: the Nomad agent's data_dir, where its client's identity and allocations are checked (default "+nomad.DefaultDataDir+")")
	f.StringVar(&nomadDeadline, "nomad-teardown-deadline", "", "with a nomad block: how long a terminal allocation's CNI attachment is left to Nomad's own teardown while its client lives (default 10m)")
	cmd.AddCommand(newAgentDrainCmd(g))
	applyNomad = func(cfg *agent.Config) {
		if nomadAddr == "" && nomadGrace == "" && nomadDataDir == "" && nomadDeadline == "" {
			return
		}
		if cfg.Nomad == nil {
			cfg.Nomad = &nomad.Config{}
		}
		if nomadAddr != "" {
			cfg.Nomad.Address = nomadAddr
		}
		if nomadGrace != "" {
			cfg.Nomad.GracePeriod = nomadGrace
		}
		if nomadDataDir != "" {
			cfg.Nomad.DataDir = nomadDataDir
		}
		if nomadDeadline != "" {
			cfg.Nomad.TeardownDeadline = nomadDeadline
		}
	}
	return cmd
}

func runAgent(ctx context.Context, g *Globals, cfg agent.Config) error {
	// A bad log setting is reported by agent.New, with every other problem.
	logger, _ := cfg.NewLogger(g.stderr)
	a, err := agent.New(cfg, logger, agent.WithVersion(Version), agent.WithBanner(g.stdout))
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// longFlags turns Go-style single-dash long flags ("-config x",
// "-data-dir=x") into pflag's double-dash form. Shorthands (-h) and
// anything after "--" are left alone.
func longFlags(cmd *cobra.Command, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// ClientFlags are the flags of the commands that talk to an agent. The
// token is never a flag's value (ps shows command lines): it comes from
// BERTH_TOKEN or a file (--token-file, BERTH_TOKEN_FILE).
type ClientFlags struct {
	Address   string
	TokenFile string
	// Token is the removed --token, kept hidden to say what to use.
	Token         string
	CACert        string
	ClientCert    string
	ClientKey     string
	TLSServerName string
}

func (cf *ClientFlags) register(cmd *cobra.Command) {
	addr := os.Getenv(api.EnvAddress)
	if addr == "" {
		addr = api.DefaultAddress
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&cf.Address, "address", addr, "agent address: unix:///path/to/berth.sock, http://host:port or https://host:port (env "+api.EnvAddress+")")
	pf.StringVar(&cf.TokenFile, "token-file", os.Getenv(api.EnvTokenFile), "file holding the bearer token of an agent's TCP address (env "+api.EnvTokenFile+"; or the token itself in "+api.EnvToken+")")
	pf.StringVar(&cf.CACert, "ca-cert", os.Getenv(api.EnvCACert), "PEM CA certificate that signs the agent's certificate, for https:// (env "+api.EnvCACert+")")
	pf.StringVar(&cf.ClientCert, "client-cert", os.Getenv(api.EnvClientCert), "PEM client certificate for an agent that asks for one (env "+api.EnvClientCert+")")
	pf.StringVar(&cf.ClientKey, "client-key", os.Getenv(api.EnvClientKey), "PEM key of --client-cert (env "+api.EnvClientKey+")")
	pf.StringVar(&cf.TLSServerName, "tls-server-name", os.Getenv(api.EnvTLSServerName), "name the agent's certificate must carry, if not the address's host (env "+api.EnvTLSServerName+")")
	pf.StringVar(&cf.Token, "token", "", "removed: use "+api.EnvToken+" or --token-file")
	_ = pf.MarkHidden("token")
}

// ErrTokenFlag: --token was given; a token on the command line is visible
// to every user of the machine (ps, /proc/<pid>/cmdline).
var ErrTokenFlag = errors.New("--token is not accepted: a token on the command line is visible to every user (ps); put it in " + api.EnvToken + " or in a file named by --token-file")

// options are the client options the flags and the environment give.
func (cf *ClientFlags) options() (api.ClientOptions, error) {
	if cf.Token != "" {
		return api.ClientOptions{}, ErrTokenFlag
	}
	o := api.ClientOptions{Token: os.Getenv(api.EnvToken), CACert: cf.CACert, ClientCert: cf.ClientCert, ClientKey: cf.ClientKey, TLSServerName: cf.TLSServerName}
	if cf.TokenFile != "" {
		t, err := api.ReadTokenFile(cf.TokenFile)
		if err != nil {
			return o, err
		}
		o.Token = t
	}
	return o, nil
}

func (cf *ClientFlags) client() (*api.Client, error) {
	o, err := cf.options()
	if err != nil {
		return nil, err
	}
	return api.NewClientWithOptions(cf.Address, o)
}

// agentCall makes one call to the agent with a client of its own, and
// says what to do when no agent answers.
func agentCall[T any](cf *ClientFlags, call func(*api.Client) (T, error)) (T, error) {
	var zero T
	c, err := cf.client()
	if err != nil {
		return zero, err
	}
	defer c.Close()
	v, err := call(c)
	if err != nil {
		return zero, agentErr(err)
	}
	return v, nil
}

// agentErr adds what to do to an error of a command that needs an agent.
func agentErr(err error) error {
	var ae *api.Error
	var ua x509.UnknownAuthorityError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.Is(err, api.ErrNoAgent):
		return fmt.Errorf("%w\nstart one with `berth agent` (or point --address / %s at one)", err, api.EnvAddress)
	case errors.As(err, &ae) && ae.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w\nthe agent's TCP address wants its bearer token: set %s, or name a file holding it with --token-file (or %s)", err, api.EnvToken, api.EnvTokenFile)
	case errors.As(err, &ua), errors.As(err, &cv), strings.Contains(err.Error(), "x509: "):
		return fmt.Errorf("%w\nthe agent's certificate is not trusted here: name the CA that signed it with --ca-cert (or %s)", err, api.EnvCACert)
	}
	return err
}
