package exec

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMain removes the per-hierarchy cgroup parent ("berth") after the
// tests if they are the ones that created it. rmdir only succeeds on an
// empty directory, so a parent another process is using is left alone.
func TestMain(m *testing.M) {
	var created []string
	if os.Geteuid() == 0 {
		for _, root := range detectHierarchies(defaultCgroupRoot).all() {
			p := filepath.Join(root, defaultCgroupParent)
			if _, err := os.Stat(p); os.IsNotExist(err) {
				created = append(created, p)
			}
		}
	}
	code := m.Run()
	for _, p := range created {
		_ = syscall.Rmdir(p)
	}
	os.Exit(code)
}
