package exec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/driver"
	"github.com/berth/berth/internal/proc"
)

// execIn runs cmd in the task through Exec (what `berth alloc exec`
// calls) and returns its status and its output (stdout and stderr).
func execIn(t *testing.T, h driver.Handle, env map[string]string, cmd ...string) (int, string) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	code, err := h.(driver.Execer).Exec(ctxT(t), &driver.ExecRequest{Cmd: cmd, Stdin: in, Stdout: out, Stderr: out, Env: env})
	if err != nil {
		t.Fatalf("Exec %q: %v", cmd, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// euid is the effective UID of pid, -1 when unknown.
func euid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 1 {
				n, _ := strconv.Atoi(f[1])
				return n
			}
		}
	}
	return -1
}

// A task running as nobody whose main process became a setuid-root one,
// with loader variables in its environment, cannot make `alloc exec` run
// as root: the command runs as the job's user with the driver's
// capabilities, without LD_*, and cannot write /root.
func TestSecExecIdentity(t *testing.T) {
	requireRoot(t)
	for _, d := range []*Driver{NewRawExec(Options{StoreID: testStore}), NewExec(Options{StoreID: testStore})} {
		t.Run(d.Name(), func(t *testing.T) {
			task := newTask(t, newNetns(t), nil)
			// A setuid-root binary the task can run (planted by root:
			// the task could not make one); exec mounts its root's
			// system dirs nosuid, not the task dir.
			local := filepath.Join(driver.TaskDir(task.AllocDir, task.TaskName), "local")
			if err := os.MkdirAll(local, 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile("/bin/sleep")
			if err != nil {
				t.Fatal(err)
			}
			suid := filepath.Join(local, "suid-sleep")
			if err := os.WriteFile(suid, b, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(suid, 0o4755); err != nil {
				t.Fatal(err)
			}
			task.User = "nobody"
			task.Env["LD_LIBRARY_PATH"] = "/nonexistent-berth-test"
			task.Config = sh("export LD_PRELOAD=/nonexistent-berth-test.so TASK_EXPORTED=1; exec ./local/suid-sleep 1000")
			h := start(t, d, task)
			pid := h.State().PID
			for i := 0; euid(pid) != 0; i++ {
				if i == 2000 {
					b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
					t.Fatalf("the task's main process did not become setuid root: %s\nstderr: %s", b, readLog(t, task, "stderr"))
				}
				time.Sleep(10 * time.Millisecond)
			}

			victim := "/root/btsec-" + randSuffix(t)
			t.Cleanup(func() { os.Remove(victim) })
			code, out := execIn(t, h, map[string]string{"FROM_REQUEST": "1"}, "/bin/sh", "-c",
				`id -u; grep CapEff /proc/self/status; env | grep -c '^LD_'; env | grep -c TASK_EXPORTED; `+
					`echo "recorded=$BERTH_TEST request=$FROM_REQUEST"; touch `+victim+` && echo WROTE-ROOT; exit 0`)
			if code != 0 {
				t.Fatalf("exec: status %d: %s", code, out)
			}
			lines := strings.Split(out, "\n")
			if len(lines) < 5 || lines[0] != "65534" {
				t.Fatalf("exec ran as %q, want nobody (65534):\n%s", lines[0], out)
			}
			if c := capEff(out); c != 0 {
				t.Errorf("exec CapEff %x, want 0:\n%s", c, out)
			}
			if lines[2] != "0" {
				t.Errorf("exec got %s loader variables:\n%s", lines[2], out)
			}
			if lines[3] != "0" {
				t.Errorf("exec got the environment of the task's process, not its recorded one:\n%s", out)
			}
			if !strings.Contains(out, "recorded=1 request=1") {
				t.Errorf("exec lost the task's recorded or the request's environment:\n%s", out)
			}
			if strings.Contains(out, "WROTE-ROOT") {
				t.Errorf("exec wrote %s", victim)
			}
			if _, err := os.Stat(victim); err == nil {
				t.Errorf("%s exists", victim)
			}
		})
	}
}

// enter refuses a task whose main process is not where the task was
// started: a PID that now names another process.
func TestSecExecPIDReused(t *testing.T) {
	requireRoot(t)
	d := NewRawExec(Options{StoreID: testStore})
	h := start(t, d, newTask(t, "", sh("exec sleep 1000"))).(*handle)
	st, err := proc.ReadStat(h.pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openProc(h.pid, st.StartTime+1); err == nil {
		t.Fatal("a /proc entry of another start time was taken for the task's")
	}
	other := &handle{drv: d, supPID: h.supPID, supStart: h.supStart, allocID: h.allocID, task: "other"}
	if _, _, err := other.recordedSpec(); err == nil || !strings.Contains(err.Error(), "not the supervisor of task") {
		t.Fatalf("the supervisor of another task was taken: %v", err)
	}
}
