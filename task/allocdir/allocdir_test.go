package allocdir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func id(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// The remover removes what it is given (allocation IDs only, never a path
// out of its root), in the background, and Close finishes the queue.
func TestRemover(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for i := range 200 {
		if err := os.MkdirAll(filepath.Join(root, id(i), "sub"), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	r := NewRemover(root, nil)
	var ids []string
	for i := range 150 {
		ids = append(ids, id(i))
	}
	r.Remove(append(ids, "../"+filepath.Base(outside), "not-an-id", "")...)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.Removed() != 150 || r.Pending() != 0 {
		t.Errorf("removed %d, pending %d", r.Removed(), r.Pending())
	}
	left, _ := os.ReadDir(root)
	if len(left) != 50 {
		t.Errorf("%d directories left, want 50", len(left))
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a path outside the root was touched: %v", err)
	}
	r.Remove(id(199)) // after Close: ignored
	if _, err := os.Stat(filepath.Join(root, id(199))); err != nil {
		t.Errorf("removed after Close: %v", err)
	}
}

// Close gives up when its context ends, saying how many are left.
func TestRemoverCloseDeadline(t *testing.T) {
	root := t.TempDir()
	r := NewRemover(root, nil)
	var ids []string
	for i := range 10000 {
		ids = append(ids, id(i))
	}
	r.Remove(ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); err == nil && r.Pending() > 0 {
		t.Errorf("Close returned nil with %d pending", r.Pending())
	}
}

// Unknown lists the allocation directories without a record, and lists
// the directories before it asks for the records.
func TestUnknown(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{id(1), id(2), id(3), "lost+found"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, id(4)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Unknown(context.Background(), root, func(context.Context) (map[string]bool, error) {
		// Made after the listing, with its record: never a candidate.
		if err := os.Mkdir(filepath.Join(root, id(5)), 0o750); err != nil {
			t.Fatal(err)
		}
		return map[string]bool{id(2): true, id(5): true}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{id(1), id(3)}) {
		t.Errorf("unknown: %v", got)
	}
	if got, err := Unknown(context.Background(), filepath.Join(root, "none"), nil); err != nil || got != nil {
		t.Errorf("missing root: %v %v", got, err)
	}
}
