package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// This file's tests use the subnets 10.199.175-179.0/24.

// hostJob is a raw_exec job in host networking running sh -c script.
func hostJob(id, typ string, count int, script, resources string) string {
	return fmt.Sprintf(`job %q {
  type = %q
  group "g" {
    count = %d
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      %s
    }
  }
}
`, id, typ, count, script, resources)
}

// runAgent runs a in this process until the test ends, without waiting
// for anything.
func runAgent(t *testing.T, a *Agent) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		err := a.Run(ctx)
		errc <- err
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			t.Errorf("agent did not drain within 5 minutes")
		}
	})
	return errc
}

// Row 9: a second agent on the socket of a running one fails at once,
// before it has opened its store, so before any reconcile or sweep.
func TestSecondAgentOnSameSocketFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.175.0/24")
	e.startAgent(t)
	second := e.cfg
	second.DataDir = filepath.Join(e.dir, "data2")
	second.GCMode = GCFull // the host-wide sweep it must not get to
	a, err := New(second, testLogger(t))
	testenv.Must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrAgentRunning) {
		t.Fatalf("second agent on %s: %v, want ErrAgentRunning", e.cfg.API.Socket, err)
	}
	if _, err := os.Stat(filepath.Join(second.DataDir, store.DBFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the second agent opened a store before noticing the socket is taken: %v", err)
	}
}

// deadOwner is the PID of a process that has exited, with a start time
// it never had: records owned by it are a killed agent's.
func deadOwner(t testing.TB) (int, uint64) {
	t.Helper()
	cmd := exec.Command("/bin/true")
	testenv.Must(t, cmd.Run())
	return cmd.Process.Pid, 1
}

