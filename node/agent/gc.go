package agent

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

// collect runs garbage collection (gc_mode full: gc.Run; records:
// gc.ReplayPending) and records it in the metrics. why is "start",
// "periodic" or "api"; force retries pending teardowns before their
// backoff has passed (an operator asked).
func (a *Agent) collect(ctx context.Context, why string, req api.GCRequest, force bool) (*api.GCReport, error) {
	dryRun := req.DryRun
	a.gcMu.Lock()
	defer a.gcMu.Unlock()
	// The agent's own drivers (its podman service) stop tasks of a dead
	// agent.
	o := a.node.GCOptions()
	o.DryRun = dryRun
	// This agent re-adopted (claimed) what it could before its first
	// collection: what a stopped agent left and no one claimed is garbage.
	o.ReclaimDetached = true
	o.IgnoreBackoff = force
	o.TidyIdle = tidyIdle(force)
	o.ForeignPrefixes = req.ForeignPrefixes
	o.ForeignNetworks = req.ForeignNetworks
	o.Logger = a.log.With("gc", why)
	var rep *gc.Report
	var err error
	if a.cfg.GCMode == GCRecords {
		rep, err = gc.ReplayPending(ctx, o)
	} else {
		rep, err = gc.Run(ctx, o)
	}
	if rep == nil {
		if err == nil {
			err = errors.New("gc returned no report")
		}
		a.met.GCRun(err, nil)
		a.hist.RecordGC(time.Now(), why, nil, err)
		return nil, err
	}
	out := wireGCReport(rep)
	a.hist.RecordGC(time.Now(), why, out, err)
	if !dryRun {
		reclaimed := out.ReclaimedByKind
		runErr := err
		if runErr == nil && len(rep.Errors) > 0 {
			runErr = errors.New(strings.Join(rep.Errors, "; "))
		}
		a.met.GCRun(runErr, reclaimed)
		kept := boundedGCReport(out, api.MaxGCReportItems)
		a.mu.Lock()
		a.lastGC = kept
		a.mu.Unlock()
	}
	if len(rep.Reclaimed) > 0 || len(rep.Errors) > 0 {
		a.log.Info("garbage collection", "gc", why, "dry_run", dryRun, "found", len(rep.Found),
			"reclaimed", len(rep.Reclaimed), "errors", len(rep.Errors), "duration_ms", rep.DurationMS)
	}
	return out, err
}

// tidyIdle: a collection asked through the API tidies idle networks at
// once, as `berth gc` does; the agent's own wait (gc.DefaultTidyIdle).
func tidyIdle(asked bool) time.Duration {
	if asked {
		return 0
	}
	return gc.DefaultTidyIdle
}

func (a *Agent) gcLoop(ctx context.Context) {
	if a.set.gcInterval <= 0 {
		return
	}
	t := time.NewTicker(a.set.gcInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := a.collect(ctx, "periodic", api.GCRequest{}, false); err != nil && ctx.Err() == nil {
			a.log.Warn("periodic garbage collection failed", "err", err)
		}
	}
}

// refreshGauges sets the gauges that are read from the store rather than
// counted as things happen: allocations by status and pending teardowns.
func (a *Agent) refreshGauges(ctx context.Context) {
	if allocs, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{}); err == nil {
		by := map[string]int{}
		for _, s := range []store.AllocStatus{store.AllocPending, store.AllocRunning, store.AllocComplete, store.AllocFailed, store.AllocLost, store.AllocUnreadable} {
			by[string(s)] = 0
		}
		for _, al := range allocs {
			by[string(al.Status)]++
		}
		a.met.SetAllocations(by)
	}
	if recs, err := a.node.Store.ListAttachments(ctx); err == nil {
		n := 0
		for _, r := range recs {
			if r.Phase == store.PhaseTearingDown {
				n++
			}
		}
		a.met.SetPendingTeardowns(n)
	}
}
