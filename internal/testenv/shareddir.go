package testenv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SharedDir is a new directory, writable by all, that is a shared mount
// point (a bind of itself, made rshared): what a test mounts below it
// later propagates into a task's namespace that holds a slave or shared
// copy of it, whatever the propagation of the host's / (private on some
// CI hosts). Cleanup detaches it and every mount below it, then removes
// it.
func SharedDir(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	// TempDir is 0700; an exec task runs as nobody.
	Must(t, os.Chmod(dir, 0o777))
	Must(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount shared dir %s: %v", dir, err)
		}
	})
	Must(t, unix.Mount("", dir, "", unix.MS_SHARED, ""))
	return dir
}

// MountTmpfs mounts a tmpfs on dir (an existing directory) and unmounts it
// in Cleanup.
func MountTmpfs(t testing.TB, dir string) {
	t.Helper()
	Must(t, unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0777"))
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount tmpfs %s: %v", dir, err)
		}
	})
}

// WaitFile waits until path exists, failing t when ctx ends first.
func WaitFile(ctx context.Context, t testing.TB, path string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", path, ctx.Err())
		case <-tick.C:
		}
	}
}
