package agent

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/node"
	"github.com/berth/berth/store"
)

// This file's tests use the subnets 10.199.212-215.0/24.

// newHarden2Env is newTestEnv on subnet with its bridge network on
// bridgeSubnet, both of this file's.
func newHarden2Env(t *testing.T, subnet, bridgeSubnet string) *testEnv {
	t.Helper()
	e := newTestEnv(t, subnet)
	e.cfg.Bridge = &node.Bridge{Network: "btag-br-" + testenv.RandSuffix(6), Iface: "btag" + testenv.RandSuffix(6), Subnet: bridgeSubnet}
	return e
}

// Issue 18 item 3: a task that replaces its log by a symlink or a hard
// link to a root-only file (standing in for /etc/shadow) gets neither the
// API nor the status page to show it: both read through logfile.OpenLog.
func TestHarden2PlantedLogRefusedByAPIAndUI(t *testing.T) {
	t.Parallel()
	e := newHarden2Env(t, "10.199.212.0/24", "10.199.213.0/24")
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 2*time.Minute)

	secret := "btag-secret-" + testenv.RandSuffix(12)
	secretPath := filepath.Join(t.TempDir(), "shadow")
	testenv.Must(t, os.WriteFile(secretPath, []byte("root:"+secret+":19000:0:99999:7:::\n"), 0o600))

	_, err := c.SubmitJob(ctx, []byte(hostJob("btag-planted", "batch", 1, "echo out-line; echo err-line >&2", "")), "planted.hcl")
	testenv.Must(t, err)
	t.Cleanup(func() { _, _ = c.StopJob(testenv.Context(t, time.Minute), "btag-planted") })
	var st *api.JobStatus
	waitFor(t, "the batch job to finish", time.Minute, func() (bool, error) {
		st, err = c.Job(ctx, "btag-planted")
		return err == nil && st.Status == api.JobDead, err
	})
	if len(st.Allocations) != 1 {
		t.Fatalf("job status: %+v", st)
	}
	id := st.Allocations[0].ID
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Do(ctx, http.MethodGet, path, nil)
		testenv.Must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Before: the log berth wrote is served by both.
	if code, body := get("/v1/allocation/" + id + "/logs/t"); code != http.StatusOK || body != "out-line\n" {
		t.Fatalf("the task's own log: %d %q", code, body)
	}
	if code, body := get("/ui/alloc/" + id); code != http.StatusOK || !strings.Contains(body, "out-line") {
		t.Fatalf("the status page without the task's log: %d", code)
	}

	logPath := filepath.Join(e.cfg.DataDir, "alloc", id, "alloc", "logs", "t.stdout.0")
	for _, tc := range []struct {
		name  string
		plant func(oldname, newname string) error
	}{
		{"symlink", os.Symlink},
		{"hard link", os.Link},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.Must(t, os.Remove(logPath))
			testenv.Must(t, tc.plant(secretPath, logPath))
			for _, q := range []string{"", "?follow=true", "?tail=100", "?lines=1"} {
				code, body := get("/v1/allocation/" + id + "/logs/t" + q)
				if code != http.StatusForbidden || strings.Contains(body, secret) {
					t.Errorf("API logs%s through a planted %s: %d %q, want 403 without the file", q, tc.name, code, body)
				}
			}
			code, body := get("/ui/alloc/" + id)
			if strings.Contains(body, secret) {
				t.Errorf("the status page shows the file a planted %s points to", tc.name)
			}
			if code != http.StatusOK || !strings.Contains(body, "not shown") || !strings.Contains(body, "err-line") {
				t.Errorf("status page: %d, want 200 with a notice for stdout and stderr shown:\n%s", code, body)
			}
		})
	}
}

