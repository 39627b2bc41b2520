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

// helperBinaries are berth's helper programs that the tests build from
// this checkout, with the variable that names each (supervisor.PathEnv,
// artifact.PathEnv: not imported, their tests use this package).
var helperBinaries = []struct{ pkg, env string }{
	{"github.com/berth/berth/cmd/berth-supervisor", "BERTH_SUPERVISOR"},
	{"github.com/berth/berth/cmd/berth-fetch", "BERTH_FETCH"},
}

// BuildSupervisor builds cmd/berth-supervisor, the per-task supervisor of
// the raw_exec and exec drivers, and cmd/berth-fetch, the artifact
// fetcher, into a temporary directory and points $BERTH_SUPERVISOR and
// $BERTH_FETCH at them, so that every driver and runner of the test
// binary, and every berth binary it starts, runs the helpers of this
// checkout. It leaves alone a helper whose variable is set already.
// LeakCheckMain calls it; call the returned cleanup after the tests.
func BuildSupervisor() (cleanup func(), err error) {
	var pkgs, envs []string
	for _, h := range helperBinaries {
		if os.Getenv(h.env) == "" {
			pkgs = append(pkgs, h.pkg)
			envs = append(envs, h.env)
		}
	}
	if len(pkgs) == 0 {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "berth-helpers-")
	if err != nil {
		return nil, err
	}
	// One go build for both: a directory as -o takes each command's name.
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, strings.TrimSpace(string(out)))
	}
	for i, p := range pkgs {
		os.Setenv(envs[i], filepath.Join(dir, filepath.Base(p)))
	}
	return func() {
		for _, e := range envs {
			os.Unsetenv(e)
		}
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
