package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/internal/testenv"
)

// logsJob writes a counter, 1 to 200000 (1.4 MB: past one 1 MB file),
// waits for alloc/data/go, writes 200001 to 400000, then sleeps.
func logsJob(driver string) string {
	script := `seq -w 1 200000; while [ ! -e "$NOMAD_ALLOC_DIR/data/go" ]; do sleep 0.1; done; seq 200001 400000; echo done >&2; sleep 600`
	config := fmt.Sprintf(`
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }`, script)
	if driver == "podman" {
		config = fmt.Sprintf(`
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", %q]
      }`, script)
	}
	return `job "btag-logs" {
  type = "service"
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver       = "` + driver + `"
      kill_timeout = "3s"` + config + `
      logs {
        max_files     = 10
        max_file_size = 1
      }
    }
  }
}
`
}

// The log writer outlives the agent: an agent SIGKILLed between two
// rotations and restarted, the task's output goes on into the same file
// at the same index (the supervisor's rotator for raw_exec and exec; for
// podman the copier the new agent starts from its recorded offset, into
// the highest-numbered file), nothing is lost or repeated, and alloc
// logs reads every file in order.
func TestSIGKILLKeepsLogging(t *testing.T) {
	for i, drv := range signalDrivers(t) {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, fmt.Sprintf("10.199.192.%d/26", 64*i))
			c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
			testenv.Must(t, err)
			defer c.Close()
			cfgPath := e.writeConfig(t)
			p := e.startBinary(t, cfgPath, c)
			_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, logsJob(drv))), "logs.hcl")
			testenv.Must(t, err)
			al := runningAlloc(t, c, "btag-logs")
			dir := filepath.Join(e.cfg.AllocDir(), al.ID, "alloc", "logs")
			waitFor(t, "the first half written (200000)", time.Minute, func() (bool, error) {
				b, err := logfile.ReadTail(context.Background(), dir, "t.stdout", 7)
				return string(b) == "200000\n", err
			})
			before, err := logfile.Indexes(dir, "t.stdout")
			testenv.Must(t, err)
			if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
				t.Fatal(err)
			}
			p = e.startBinary(t, cfgPath, c)
			cur := readopted(t, c, al.ID)
			testenv.Must(t, os.WriteFile(filepath.Join(e.cfg.AllocDir(), al.ID, "alloc", "data", "go"), nil, 0o644))
			var out bytes.Buffer
			waitFor(t, "the second half through alloc logs", time.Minute, func() (bool, error) {
				out.Reset()
				err := c.StreamAllocLogs(context.Background(), al.ID, "t", api.LogsOptions{}, &out)
				return strings.HasSuffix(out.String(), "\n400000\n"), err
			})
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			for j, l := range lines {
				if n, err := strconv.Atoi(l); err != nil || n != j+1 {
					t.Fatalf("line %d of alloc logs is %q, want %d: lost or repeated across the agent's death", j+1, l, j+1)
				}
			}
			after, err := logfile.Indexes(dir, "t.stdout")
			testenv.Must(t, err)
			// The file written when the agent died goes on: every file but
			// the newest is full (a fresh index at the restart would leave
			// one short), and the indexes follow each other from 0.
			for j, idx := range after {
				if idx != j {
					t.Fatalf("files t.stdout.%v after the restart (before: %v), want 0, 1, ...", after, before)
				}
				fi, err := os.Stat(filepath.Join(dir, "t.stdout."+strconv.Itoa(idx)))
				testenv.Must(t, err)
				if j < len(after)-1 && fi.Size() < 1<<20-32<<10 {
					t.Errorf("t.stdout.%d has %d bytes: not filled before the next one (indexes before %v, after %v)", idx, fi.Size(), before, after)
				}
			}
			if len(after) < 3 {
				t.Errorf("files %v: the output did not reach a third file, the test proves less", after)
			}
			drainAndCheck(t, e, p, cur)
		})
	}
}

