package logfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Start finds the last bytes or lines across the rotated files, and the
// oldest file's start without a tail.
func TestStart(t *testing.T) {
	files := map[string]string{"t.3": "a\nb\nc", "t.4": "\nd\n", "t.5": "e\nf\n"}
	all := "a\nb\nc\nd\ne\nf\n"
	for _, tc := range []struct {
		bytes int64
		lines int
		want  string
	}{
		{0, 0, all},
		{2, 0, "f\n"},
		{4, 0, "e\nf\n"},
		{5, 0, "\ne\nf\n"},
		{6, 0, "d\ne\nf\n"},
		{100, 0, all},
		{0, 1, "f\n"},
		{0, 2, "e\nf\n"},
		{0, 3, "d\ne\nf\n"},
		{0, 4, "c\nd\ne\nf\n"},
		{0, 6, all},
		{0, 60, all},
	} {
		dir := t.TempDir()
		for n, c := range files {
			must(t, os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644))
		}
		pos, err := Start(dir, "t", tc.bytes, tc.lines)
		must(t, err)
		var out bytes.Buffer
		must(t, Follow(context.Background(), dir, "t", pos, &out, FollowOptions{}))
		if out.String() != tc.want {
			t.Errorf("tail %d bytes, %d lines: %q (from %+v), want %q", tc.bytes, tc.lines, out.String(), pos, tc.want)
		}
	}
	if _, err := Start(t.TempDir(), "t", 0, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file: %v, want ErrNotExist", err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Follow reads everything a Rotator writes, in order, even when it rotates
// several times between two looks, and ends once the writer is done.
func TestFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	r, err := NewRotator(dir, "t.stdout", 50, 1000, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var out lockedBuffer
	errc := make(chan error, 1)
	go func() {
		// A slow look: many rotations in between.
		errc <- Follow(context.Background(), dir, "t.stdout", Position{}, &out, FollowOptions{Done: done.Load, Poll: 20 * time.Millisecond})
	}()
	var want bytes.Buffer
	for i := 0; i < 3000; i++ {
		line := fmt.Sprintf("line %05d\n", i)
		want.WriteString(line)
		if _, err := r.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			time.Sleep(30 * time.Millisecond)
		}
	}
	r.f.Close()
	done.Store(true)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Follow did not end once the writer was done")
	}
	if out.b.String() != want.String() {
		t.Errorf("followed %d bytes, want %d", out.b.Len(), want.Len())
	}
	if _, err := os.Stat(filepath.Join(dir, "t.stdout.30")); err != nil {
		t.Errorf("fewer rotations than the test means: %v", err)
	}
}
