package logfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestOpenBeneath(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, fn func(p string) error) {
		if err := fn(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	mk("plain", func(p string) error { return os.WriteFile(p, []byte("ok\n"), 0o644) })
	mk("symlink", func(p string) error { return os.Symlink(outside, p) })
	mk("dangling", func(p string) error { return os.Symlink(filepath.Join(dir, "nowhere"), p) })
	mk("hardlink", func(p string) error { return os.Link(outside, p) })
	mk("fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) })
	mk("subdir", func(p string) error { return os.Mkdir(p, 0o755) })

	tests := []struct {
		name   string
		flags  int
		unsafe bool
		fail   bool
	}{
		{name: "plain", flags: os.O_RDONLY},
		{name: "new", flags: os.O_WRONLY | os.O_CREATE | os.O_APPEND},
		{name: "symlink", flags: os.O_RDONLY, unsafe: true},
		{name: "symlink", flags: os.O_WRONLY | os.O_CREATE | os.O_APPEND, unsafe: true},
		{name: "dangling", flags: os.O_WRONLY | os.O_CREATE, unsafe: true},
		{name: "hardlink", flags: os.O_RDONLY, unsafe: true},
		{name: "hardlink", flags: os.O_WRONLY | os.O_APPEND, unsafe: true},
		{name: "fifo", flags: os.O_RDONLY, unsafe: true},
		{name: "subdir", flags: os.O_RDONLY, unsafe: true},
		{name: "../escape", flags: os.O_RDONLY, unsafe: true},
		{name: "..", flags: os.O_RDONLY, unsafe: true},
		{name: "plain", flags: os.O_WRONLY | os.O_TRUNC, fail: true},
		{name: "missing", flags: os.O_RDONLY, fail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := OpenBeneath(dir, tc.name, tc.flags, 0o644)
			if !tc.unsafe && !tc.fail {
				if err != nil {
					t.Fatalf("OpenBeneath: %v", err)
				}
				f.Close()
				return
			}
			if err == nil {
				f.Close()
				t.Fatalf("OpenBeneath(%s, %#x) succeeded", tc.name, tc.flags)
			}
			if tc.unsafe && !errors.Is(err, ErrUnsafe) {
				t.Fatalf("error %v is not ErrUnsafe", err)
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatalf("the file outside was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a write through the dangling symlink created its target: %v", err)
	}
}

func TestRotator(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.stdout"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRotator(dir, "t.stdout", 3, 10, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	// Appends to the 5 bytes there, then fills and rotates: 10 bytes a file.
	for _, chunk := range []string{"abcde", "fghijklmnopqrst", "uvwxyz0123456789", "!"} {
		if n, err := r.Write([]byte(chunk)); err != nil || n != len(chunk) {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"t.stdout":   "9!",
		"t.stdout.1": "z012345678",
		"t.stdout.2": "pqrstuvwxy",
	}
	for name, w := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != w {
			t.Errorf("%s = %q (%v), want %q", name, b, err, w)
		}
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 3 {
		t.Fatalf("files %v, want max_files = 3", names)
	}
}

// A task that plants a symlink where the next file goes does not get it
// followed: the rotation replaces it with a file of its own.
func TestRotatorPlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "target")
	r, err := NewRotator(dir, "t.stderr", 2, 4, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Write([]byte("abcd")); err != nil {
		t.Fatal(err)
	}
	// The task replaces the current file by a symlink; the next write
	// rotates: the symlink is renamed away (never followed) and a new
	// file takes the name.
	if err := os.Remove(filepath.Join(dir, "t.stderr")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "t.stderr")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("efgh")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rotation wrote through the planted symlink: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "t.stderr"))
	if err != nil || !strings.HasPrefix(string(b), "efgh") {
		t.Fatalf("t.stderr = %q, %v", b, err)
	}
}
