package service

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/store"
)

// benchServers is how many busybox httpd processes serve the benchmark's
// checks: separate processes, so that the CPU measured is the checker's
// and the catalog's only (each server answers 500/benchServers checks a
// second, forking one child per connection as busybox does).
const benchServers = 50

// startHTTPDs starts n busybox httpd on loopback, each serving dir, and
// returns their ports once each answers. They are killed at cleanup.
func startHTTPDs(b *testing.B, n int, dir string) []int {
	b.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		b.Skip("busybox is not installed: the benchmark's servers are busybox httpd")
	}
	var ports []int
	for len(ports) < n {
		// A free port, then handed to httpd: another process may take it
		// meanwhile, which the readiness probe below catches (and we
		// try another).
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bb, "httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		if waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/index.html", port), 5*time.Second) {
			ports = append(ports, port)
		}
	}
	return ports
}

func waitHTTP(url string, d time.Duration) bool {
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	return false
}

// BenchmarkSvcChecks500 is the target: 500 registered services,
// each with an http check every second, in the catalog over a real store
// (health changes written through the registry's flusher), probed from
// the host to busybox httpd on loopback. One b.N is one interval of wall
// time: run it with -benchtime=30x for 30 s. It reports how late runs
// started after their time (lag p50/p99/max, and the runs an interval or
// more late), the times a check skipped because its last run was still
// going, the fewest runs any one check made per interval, and the CPU of
// this process (checker, registry and store) in percent of one core.
func BenchmarkSvcChecks500(b *testing.B) {
	const services, interval = 500, time.Second
	www := b.TempDir()
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("ok\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	ports := startHTTPDs(b, benchServers, www)
	ctx := context.Background()
	st, err := store.Open(ctx, b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	reg := NewRegistry(st, nil)
	b.Cleanup(reg.Close)
	chk := NewChecker(0, nil)
	b.Cleanup(chk.Close)

	runs := make([]atomic.Int64, services)
	var svcs []*store.Service
	for i := range services {
		svcs = append(svcs, &store.Service{
			ID: ID(fmt.Sprintf("alloc-%03d", i), "web", "", "web", "http"), ServiceName: fmt.Sprintf("web-%03d", i),
			Namespace: "default", JobID: "bench", AllocID: fmt.Sprintf("alloc-%03d", i), Group: "web",
			Address: "127.0.0.1", Port: ports[i%len(ports)], Health: store.CheckPending,
			Checks: []store.CheckStatus{{Name: "alive", Type: "http", Status: store.CheckPending}},
		})
	}
	if err := reg.Register(ctx, svcs...); err != nil {
		b.Fatal(err)
	}
	var handles []*Handle
	for i, s := range svcs {
		id := s.ID
		handles = append(handles, chk.Start(Spec{
			Probe:    Probe{Type: "http", Target: Target{Address: s.Address, Port: s.Port}, Path: "/index.html"},
			Interval: interval, Timeout: interval,
			OnResult: func(r Result) {
				reg.UpdateCheck(id, 0, r.Status, r.Output, r.Time)
				runs[i].Add(1)
			},
		}))
	}
	b.Cleanup(func() {
		for _, h := range handles {
			h.Stop()
		}
	})
	// Every check has run once (first runs are spread over an interval).
	time.Sleep(interval + 200*time.Millisecond)

	before := make([]int64, services)
	for i := range runs {
		before[i] = runs[i].Load()
	}
	s0 := chk.Stats()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t0 := time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(interval)
	}
	b.StopTimer()
	wall := time.Since(t0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	s1 := chk.Stats()

	fewest := int64(-1)
	for i := range runs {
		if n := runs[i].Load() - before[i]; fewest < 0 || n < fewest {
			fewest = n
		}
	}
	passing := 0
	for _, s := range reg.Own(store.ServiceFilter{}) {
		if s.Health == store.CheckPassing {
			passing++
		}
	}
	if passing != services {
		b.Errorf("%d of %d services passing: the servers did not answer", passing, services)
	}
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * 100
	// The lag quantiles cover every run since the checks started (the
	// checker keeps the last 65536), the first runs included.
	b.ReportMetric(float64(s1.LagP50.Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(s1.LagP99.Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64(s1.LagMax.Microseconds())/1000, "lag-max-ms")
	b.ReportMetric(float64(s1.Late-s0.Late), "late-runs")
	b.ReportMetric(float64(s1.Skipped-s0.Skipped), "skipped-runs")
	b.ReportMetric(float64(fewest)*float64(interval)/float64(wall), "fewest-runs/interval")
	b.ReportMetric(float64(s1.Runs-s0.Runs)/wall.Seconds(), "checks/s")
	b.ReportMetric(float64(cpu)/float64(wall), "cpu-%")
	b.ReportMetric(0, "ns/op")
}
