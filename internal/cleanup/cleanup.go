// Package cleanup gives undo work its own context. Undoing what a failed
// or cancelled operation acquired must still happen when the operation's
// context has ended (that is often why it failed), but must not run
// forever either: it gets the caller's values, none of its cancellation,
// and a deadline of its own.
package cleanup

import (
	"context"
	"time"
)

// Context returns a context for deferred cleanup after ctx: it keeps ctx's
// values, is not cancelled when ctx is, and ends after d.
//
//	defer func() {
//		if err != nil {
//			cctx, cancel := cleanup.Context(ctx, time.Minute)
//			defer cancel()
//			err = errors.Join(err, undo(cctx))
//		}
//	}()
func Context(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
