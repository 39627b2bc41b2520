package testenv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Serve runs serve (an agent's Run, say) in the background and returns
// once ready is closed; stop cancels serve's context and waits for it to
// return. The test's end stops it too, so a test that never calls stop
// leaves nothing running; calling stop earlier (to restart what it
// serves) is fine, and later calls do nothing. what names it in failures.
func Serve(t testing.TB, what string, serve func(context.Context) error, ready <-chan struct{}) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
			case <-time.After(5 * time.Minute):
				t.Errorf("%s did not stop within 5 minutes", what)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-ready:
	case err := <-errc:
		once.Do(cancel) // it is over: nothing for stop to wait for
		t.Fatalf("%s stopped before it was ready: %v", what, err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s not ready after 2 minutes", what)
	}
	return stop
}
