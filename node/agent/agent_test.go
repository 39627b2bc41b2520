package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// The seed job of the issue, submitted through the API: a periodic batch
// job whose podman task exits at once, in a CNI namespace. N allocations
// must complete with their network status recorded, leave nothing behind,
// and move the metrics by exactly what they did.
func TestSeedJobThroughAPI(t *testing.T) {
	t.Parallel()
	requireImage(t)
	e := newTestEnv(t, "10.199.70.0/24")
	seed, err := os.ReadFile("../../examples/jobs/seed-podman-every-second.nomad.hcl")
	testenv.Must(t, err)
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 5*time.Minute)

	before := scrape(t, c)
	resp, err := c.SubmitJob(ctx, []byte(e.jobSource(t, string(seed))), "seed.nomad.hcl")
	testenv.Must(t, err)
	if resp.JobID != "cni-debug" || resp.Replaced || len(resp.NextLaunches) != 5 {
		t.Errorf("submit response: %+v", resp)
	}

	const n = 3
	waitFor(t, "3 complete allocations", 3*time.Minute, func() (bool, error) {
		l, err := c.Allocations(ctx, "cni-debug")
		return err == nil && countStatus(l, api.AllocComplete) >= n, err
	})
	st, err := c.StopJob(ctx, "cni-debug")
	testenv.Must(t, err)
	if !st.Stopped || st.Summary == nil || len(st.Summary.Leaks) != 0 {
		t.Fatalf("stop: %+v", st)
	}
	// A stopped job stays known as dead until purged, as Nomad's.
	if js, err := c.Job(ctx, "cni-debug"); err != nil || js.Status != api.JobDead || !js.Stopped {
		t.Errorf("stopped job: %+v %v", js, err)
	}
	if st, err := c.StopJobWith(ctx, "cni-debug", api.JobStopOptions{Purge: true}); err != nil || !st.Purged {
		t.Errorf("purge: %+v %v", st, err)
	}
	if _, err := c.Job(ctx, "cni-debug"); !api.IsNotFound(err) {
		t.Errorf("purged job still known: %v", err)
	}

	allocs := allocsOf(t, c, "cni-debug")
	withNetns := 0
	for _, stub := range allocs {
		a, err := c.Allocation(ctx, stub.ID)
		testenv.Must(t, err)
		if a.Status != api.AllocComplete {
			t.Errorf("alloc %s: %s: %s", a.ID, a.Status, a.StatusDesc)
			continue
		}
		ns := a.Network
		if ns == nil || ns.NetnsPath == "" {
			// Stopped before its network was set up: nothing to check.
			continue
		}
		withNetns++
		if ns.NetnsPath != "/run/netns/"+a.ID || ns.Network != e.net.Name || ns.Interface != "eth0" ||
			len(ns.IPv4) != 1 || !strings.HasPrefix(ns.IPv4[0], "10.199.70.") || len(ns.Gateway) != 1 {
			t.Errorf("alloc %s network status: %+v", a.ID, ns)
		}
		if netnsExists(ns.NetnsPath) {
			t.Errorf("alloc %s: namespace %s left behind", a.ID, ns.NetnsPath)
		}
		var types []string
		stopped := false
		for _, ev := range a.Events {
			types = append(types, ev.Type)
			stopped = stopped || strings.HasPrefix(ev.Type, "Kill")
		}
		// The stop cuts short what is in flight: those tasks are killed
		// (or never started), not failed, and must leave as little.
		if len(a.Tasks) != 1 || a.Tasks[0].Failed || a.Tasks[0].Driver != "podman" ||
			(!stopped && a.Tasks[0].ExitCode != 0) ||
			(a.Tasks[0].NotStarted != "" && a.Tasks[0].NotStarted != "stopped while starting" && a.Tasks[0].NotStarted != runner.NotStartedStopped) {
			t.Errorf("alloc %s tasks: %+v", a.ID, a.Tasks)
		}
		if got := strings.Join(types, ","); !strings.Contains(got, "Network,") || !strings.HasSuffix(got, "Network removed") {
			t.Errorf("alloc %s events: %s", a.ID, got)
		}
	}
	if withNetns < n {
		t.Fatalf("%d allocations had a namespace, want at least %d", withNetns, n)
	}

	after := scrape(t, c)
	delta := func(metric string, labels map[string]string) int {
		return int(metricSum(after, metric, labels) - metricSum(before, metric, labels))
	}
	netLabels := func(verb, result string) map[string]string {
		return map[string]string{"verb": verb, "network": e.net.Name, "result": result}
	}
	for _, tc := range []struct {
		metric string
		labels map[string]string
		want   int
	}{
		{"berth_cni_operations_total", netLabels("ADD", "ok"), withNetns},
		{"berth_cni_operations_total", netLabels("DEL", "ok"), withNetns},
		{"berth_cni_operations_total", netLabels("ADD", "error"), 0},
		{"berth_cni_operation_duration_seconds_count", map[string]string{"verb": "ADD", "network": e.net.Name}, withNetns},
		{"berth_netns_operation_duration_seconds_count", map[string]string{"op": "create"}, withNetns},
		{"berth_netns_operation_duration_seconds_count", map[string]string{"op": "remove"}, withNetns},
		{"berth_allocations_total", map[string]string{"status": "complete"}, len(allocs)},
		{"berth_http_requests_total", map[string]string{"route": "/v1/jobs", "method": "post", "code": "200"}, 1},
		{"berth_http_requests_total", map[string]string{"route": "/v1/job/{id}", "method": "delete", "code": "200"}, 2}, // the stop and the purge
	} {
		if got := delta(tc.metric, tc.labels); got != tc.want {
			t.Errorf("%s%v moved by %d, want %d", tc.metric, tc.labels, got, tc.want)
		}
	}
	if got := metricSum(after, "berth_allocations", map[string]string{"status": "complete"}); int(got) != len(allocs) {
		t.Errorf("berth_allocations{status=complete} = %v, want %d", got, len(allocs))
	}
	if got := metricSum(after, "berth_pending_teardowns", nil); got != 0 {
		t.Errorf("berth_pending_teardowns = %v", got)
	}
	if got := metricSum(after, "berth_gc_runs_total", map[string]string{"result": "ok"}); got < 1 {
		t.Errorf("the reconcile at start is not counted as a gc run: %v", got)
	}

	nss, err := c.Namespaces(ctx)
	testenv.Must(t, err)
	for _, ns := range nss {
		for _, a := range allocs {
			if ns.Name == a.ID || ns.AllocID == a.ID {
				t.Errorf("namespace of finished alloc %s still listed: %+v", a.ID, ns)
			}
		}
	}
	t.Logf("%d allocations, %d with a namespace; setup p50 %.1f ms, teardown p50 %.1f ms", len(allocs), withNetns, st.Summary.SetupP50, st.Summary.TeardownP50)
}

