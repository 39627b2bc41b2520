package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/testenv"
)

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// threadNetns is the inode of the calling thread's namespace (0 if it
// cannot be read); it runs inside WithPath, where t.Fatal must not.
func threadNetns() uint64 {
	var st unix.Stat_t
	if unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st) != nil {
		return 0
	}
	return st.Ino
}

func TestWithPathOpenFails(t *testing.T) {
	called := false
	err := WithPath(filepath.Join(t.TempDir(), "missing"), func() error { called = true; return nil })
	if err == nil || !errors.Is(err, unix.ENOENT) || called {
		t.Errorf("WithPath(missing) = %v, fn called %v; want ENOENT and fn not called", err, called)
	}
}

func TestWithPathNotANamespace(t *testing.T) {
	testenv.RequireRoot(t)
	called := false
	// A directory opens fine; setns refuses it.
	err := WithPath(t.TempDir(), func() error { called = true; return nil })
	if err == nil || !errors.Is(err, unix.EINVAL) || called {
		t.Errorf("WithPath(dir) = %v, fn called %v; want EINVAL and fn not called", err, called)
	}
}

// TestWithPathClosesBeforeReturning: the caller sees the thread's handle
// on its original namespace closed by the time WithPath returns, on every
// path. A result sent before that close made a caller's fd count (and, in
// the field, an unmount right after) race the closing goroutine.
func TestWithPathClosesBeforeReturning(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name string
		path string
		fn   func() error
	}{
		{"open fails", missing, func() error { return nil }},
		{"fn fails", "/proc/self/ns/net", func() error { return errors.New("fn") }},
		{"fn succeeds", "/proc/self/ns/net", func() error { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.path == "/proc/self/ns/net" {
				testenv.RequireRoot(t)
			}
			before := openFDs(t)
			for i := 0; i < 200; i++ {
				_ = WithPath(tc.path, tc.fn)
				if after := openFDs(t); after != before {
					t.Fatalf("call %d: open fds went from %d to %d", i, before, after)
				}
			}
		})
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestWithPath(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := testenv.Context(t, time.Minute)
	m := NewManager(filepath.Join(t.TempDir(), "netns"))
	t.Cleanup(func() { _ = unix.Unmount(m.Dir(), unix.MNT_DETACH) })
	process := nsInode(t, "/proc/self/ns/net")
	path, err := m.Create(ctx, "btns-enter-"+filepath.Base(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = RemovePath(context.Background(), path) })
	pinned := nsInode(t, path)
	if pinned == process {
		t.Fatal("the new namespace is the process's own")
	}

	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		ret  error
	}{{"ok", nil}, {"fn fails", boom}} {
		t.Run(tc.name, func(t *testing.T) {
			var inside uint64
			err := WithPath(path, func() error { inside = threadNetns(); return tc.ret })
			if !errors.Is(err, tc.ret) || (tc.ret == nil && err != nil) {
				t.Errorf("WithPath = %v, want %v", err, tc.ret)
			}
			if inside != pinned {
				t.Errorf("fn ran in netns inode %d, want the pinned %d", inside, pinned)
			}
		})
	}
	// Neither Create nor WithPath may leave the process (its main thread)
	// in another namespace; that would also keep the namespace alive.
	if got := nsInode(t, "/proc/self/ns/net"); got != process {
		t.Errorf("process netns inode %d after Create/WithPath, want %d", got, process)
	}
	if hs, _ := Holders(ctx, path); len(hs) != 0 {
		t.Errorf("holders after WithPath: %v", hs)
	}
}
