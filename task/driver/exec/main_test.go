package exec

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/berth/berth/internal/cgroup"
	"github.com/berth/berth/internal/testenv"
)

// TestMain runs the tests inside the host leak check (which also builds
// berth-supervisor for them), then removes the per-hierarchy cgroup parent
// ("berth") if the tests are the ones that created it. rmdir only succeeds
// on an empty directory, so a parent another process is using is left
// alone.
func TestMain(m *testing.M) {
	var created []string
	if os.Geteuid() == 0 {
		for _, root := range cgroup.Detect(defaultCgroupRoot).All() {
			p := filepath.Join(root, defaultCgroupParent)
			if _, err := os.Stat(p); os.IsNotExist(err) {
				created = append(created, p)
			}
		}
	}
	code := testenv.LeakCheckMain(m)
	for _, p := range created {
		_ = syscall.Rmdir(p)
	}
	os.Exit(code)
}