// post sends a raw body to the agent.
func post(t *testing.T, c *api.Client, path string, body io.Reader) (int, string) {
	t.Helper()
	resp, err := c.Do(context.Background(), http.MethodPost, path, body)
	testenv.Must(t, err)
	defer resp.Body.Close()
	return resp.StatusCode, readAll(resp.Body)
}

// onlyReader hides a reader's type so that its length is unknown and the
// body is sent chunked.
type onlyReader struct{ io.Reader }

func TestAPI(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.71.0/24")
	const token = "btag-0123456789abcdef"
	e.cfg.API.TCPAddress = "127.0.0.1:0"
	e.cfg.API.Token = token
	a, c := e.startAgent(t)
	ctx := testenv.Context(t, 5*time.Minute)

	fi, err := os.Stat(a.SocketPath())
	testenv.Must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}

	t.Run("tcp needs the token", func(t *testing.T) {
		for _, tc := range []struct {
			token string
			want  int
		}{
			{"", http.StatusUnauthorized},
			{"wrong-token-0123456789", http.StatusUnauthorized},
			{token + "x", http.StatusUnauthorized},
			{token, http.StatusOK},
		} {
			tc2, err := api.NewClient("http://"+a.TCPAddr(), tc.token)
			testenv.Must(t, err)
			for _, path := range []string{"/v1/health", "/v1/jobs", "/metrics"} {
				resp, err := tc2.Do(ctx, http.MethodGet, path, nil)
				testenv.Must(t, err)
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Errorf("token %q %s: %d, want %d", tc.token, path, resp.StatusCode, tc.want)
				}
			}
			tc2.Close()
		}
		m := scrape(t, c)
		if got := metricSum(m, "berth_http_requests_total", map[string]string{"route": "unauthorized", "code": "401"}); got != 9 {
			t.Errorf("unauthorized requests counted %v, want 9", got)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		big := `{"job_hcl":"` + strings.Repeat("a", api.MaxBodyBytes+10) + `"}`
		cases := []struct {
			name, path string
			body       io.Reader
			want       int
			msg        string
		}{
			{"oversized", "/v1/jobs", strings.NewReader(big), http.StatusRequestEntityTooLarge, "larger than"},
			{"oversized chunked", "/v1/jobs", onlyReader{strings.NewReader(big)}, http.StatusRequestEntityTooLarge, "larger than"},
			{"oversized plan", "/v1/jobs/plan", onlyReader{strings.NewReader(big)}, http.StatusRequestEntityTooLarge, "larger than"},
			{"malformed", "/v1/jobs", strings.NewReader(`{"job_hcl": `), http.StatusBadRequest, "malformed JSON"},
			{"not an object", "/v1/jobs", strings.NewReader(`["job"]`), http.StatusBadRequest, "malformed JSON"},
			{"unknown field", "/v1/jobs", strings.NewReader(`{"job_hcl":"x","jobhcl":"y"}`), http.StatusBadRequest, "unknown field"},
			{"trailing data", "/v1/jobs", strings.NewReader(`{"job_hcl":"x"} {}`), http.StatusBadRequest, "trailing"},
			{"empty body", "/v1/jobs", strings.NewReader(``), http.StatusBadRequest, "empty"},
			{"empty job", "/v1/jobs", strings.NewReader(`{"job_hcl":"  "}`), http.StatusBadRequest, "job.nomad.hcl:1:1: the job file holds only white space"},
			{"bad hcl", "/v1/jobs", strings.NewReader(`{"job_hcl":"job \"x\" {\n  tpye = \"batch\"\n}\n","filename":"x.hcl"}`), http.StatusBadRequest, "x.hcl:2:3: "},
			// 100,000 levels of nesting overflowed the HCL parser's stack
			// and killed the agent: refused before parsing, positioned.
			{"nested too deeply", "/v1/jobs/plan", strings.NewReader(`{"job_hcl":"job \"x\" {\n config { x = ` + strings.Repeat("[", 100000) + `] }\n}\n","filename":"deep.hcl"}`), http.StatusBadRequest, "deep.hcl:2:"},
			{"bad job id", "/v1/jobs", strings.NewReader(`{"job_hcl":"job \"a:b\" {\n group \"g\" {\n task \"t\" {\n driver = \"raw_exec\"\n config {\n command = \"/bin/true\"\n }\n }\n }\n}\n"}`), http.StatusBadRequest, "job ID"},
			{"bad dry_run", "/v1/gc?dry_run=maybe", nil, http.StatusBadRequest, "dry_run"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				code, body := post(t, c, tc.path, tc.body)
				if code != tc.want || !strings.Contains(body, tc.msg) {
					t.Errorf("%d %s; want %d mentioning %q", code, body, tc.want, tc.msg)
				}
				var er api.ErrorResponse
				if err := json.Unmarshal([]byte(body), &er); err != nil || er.Error == "" {
					t.Errorf("error body is not {\"error\": ...}: %s", body)
				}
			})
		}
		gets := []struct {
			method, path string
			want         int
		}{
			{http.MethodGet, "/v1/job/no-such-job", http.StatusNotFound},
			{http.MethodGet, "/v1/job/a%2F..%2Fb", http.StatusBadRequest},
			{http.MethodDelete, "/v1/job/no-such-job", http.StatusNotFound},
			{http.MethodGet, "/v1/allocation/0123abcd-0000-4000-8000-000000000000", http.StatusNotFound},
			{http.MethodGet, "/v1/allocation/..%2F..%2Fetc", http.StatusBadRequest},
			{http.MethodGet, "/v1/allocation/0123abcd/logs/..%2F..%2Fberth.db", http.StatusNotFound},
			{http.MethodGet, "/v1/allocations?job=a%20b", http.StatusBadRequest},
			{http.MethodPut, "/v1/jobs", http.StatusMethodNotAllowed},
			{http.MethodGet, "/v2/jobs", http.StatusNotFound},
		}
		for _, g := range gets {
			resp, err := c.Do(ctx, g.method, g.path, nil)
			testenv.Must(t, err)
			body := readAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != g.want || !strings.Contains(body, `"error"`) {
				t.Errorf("%s %s: %d %s; want %d", g.method, g.path, resp.StatusCode, body, g.want)
			}
		}
	})

	t.Run("batch job, status and logs", func(t *testing.T) {
		src := e.jobSource(t, `job "btag-batch" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo out-line; busybox ip -o -4 addr show eth0; echo err-line >&2"]
      }
    }
  }
}
`)
		plan, err := c.PlanJob(ctx, []byte(src), "batch.hcl")
		testenv.Must(t, err)
		if plan.Job.ID != "btag-batch" || plan.Exists || plan.Running {
			t.Errorf("plan: %+v", plan)
		}
		if jobs, _ := c.Jobs(ctx); len(jobs) != 0 {
			t.Errorf("plan had side effects: jobs %+v", jobs)
		}
		_, err = c.SubmitJob(ctx, []byte(src), "batch.hcl")
		testenv.Must(t, err)
		var st *api.JobStatus
		waitFor(t, "the batch job to finish", 2*time.Minute, func() (bool, error) {
			st, err = c.Job(ctx, "btag-batch")
			return err == nil && st.Status == api.JobDead, err
		})
		if len(st.Allocations) != 1 || st.Allocations[0].Status != api.AllocComplete || st.Summary == nil {
			t.Fatalf("job status: %+v", st)
		}
		id := st.Allocations[0].ID
		out, err := c.AllocLogs(ctx, id[:8], "t", false, 0)
		testenv.Must(t, err)
		if !strings.HasPrefix(string(out), "out-line\n") || !strings.Contains(string(out), "10.199.71.") {
			t.Errorf("stdout: %q", out)
		}
		errOut, err := c.AllocLogs(ctx, id, "t", true, 0)
		testenv.Must(t, err)
		if string(errOut) != "err-line\n" {
			t.Errorf("stderr: %q", errOut)
		}
		tail, err := c.AllocLogs(ctx, id, "t", true, 5)
		testenv.Must(t, err)
		if string(tail) != "line\n" {
			t.Errorf("tail 5 of stderr: %q", tail)
		}
		for _, bad := range []struct {
			task  string
			query string
			want  int
		}{
			{"nope", "", http.StatusNotFound},
			{"..%2F..%2Fberth.db", "", http.StatusNotFound},
			{"t.stdout", "", http.StatusNotFound},
			{"t", "?type=stdin", http.StatusBadRequest},
			{"t", "?tail=-1", http.StatusBadRequest},
		} {
			resp, err := c.Do(ctx, http.MethodGet, "/v1/allocation/"+id+"/logs/"+bad.task+bad.query, nil)
			testenv.Must(t, err)
			resp.Body.Close()
			if resp.StatusCode != bad.want {
				t.Errorf("logs %s%s: %d, want %d", bad.task, bad.query, resp.StatusCode, bad.want)
			}
		}
		// Row 10 of issue 10: a task that replaces its log by a symlink
		// does not get the target served.
		logPath := filepath.Join(e.cfg.DataDir, "alloc", id, "alloc", "logs", "t.stdout.0")
		testenv.Must(t, os.Remove(logPath))
		testenv.Must(t, os.Symlink("/etc/os-release", logPath))
		resp, err := c.Do(ctx, http.MethodGet, "/v1/allocation/"+id+"/logs/t", nil)
		testenv.Must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "PRETTY_NAME") {
			t.Errorf("logs through a planted symlink: %d %q", resp.StatusCode, body)
		}
		// Dead jobs stay listed until stopped; stop forgets them.
		plan, err = c.PlanJob(ctx, []byte(src), "batch.hcl")
		testenv.Must(t, err)
		if !plan.Exists || plan.Running {
			t.Errorf("plan of a finished job: exists %v running %v", plan.Exists, plan.Running)
		}
		if _, err := c.StopJob(ctx, "btag-batch"); err != nil {
			t.Error(err)
		}
	})

	t.Run("resubmit replaces a running service", func(t *testing.T) {
		src := e.jobSource(t, `job "btag-svc" {
  type = "service"
  group "g" {
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
`)
		_, err := c.SubmitJob(ctx, []byte(src), "svc.hcl")
		testenv.Must(t, err)
		var first string
		waitFor(t, "the service to run", time.Minute, func() (bool, error) {
			l, err := c.Allocations(ctx, "btag-svc")
			if err == nil && len(l) == 1 && l[0].Status == api.AllocRunning {
				first = l[0].ID
				return true, nil
			}
			return false, err
		})
		// A change of the task (not an in-place one) replaces it.
		resp, err := c.SubmitJob(ctx, []byte(strings.Replace(src, `"600"`, `"601"`, 1)), "svc.hcl")
		testenv.Must(t, err)
		if !resp.Replaced || resp.Update != api.UpdateDestructive || resp.Version != 1 {
			t.Errorf("resubmit of a running job: replaced = false")
		}
		old, err := c.Allocation(ctx, first)
		testenv.Must(t, err)
		if old.Status != api.AllocComplete || netnsExists(old.Network.NetnsPath) {
			t.Errorf("replaced allocation: %s, netns %s exists %v", old.Status, old.Network.NetnsPath, netnsExists(old.Network.NetnsPath))
		}
		waitFor(t, "the new version to run", time.Minute, func() (bool, error) {
			l, err := c.Allocations(ctx, "btag-svc")
			return err == nil && countStatus(l, api.AllocRunning) == 1, err
		})
		self, err := c.Self(ctx)
		testenv.Must(t, err)
		if self.Jobs[api.JobRunning] != 1 || self.Config.TCPAddress == "" || !self.Config.TokenSet || self.Config.DataDir != e.cfg.DataDir {
			t.Errorf("agent self: %+v", self)
		}
		if b, _ := json.Marshal(self); bytes.Contains(b, []byte(token)) {
			t.Errorf("agent self leaks the token: %s", b)
		}
		st, err := c.StopJob(ctx, "btag-svc")
		testenv.Must(t, err)
		if !st.Stopped {
			t.Errorf("stop: %+v", st)
		}
		for _, al := range allocsOf(t, c, "btag-svc") {
			if al.Status != api.AllocComplete || netnsExists(al.NetnsPath) {
				t.Errorf("alloc %s after stop: %s, netns exists %v", al.ID, al.Status, netnsExists(al.NetnsPath))
			}
		}
	})

	t.Run("gc dry run", func(t *testing.T) {
		rep, err := c.GC(ctx, api.GCRequest{DryRun: true})
		testenv.Must(t, err)
		if !rep.DryRun || len(rep.Errors) != 0 {
			t.Errorf("gc dry run: %+v", rep)
		}
	})

	t.Run("a second agent on the socket is refused", func(t *testing.T) {
		cfg := e.cfg
		cfg.DataDir = e.dir + "/data2"
		cfg.API = &APIConfig{Socket: e.cfg.API.Socket}
		b, err := New(cfg, testLogger(t))
		testenv.Must(t, err)
		if err := b.Run(ctx); !errors.Is(err, ErrAgentRunning) {
			t.Errorf("second agent: %v, want ErrAgentRunning", err)
		}
		if _, err := c.Health(ctx); err != nil {
			t.Errorf("first agent no longer answers: %v", err)
		}
	})

	t.Run("the data dir has one owner", func(t *testing.T) {
		cfg := e.cfg
		cfg.API = &APIConfig{Socket: e.dir + "/other.sock"}
		b, err := New(cfg, testLogger(t))
		testenv.Must(t, err)
		if err := b.Run(ctx); !errors.Is(err, store.ErrLocked) {
			t.Errorf("second agent on the data dir: %v, want store.ErrLocked", err)
		}
	})
}
