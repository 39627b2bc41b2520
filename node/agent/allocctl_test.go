package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

// This file's tests use the subnets 10.199.165-169.0/24.

// allocCmdEnv is newTestEnv on subnet with this file's bridge subnet.
func allocCmdEnv(t *testing.T, subnet string) *testEnv {
	t.Helper()
	e := newTestEnv(t, subnet)
	e.cfg.Bridge.Subnet = "10.199.169.0/24"
	return e
}

func allocCmdJob(id, typ, driver, script, extra string) string {
	return fmt.Sprintf(`job %q {
  type = %q
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver       = %q
      kill_timeout = "2s"
      %s
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
    }
  }
}
`, id, typ, driver, extra, script)
}

func submit(t *testing.T, e *testEnv, c *api.Client, src string) {
	t.Helper()
	if _, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, src)), "job.nomad.hcl"); err != nil {
		t.Fatalf("submit: %v", err)
	}
}

// logs -f prints what the task writes after it started, across rotation
// (1 MB files), and ends once the task is dead and its log read; -n 3 is
// the last three lines.
func TestAllocCmdLogsFollow(t *testing.T) {
	t.Parallel()
	e := allocCmdEnv(t, "10.199.165.0/24")
	_, c := e.startAgent(t)
	trig := filepath.Join(e.dir, "go")
	pad := strings.Repeat("x", 100)
	const n = 15000
	script := fmt.Sprintf(`echo first; while [ ! -e %s ]; do sleep 0.05; done
i=0; while [ $i -lt %d ]; do echo "line-$i-%s"; i=$((i+1)); done
echo last-1; echo last-2; echo last-3`, trig, n, pad)
	submit(t, e, c, allocCmdJob("btac-logs", "batch", "raw_exec", script, `logs {
        max_files     = 10
        max_file_size = 1
      }`))
	al := runningAlloc(t, c, "btac-logs")

	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.StreamAllocLogs(ctx, al.ID, "t", api.LogsOptions{Follow: true}, &out) }()
	waitFor(t, "the first line through logs -f", time.Minute, func() (bool, error) {
		return len(out.lines("first")) == 1, nil
	})
	select {
	case err := <-done:
		t.Fatalf("logs -f ended while the task runs: %v", err)
	default:
	}
	testenv.Must(t, os.WriteFile(trig, nil, 0o644))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("logs -f: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("logs -f did not end after the task did")
	}
	var want bytes.Buffer
	want.WriteString("first\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&want, "line-%d-%s\n", i, pad)
	}
	want.WriteString("last-1\nlast-2\nlast-3\n")
	out.mu.Lock()
	got := out.b.String()
	out.mu.Unlock()
	if got != want.String() {
		t.Errorf("logs -f gave %d bytes, want %d (lost or repeated across rotation?); first difference at byte %d", len(got), want.Len(), firstDiff(got, want.String()))
	}
	if _, err := os.Stat(filepath.Join(e.cfg.AllocDir(), al.ID, "alloc", "logs", "t.stdout.1")); err != nil {
		t.Errorf("the log did not rotate, the test proves less: %v", err)
	}

	var tail bytes.Buffer
	testenv.Must(t, c.StreamAllocLogs(context.Background(), al.ID, "t", api.LogsOptions{TailLines: 3}, &tail))
	if tail.String() != "last-1\nlast-2\nlast-3\n" {
		t.Errorf("-n 3 = %q", tail.String())
	}
	tail.Reset()
	testenv.Must(t, c.StreamAllocLogs(context.Background(), al.ID, "t", api.LogsOptions{TailBytes: 7}, &tail))
	if tail.String() != "last-3\n" {
		t.Errorf("-c 7 = %q", tail.String())
	}
	// A finished task's log followed ends at once.
	tail.Reset()
	testenv.Must(t, c.StreamAllocLogs(context.Background(), al.ID, "t", api.LogsOptions{Follow: true, TailLines: 1}, &tail))
	if tail.String() != "last-3\n" {
		t.Errorf("-f -n 1 of a dead task = %q", tail.String())
	}
	resp, err := c.Do(context.Background(), http.MethodGet, "/v1/allocation/"+al.ID+"/logs/t?tail=3&lines=3", nil)
	testenv.Must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("tail and lines: %d, want 400", resp.StatusCode)
	}
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

type execCase struct {
	name     string
	cmd      []string
	stdin    string
	tty      bool
	wantCode int
	want     func(out string) error
}

