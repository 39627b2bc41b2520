package agent

import (
	"context"

	"github.com/berth/berth/gc"
	"github.com/berth/berth/metrics"
	"github.com/berth/berth/nomad"
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
	go func() {
		defer close(done)
		_ = nomad.Run(ctx, nomad.RunOptions{
			Settings: *a.set.nomad,
			GC: gc.Options{
				Attach: a.m, Store: a.st, LockDir: a.cfg.LockDir,
				Logger: a.log.With("gc", "nomad"),
			},
			Interval: a.set.gcInterval,
			NetnsDir: a.cfg.NetnsDir,
			Metrics:  a.met,
			Logger:   a.log,
		})
	}()
	return done
}

func (a *Agent) nomadBanner() string {
	if a.set.nomad == nil {
		return "(off)"
	}
	s := a.set.nomad
	return s.Address + " (reclaims what Nomad leaves; grace period " + s.Grace.String() + ")"
}
