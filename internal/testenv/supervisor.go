package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// supervisorEnv is driver/exec.SupervisorEnv (not imported: the driver's
// tests use this package).
const supervisorEnv = "BERTH_SUPERVISOR"

// BuildSupervisor builds cmd/berth-supervisor, the per-task supervisor of
// the raw_exec and exec drivers, into a temporary directory and points
// $BERTH_SUPERVISOR at it, so that every driver of the test binary, and
// every berth binary it starts, runs the supervisor of this checkout. It
// does nothing when $BERTH_SUPERVISOR is set already. LeakCheckMain calls
// it; call the returned cleanup after the tests.
func BuildSupervisor() (cleanup func(), err error) {
	if os.Getenv(supervisorEnv) != "" {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "berth-supervisor-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "berth-supervisor")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/berth/berth/cmd/berth-supervisor")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build ./cmd/berth-supervisor: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	os.Setenv(supervisorEnv, bin)
	return func() {
		os.Unsetenv(supervisorEnv)
		os.RemoveAll(dir)
	}, nil
}

// BuildBerth builds the berth binary into a temporary directory, for
// tests that run it as a process (an agent to SIGKILL, a janitor job);
// cleanup removes it. Only as root: the tests that run it need root.
func BuildBerth() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "berth-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "berth")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/berth/berth/cmd/berth")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/berth: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Berth is the berth binary that a test binary builds once, in its
// TestMain (MainWithBerth), for the tests that run berth as a process.
type Berth struct {
	path string
	err  error
}

// Path is the binary; it fails tb, with the reason, when there is none.
func (b *Berth) Path(tb testing.TB) string {
	tb.Helper()
	if b.path == "" {
		err := b.err
		if err == nil {
			err = errors.New("not built: TestMain builds it with testenv.MainWithBerth, as root")
		}
		tb.Fatalf("no berth binary: %v", err)
	}
	return b.path
}

// MainWithBerth is the TestMain of such a package: it builds berth into b
// (as root only: the tests that run it need root), runs the tests under
// the host leak check (LeakCheckMain), and removes the binary.
func MainWithBerth(m *testing.M, b *Berth) int {
	if os.Geteuid() == 0 {
		bin, cleanup, err := BuildBerth()
		if err != nil {
			b.err = err
		} else {
			defer cleanup()
			b.path = bin
		}
	}
	return LeakCheckMain(m)
}
