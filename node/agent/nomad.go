package agent

import (
	"context"

	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/metrics"
	"github.com/berth/berth/node/nomad"
)

var _ nomad.Metrics = (*metrics.Metrics)(nil)

// startNomad runs the Nomad janitor (a nomad block) until ctx ends; the
// returned channel is closed when it has stopped.
func (a *Agent) startNomad(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if a.set.nomad == nil {
		close(done)
		return done
	}
	if a.cfg.GCMode == GCFull {
		// Nomad's networks are judged by Nomad; but a network that is in
		// berth's CNI config dir too is also swept as berth's own, where an
		// ID berth does not know is berth's leftover.
		a.log.Warn("nomad block with gc_mode full: berth's own sweep takes every attachment of the networks in its cni_config_dir for berth's; if Nomad's cni_config_dir is the same, use gc_mode \"records\" (as examples/nomad/berth-janitor.nomad.hcl does)",
			"cni_config_dir", a.cfg.CNIConfigDir)
	}
	go func() {
		defer close(done)
		_ = nomad.Run(ctx, nomad.RunOptions{
			Settings: *a.set.nomad,
			GC:       a.nomadGCOptions(),
			Interval: a.set.gcInterval,
			NetnsDir: a.cfg.NetnsDir,
			Metrics:  a.met,
			Logger:   a.log,
		})
	}()
	return done
}

// nomadGCOptions are the node's gc options for the janitor's runs: berth's
// own attachments are judged as always, Nomad's by its owner.
func (a *Agent) nomadGCOptions() gc.Options {
	o := a.node.GCOptions()
	o.Logger = a.log.With("gc", "nomad")
	return o
}

func (a *Agent) nomadBanner() string {
	if a.set.nomad == nil {
		return "(off)"
	}
	s := a.set.nomad
	return s.Address + " (reclaims what Nomad leaves; data dir " + s.DataDir + ", teardown deadline " + s.TeardownWait.String() + ", grace period " + s.Grace.String() + ")"
}
