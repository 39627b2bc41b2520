package logfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// What a task can leave in place of its log: OpenLog and ReadTail refuse
// every form of it, and read the log berth's writer made.
func TestHarden2OpenLogRefusesPlantedFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the planted files are owned by another user")
	}
	const secret = "btlog-secret-root:$6$not-for-tasks"
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, log, secretPath string)
		ok    bool
	}{
		{"log writer's own file", func(t *testing.T, log, _ string) {
			r, err := NewRotator(filepath.Dir(log), "t.stdout", 1, 1<<20, 0o640)
			must(t, err)
			_, err = r.Write([]byte("hello\n"))
			must(t, err)
			must(t, r.Close())
		}, true},
		{"symlink", func(t *testing.T, log, s string) { must(t, os.Symlink(s, log)) }, false},
		{"hard link", func(t *testing.T, log, s string) { must(t, os.Link(s, log)) }, false},
		{"fifo", func(t *testing.T, log, _ string) { must(t, syscall.Mkfifo(log, 0o600)) }, false},
		{"directory", func(t *testing.T, log, _ string) { must(t, os.Mkdir(log, 0o700)) }, false},
		{"another user's file", func(t *testing.T, log, _ string) {
			must(t, os.WriteFile(log, []byte(secret), 0o600))
			must(t, os.Chown(log, 65534, 65534))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			secretPath := filepath.Join(t.TempDir(), "shadow")
			must(t, os.WriteFile(secretPath, []byte(secret), 0o600))
			log := filepath.Join(dir, "t.stdout.0")
			tc.plant(t, log, secretPath)
			f, err := OpenLog(dir, "t.stdout.0")
			if err == nil {
				f.Close()
			}
			b, terr := ReadTail(context.Background(), dir, "t.stdout", 1<<10)
			if tc.ok {
				if err != nil || terr != nil || string(b) != "hello\n" {
					t.Fatalf("the writer's log: open %v, tail %q %v", err, b, terr)
				}
				return
			}
			if !errors.Is(err, ErrUnsafe) || !errors.Is(terr, ErrUnsafe) {
				t.Errorf("open: %v, tail: %v; want ErrUnsafe", err, terr)
			}
			if len(b) > 0 {
				t.Errorf("read %q through a planted %s", b, tc.name)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
