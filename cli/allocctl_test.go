package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

// The alloc commands as an operator types them, Nomad's flags included,
// against a real agent (host networking: no subnet).
func TestAllocCmdCLI(t *testing.T) {
	addr := startAgent(t)
	c, err := api.NewClient(addr, "")
	testenv.Must(t, err)
	ctx := context.Background()
	src := `job "btcli-alloc" {
  type = "service"
  group "g" {
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo one; echo two; echo three; echo four; trap 'echo got-usr1' USR1; while :; do sleep 0.1; done"]
      }
    }
  }
}
`
	if _, err := c.SubmitJob(ctx, []byte(src), "a.nomad.hcl"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.StopJob(context.Background(), "btcli-alloc") })
	var id string
	deadline := time.Now().Add(time.Minute)
	for id == "" && time.Now().Before(deadline) {
		if l, err := c.Allocations(ctx, "btcli-alloc"); err == nil && len(l) == 1 && l[0].Status == api.AllocRunning {
			if b, _ := c.AllocLogs(ctx, l[0].ID, "t", false, 0); strings.Contains(string(b), "four") {
				id = l[0].ID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("no running allocation")
	}
	a := []string{"--address", addr}
	cmd := func(args ...string) (string, string, error) {
		t.Helper()
		return run(t, append(append([]string{"alloc"}, args[0]), append(a, args[1:]...)...)...)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "-tail", "-n", "3", id, "t"}, "two\nthree\nfour\n"},
		{[]string{"logs", "-n", "2", "-task", "t", id[:8]}, "three\nfour\n"},
		{[]string{"logs", "-c", "5", id}, "four\n"},
		{[]string{"logs", "-tail", id}, "one\ntwo\nthree\nfour\n"},
	} {
		out, stderr, err := cmd(tc.args...)
		if err != nil || out != tc.want {
			t.Errorf("alloc %s: %q, %v (%s); want %q", strings.Join(tc.args, " "), out, err, stderr, tc.want)
		}
	}
	if _, _, err := cmd("logs", "-n", "2", "-c", "3", id); err == nil {
		t.Error("-n and -c together: no error")
	}

	out, _, err := cmd("exec", "-i=false", id, "--", "sh", "-c", "echo in-ns; exit 5")
	var ec exitCode
	if !errors.As(err, &ec) || int(ec) != 5 || out != "in-ns\n" {
		t.Errorf("alloc exec ... exit 5: %q, %v; want exit code 5", out, err)
	}
	if out, _, err := cmd("exec", "-i=false", "-task", "t", id, "--", "true"); err != nil || out != "" {
		t.Errorf("alloc exec true: %q, %v", out, err)
	}

	if out, _, err := cmd("signal", "-s", "USR1", id); err != nil || !strings.Contains(out, "sent USR1 to t") {
		t.Errorf("alloc signal: %q, %v", out, err)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		b, _ := c.AllocLogs(ctx, id, "t", false, 0)
		if strings.Contains(string(b), "got-usr1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trap never saw SIGUSR1: %q", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _, err := cmd("restart", "-task", "t", id); err != nil || !strings.Contains(out, "restarted t") {
		t.Errorf("alloc restart: %q, %v", out, err)
	}
	if out, _, err := cmd("stop", id); err != nil || !strings.Contains(out, "stopped") {
		t.Errorf("alloc stop: %q, %v", out, err)
	}
	_, _, err = cmd("stop", id)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.StatusCode != 409 || !strings.Contains(err.Error(), id) {
		t.Errorf("alloc stop of a stopped allocation: %v; want 409 naming it", err)
	}
	_, _, err = cmd("restart", "00000000")
	if !errors.As(err, &ae) || ae.StatusCode != 404 {
		t.Errorf("alloc restart of an unknown allocation: %v; want 404", err)
	}
}
