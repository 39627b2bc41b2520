package agent

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/node/nomadapi"
)

// The Nomad API's alloc fs reads the alloc dir only: no "..", no link
// followed (to a host file or back up the tree), a task's secrets
// refused by name, a FIFO opened without blocking and not read.
func TestNomadAllocFSSandbox(t *testing.T) {
	root := t.TempDir()
	for p, data := range map[string]string{
		"alloc/logs/web.stdout.0": "out\n",
		"web/local/file":          "content\n",
		"web/secrets/s":           "secret\n",
	} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"web/local/pw": "/etc/passwd", "web/local/up": "../..", "web/local/abs": "/"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "web/local/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &allocFS{fd: fd, allocID: "a", tasks: []string{"web"}}
	defer d.Close()

	for _, tc := range []struct {
		path string
		want string // content, or "!" + a substring of the error
	}{
		{"web/local/file", "content\n"},
		{"/alloc/logs/web.stdout.0", "out\n"},
		{"web/local/pw", "!symbolic link"},
		{"web/local/up/web/local/file", "!symbolic link"},
		{"web/local/abs/etc/passwd", "!symbolic link"},
		{"../x", "!escapes"},
		{"web/../../x", "!escapes"},
		{"web/secrets/s", "!secret file prohibited"},
		{"web//secrets/s", "!secret file prohibited"},
		{"web/local/fifo", "!not a file"},
		{"web/local", "!not a file"},
		{"web/local/nope", "!no such file"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			done := make(chan struct{})
			var got string
			var err error
			go func() {
				defer close(done)
				var f io.ReadSeekCloser
				if f, err = d.Open(tc.path); err == nil {
					b, _ := io.ReadAll(f)
					f.Close()
					got = string(b)
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("open blocked")
			}
			if want, ok := strings.CutPrefix(tc.want, "!"); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, want)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	l, err := d.List("web/local")
	if err != nil || len(l) != 5 {
		t.Fatalf("list: %d entries, %v", len(l), err)
	}
	for _, fi := range l {
		if fi.Name == "pw" && !strings.HasPrefix(fi.FileMode, "L") {
			t.Errorf("a link listed as %s", fi.FileMode)
		}
	}
	if fi, err := d.Stat("/"); err != nil || !fi.IsDir {
		t.Errorf("stat /: %+v, %v", fi, err)
	}
	if _, err := d.Stat("web/secrets"); !errors.Is(err, nomadapi.ErrBadRequest) {
		t.Errorf("stat of the secrets dir: %v, want a refusal", err)
	}
}
