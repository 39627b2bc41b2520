package driver

import (
	"context"
	"errors"
	"os"
	"time"
)

// The container drivers' small file and timing helpers, one copy for
// podman's and docker's.

// RemoveFiles removes paths; one already gone is no error.
func RemoveFiles(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// WriteFileAtomic replaces path with data (a temporary file renamed over
// it): a reader, or an agent killed half-way, never sees half of it. For
// the drivers' own state files, which no task can reach.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SleepCtx waits d, or less if ctx ends first (then it returns false).
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
