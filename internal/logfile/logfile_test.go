package logfile

import (
	"context"
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

// readLogDir returns dir's files and their contents.
func readLogDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// The Rotator names and keeps files as Nomad 1.6.5's logmon (measured:
// node/parity/testdata/logs.nomad.hcl): <name>.0, .1, ... by index, the
// newest max_files kept, a line not split between files when it fits in
// the next one.
func TestRotator(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   map[string]string // files there at open
		maxFiles int
		maxSize  int64
		chunks   []string
		want     map[string]string
	}{
		{name: "no newlines, filled to the size", maxFiles: 3, maxSize: 10,
			chunks: []string{"abcde", "fghijklmnopqrst", "uvwxyz0123456789", "!"},
			want:   map[string]string{"t.2": "uvwxyz0123", "t.3": "456789!", "t.1": "klmnopqrst"}},
		{name: "appends to the highest index", maxFiles: 3, maxSize: 10,
			before: map[string]string{"t.0": "old", "t.4": "12345"},
			chunks: []string{"abcdefgh"},
			want:   map[string]string{"t.4": "12345abcde", "t.5": "fgh"}},
		{name: "highest index full: the next", maxFiles: 2, maxSize: 4,
			before: map[string]string{"t.7": "full"},
			chunks: []string{"x"},
			want:   map[string]string{"t.7": "full", "t.8": "x"}},
		{name: "a line that does not fit starts the next file", maxFiles: 5, maxSize: 10,
			chunks: []string{"abc\ndefg\nhijkl\nmn\n"},
			want:   map[string]string{"t.0": "abc\ndefg\n", "t.1": "hijkl\nmn\n"}},
		{name: "a line longer than a file is split", maxFiles: 5, maxSize: 4,
			chunks: []string{"ab\n0123456789\n"},
			want:   map[string]string{"t.0": "ab\n", "t.1": "0123", "t.2": "4567", "t.3": "89\n"}},
		{name: "one file kept", maxFiles: 1, maxSize: 3,
			chunks: []string{"a\nb\nc\nd\n"},
			want:   map[string]string{"t.3": "d\n"}},
		{name: "other names left alone", maxFiles: 1, maxSize: 3,
			before: map[string]string{"t.01": "x", "t.x": "y", "u.0": "z"},
			chunks: []string{"abcdefg"},
			want:   map[string]string{"t.01": "x", "t.x": "y", "u.0": "z", "t.2": "g"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, c := range tc.before {
				must(t, os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644))
			}
			r, err := NewRotator(dir, "t", tc.maxFiles, tc.maxSize, 0o644)
			must(t, err)
			for _, c := range tc.chunks {
				if n, err := r.Write([]byte(c)); err != nil || n != len(c) {
					t.Fatalf("Write(%q) = %d, %v", c, n, err)
				}
			}
			must(t, r.Close())
			got := readLogDir(t, dir)
			if len(got) != len(tc.want) {
				t.Errorf("files %v, want %v", got, tc.want)
			}
			for n, w := range tc.want {
				if got[n] != w {
					t.Errorf("%s = %q, want %q", n, got[n], w)
				}
			}
		})
	}
}

// What a task can plant in its log dir, where the Rotator is about to
// write (the file it appends to at open, the next one at a rotation) or
// where it wrote before: the host file it points at is never written, the
// planted name is replaced by a file of the writer's own, and no reader
// (OpenLog, Start, ReadTail) serves the host file.
func TestRotatorPlanted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a hard link to another user's file")
	}
	const secret = "host-secret\n"
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir, host string)
		write func(t *testing.T, r *Rotator)
	}{
		{"symlink as the file opened", func(t *testing.T, dir, host string) {
			must(t, os.Symlink(host, filepath.Join(dir, "t.0")))
		}, nil},
		{"hard link as the file opened", func(t *testing.T, dir, host string) {
			must(t, os.Link(host, filepath.Join(dir, "t.0")))
		}, nil},
		{"symlink as the next file, before a rotation", func(t *testing.T, dir, host string) {
			must(t, os.Symlink(host, filepath.Join(dir, "t.1")))
		}, nil},
		{"hard link as the next file, before a rotation", func(t *testing.T, dir, host string) {
			must(t, os.Link(host, filepath.Join(dir, "t.1")))
		}, nil},
		{"symlink for a rotated file, after a rotation", nil, func(t *testing.T, r *Rotator) {
			must(t, os.Remove(filepath.Join(r.dir, "t.0")))
			must(t, os.Symlink(r.dir+"/../host", filepath.Join(r.dir, "t.0")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "logs")
			must(t, os.Mkdir(dir, 0o755))
			host := filepath.Join(base, "host")
			must(t, os.WriteFile(host, []byte(secret), 0o600))
			if tc.plant != nil {
				tc.plant(t, dir, host)
			}
			r, err := NewRotator(dir, "t", 5, 8, 0o644)
			must(t, err)
			_, err = r.Write([]byte("1234567\n"))
			must(t, err)
			if tc.write != nil {
				tc.write(t, r)
			}
			_, err = r.Write([]byte("abcdefg\nxyz\n"))
			must(t, err)
			must(t, r.Close())
			if b, _ := os.ReadFile(host); string(b) != secret {
				t.Fatalf("the host file was written: %q", b)
			}
			b, err := ReadTail(context.Background(), dir, "t", 1<<20)
			if tc.write != nil {
				// The planted link is still there, older than the
				// writer's files: refused, not served.
				if !errors.Is(err, ErrUnsafe) || strings.Contains(string(b), "secret") {
					t.Fatalf("ReadTail = %q, %v; want ErrUnsafe", b, err)
				}
				pos := Position{Index: 1}
				var out strings.Builder
				must(t, Follow(context.Background(), dir, "t", pos, &out, FollowOptions{}))
				if out.String() != "abcdefg\nxyz\n" {
					t.Fatalf("from the writer's files: %q", out.String())
				}
				return
			}
			if err != nil || strings.Contains(string(b), "secret") {
				t.Fatalf("ReadTail = %q, %v", b, err)
			}
			if !strings.HasSuffix(string(b), "abcdefg\nxyz\n") {
				t.Fatalf("ReadTail = %q, want the writer's lines", b)
			}
		})
	}
}
