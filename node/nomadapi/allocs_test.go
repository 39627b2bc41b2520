package nomadapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	napi "github.com/hashicorp/nomad/api"

	"github.com/berth/berth/api"
)

// allocJob is a job of one group in the test's CNI network, its task "web"
// running script under raw_exec, with port "http" mapped.
func allocJob(id, typ, script string) string {
	return fmt.Sprintf(`job %q {
  type = %q
  group "g" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    task "web" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      resources {
        cpu    = 120
        memory = 64
      }
    }
  }
}
`, id, typ, script)
}

// submit submits src (its cni/private the test network) with berth's own
// client and returns the job's first allocation once it runs (or, for a
// batch job, once it exists).
func (e *nomadEnv) submit(t *testing.T, id, src string, running bool) api.AllocStub {
	t.Helper()
	src = strings.ReplaceAll(src, "cni/private", "cni/"+e.net.Name)
	ctx := context.Background()
	if _, err := e.c.SubmitJob(ctx, []byte(src), id+".nomad.hcl"); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
	var al api.AllocStub
	waitFor(t, "an allocation of "+id, time.Minute, func() bool {
		l, err := e.c.Allocations(ctx, id)
		if err != nil || len(l) == 0 {
			return false
		}
		al = l[0]
		return !running || al.Status == api.AllocRunning
	})
	return al
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nomadIn is nomad with stdin.
func (e *nomadEnv) nomadIn(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("nomad not installed: run scripts/setup.sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+e.addr, "NOMAD_TOKEN="+testToken, "NO_COLOR=1", "NOMAD_CLI_NO_COLOR=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nomad %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ nomad %s (exit %d)\n%s", strings.Join(args, " "), code, out.String())
	return out.String(), code
}

// must runs the nomad CLI and fails the test unless it exits with code
// and prints every one of want.
func (e *nomadEnv) must(t *testing.T, code int, want []string, args ...string) string {
	t.Helper()
	out, got := e.nomad(t, args...)
	if got != code {
		t.Errorf("nomad %s: exit %d, want %d", strings.Join(args, " "), got, code)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("nomad %s: output lacks %q", strings.Join(args, " "), w)
		}
	}
	return out
}

// TestNomadCLIAlloc: the real nomad CLI's alloc commands against a berth
// agent: status (events, ports, resources), logs (plain, -stderr, -tail
// -n, -f to the task's end), exec (output, exit code, stdin), fs (ls,
// cat, stat, sandboxed), signal, restart and stop.
func TestNomadCLIAlloc(t *testing.T) {
	e := startNomadEnv(t, "10.199.137.0/24", "10.199.138.0/24")
	script := `trap 'echo got-usr1' USR1; echo hello-stdout; echo hello-stderr >&2; echo secret-data > secrets/s.txt; i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.5; done`
	al := e.submit(t, "napi-alloc", allocJob("napi-alloc", "service", script), true)
	id := al.ID[:8]

	t.Run("status", func(t *testing.T) {
		out := e.must(t, 0, []string{"ID", al.ID, "Name", "napi-alloc.g[0]", "Client Status", "running", `Task "web" is "running"`,
			"Started", "Task Resources", "120 MHz", "64 MiB", "Allocation Addresses", "http"}, "alloc", "status", id)
		// The port as mapped on the host: address:port -> 8080.
		if !regexp.MustCompile(`http\s+yes\s+\S+:\d+ -> 8080`).MatchString(out) {
			t.Errorf("alloc status: no line for port http mapped to 8080")
		}
		e.must(t, 0, []string{"Placement Metrics", "Eval ID"}, "alloc", "status", "-verbose", id)
		e.must(t, 1, []string{"No allocation(s) with prefix or id"}, "alloc", "status", "ffffffff")
	})

	t.Run("logs", func(t *testing.T) {
		waitFor(t, "two ticks", 30*time.Second, func() bool {
			out, _ := e.nomad(t, "alloc", "logs", id, "web")
			return strings.Contains(out, "tick-2")
		})
		e.must(t, 0, []string{"hello-stdout", "tick-1"}, "alloc", "logs", id, "web")
		out := e.must(t, 0, []string{"hello-stderr"}, "alloc", "logs", "-stderr", id, "web")
		if strings.Contains(out, "tick-") {
			t.Errorf("alloc logs -stderr shows stdout")
		}
		out = e.must(t, 0, []string{"tick-"}, "alloc", "logs", "-tail", "-n", "1", id, "web")
		if n := strings.Count(strings.TrimSpace(out), "\n"); n != 0 || strings.Contains(out, "hello") {
			t.Errorf("alloc logs -tail -n 1: %d lines, want 1", n+1)
		}
		e.must(t, 1, []string{"unknown task"}, "alloc", "logs", id, "nope")

		// plain=true: the bytes, no frames; origin end, offset in bytes.
		for q, want := range map[string]string{
			"task=web&plain=true":                                 "hello-stdout\ntick-1\n",
			"task=web&type=stderr&plain=true":                     "hello-stderr\n",
			"task=web&plain=true&origin=start&offset=13":          "tick-1\n",
			"task=web&type=stderr&plain=true&origin=end&offset=7": "stderr\n",
		} {
			req, err := http.NewRequest(http.MethodGet, e.addr+"/v1/client/fs/logs/"+al.ID+"?"+q, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Nomad-Token", testToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), want) {
				t.Errorf("logs?%s: %d %q, want it to start with %q", q, resp.StatusCode, b, want)
			}
		}
	})

	t.Run("logs -f", func(t *testing.T) {
		b := e.submit(t, "napi-batch", allocJob("napi-batch", "batch", `for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.3; done; echo done-all`), false)
		start := time.Now()
		out := e.must(t, 0, []string{"line-1", "line-6", "done-all"}, "alloc", "logs", "-f", "-stdout", b.ID[:8], "web")
		if strings.Index(out, "line-1") > strings.Index(out, "done-all") {
			t.Errorf("alloc logs -f: out of order")
		}
		t.Logf("logs -f ended %v after it started", time.Since(start))
	})

	t.Run("exec", func(t *testing.T) {
		out, code := e.nomad(t, "alloc", "exec", "-task", "web", id, "/bin/sh", "-c", "echo exec-out; echo exec-err >&2; exit 3")
		if code != 3 || !strings.Contains(out, "exec-out") || !strings.Contains(out, "exec-err") {
			t.Errorf("alloc exec: exit %d, want 3 with both outputs", code)
		}
		// Without -task: the group's only task.
		out, code = e.nomadIn(t, "from-stdin\n", "alloc", "exec", "-i", id, "cat")
		if code != 0 || !strings.Contains(out, "from-stdin") {
			t.Errorf("alloc exec -i cat: exit %d, want 0 echoing stdin", code)
		}
		if _, code = e.nomad(t, "alloc", "exec", id, "/no/such/command"); code == 0 {
			t.Errorf("alloc exec of a missing command: exit 0")
		}

		// A terminal, through Nomad's Go API client: the command sees a
		// tty of the size sent.
		c, err := napi.NewClient(&napi.Config{Address: e.addr, SecretID: testToken})
		if err != nil {
			t.Fatal(err)
		}
		alloc, _, err := c.Allocations().Info(al.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		sizes := make(chan napi.TerminalSize, 1)
		sizes <- napi.TerminalSize{Height: 33, Width: 101}
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		code, err = c.Allocations().Exec(ctx, alloc, "web", true, []string{"/bin/sh", "-c", "sleep 0.5; tty; stty size; exit 4"},
			strings.NewReader(""), &stdout, &stderr, sizes, nil)
		t.Logf("exec -t: exit %d, %v: %q %q", code, err, stdout.String(), stderr.String())
		if err != nil || code != 4 || !strings.Contains(stdout.String(), "/dev/pts/") || !strings.Contains(stdout.String(), "33 101") {
			t.Errorf("exec with a tty: exit %d, %v, output %q; want 4, a pts and its size 33 101", code, err, stdout.String())
		}
	})

	t.Run("fs", func(t *testing.T) {
		e.must(t, 0, []string{"alloc/", "web/"}, "alloc", "fs", id)
		e.must(t, 0, []string{"web.stdout.0"}, "alloc", "fs", id, "alloc/logs")
		e.must(t, 0, []string{"hello-stdout"}, "alloc", "fs", id, "alloc/logs/web.stdout.0")
		e.must(t, 0, []string{"web.stdout.0", "-rw"}, "alloc", "fs", "-stat", id, "alloc/logs/web.stdout.0")
		// -tail reads at an offset (readat, limit -1).
		out := e.must(t, 0, []string{"tick-"}, "alloc", "fs", "-tail", "-n", "1", id, "alloc/logs/web.stdout.0")
		if strings.Contains(out, "hello") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("alloc fs -tail -n 1: %q, want the last line", out)
		}
		out, code := e.nomad(t, "alloc", "fs", id, "../../../etc/passwd")
		if code == 0 || strings.Contains(out, "root:") {
			t.Errorf("alloc fs ..: exit %d, want a refusal", code)
		}
		out, code = e.nomad(t, "alloc", "fs", id, "web/secrets/s.txt")
		if code == 0 || strings.Contains(out, "secret-data") || !strings.Contains(out, "secret") {
			t.Errorf("alloc fs of a secret: exit %d, want Nomad's refusal", code)
		}
		// A link the task planted is not followed.
		if _, code := e.nomad(t, "alloc", "exec", id, "/bin/sh", "-c", "ln -s /etc/passwd local/pw && ln -s / local/root"); code != 0 {
			t.Fatalf("planting links: exit %d", code)
		}
		for _, p := range []string{"web/local/pw", "web/local/root/etc/passwd"} {
			out, code = e.nomad(t, "alloc", "fs", id, p)
			if code == 0 || strings.Contains(out, "root:") {
				t.Errorf("alloc fs %s (a planted link): exit %d, want a refusal", p, code)
			}
		}
	})

	t.Run("signal", func(t *testing.T) {
		e.must(t, 0, nil, "alloc", "signal", "-s", "SIGUSR1", id, "web")
		waitFor(t, "the trap's output", 30*time.Second, func() bool {
			out, _ := e.nomad(t, "alloc", "logs", id, "web")
			return strings.Contains(out, "got-usr1")
		})
		e.must(t, 1, nil, "alloc", "signal", "-s", "SIGNOPE", id, "web")
	})

	t.Run("restart", func(t *testing.T) {
		e.must(t, 0, nil, "alloc", "restart", id, "web")
		e.must(t, 0, []string{"Restart Signaled", `Task "web" is "running"`}, "alloc", "status", id)
	})

	t.Run("lists agree", func(t *testing.T) {
		// /v1/allocations and /v1/job/:id/allocations: one converter.
		stub := func(args ...string) map[string]any {
			out := e.must(t, 0, nil, args...)
			var l []map[string]any
			if err := json.Unmarshal([]byte(out), &l); err != nil {
				t.Fatalf("nomad %s: %v", strings.Join(args, " "), err)
			}
			for _, a := range l {
				if a["ID"] == al.ID {
					return a
				}
			}
			t.Fatalf("nomad %s: no allocation %s", strings.Join(args, " "), al.ID)
			return nil
		}
		all, job := stub("alloc", "status", "-json"), stub("job", "allocs", "-json", "napi-alloc")
		for _, k := range []string{"EvalID", "DesiredStatus", "ClientStatus", "JobType", "DeploymentStatus", "AllocatedResources"} {
			a, _ := json.Marshal(all[k])
			j, _ := json.Marshal(job[k])
			if string(a) != string(j) {
				t.Errorf("allocation %s: %s is %s in /v1/allocations, %s in the job's list", al.ID, k, a, j)
			}
		}
	})

	t.Run("stop", func(t *testing.T) {
		// Without -detach the CLI monitors the stop's evaluation.
		out := e.must(t, 0, []string{`finished with status "complete"`}, "alloc", "stop", id)
		if !regexp.MustCompile(`[0-9a-f]{8}`).MatchString(out) {
			t.Errorf("alloc stop: no evaluation ID")
		}
		waitFor(t, "the allocation to stop", time.Minute, func() bool {
			a, err := e.c.Allocation(context.Background(), al.ID)
			return err == nil && a.Status != api.AllocRunning
		})
	})
}
