package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Issue 18 item 6: a teardown of 1,000 tasks failed on the agent's own
// store lock deadline. The agent's own readers (every allocation's
// goroutine, the API) kept the shared transaction lock held between them,
// so its writer, polling for the exclusive one, never got it. The process
// lets its writer in ahead of readers that came after it: with readers
// reading without pause, every write still lands.
func TestHarden2OwnReadersDoNotStarveWrites(t *testing.T) {
	dir := t.TempDir()
	// A short deadline: the writes must not need it at all.
	s, err := Open(context.Background(), dir, Options{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const writers, readers = 200, 32
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	for i := 0; i < readers; i++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.ListAllocations(ctx, AllocFilter{JobID: "btstore-job"})
			}
		}()
	}
	var wwg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 0; i < writers; i++ {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			a := &Allocation{ID: fmt.Sprintf("btstore-%04d", i), JobID: "btstore-job", Status: AllocRunning}
			if err := s.PutAllocation(ctx, a); err != nil {
				errs <- err
				return
			}
			a.Status = AllocComplete
			errs <- s.PutAllocation(ctx, a)
		}()
	}
	wwg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if failed == 0 {
				t.Errorf("write failed beside the process's own readers: %v", err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d allocations not recorded terminal", failed, writers)
	}
}