// Issue 18 item 6: the agent's own files (its config, the token file,
// the TLS files) are read only when each is a regular file itself. A FIFO
// hung the agent past SIGTERM (open and read block), a symlinked token
// file was accepted: both are refused at once, naming the file and the
// setting.
func TestHarden2AgentFilesRefused(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "h2")
	tokenFile := filepath.Join(dir, "token")
	testenv.Must(t, os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600))
	cfgFile := filepath.Join(dir, "agent.hcl")
	testenv.Must(t, os.WriteFile(cfgFile, []byte("gc_interval = \"1m\"\n"), 0o600))
	n := 0
	plant := func(kind, target string) string {
		n++
		path := filepath.Join(dir, fmt.Sprintf("planted-%d", n))
		switch kind {
		case "fifo":
			testenv.Must(t, syscall.Mkfifo(path, 0o600))
		case "symlink":
			testenv.Must(t, os.Symlink(target, path))
		case "oversized":
			testenv.Must(t, os.WriteFile(path, bytes.Repeat([]byte("a"), 2<<20), 0o600))
		}
		return path
	}
	load := func(path string) error { _, err := LoadConfig(path); return err }
	check := func(edit func(c *Config)) error {
		cfg := DefaultConfig()
		cfg.API.TCPAddress = "127.0.0.1:4646"
		cfg.API.TLS = &TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey, CAFile: p.caCert}
		cfg.API.TokenFile = tokenFile
		edit(&cfg)
		_, err := cfg.check()
		return err
	}
	files := []struct {
		setting string
		target  string
		read    func(path string) error
	}{
		{"-config", cfgFile, load},
		{"api.token_file", tokenFile, func(path string) error { return check(func(c *Config) { c.API.TokenFile = path }) }},
		{"api.tls.key_file", p.serverKey, func(path string) error { return check(func(c *Config) { c.API.TLS.KeyFile = path }) }},
		{"api.tls.cert_file", p.serverCert, func(path string) error { return check(func(c *Config) { c.API.TLS.CertFile = path }) }},
		{"api.tls.ca_file", p.caCert, func(path string) error { return check(func(c *Config) { c.API.TLS.CAFile = path }) }},
	}
	// The real files pass.
	testenv.Must(t, load(cfgFile))
	testenv.Must(t, check(func(*Config) {}))
	for _, f := range files {
		for _, tc := range []struct{ kind, want string }{
			{"fifo", "is not a regular file (it is a FIFO"},
			{"symlink", "is a symbolic link"},
			{"oversized", "larger than"},
		} {
			if tc.kind == "oversized" && f.setting == "-config" {
				continue // the parser's own limit names it (TestParseConfigLimits)
			}
			t.Run(f.setting+"/"+tc.kind, func(t *testing.T) {
				path := plant(tc.kind, f.target)
				errc := make(chan error, 1)
				go func() { errc <- f.read(path) }()
				var err error
				select {
				case err = <-errc:
				case <-time.After(30 * time.Second):
					// A hang, not a speed target: open(2) of a FIFO blocks
					// until a writer comes. Unblock it so the test ends.
					if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						w.Close()
					}
					t.Fatalf("reading a %s as %s hangs", tc.kind, f.setting)
				}
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) ||
					(tc.kind != "oversized" && !strings.Contains(err.Error(), f.setting)) {
					t.Errorf("%s as %s: %v; want an error naming %s, %s and %q", tc.kind, f.setting, err, path, f.setting, tc.want)
				}
			})
		}
	}
}

// Issue 18 item 6: a teardown of 1,000 tasks failed once on the agent's
// own store lock deadline. 200 raw_exec allocations stopped at once, with
// the API read meanwhile as a status page and a CLI do: every one ends
// terminal and recorded.
func TestHarden2StopManyAllocationsAtOnce(t *testing.T) {
	const n = 200
	e := newHarden2Env(t, "10.199.215.0/24", "10.199.214.0/24")
	a, c := e.startAgent(t)
	ctx := testenv.Context(t, 5*time.Minute)
	_, err := c.SubmitJob(ctx, []byte(hostJob("btag-many", "service", n, "exec sleep 3600", "resources {\n        cpu    = 10\n        memory = 10\n      }")), "many.hcl")
	testenv.Must(t, err)
	t.Cleanup(func() { _, _ = c.StopJob(testenv.Context(t, 3*time.Minute), "btag-many") })
	waitFor(t, fmt.Sprintf("%d allocations running", n), 3*time.Minute, func() (bool, error) {
		return countStatus(allocsOf(t, c, "btag-many"), api.AllocRunning) == n, nil
	})

	stop := make(chan struct{})
	var readers sync.WaitGroup
	// As many API readers as make the agent's own reads overlap without
	// pause: on main they kept the writer from its lock past its 30 s.
	for i := 0; i < 32; i++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = c.Allocations(ctx, "btag-many")
			}
		}()
	}
	resp, err := c.StopJob(ctx, "btag-many")
	close(stop)
	readers.Wait()
	testenv.Must(t, err)
	if !resp.Stopped || resp.Summary == nil {
		t.Fatalf("stop: %+v", resp)
	}
	if got := resp.Summary.ByStatus[api.AllocComplete]; got != n {
		t.Errorf("allocations by status %v, want all %d complete; failed: %v", resp.Summary.ByStatus, n, resp.Summary.Failed)
	}
	// Retention keeps the newest finished ones; any left unfinished stay.
	allocs, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{JobID: "btag-many"})
	testenv.Must(t, err)
	for _, al := range allocs {
		if !al.Status.Terminal() {
			t.Errorf("allocation %s recorded %s after the stop", al.ID, al.Status)
		}
		for _, ev := range al.Events {
			if ev.Type == runner.EventNotRecorded {
				t.Errorf("allocation %s: a write was lost: %s", al.ID, ev.Message)
			}
		}
	}
}
