package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/berth/berth/node/doctor"
	"github.com/berth/berth/node/nomad"
)

// nomadFlags are the flags that say how to reach the local Nomad client
// agent. Unset flags fall back to the nomad CLI's environment (NOMAD_ADDR,
// NOMAD_TOKEN, ...), as the nomad CLI does.
type nomadFlags struct {
	on        bool
	cfg       nomad.Config
	tokenFile string
}

// register adds the flags; onFlag names the switch that turns Nomad on
// ("" for none).
func (nf *nomadFlags) register(f *pflag.FlagSet, onFlag, onHelp string) {
	if onFlag != "" {
		f.BoolVar(&nf.on, onFlag, false, onHelp)
	}
	f.StringVar(&nf.cfg.Address, "nomad-address", "", "address of this node's Nomad client agent (env "+nomad.EnvAddress+", default "+nomad.DefaultAddress+")")
	// A token on the command line is visible to every user (ps): it
	// comes from the environment, as for the nomad CLI, or a file.
	f.StringVar(&nf.tokenFile, "nomad-token-file", "", "file holding the Nomad ACL token (agent:read, node:read, read-job in every namespace); default: env "+nomad.EnvToken)
	f.StringVar(&nf.cfg.Region, "nomad-region", "", "Nomad region (env "+nomad.EnvRegion+")")
	f.StringVar(&nf.cfg.Namespace, "nomad-namespace", "", "Nomad namespace whose allocation events the agent follows (env "+nomad.EnvNamespace+", default \"*\": all); a node's allocations are listed in every namespace")
	f.StringVar(&nf.cfg.CACert, "nomad-ca-cert", "", "CA certificate to verify Nomad's TLS certificate (env "+nomad.EnvCACert+")")
	f.StringVar(&nf.cfg.ClientCert, "nomad-client-cert", "", "client certificate for Nomad's mutual TLS (env "+nomad.EnvClientCert+")")
	f.StringVar(&nf.cfg.ClientKey, "nomad-client-key", "", "client key for Nomad's mutual TLS (env "+nomad.EnvClientKey+")")
	f.StringVar(&nf.cfg.TLSServerName, "nomad-tls-server-name", "", "server name to verify Nomad's TLS certificate against (env "+nomad.EnvTLSServerName+")")
	f.StringVar(&nf.cfg.GracePeriod, "nomad-grace-period", "", "reclaim what Nomad no longer knows only once its evidence is older than this (default 1h)")
	f.StringVar(&nf.cfg.DataDir, "nomad-data-dir", "", "the Nomad agent's data_dir: the client's identity (client/client-id, client/state.db) and its allocations (alloc/<id>) are checked there, never at a path the API names (default "+nomad.DefaultDataDir+")")
	f.StringVar(&nf.cfg.TeardownDeadline, "nomad-teardown-deadline", "", "how long a terminal allocation's CNI attachment is left to Nomad's own teardown while its client lives and holds the allocation (default 10m)")
	f.BoolVar(&nf.cfg.ReclaimWithoutEvidence, "nomad-reclaim-without-evidence", false, "also take namespaces named by an allocation ID for Nomad's when the host has no evidence they were (no alloc dir, no libcni cache entry, not held by the client): other runtimes name namespaces by UUIDs too")
}

// needSwitch refuses --nomad-* flags without the switch that uses them.
func (nf *nomadFlags) needSwitch(f *pflag.FlagSet, onFlag string) error {
	if nf.on {
		return nil
	}
	var err error
	f.Visit(func(fl *pflag.Flag) {
		if err == nil && strings.HasPrefix(fl.Name, "nomad-") {
			err = fmt.Errorf("--%s is given without --%s", fl.Name, onFlag)
		}
	})
	return err
}

// config is the environment with the flags given over it.
func (nf *nomadFlags) config() (nomad.Config, error) {
	c := nf.cfg
	if nf.tokenFile != "" {
		b, err := os.ReadFile(nf.tokenFile)
		if err != nil {
			return c, fmt.Errorf("--nomad-token-file: %w", err)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	return nomad.FromEnv(os.Getenv).Over(c), nil
}

// connect is the Nomad owner for a one-shot collection: any failure means
// nothing may be reclaimed.
func (g *Globals) connectNomad(ctx context.Context, nf *nomadFlags) (*nomad.Owner, error) {
	c, err := nf.config()
	if err != nil {
		return nil, err
	}
	s, err := c.Check()
	if err != nil {
		return nil, err
	}
	ow, err := nomad.Connect(ctx, s, nil, nomad.OwnerOptions{Logger: g.Logger(), NetnsDir: g.NetnsDir})
	if err != nil {
		return nil, fmt.Errorf("nomad: %w\nnothing was reclaimed: without an answer from this node's Nomad client agent no allocation can be proven dead", err)
	}
	return ow, nil
}

// nomadChecks are berth doctor's checks of the Nomad connection.
func (g *Globals) nomadChecks(ctx context.Context, nf *nomadFlags) []doctor.Check {
	c, err := nf.config()
	if err != nil {
		return []doctor.Check{{Name: "nomad/config", Status: doctor.StatusFail, Message: err.Error()}}
	}
	return nomad.Check(ctx, c)
}
