package runner

import "context"

// Phases of an allocation, as a foreground run shows them while they last.
const (
	PhaseNetwork   = "setting up network"
	PhaseArtifacts = "fetching artifacts"
	PhaseStarting  = "starting"
	PhaseRunning   = "running"
	PhaseTeardown  = "tearing down"
	PhaseDone      = "done"
)

// phaseKey carries RunOptions.OnPhase to the allocations of a run, as
// net/http/httptrace carries its hooks: an observer of work done deep in
// the call tree, set by whoever started it.
type phaseKey struct{}

func withPhaseHook(ctx context.Context, fn func(allocID, phase string)) context.Context {
	if fn == nil {
		return ctx
	}
	return context.WithValue(ctx, phaseKey{}, fn)
}

// phase tells the run's observer, if any, that the allocation entered p.
func (a *allocRun) phase(ctx context.Context, p string) {
	if fn, ok := ctx.Value(phaseKey{}).(func(string, string)); ok && a.alloc != nil {
		fn(a.alloc.ID, p)
	}
}