// Row 2: with thousands of allocations a killed agent left, the API answers
// before the reconcile is done (it says it reconciles), jobs submitted
// meanwhile start after it, every allocation is marked lost, and
// /v1/agent/self keeps a bounded report.
func TestAPIAnswersWhileReconciling(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.176.0/24")
	// 10,000 keep the test short under -race; the benchmark below starts
	// with 50,000.
	const n = 10000
	seedAllocations(t, e.cfg.DataDir, n)

	a, err := New(e.cfg, testLogger(t))
	testenv.Must(t, err)
	// Holding the gc lock holds the reconcile at its start.
	a.gcMu.Lock()
	errc := runAgent(t, a)
	select {
	case <-a.Ready():
	case err := <-errc:
		t.Fatalf("agent: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not ready")
	}
	c, err := api.NewClient("unix://"+a.SocketPath(), "")
	testenv.Must(t, err)
	defer c.Close()
	ctx := testenv.Context(t, 3*time.Minute)
	h, err := c.Health(ctx)
	testenv.Must(t, err)
	if h.Status != "ok" || !h.Reconciling {
		t.Errorf("health while reconciling: %+v", h)
	}
	if _, err := c.SubmitJob(ctx, []byte(hostJob("early", "batch", 1, "true", "")), "early.hcl"); err != nil {
		t.Fatalf("submit while reconciling: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if l := allocsOf(t, c, "early"); len(l) != 0 {
		t.Errorf("a job submitted during the reconcile started before it: %+v", l)
	}
	a.gcMu.Unlock()
	<-a.Reconciled()

	waitFor(t, "the early job to complete", time.Minute, func() (bool, error) {
		l, err := c.Allocations(ctx, "early")
		return err == nil && countStatus(l, api.AllocComplete) == 1, err
	})
	resp, err := c.Do(ctx, http.MethodGet, "/v1/agent/self", nil)
	testenv.Must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var self api.AgentSelf
	testenv.Must(t, json.Unmarshal(body, &self))
	g := self.LastGC
	if self.Reconciling || g == nil {
		t.Fatalf("after the reconcile: reconciling %v, last gc %v", self.Reconciling, g)
	}
	if g.FoundTotal != n || g.ReclaimedTotal != n || g.ReclaimedByKind[api.GCAllocOwner] != n ||
		len(g.Found) != api.MaxGCReportItems || len(g.Reclaimed) != api.MaxGCReportItems || !g.Omitted {
		t.Errorf("last gc: found %d (%d listed), reclaimed %d (%d listed), by kind %v, omitted %v",
			g.FoundTotal, len(g.Found), g.ReclaimedTotal, len(g.Reclaimed), g.ReclaimedByKind, g.Omitted)
	}
	if len(body) > 256<<10 {
		t.Errorf("/v1/agent/self is %d bytes after a gc of %d items: it grows with the report", len(body), n)
	}
	t.Logf("/v1/agent/self: %d bytes", len(body))
	st, err := store.Open(ctx, e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	defer st.Close()
	live, err := st.ListAllocations(ctx, store.AllocFilter{JobID: "ghost", NonTerminal: true})
	testenv.Must(t, err)
	if len(live) != 0 {
		t.Errorf("%d allocations of the killed agent are still not lost", len(live))
	}
}

// seedAllocations writes n running allocations of a dead agent.
func seedAllocations(t testing.TB, dataDir string, n int) {
	t.Helper()
	pid, start := deadOwner(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dataDir, store.Options{})
	testenv.Must(t, err)
	defer st.Close()
	var batch []*store.Allocation
	for i := range n {
		batch = append(batch, &store.Allocation{
			ID: runner.NewAllocID(), JobID: "ghost", Group: "g", Status: store.AllocRunning,
			Tasks:    []store.TaskState{{Name: "t", Driver: "raw_exec", State: "running"}},
			OwnerPID: pid, OwnerStartTime: start,
		})
		if len(batch) == 5000 || i == n-1 {
			testenv.Must(t, st.PutAllocations(ctx, batch))
			batch = nil
		}
	}
}

// Row 2: a job that could never fit is refused by plan and run, naming
// the dimension; one that fits the node but not what is free now waits,
// pending with what it waits for.
func TestAdmissionThroughAPI(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.177.0/24")
	e.cfg.Client.MemoryTotalMB = 100
	e.cfg.Client.CPUTotalCompute = 100000
	_, c := e.startAgent(t)
	ctx := testenv.Context(t, 2*time.Minute)

	big := hostJob("big", "service", 100000, "sleep 60", "")
	for _, call := range []func() error{
		func() error { _, err := c.PlanJob(ctx, []byte(big), "big.hcl"); return err },
		func() error { _, err := c.SubmitJob(ctx, []byte(big), "big.hcl"); return err },
	} {
		err := call()
		var ae *api.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || len(ae.Diagnostics) != 1 ||
			!strings.Contains(ae.Message, `big.hcl:3:3: job "big" cannot run on this node: memory exhausted; 100000 x 300 MB (group "g") = 30000000 MB > 100 MB (the node's)`) {
			t.Errorf("count 100000: %v", err)
		}
	}
	if _, err := c.Job(ctx, "big"); !api.IsNotFound(err) {
		t.Errorf("a refused job is known: %v", err)
	}

	// Two jobs that fit the node each, but not together: the second waits.
	_, err := c.SubmitJob(ctx, []byte(hostJob("fits", "batch", 2, "sleep 2", "resources {\n memory = 50\n}")), "fits.hcl")
	testenv.Must(t, err)
	waitFor(t, "the first job to run", time.Minute, func() (bool, error) {
		l, err := c.Allocations(ctx, "fits")
		return err == nil && countStatus(l, api.AllocRunning) == 2, err
	})
	_, err = c.SubmitJob(ctx, []byte(hostJob("waits", "batch", 1, "true", "resources {\n memory = 50\n}")), "waits.hcl")
	testenv.Must(t, err)
	var queued *api.Allocation
	waitFor(t, "a queued allocation", time.Minute, func() (bool, error) {
		st, err := c.Job(ctx, "waits")
		if err != nil || st.Allocations == nil {
			return false, err
		}
		for _, s := range st.Allocations {
			if s.Status == api.AllocPending && strings.HasPrefix(s.StatusDesc, "queued: ") {
				queued, err = c.Allocation(ctx, s.ID)
				return err == nil, err
			}
		}
		return false, nil
	})
	if queued.StatusDesc != "queued: waiting for memory: needs 50 MB, 0 MB free of 100 MB" || queued.Events[len(queued.Events)-1].Type != runner.EventQueued {
		t.Errorf("queued allocation: %q, events %+v", queued.StatusDesc, queued.Events)
	}
	waitFor(t, "all three complete", time.Minute, func() (bool, error) {
		l, err := c.Allocations(ctx, "")
		return err == nil && countStatus(l, api.AllocComplete) == 3, err
	})
}

// Row 8: the TCP API over TLS, with client certificates verified against
// ca_file; certificates made by the test, on 127.0.0.1.
func TestTCPAPIOverTLS(t *testing.T) {
	t.Parallel()
	for _, required := range []bool{true, false} {
		t.Run(fmt.Sprintf("verify_client=%v", required), func(t *testing.T) {
			subnet := "10.199.178.0/24"
			if !required {
				subnet = "10.199.179.0/24"
			}
			e := newTestEnv(t, subnet)
			p := newPKI(t, e.dir, "api")
			other := newPKI(t, e.dir, "other")
			token := "btag-" + testenv.RandSuffix(24)
			e.cfg.API.TCPAddress, e.cfg.API.Token = "127.0.0.1:0", token
			e.cfg.API.TLS = &TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey, CAFile: p.caCert, VerifyClient: required}
			a, _ := e.startAgent(t)
			ctx := testenv.Context(t, time.Minute)
			url := "https://" + a.TCPAddr()
			health := func(o api.ClientOptions, addr string) error {
				c, err := api.NewClientWithOptions(addr, o)
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Health(ctx)
				return err
			}
			good := api.ClientOptions{Token: token, CACert: p.caCert, ClientCert: p.clientCert, ClientKey: p.clientKey}
			if err := health(good, url); err != nil {
				t.Fatalf("CA, client certificate and token: %v", err)
			}
			noCert := api.ClientOptions{Token: token, CACert: p.caCert}
			if err := health(noCert, url); (err == nil) == required {
				t.Errorf("without a client certificate (required %v): %v", required, err)
			}
			foreign := api.ClientOptions{Token: token, CACert: p.caCert, ClientCert: other.clientCert, ClientKey: other.clientKey}
			// Go's client offers only a certificate of a CA the agent
			// names: another CA's is not sent, so it counts as none.
			if err := health(foreign, url); (err == nil) == required {
				t.Errorf("a client certificate of another CA (required %v): %v", required, err)
			}
			if err := health(api.ClientOptions{Token: token, ClientCert: p.clientCert, ClientKey: p.clientKey}, url); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("an agent certificate the client cannot verify: %v", err)
			}
			if err := health(api.ClientOptions{CACert: p.caCert, ClientCert: p.clientCert, ClientKey: p.clientKey}, url); !isStatus(err, http.StatusUnauthorized) {
				t.Errorf("no token over TLS: %v, want 401", err)
			}
			if err := health(api.ClientOptions{Token: token}, "http://"+a.TCPAddr()); err == nil {
				t.Error("plain HTTP answered on the TLS port")
			}
			// The raw handshake offers nothing below TLS 1.2.
			conn, err := tls.Dial("tcp", a.TCPAddr(), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11})
			if err == nil {
				conn.Close()
				t.Error("TLS 1.1 accepted")
			}
		})
	}
}

