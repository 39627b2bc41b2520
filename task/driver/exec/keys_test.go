package exec

import (
	"testing"

	"github.com/berth/berth/task/driver/drivercfg"
)

// appliedBy names, for every key the drivers run, the test that sees it
// applied from inside a task: a key added to configKeys without one fails
// TestEveryKeyApplied.
var appliedBy = map[string]string{
	"command":        "TestConfigKeysApplied",
	"args":           "TestConfigKeysApplied",
	"work_dir":       "TestConfigKeysApplied",
	"cwd":            "TestConfigKeysApplied",
	"denied_envvars": "TestConfigKeysApplied",
	"oom_score_adj":  "TestConfigKeysApplied",
	"cap_add":        "TestExecCaps",
	"cap_drop":       "TestExecCaps",
	"pid_mode":       "TestExecHostModes",
	"ipc_mode":       "TestExecHostModes",
}

func TestEveryKeyApplied(t *testing.T) {
	for _, r := range ConfigKeys() {
		_, ok := appliedBy[r.Name]
		switch {
		case r.Verdict == drivercfg.Refused && ok:
			t.Errorf("%s is refused but appliedBy names a test for it", r.Name)
		case r.Verdict != drivercfg.Refused && !ok:
			t.Errorf("%s runs but no test sees it applied: add one and name it in appliedBy", r.Name)
		}
	}
}

// TestConfigKeysApplied runs a task with each key set, on raw_exec and
// exec, and finds the key's effect in what the task prints.
func TestConfigKeysApplied(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		key   string
		cfg   map[string]any
		probe string
		want  string
	}{
		{key: "args", cfg: map[string]any{"command": "/bin/echo", "args": []any{"a b", "c"}}, want: "a b c\n"},
		{key: "work_dir", cfg: map[string]any{"work_dir": "/usr"}, probe: "pwd", want: "/usr\n"},
		{key: "cwd", cfg: map[string]any{"cwd": "/usr"}, probe: "pwd", want: "/usr\n"},
		{key: "denied_envvars", cfg: map[string]any{"denied_envvars": []any{"BTEXEC_DENIED_*", "FROM_JOB"}},
			probe: `env | grep -E '^(BTEXEC_|FROM_JOB)' | sort`, want: "BTEXEC_KEPT=y\n"},
		{key: "oom_score_adj", cfg: map[string]any{"oom_score_adj": int64(321)}, probe: "cat /proc/self/oom_score_adj", want: "321\n"},
	}
	for _, d := range drivers() {
		for _, tc := range tests {
			t.Run(d.Name()+"/"+tc.key, func(t *testing.T) {
				cfg := tc.cfg
				if tc.probe != "" {
					cfg = sh(tc.probe)
					for k, v := range tc.cfg {
						cfg[k] = v
					}
				}
				task := newTask(t, "", cfg)
				// The runner hands the driver the whole environment
				// (the agent's and the job's): denied_envvars filters it.
				for k, v := range map[string]string{"FROM_JOB": "z", "BTEXEC_KEPT": "y", "BTEXEC_DENIED_ONE": "x"} {
					task.Env[k] = v
				}
				h := start(t, d, task)
				res := wait(t, h)
				out := readLog(t, task, "stdout")
				if !res.Successful() || out != tc.want {
					t.Fatalf("%s: stdout %q, want %q (%+v, stderr %q)", tc.key, out, tc.want, res, readLog(t, task, "stderr"))
				}
			})
		}
	}
}
