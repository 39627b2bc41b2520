package netns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRemovePathRefusesWhatIsNotAPin: a path from a damaged record or a
// foreign cache entry is only unlinked if it is a namespace pin or the
// empty file a pin leaves.
func TestRemovePathRefusesWhatIsNotAPin(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "os-release")
	if err := os.WriteFile(file, []byte("NAME=Debian\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(empty, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		refused bool
	}{
		{file, true},
		{link, true},
		{sub, true},
		{"/proc/self/ns/net", true}, // a symlink in /proc
		{empty, false},
		{filepath.Join(dir, "missing"), false},
	}
	for _, tt := range tests {
		_, err := RemovePath(context.Background(), tt.path)
		if got := errors.Is(err, ErrNotNetns); got != tt.refused {
			t.Errorf("RemovePath(%s): %v, refused %v want %v", tt.path, err, got, tt.refused)
		}
	}
	for _, p := range []string{file, link, sub, empty} {
		_, err := os.Lstat(p)
		if exists := err == nil; exists != (p != empty) {
			t.Errorf("%s exists %v after RemovePath", p, exists)
		}
	}
}
