package runner

import "context"

// TakeStartSlot takes one of the runner's start slots (client.start_workers)
// as a starting allocation does, until release: a test that holds them all
// keeps allocations pending, as a loaded node does.
func (r *Runner) TakeStartSlot(ctx context.Context) (release func(), err error) {
	return r.starts.acquire(ctx)
}
