package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/job/jobspec"
)

// A driver this node does not have is refused by run with what to
// install or configure, and is only a warning for validate.
func TestMissingDriverHint(t *testing.T) {
	tests := []struct {
		driver  string
		rawExec bool // tasks.raw_exec_enabled
		fix     string
	}{
		{"raw_exec", false, "set raw_exec_enabled = true in the tasks block of the agent's config"},
		{"java", true, "install a JRE and run the jar with exec or raw_exec"},
		{"qemu", true, "install qemu"},
		{"containerd-driver", true, `berth loads no task driver plugins, so "containerd-driver" cannot be installed on it`},
	}
	for _, tt := range tests {
		t.Run(tt.driver, func(t *testing.T) {
			cfg := Default()
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.LockDir = filepath.Join(t.TempDir(), "lock")
			tasks := DefaultTasks()
			tasks.RawExecEnabled = tt.rawExec
			cfg.Tasks = tasks
			n, err := New(context.Background(), cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close(context.Background()) })
			src := "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"" + tt.driver + "\"\n    }\n  }\n}\n"
			opts := n.ParseOptions(context.Background())
			_, err = jobspec.Parse([]byte(src), "j.hcl", opts)
			if err == nil || !strings.HasPrefix(err.Error(), "j.hcl:4:16: ") || !strings.Contains(err.Error(), tt.fix) || !strings.Contains(err.Error(), "this node's drivers: ") {
				t.Errorf("run: %v, want a refusal at j.hcl:4:16 with %q and this node's drivers", err, tt.fix)
			}
			opts.NodeWarnings = true
			job, err := jobspec.Parse([]byte(src), "j.hcl", opts)
			if err != nil || len(job.Warnings) != 1 || !strings.Contains(job.Warnings[0].String(), tt.fix) {
				t.Errorf("validate: %v, want one warning with %q", err, tt.fix)
			}
		})
	}
}
