package flock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestExclusiveAndShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.lock")
	tests := []struct {
		name         string
		first, other Options
		wantBlock    bool
	}{
		{"shared+shared", Options{}, Options{}, false},
		{"shared+exclusive", Options{}, Options{Exclusive: true}, true},
		{"exclusive+shared", Options{Exclusive: true}, Options{}, true},
		{"exclusive+exclusive", Options{Exclusive: true}, Options{Exclusive: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := TryAcquire(path, tt.first)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock()
			o, err := TryAcquire(path, tt.other)
			if tt.wantBlock != errors.Is(err, ErrWouldBlock) {
				t.Fatalf("second lock: %v, want blocked=%v", err, tt.wantBlock)
			}
			o.Unlock()
		})
	}
}

func TestAcquireWaitsAndHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := Acquire(context.Background(), path, Options{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = Acquire(ctx, path, Options{Exclusive: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a held lock: %v, want deadline exceeded", err)
	}
	if pids := Holders(path); !slices.Contains(pids, os.Getpid()) {
		t.Errorf("Holders = %v, want this process %d", pids, os.Getpid())
	}
	go func() { time.Sleep(20 * time.Millisecond); l.Unlock() }()
	l2, err := Acquire(context.Background(), path, Options{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	l2.Unlock()
	l2.Unlock() // idempotent
}

// TestTransientMutualExclusion hammers one transient lock: the file is
// removed on each release, and no two holders may ever overlap.
func TestTransientMutualExclusion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.lock")
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				l, err := Acquire(context.Background(), path, Options{Exclusive: true, Transient: true})
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d overlapping holders of a transient lock", n)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("transient lock file left behind: %v", err)
	}
}

func TestTransientMustBeExclusive(t *testing.T) {
	if _, err := TryAcquire(filepath.Join(t.TempDir(), "x"), Options{Transient: true}); err == nil {
		t.Fatal("shared transient lock accepted")
	}
}
