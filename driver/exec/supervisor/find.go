package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PathEnv names the supervisor binary for processes that cannot be told
// otherwise (tests, a berth run from a build directory).
const PathEnv = "BERTH_SUPERVISOR"

// ErrNotFound is returned when the berth-supervisor binary is not found.
var ErrNotFound = errors.New(Binary + " not found")

// Find locates the supervisor binary: explicit, $BERTH_SUPERVISOR, beside
// the running executable (an installed berth), then $PATH. The drivers
// run tasks with it and the runner fetches artifacts with it.
func Find(explicit string) (string, error) {
	var tried []string
	try := func(p string) bool {
		if p == "" {
			return false
		}
		tried = append(tried, p)
		return checkExecutable(p) == nil
	}
	if try(explicit) {
		return explicit, nil
	}
	if p := os.Getenv(PathEnv); try(p) {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), Binary); try(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(Binary); err == nil && try(p) {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked at %s and in $PATH): install it with scripts/install.sh, or build it with `go build ./cmd/%s` and set %s",
		ErrNotFound, strings.Join(tried, ", "), Binary, PathEnv)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable: %w", p, os.ErrPermission)
	}
	return nil
}