// Issue 23 item 6 puts the logs in the tasks' view (alloc/logs). A task
// running as root (raw_exec) plants links to a host file there: a
// symlink where the next file goes (before a rotation), a hard link in
// place of a rotated file and a symlink in place of the file being
// written (after it): the host file is never written, and neither the
// API (whole log, tail, lines, follow) nor the status page serves it. An
// exec task as nobody without capabilities cannot plant anything:
// alloc/logs is root's 0755, and it reads its own log there, as under
// Nomad. (With Nomad's default capabilities, CAP_DAC_OVERRIDE, it can, as
// a root task can: the writer and readers hold, as the raw_exec task
// shows.)
func TestHarden2TaskPlantsLogLinks(t *testing.T) {
	e := newHarden2Env(t, "10.199.193.0/25", "10.199.193.128/25")
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 3*time.Minute)

	secret := "btag-secret-" + testenv.RandSuffix(12)
	secretPath := filepath.Join(e.dir, "shadow")
	testenv.Must(t, os.WriteFile(secretPath, []byte("root:"+secret+":19000:0:99999:7:::\n"), 0o600))

	planter := fmt.Sprintf(`L="$NOMAD_ALLOC_DIR/logs"
ln -s %[1]s "$L/t.stdout.1"
seq -w 1 200000
sleep 0.5
rm -f "$L/t.stdout.0"; ln %[1]s "$L/t.stdout.0"
rm -f "$L/t.stderr.0"; ln -s %[1]s "$L/t.stderr.0"
echo after-plant >&2
echo last-line`, secretPath)
	nobody := `L="$NOMAD_ALLOC_DIR/logs"
ln -s /etc/passwd "$L/x.stdout.1" 2>/dev/null && echo planted || echo refused
(echo x > "$L/new") 2>/dev/null && echo wrote || echo cannot-write
# Its log writer copies its output a moment later: a few looks.
for i in 1 2 3 4 5 6 7 8 9 10; do grep -q refused "$L/x.stdout.0" && break; sleep 0.3; done
grep -q refused "$L/x.stdout.0" && echo reads-own-log`
	job := fmt.Sprintf(`job "btag-plant" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      logs {
        max_files     = 3
        max_file_size = 1
      }
    }
    task "x" {
      driver = "exec"
      config {
        command  = "/bin/sh"
        args     = ["-c", %q]
        cap_drop = ["all"]
      }
    }
  }
}
`, planter, nobody)
	_, err := c.SubmitJob(ctx, []byte(job), "plant.hcl")
	testenv.Must(t, err)
	t.Cleanup(func() { _, _ = c.StopJob(testenv.Context(t, time.Minute), "btag-plant") })
	var st *api.JobStatus
	waitFor(t, "the batch job to finish", 2*time.Minute, func() (bool, error) {
		st, err = c.Job(ctx, "btag-plant")
		return err == nil && st.Status == api.JobDead, err
	})
	if len(st.Allocations) != 1 {
		t.Fatalf("job status: %+v", st)
	}
	id := st.Allocations[0].ID
	if b, _ := os.ReadFile(secretPath); string(b) != "root:"+secret+":19000:0:99999:7:::\n" {
		t.Fatalf("the host file was written through a planted link: %q", b)
	}
	dir := filepath.Join(e.cfg.AllocDir(), id, "alloc", "logs")
	if fi, err := os.Lstat(filepath.Join(dir, "t.stdout.1")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("t.stdout.1, planted as a symlink before the rotation: %v %v, want the writer's file", fi, err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Do(ctx, "GET", path, nil)
		testenv.Must(t, err)
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	for _, tc := range []struct {
		query string
		want  int // 0: 200 or 403, as long as the host file is not in it
	}{
		{"", 403}, {"?follow=true", 403}, {"?type=stderr", 403}, {"?type=stderr&lines=1", 403},
		{"?lines=1", 200}, {"?tail=10", 200}, {"?tail=2000000", 403},
	} {
		code, body := get("/v1/allocation/" + id + "/logs/t" + tc.query)
		if strings.Contains(body, secret) {
			t.Errorf("logs%s served the host file a task linked", tc.query)
		}
		if code != tc.want {
			t.Errorf("logs%s: %d %.200q, want %d", tc.query, code, body, tc.want)
		}
		if code == 200 && !strings.HasSuffix(body, "last-line\n") {
			t.Errorf("logs%s: %q, want the end of the writer's file", tc.query, body)
		}
	}
	code, body := get("/ui/alloc/" + id)
	if strings.Contains(body, secret) {
		t.Errorf("the status page shows the host file a task linked")
	}
	if code != 200 || !strings.Contains(body, "not shown") {
		t.Errorf("status page: %d, want 200 with a notice", code)
	}
	code, body = get("/v1/allocation/" + id + "/logs/x")
	if code != 200 || body != "refused\ncannot-write\nreads-own-log\n" {
		t.Errorf("the exec task (nobody) in alloc/logs: %d %q, want refused, cannot-write, reads-own-log", code, body)
	}
}
