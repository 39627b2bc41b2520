package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestRetention(t *testing.T) {
	terminal := []AllocStatus{AllocComplete, AllocFailed, AllocLost}
	tests := []struct {
		name      string
		retention int // as passed in Options
		keep      int // what should be kept
		writes    int
	}{
		{"default", 0, DefaultRetention, 60},
		{"explicit 50", 50, 50, 60},
		{"small", 3, 3, 10},
		{"under the limit", 50, 50, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := openTest(t, Options{Retention: tt.retention})

			// Non-terminal allocs of the same job, written first so they
			// are the oldest: never pruned.
			for i := range 5 {
				a := &Allocation{ID: fmt.Sprintf("web-live-%02d", i), JobID: "web", Status: []AllocStatus{AllocPending, AllocRunning}[i%2]}
				if err := s.PutAllocation(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			// Same job ID in another namespace, and another job: untouched.
			for i := range 7 {
				for _, a := range []*Allocation{
					{ID: fmt.Sprintf("db-%02d", i), JobID: "db", Status: AllocComplete},
					{ID: fmt.Sprintf("ns2-web-%02d", i), Namespace: "ns2", JobID: "web", Status: AllocFailed},
				} {
					if err := s.PutAllocation(ctx, a); err != nil {
						t.Fatal(err)
					}
				}
			}
			var written []string
			for i := range tt.writes {
				a := &Allocation{ID: fmt.Sprintf("web-%03d", i), JobID: "web", Status: terminal[i%3]}
				if err := s.PutAllocation(ctx, a); err != nil {
					t.Fatal(err)
				}
				written = append(written, a.ID)
			}

			want := written[max(0, len(written)-tt.keep):]
			got := terminalIDs(t, s, "", "web")
			if !slices.Equal(got, want) {
				t.Errorf("kept %d terminal allocs of web: %v\nwant the newest %d: %v", len(got), got, len(want), want)
			}
			if live, _ := s.ListAllocations(ctx, AllocFilter{JobID: "web", NonTerminal: true}); len(live) != 5 {
				t.Errorf("non-terminal web allocs: %v, want all 5", ids(live))
			}
			// Their own retention applies, independent of web's writes.
			for _, job := range [][2]string{{"", "db"}, {"ns2", "web"}} {
				if n := len(terminalIDs(t, s, job[0], job[1])); n != min(7, tt.keep) {
					t.Errorf("job %s/%s has %d allocs, want %d", job[0], job[1], n, min(7, tt.keep))
				}
			}
			checkIndex(t, s)
		})
	}
}

// TestRetentionReindex: rewriting, updating and deleting terminal allocs
// must keep exactly one index entry per terminal alloc, or retention would
// count ghosts and prune too much.
func TestRetentionReindex(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{Retention: 3})
	for i := range 3 {
		if err := s.PutAllocation(ctx, &Allocation{ID: fmt.Sprint("a", i), JobID: "j", Status: AllocComplete}); err != nil {
			t.Fatal(err)
		}
	}
	// a0 is the oldest; touching it repeatedly makes it the newest.
	for range 5 {
		if err := s.UpdateAllocation(ctx, "a0", func(a *Allocation) error { a.StatusDesc += "."; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutAllocation(ctx, &Allocation{ID: "a1", JobID: "j", Status: AllocFailed}); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
	if got := terminalIDs(t, s, "", "j"); !slices.Equal(got, []string{"a2", "a0", "a1"}) {
		t.Fatalf("order after updates = %v", got)
	}
	// A new terminal alloc now pushes out a2, the least recently written.
	if err := s.PutAllocation(ctx, &Allocation{ID: "a3", JobID: "j", Status: AllocLost}); err != nil {
		t.Fatal(err)
	}
	if got := terminalIDs(t, s, "", "j"); !slices.Equal(got, []string{"a0", "a1", "a3"}) {
		t.Fatalf("after a3: %v", got)
	}
	// Back to running (a restart of the same alloc ID): out of the index.
	if err := s.UpdateAllocation(ctx, "a0", func(a *Allocation) error { a.Status = AllocRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAllocation(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
	// Moving an alloc to another job moves its index entry.
	if err := s.UpdateAllocation(ctx, "a3", func(a *Allocation) error { a.JobID = "k"; return nil }); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
	if err := s.DeleteAllocation(ctx, "a3"); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
	if err := s.view(context.Background(), func(tx *bolt.Tx) error {
		if tx.Bucket(bucketTerminal).Bucket([]byte("\x00k")) != nil {
			t.Error("empty index bucket of job k left behind")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// terminalIDs lists a job's terminal allocs oldest first (by ModifiedAt).
func terminalIDs(t *testing.T, s *Store, ns, job string) []string {
	t.Helper()
	list, err := s.ListAllocations(context.Background(), AllocFilter{Namespace: ns, JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	var out []*Allocation
	for _, a := range list {
		if a.Status.Terminal() && a.Namespace == ns {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *Allocation) int { return a.ModifiedAt.Compare(b.ModifiedAt) })
	return ids(out)
}

// checkIndex: the terminal index holds exactly the terminal allocations.
func checkIndex(t *testing.T, s *Store) {
	t.Helper()
	want := map[string]bool{}
	list, err := s.ListAllocations(context.Background(), AllocFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		if a.Status.Terminal() {
			want[string(jobKey(a))+"/"+string(terminalKey(a))] = true
		}
	}
	got := map[string]bool{}
	err = s.view(context.Background(), func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTerminal).ForEachBucket(func(job []byte) error {
			return tx.Bucket(bucketTerminal).Bucket(job).ForEach(func(k, _ []byte) error {
				got[string(job)+"/"+string(k)] = true
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("index has %d entries, want %d", len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("index misses %q", k)
		}
	}
}

// TestConcurrentWriters is meant for -race: many goroutines writing,
// updating and listing at once, and read-modify-write never losing an
// increment.
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{Retention: 5})
	if err := s.PutAllocation(ctx, &Allocation{ID: "counter", JobID: "c", Status: AllocRunning}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAttachment(ctx, &Attachment{ID: "counter"}); err != nil {
		t.Fatal(err)
	}
	const workers, ops = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*ops*5)
	for w := range workers {
		wg.Go(func() {
			for i := range ops {
				id := fmt.Sprintf("w%d-%d", w, i)
				errs <- s.PutAttachment(ctx, &Attachment{ID: id, Phase: PhaseIntent})
				errs <- s.UpdateAttachment(ctx, "counter", func(a *Attachment) error { a.TeardownAttempts++; return nil })
				errs <- s.UpdateAllocation(ctx, "counter", func(a *Allocation) error { a.TeardownRetries++; return nil })
				errs <- s.PutAllocation(ctx, &Allocation{ID: id, JobID: fmt.Sprint("job", w%2), Status: AllocComplete})
				_, err := s.ListAttachments(ctx)
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.GetAttachment(ctx, "counter")
	if err != nil || a.TeardownAttempts != workers*ops {
		t.Errorf("attachment counter = %+v, %v; want %d", a, err, workers*ops)
	}
	al, err := s.GetAllocation(ctx, "counter")
	if err != nil || al.TeardownRetries != workers*ops {
		t.Errorf("allocation counter = %+v, %v; want %d", al, err, workers*ops)
	}
	atts, err := s.ListAttachments(ctx)
	if err != nil || len(atts) != workers*ops+1 {
		t.Errorf("%d attachments, %v; want %d", len(atts), err, workers*ops+1)
	}
	for _, job := range []string{"job0", "job1"} {
		if n := len(terminalIDs(t, s, "", job)); n != 5 {
			t.Errorf("%s kept %d terminal allocs, want 5", job, n)
		}
	}
	checkIndex(t, s)
}

// OnPrune hears of every allocation retention deletes, once its
// transaction committed, whether the write was a put, an update or one of
// a batch; batch writes mark many records in one transaction.
func TestOnPruneAndBatches(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var pruned []string
	s, _ := openTest(t, Options{Retention: 2, OnPrune: func(ids []string) {
		mu.Lock()
		pruned = append(pruned, ids...)
		mu.Unlock()
	}})
	for i := range 3 {
		testenvMust(t, s.PutAllocation(ctx, &Allocation{ID: fmt.Sprintf("a-%d", i), JobID: "j", Status: AllocComplete}))
	}
	mu.Lock()
	if !slices.Equal(pruned, []string{"a-0"}) {
		t.Errorf("pruned after 3 puts: %v", pruned)
	}
	mu.Unlock()

	var batch []*Allocation
	for i := range 4 {
		batch = append(batch, &Allocation{ID: fmt.Sprintf("b-%d", i), JobID: "j", Status: AllocRunning})
	}
	testenvMust(t, s.PutAllocations(ctx, batch))
	ids := []string{"b-0", "b-1", "b-2", "missing"}
	errs, err := s.UpdateAllocations(ctx, ids, func(a *Allocation) error {
		if a.ID == "b-2" {
			return fmt.Errorf("not this one")
		}
		a.Status = AllocLost
		return nil
	})
	testenvMust(t, err)
	if len(errs) != 2 || errs["b-2"] == nil || errs["missing"] == nil || !errorsIs(errs["missing"], ErrNotFound) {
		t.Errorf("per-ID errors: %v", errs)
	}
	all, err := s.ListAllocations(ctx, AllocFilter{JobID: "j"})
	testenvMust(t, err)
	got := map[string]AllocStatus{}
	for _, a := range all {
		got[a.ID] = a.Status
	}
	want := map[string]AllocStatus{"b-0": AllocLost, "b-1": AllocLost, "b-2": AllocRunning, "b-3": AllocRunning}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("%s: %s, want %s (all: %v)", id, got[id], st, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Two lost records made a-1 and a-2 the oldest beyond retention 2.
	slices.Sort(pruned)
	if !slices.Equal(pruned, []string{"a-0", "a-1", "a-2"}) {
		t.Errorf("pruned: %v", pruned)
	}
	idset, err := s.AllocationIDs(ctx)
	testenvMust(t, err)
	if len(idset) != 4 || !idset["b-3"] || idset["a-2"] {
		t.Errorf("AllocationIDs: %v", idset)
	}
}

func testenvMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
