package artifact

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"golang.org/x/sys/unix"
)

// landlockChildEnv makes the test binary the sandboxed child of
// TestArtifactSecLandlock: it names the one directory it may read.
const landlockChildEnv = "BERTH_TEST_LANDLOCK_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(landlockChildEnv); dir != "" {
		if err := landlockChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(testenv.LeakCheckMain(m))
}

// landlockChild confines its thread to reading dir, then checks what it
// may still open on that thread.
func landlockChild(dir string) error {
	runtime.LockOSThread()
	rs, err := newRuleset(LandlockABI(), true)
	if err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := rs.allow(fd, fsRead, true); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if err := rs.restrict(); err != nil {
		return err
	}
	if fd, err := unix.Open(filepath.Join(dir, "ok.txt"), unix.O_RDONLY, 0); err != nil {
		return fmt.Errorf("reading inside the allowed directory: %w", err)
	} else {
		unix.Close(fd)
	}
	for _, p := range []string{"/etc/passwd", "/etc/shadow", filepath.Dir(dir)} {
		if fd, err := unix.Open(p, unix.O_RDONLY, 0); !errors.Is(err, unix.EACCES) {
			unix.Close(fd)
			return fmt.Errorf("open %s under Landlock: %v, want EACCES", p, err)
		}
	}
	if fd, err := unix.Open(filepath.Join(dir, "new.txt"), unix.O_WRONLY|unix.O_CREAT, 0o644); !errors.Is(err, unix.EACCES) {
		unix.Close(fd)
		return fmt.Errorf("creating a file in a read-only directory under Landlock: %v, want EACCES", err)
	}
	return nil
}

// The sandbox's Landlock ruleset: a process confined to reading one
// directory reads it, and cannot read /etc/passwd or /etc/shadow (even as
// root), list the directory's parent, or write in the directory.
func TestArtifactSecLandlock(t *testing.T) {
	abi := LandlockABI()
	if abi == 0 {
		t.Skip("this kernel has no Landlock (the fetch then runs without the filesystem sandbox)")
	}
	t.Logf("Landlock ABI %d", abi)
	dir := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("ok"), 0o644))
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), landlockChildEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sandboxed child: %v\n%s", err, out)
	}
}
