// Package helperbin finds berth's helper binaries (berth-supervisor,
// berth-fetch): each is a small program of its own so that what runs
// many times, or sandboxed, links only what it needs.
package helperbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Find locates the helper binary named binary: explicit, $env, beside the
// running executable (an installed berth), then $PATH. The error wraps
// notFound and says where it looked and how to get the binary.
func Find(explicit, binary, env string, notFound error) (string, error) {
	var tried []string
	try := func(p string) bool {
		if p == "" {
			return false
		}
		tried = append(tried, p)
		return CheckExecutable(p) == nil
	}
	if try(explicit) {
		return explicit, nil
	}
	if p := os.Getenv(env); try(p) {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), binary); try(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(binary); err == nil && try(p) {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked at %s and in $PATH): install it with scripts/install.sh, or build it with `go build ./cmd/%s` and set %s",
		notFound, strings.Join(tried, ", "), binary, env)
}

// CheckExecutable says why p cannot be executed (missing, a directory,
// no execute bit), or nil.
func CheckExecutable(p string) error {
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
