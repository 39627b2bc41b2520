package logfile

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTailLines(t *testing.T) {
	for _, tc := range []struct {
		content string
		n       int
		want    string
	}{
		{"a\nb\nc\nd\n", 3, "b\nc\nd\n"},
		{"a\nb\nc\nd", 3, "b\nc\nd"},
		{"a\nb\n", 3, "a\nb\n"},
		{"", 3, ""},
		{"a\n\n\nb\n", 2, "\nb\n"},
		{"only", 1, "only"},
		{"x\n", 1, "x\n"},
		{string(bytes.Repeat([]byte("0123456789\n"), 10000)), 2, "0123456789\n0123456789\n"},
	} {
		f, err := os.CreateTemp(t.TempDir(), "log")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(tc.content); err != nil {
			t.Fatal(err)
		}
		off, err := TailLines(f, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if got := tc.content[off:]; got != tc.want {
			t.Errorf("TailLines(%.20q, %d) = %q, want %q", tc.content, tc.n, got, tc.want)
		}
		f.Close()
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
	f, err := OpenBeneath(dir, "t.stdout", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var out lockedBuffer
	errc := make(chan error, 1)
	go func() {
		// A slow look: many rotations in between.
		errc <- Follow(context.Background(), dir, "t.stdout", f, &out, FollowOptions{Done: done.Load, Poll: 20 * time.Millisecond})
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
	if _, err := os.Stat(filepath.Join(dir, "t.stdout.20")); err != nil {
		t.Errorf("fewer rotations than the test means: %v", err)
	}
}