func runExec(t *testing.T, c *api.Client, alloc string, tc execCase) (string, int, error) {
	t.Helper()
	var out, errOut syncBuffer
	o := api.ExecOptions{Cmd: tc.cmd, TTY: tc.tty, Stdout: &out, Stderr: &errOut}
	if tc.stdin != "" {
		o.Stdin = strings.NewReader(tc.stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := c.Exec(ctx, alloc, o)
	out.mu.Lock()
	defer out.mu.Unlock()
	errOut.mu.Lock()
	defer errOut.mu.Unlock()
	return out.b.String() + errOut.b.String(), code, err
}

// exec runs in the allocation's namespace (its eth0 address), as the
// task's user, in its cgroup, and for an exec task in its PID namespace;
// the command's exit status is returned, stdin reaches it, -t gives it a
// terminal.
func TestAllocCmdExec(t *testing.T) {
	t.Parallel()
	e := allocCmdEnv(t, "10.199.166.0/24")
	_, c := e.startAgent(t)
	drivers := []struct{ name, extra, user string }{
		{"exec", "", "65534"},
		{"raw_exec", `user = "nobody"`, "65534"},
	}
	if len(signalDrivers(t)) > 1 {
		drivers = append(drivers, struct{ name, extra, user string }{"podman", "", "0"})
	}
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			job := "btac-exec-" + strings.ReplaceAll(d.name, "_", "-")
			src := allocCmdJob(job, "service", d.name, "exec /bin/sleep 600", d.extra)
			if d.name == "podman" {
				src = strings.Replace(src, "config {", `config {
        image   = "localhost/busybox:latest"`, 1)
				src = strings.Replace(src, "exec /bin/sleep 600", "trap 'echo got-usr1' USR1; while :; do sleep 0.1; done", 1)
			}
			submit(t, e, c, src)
			al := runningAlloc(t, c, job)
			ip, _, _ := strings.Cut(al.Network.IPv4[0], "/")
			var taskCgroup []byte
			if d.name != "podman" {
				var err error
				taskCgroup, err = os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", al.Tasks[0].Handle.PID))
				testenv.Must(t, err)
			}
			cases := []execCase{
				{name: "ip addr", cmd: []string{"ip", "-4", "-o", "addr", "show", "dev", "eth0"}, want: func(out string) error {
					if !strings.Contains(out, " "+ip+"/") {
						return fmt.Errorf("no %s in it", ip)
					}
					return nil
				}},
				{name: "proc net dev", cmd: []string{"cat", "/proc/net/dev"}, want: func(out string) error {
					if !strings.Contains(out, "eth0:") {
						return errors.New("no eth0")
					}
					return nil
				}},
				{name: "user", cmd: []string{"id", "-u"}, want: func(out string) error {
					if strings.TrimSpace(out) != d.user {
						return fmt.Errorf("want uid %s", d.user)
					}
					return nil
				}},
				{name: "cgroup", cmd: []string{"cat", "/proc/self/cgroup"}, want: func(out string) error {
					if out != string(taskCgroup) {
						return fmt.Errorf("the task's is %q", taskCgroup)
					}
					return nil
				}},
				{name: "exit code", cmd: []string{"sh", "-c", "echo bye; exit 7"}, wantCode: 7},
				{name: "stdin", cmd: []string{"cat"}, stdin: "hello\nworld\n", want: func(out string) error {
					if out != "hello\nworld\n" {
						return errors.New("want the input back")
					}
					return nil
				}},
				{name: "tty", cmd: []string{"sh", "-c", "test -t 0 && test -t 1 && echo is-a-tty"}, tty: true, want: func(out string) error {
					if !strings.Contains(out, "is-a-tty") {
						return errors.New("no terminal")
					}
					return nil
				}},
				{name: "no tty", cmd: []string{"sh", "-c", "test -t 0 || echo not-a-tty"}, want: func(out string) error {
					if !strings.Contains(out, "not-a-tty") {
						return errors.New("a terminal without -t")
					}
					return nil
				}},
			}
			if d.name == "podman" {
				// Podman's cgroup namespace shows it otherwise; its PID 1 is the shell.
				cases = slices.DeleteFunc(cases, func(tc execCase) bool { return tc.name == "cgroup" })
				cases = append(cases, execCase{name: "pid namespace", cmd: []string{"cat", "/proc/1/cmdline"}, want: func(out string) error {
					if !strings.HasPrefix(out, "/bin/sh\x00-c\x00") {
						return errors.New("PID 1 is not the task")
					}
					return nil
				}})
				if _, err := c.SignalAlloc(context.Background(), al.ID, "t", "USR1"); err != nil {
					t.Errorf("signal: %v", err)
				}
				waitFor(t, "the container's trap to see SIGUSR1", time.Minute, func() (bool, error) {
					b, err := c.AllocLogs(context.Background(), al.ID, "t", false, 0)
					return strings.Contains(string(b), "got-usr1"), err
				})
			}
			if d.name == "exec" {
				cases = append(cases, execCase{name: "pid namespace", cmd: []string{"cat", "/proc/1/cmdline"}, want: func(out string) error {
					if out != "/bin/sleep\x00600\x00" {
						return errors.New("PID 1 is not the task")
					}
					return nil
				}})
			}
			for _, tc := range cases {
				out, code, err := runExec(t, c, al.ID, tc)
				if err != nil {
					t.Errorf("%s: %v (output %q)", tc.name, err, out)
					continue
				}
				if code != tc.wantCode {
					t.Errorf("%s: exit code %d, want %d (output %q)", tc.name, code, tc.wantCode, out)
				}
				if tc.want != nil {
					if err := tc.want(out); err != nil {
						t.Errorf("%s: output %q: %v", tc.name, out, err)
					}
				}
			}
			out, code, err := runExec(t, c, al.ID, execCase{cmd: []string{"no-such-command"}})
			if d.name == "podman" {
				// podman exec says so itself, on stderr, with 127.
				if err != nil || code != 127 || !strings.Contains(out, "not found") {
					t.Errorf("missing command: code %d, err %v, output %q; want 127 and podman's message", code, err, out)
				}
			} else if !api.IsExecError(err) || code != 127 || !strings.Contains(err.Error(), "not found") {
				t.Errorf("missing command: code %d, err %v; want 127 and a clear error", code, err)
			}
			// As a shell says (and podman): 127 for no such file at an
			// absolute path too, 126 for a file that cannot be executed.
			for _, tc := range []struct {
				cmd  string
				code int
			}{{"/no/such/command", 127}, {"/etc/passwd", 126}} {
				out, code, err := runExec(t, c, al.ID, execCase{cmd: []string{tc.cmd}})
				if code != tc.code || (d.name != "podman" && !api.IsExecError(err)) {
					t.Errorf("%s: code %d, err %v, output %q; want %d", tc.cmd, code, err, out, tc.code)
				}
			}
			if _, err := c.StopJob(context.Background(), job); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
}

// signal reaches a trap in the task's shell; restart gives the task a new
// PID in the same network namespace, counted as a restart; stop ends the
// allocation and the service job gets a replacement, a batch job none.
// Errors name the allocation: 404 unknown, 409 not running, 400 bad input.
// The routes need the token on TCP.
func TestAllocCmdStopRestartSignal(t *testing.T) {
	t.Parallel()
	e := allocCmdEnv(t, "10.199.167.0/24")
	e.cfg.API.TCPAddress = "127.0.0.1:0"
	e.cfg.API.Token = "btac-" + testenv.RandSuffix(16)
	a, c := e.startAgent(t)
	ctx := context.Background()
	script := `trap 'echo got-usr1' USR1; echo started-$$; while :; do sleep 0.1; done`
	submit(t, e, c, allocCmdJob("btac-ctl", "service", "raw_exec", script, ""))
	al := runningAlloc(t, c, "btac-ctl")
	old := *al.Tasks[0].Handle

	// Auth: every new route answers 401 on TCP without the token.
	anon, err := api.NewClient("http://"+a.TCPAddr(), "")
	testenv.Must(t, err)
	for _, p := range []string{"/stop", "/restart", "/signal?signal=USR1"} {
		resp, err := anon.Do(ctx, http.MethodPost, "/v1/allocation/"+al.ID+p, nil)
		testenv.Must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without token: %d, want 401", p, resp.StatusCode)
		}
	}
	if _, err := anon.Exec(ctx, al.ID, api.ExecOptions{Cmd: []string{"true"}}); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("exec without token: %v, want 401", err)
	}
	tcp, err := api.NewClient("http://"+a.TCPAddr(), e.cfg.API.Token)
	testenv.Must(t, err)
	if code, err := tcp.Exec(ctx, al.ID, api.ExecOptions{Cmd: []string{"sh", "-c", "exit 3"}}); err != nil || code != 3 {
		t.Errorf("exec over TCP with the token: %d, %v; want 3", code, err)
	}

	logs := func() string {
		var b bytes.Buffer
		_ = c.StreamAllocLogs(ctx, al.ID, "t", api.LogsOptions{}, &b)
		return b.String()
	}
	r, err := c.SignalAlloc(ctx, al.ID[:8], "", "SIGUSR1")
	if err != nil || len(r.Tasks) != 1 {
		t.Fatalf("signal: %+v, %v", r, err)
	}
	waitFor(t, "the trap to see SIGUSR1", time.Minute, func() (bool, error) { return strings.Contains(logs(), "got-usr1"), nil })

	rr, err := c.RestartAlloc(ctx, al.ID, "t")
	if err != nil || len(rr.Tasks) != 1 {
		t.Fatalf("restart: %+v, %v", rr, err)
	}
	now, err := c.Allocation(ctx, al.ID)
	testenv.Must(t, err)
	ts := now.Tasks[0]
	if ts.State != "running" || ts.Handle == nil || ts.Handle.PID == old.PID || ts.Restarts != 1 || ts.Failed {
		t.Fatalf("after restart: %+v (old pid %d); want running with a new PID, 1 restart", ts, old.PID)
	}
	if now.Network.NetnsPath != al.Network.NetnsPath || now.Status != api.AllocRunning {
		t.Errorf("after restart: netns %s, status %s; want %s, running", now.Network.NetnsPath, now.Status, al.Network.NetnsPath)
	}
	var nsFile, taskNS syscall.Stat_t
	testenv.Must(t, syscall.Stat(al.Network.NetnsPath, &nsFile))
	testenv.Must(t, syscall.Stat("/proc/"+strconv.Itoa(ts.Handle.PID)+"/ns/net", &taskNS))
	if nsFile.Ino != taskNS.Ino {
		t.Errorf("the restarted task (pid %d) is not in the allocation's namespace", ts.Handle.PID)
	}
	waitFor(t, "the restarted task's first line", time.Minute, func() (bool, error) {
		return strings.Count(logs(), "started-") == 2, nil
	})

	// Errors.
	for _, tc := range []struct {
		name string
		call func() error
		code int
	}{
		{"unknown alloc", func() error { _, err := c.StopAlloc(ctx, "0123abcd"); return err }, http.StatusNotFound},
		{"bad signal", func() error { _, err := c.SignalAlloc(ctx, al.ID, "", "SIGBOGUS"); return err }, http.StatusBadRequest},
		{"unknown task", func() error { _, err := c.RestartAlloc(ctx, al.ID, "nope"); return err }, http.StatusNotFound},
	} {
		if err := tc.call(); !isStatus(err, tc.code) {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.code)
		}
	}

	sr, err := c.StopAlloc(ctx, al.ID)
	if err != nil || !sr.Stopped {
		t.Fatalf("stop: %+v, %v", sr, err)
	}
	stopped, err := c.Allocation(ctx, al.ID)
	testenv.Must(t, err)
	if stopped.Status != api.AllocComplete || netnsExists(al.Network.NetnsPath) {
		t.Errorf("stopped allocation: %s, netns there %v; want complete, gone", stopped.Status, netnsExists(al.Network.NetnsPath))
	}
	var repl *api.Allocation
	waitFor(t, "the replacement allocation", time.Minute, func() (bool, error) {
		for _, s := range allocsOf(t, c, "btac-ctl") {
			if s.ID != al.ID && s.Status == api.AllocRunning {
				repl, err = c.Allocation(ctx, s.ID)
				return err == nil, err
			}
		}
		return false, nil
	})
	found := false
	for _, ev := range repl.Events {
		found = found || (ev.Type == "Replacement" && strings.Contains(ev.Message, al.ID))
	}
	if !found {
		t.Errorf("the replacement's events do not say whom it replaces: %+v", repl.Events)
	}
	_, err = c.StopAlloc(ctx, al.ID)
	if !isStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), al.ID) {
		t.Errorf("stop of a stopped allocation: %v; want 409 naming it", err)
	}
	if _, err := c.Exec(ctx, al.ID, api.ExecOptions{Cmd: []string{"true"}}); !isStatus(err, http.StatusConflict) {
		t.Errorf("exec in a stopped allocation: %v; want 409", err)
	}
	if _, err := c.StopJob(ctx, "btac-ctl"); err != nil {
		t.Errorf("stop job: %v", err)
	}

	// A batch job's stopped allocation is not run again.
	submit(t, e, c, allocCmdJob("btac-batch", "batch", "raw_exec", "sleep 600", ""))
	b := runningAlloc(t, c, "btac-batch")
	if sr, err := c.StopAlloc(ctx, b.ID); err != nil || !sr.Stopped {
		t.Fatalf("stop batch alloc: %+v, %v", sr, err)
	}
	waitFor(t, "the batch job to end", time.Minute, func() (bool, error) {
		st, err := c.Job(ctx, "btac-batch")
		return err == nil && st.Status == api.JobDead, err
	})
	if l := allocsOf(t, c, "btac-batch"); len(l) != 1 {
		t.Errorf("batch job after an allocation stop: %d allocations, want 1 (not rerun)", len(l))
	}
}
