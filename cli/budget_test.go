package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec/jobspectest"
)

// TestEvalBudgetValidate: `berth validate` (the binary, as a user runs
// it) refuses each evaluation bomb of issue 18 with a positioned error,
// within 2 s and 64 MiB more peak memory than a valid job needs (the
// child's maximum RSS). Before, setproduct killed the process with
// "fatal error: runtime: out of memory" and fileset("/", "**") grew to
// 9.3 GB in 29 minutes.
func TestEvalBudgetValidate(t *testing.T) {
	testenv.RequireRoot(t)
	bin := berthBinary.Path(t)
	dir := t.TempDir()
	common := []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir()}
	validate := func(t *testing.T, src string) (stderr string, took time.Duration, maxRSS int64, err error) {
		t.Helper()
		testenv.Must(t, os.WriteFile(filepath.Join(dir, "bomb.hcl"), []byte(src), 0o644))
		cmd := exec.Command(bin, append([]string{"validate", "bomb.hcl"}, common...)...)
		cmd.Dir = dir
		var errb strings.Builder
		cmd.Stderr = &errb
		start := time.Now()
		err = cmd.Run()
		took = time.Since(start)
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			maxRSS = ru.Maxrss << 10 // KiB on Linux
		}
		return errb.String(), took, maxRSS, err
	}
	ok := jobspectest.WithGroup("job \"fine\" {\n  meta { x = length(range(10)) }\n}\n")
	if stderr, _, _, err := validate(t, ok); err != nil {
		t.Fatalf("valid job: %v: %s", err, stderr)
	}
	_, _, baseRSS, _ := validate(t, ok)
	t.Logf("a valid job: max RSS %d MiB", baseRSS>>20)

	for _, tt := range jobspectest.EvalBombs {
		t.Run(tt.Name, func(t *testing.T) {
			stderr, took, rss, err := validate(t, jobspectest.WithGroup(tt.Src))
			if err == nil {
				t.Fatalf("accepted; stderr %q", stderr)
			}
			if !tt.Matches("bomb.hcl", stderr) {
				t.Errorf("stderr %q, want bomb.hcl:%s and %q", stderr, tt.Pos, tt.Want)
			}
			if took > 2*time.Second {
				t.Errorf("took %s, want < 2s", took)
			}
			if extra := rss - baseRSS; extra > 64<<20 {
				t.Errorf("max RSS %d MiB, %d MiB more than a valid job's; want < 64 MiB more", rss>>20, extra>>20)
			}
			t.Logf("%s, max RSS %d MiB: %s", took.Round(time.Millisecond), rss>>20, firstLine(stderr))
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
