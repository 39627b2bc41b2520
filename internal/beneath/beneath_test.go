package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The writes stay beneath the directory whatever a task planted: a link
// as a directory component, a link or hard link at the file's name.
func TestBeneath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "local"), 0o755))
	must(os.Symlink(outside, filepath.Join(root, "local", "linkdir")))
	must(os.Symlink(victim, filepath.Join(root, "local", "linkfile")))
	must(os.Link(victim, filepath.Join(root, "local", "hardlink")))

	d, err := Open(root)
	must(err)
	defer d.Close()

	tests := []struct {
		name, rel string
		wantErr   error
	}{
		{"plain file, parents made", "local/a/b/file", nil},
		{"through a link to a directory", "local/linkdir/victim", ErrLink},
		{"a link at the name is replaced", "local/linkfile", nil},
		{"a hard link at the name is replaced", "local/hardlink", nil},
		{"dot-dot out", "local/../../x", ErrLink},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.MkdirAll(filepath.Dir(tc.rel), 0o755, nil)
			if err == nil {
				err = d.ReplaceFile(tc.rel, []byte("new"), 0o640, Keep)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if b, _ := os.ReadFile(victim); string(b) != "host file" {
				t.Fatalf("host file written through: %q", b)
			}
			if tc.wantErr == nil {
				p := filepath.Join(root, tc.rel)
				fi, err := os.Lstat(p)
				must(err)
				if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
					t.Fatalf("%s: mode %v, want a regular file 0640", p, fi.Mode())
				}
			}
		})
	}
	if _, err := d.Rel("/etc/passwd"); err == nil {
		t.Fatal("Rel of a path outside: no error")
	}
}