func isStatus(err error, code int) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.StatusCode == code
}

// syncBuffer is a log destination tests read while the agent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Row 13: a request trickled slower than read_timeout is cut off; a
// listener serves max_connections at once; a flood of bad tokens is one
// log line per interval with a count.
func TestAPIRequestLimits(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.175.0/24")
	e.cfg.API.ReadTimeout = "1s"
	e.cfg.API.MaxConnections = 2
	e.cfg.API.TCPAddress, e.cfg.API.Token = "127.0.0.1:0", "btag-"+testenv.RandSuffix(24)
	logs := &syncBuffer{}
	a, err := New(e.cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	testenv.Must(t, err)
	a.rejects.every = 500 * time.Millisecond
	errc := runAgent(t, a)
	select {
	case <-a.Reconciled():
	case err := <-errc:
		t.Fatalf("agent: %v", err)
	}
	addr := a.TCPAddr()

	t.Run("slow body", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		testenv.Must(t, err)
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/jobs/plan HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{", e.cfg.API.Token)
		testenv.Must(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		start := time.Now()
		b, _ := io.ReadAll(conn)
		if time.Since(start) > 20*time.Second {
			t.Fatalf("a body that never came held the connection for %s", time.Since(start))
		}
		if len(b) > 0 && !strings.Contains(string(b), " 400 ") && !strings.Contains(string(b), " 408 ") {
			t.Errorf("answer to a trickled body: %q", b)
		}
	})

	t.Run("connection limit", func(t *testing.T) {
		var held []net.Conn
		for range 2 {
			conn, err := net.Dial("tcp", addr)
			testenv.Must(t, err)
			held = append(held, conn)
		}
		// Let the server accept both (the limit counts accepted ones).
		time.Sleep(100 * time.Millisecond)
		c, err := api.NewClient("http://"+addr, e.cfg.API.Token)
		testenv.Must(t, err)
		defer c.Close()
		answered := make(chan error, 1)
		go func() {
			_, err := c.Health(context.Background())
			answered <- err
		}()
		select {
		case err := <-answered:
			t.Fatalf("a third connection was served beside two held ones: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		held[0].Close()
		select {
		case err := <-answered:
			testenv.Must(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting connection was not served once one closed")
		}
		held[1].Close()
	})

	t.Run("auth failures", func(t *testing.T) {
		c, err := api.NewClient("http://"+addr, "wrong-token-0123456789")
		testenv.Must(t, err)
		defer c.Close()
		const n = 50
		for range n {
			if _, err := c.Health(context.Background()); !isStatus(err, http.StatusUnauthorized) {
				t.Fatalf("bad token: %v", err)
			}
		}
		waitFor(t, "the summary line", 10*time.Second, func() (bool, error) {
			return len(logs.lines(`msg="API requests rejected"`)) > 0, nil
		})
		single, summary := logs.lines(`msg="API request rejected"`), logs.lines(`msg="API requests rejected"`)
		if len(single) != 1 || len(summary) != 1 || !strings.Contains(summary[0], fmt.Sprintf("count=%d", n-1)) || !strings.Contains(summary[0], "127.0.0.1 (49)") {
			t.Errorf("%d rejections logged as:\n%s", n, strings.Join(append(single, summary...), "\n"))
		}
	})
}

// Row 13: an allocation the store cannot record (a full disk, injected)
// is the job's error, with its cause, not `dead` with no error. Not
// parallel: the fault is armed through the environment, for the whole
// process.
func TestUnrecordedAllocationIsTheJobsError(t *testing.T) {
	e := newTestEnv(t, "10.199.176.0/24")
	_, c := e.startAgent(t)
	t.Setenv(fault.Env, fault.FailPutAllocation)
	ctx := testenv.Context(t, time.Minute)
	_, err := c.SubmitJob(ctx, []byte(hostJob("norec", "batch", 1, "true", "")), "norec.hcl")
	testenv.Must(t, err)
	var st *api.JobStatus
	waitFor(t, "the job to end", time.Minute, func() (bool, error) {
		st, err = c.Job(ctx, "norec")
		return err == nil && st.Status == api.JobDead, err
	})
	if !strings.Contains(st.Error, "could not be recorded: put allocation ") || !strings.Contains(st.Error, "no space left on device") {
		t.Errorf("job status: %s, error %q; want the allocation's cause", st.Status, st.Error)
	}
	t.Logf("job error: %s", st.Error)
}

// Row 7: at start, allocation directories no record knows go (and
// nothing else under the alloc dir); a record pruned by retention takes
// its directory with it, also when an earlier agent made it.
func TestAllocDirsFollowRecords(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "10.199.177.0/24")
	e.cfg.Retention = 1
	allocDir := e.cfg.AllocDir()
	orphan, kept := runner.NewAllocID(), runner.NewAllocID()
	for _, d := range []string{orphan, kept, "not-an-alloc"} {
		testenv.Must(t, os.MkdirAll(filepath.Join(allocDir, d), 0o750))
		testenv.Must(t, os.WriteFile(filepath.Join(allocDir, d, "t.stdout"), []byte("x"), 0o640))
	}
	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	testenv.Must(t, st.PutAllocation(context.Background(), &store.Allocation{ID: kept, JobID: "other", Status: store.AllocComplete}))
	st.Close()

	runOnce := func(c *api.Client) string {
		ctx := testenv.Context(t, time.Minute)
		_, err := c.SubmitJob(ctx, []byte(hostJob("dirs", "batch", 1, "echo hi", "")), "dirs.hcl")
		testenv.Must(t, err)
		var id string
		waitFor(t, "the allocation to complete", time.Minute, func() (bool, error) {
			l, err := c.Allocations(ctx, "dirs")
			for _, a := range l {
				if a.Status == api.AllocComplete {
					id = a.ID
				}
			}
			return err == nil && id != "" && len(l) == 1, err
		})
		_, err = c.StopJob(ctx, "dirs")
		testenv.Must(t, err)
		return id
	}
	exists := func(id string) bool {
		_, err := os.Stat(filepath.Join(allocDir, id))
		return err == nil
	}

	// First agent: sweeps the orphan, runs the job once.
	first, err := New(e.cfg, testLogger(t))
	testenv.Must(t, err)
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() { done1 <- first.Run(ctx1) }()
	<-first.Reconciled()
	c1, err := api.NewClient("unix://"+first.SocketPath(), "")
	testenv.Must(t, err)
	waitFor(t, "the orphan directory to go", 30*time.Second, func() (bool, error) { return !exists(orphan), nil })
	if !exists(kept) || !exists("not-an-alloc") {
		t.Errorf("the sweep removed a directory it must keep: %s %v, not-an-alloc %v", kept, exists(kept), exists("not-an-alloc"))
	}
	a1 := runOnce(c1)
	c1.Close()
	stop1()
	testenv.Must(t, <-done1)
	if !exists(a1) {
		t.Fatalf("the allocation's directory %s is gone while its record is kept", a1)
	}

	// Second agent: the next run's record prunes the first one's (retention
	// 1), whose directory this agent never made.
	_, c2 := e.startAgent(t)
	a2 := runOnce(c2)
	waitFor(t, "the pruned allocation's directory to go", 30*time.Second, func() (bool, error) { return !exists(a1), nil })
	if !exists(a2) {
		t.Errorf("the newest allocation's directory %s is gone", a2)
	}
	if _, err := c2.Allocation(context.Background(), a1); !api.IsNotFound(err) {
		t.Errorf("the first allocation's record should be pruned: %v", err)
	}
}

// How long an agent takes from Run to its first answer with 50,000
// allocations a killed agent left in its store (the target is under a
// second; the reconcile goes on in the background). Run as root:
// go test -run XXX -bench AgentAnswers -benchtime 3x ./node/agent
func BenchmarkAgentAnswersWith50000Allocations(b *testing.B) {
	testenv.RequireRoot(b)
	for range b.N {
		b.StopTimer()
		dir, err := os.MkdirTemp("", "btag")
		testenv.Must(b, err)
		cfg := DefaultConfig()
		cfg.DataDir, cfg.LockDir = filepath.Join(dir, "data"), filepath.Join(dir, "lock")
		cfg.GCMode, cfg.GCInterval = GCRecords, "0"
		cfg.DrainOnShutdown = true
		cfg.API = &APIConfig{Socket: filepath.Join(dir, "b.sock")}
		seedAllocations(b, cfg.DataDir, 50000)
		a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		testenv.Must(b, err)
		c, err := api.NewClient("unix://"+cfg.API.Socket, "")
		testenv.Must(b, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- a.Run(ctx) }()
		for {
			hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
			_, err := c.Health(hctx)
			hcancel()
			if err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-to-first-answer")
		b.StopTimer()
		<-a.Reconciled()
		cancel()
		testenv.Must(b, <-done)
		c.Close()
		os.RemoveAll(dir)
	}
}
