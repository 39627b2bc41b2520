package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	execdrv "github.com/berth/berth/task/driver/exec"
	"github.com/berth/berth/task/driver/exec/supervisor"
)

const manyJob = `job "many" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "host"
    }
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "5s"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }
  }
}`

// counting is a driver that counts the tasks it started.
type counting struct {
	driver.Driver
	started *atomic.Int64
	// gate, when set, is released by each Start: the launch pool.
	gate chan struct{}
}

func (c counting) Start(ctx context.Context, t *driver.Task) (driver.Handle, error) {
	h, err := c.Driver.Start(ctx, t)
	if err == nil {
		c.started.Add(1)
	}
	if c.gate != nil {
		<-c.gate
	}
	return h, err
}

// BenchmarkManyRunningTasks runs 2,000 allocations (BERTH_BENCH_TASKS) of
// a raw_exec `sleep` at once in one runner, and reports, once all run, the
// runner process's OS threads, RSS and open fds (issue 10 row 3: under 64
// threads and 300 MB; BERTH_BENCH_POOL below), and the RSS and PSS per
// task of the supervisors
// (berth-supervisor) that keep the tasks' exit codes. Run it alone:
//
//	go test -run XXX -bench ManyRunningTasks -benchtime 1x ./job/runner
func BenchmarkManyRunningTasks(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("BERTH_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	// Allocations are launched through a pool of 32 starting at once, as
	// issue 10 has the agent start them through a bounded pool;
	// BERTH_BENCH_POOL sets its size, 0 launches all 2,000 at once (then
	// 2,000 goroutines making their alloc dirs at the same moment cost
	// 40-75 threads, which Go keeps).
	pool := 32
	if v, err := strconv.Atoi(os.Getenv("BERTH_BENCH_POOL")); err == nil && v >= 0 {
		pool = v
	}
	var gate chan struct{}
	if pool > 0 {
		gate = make(chan struct{}, pool)
	}
	e := newEnvTB(b, testenv.NetworkSpec{Subnet: "10.199.124.0/24"})
	var started atomic.Int64
	eo := execdrv.Options{StoreID: e.st.ID()}
	drivers := runner.NewDrivers(map[string]runner.DriverFactory{
		"raw_exec": {
			New: func(context.Context) (driver.Driver, error) {
				return counting{execdrv.NewRawExec(eo), &started, gate}, nil
			},
			Validate: execdrv.NewRawExec(eo).ValidateConfig,
		},
	})
	r := runner.New(runner.Options{Attach: e.m, Store: e.st, Drivers: drivers,
		AllocDir: filepath.Join(e.dataDir, "alloc"), Node: jobspec.LocalNode(), OwnerPID: os.Getpid()})
	j, err := jobspec.Parse([]byte(manyJob), "many.nomad.hcl", jobspec.ParseOptions{Node: jobspec.LocalNode(), Drivers: drivers.Validators()})
	testenv.Must(b, err)

	for i := 0; i < b.N; i++ {
		started.Store(0)
		threads0, rss0, fds0 := selfCounts(b)
		b.Logf("before: %d threads, %d MB RSS, %d fds", threads0, rss0/1024, fds0)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var failed atomic.Int64
		t0 := time.Now()
		for k := 0; k < n; k++ {
			wg.Add(1)
			if gate != nil {
				gate <- struct{}{}
			}
			go func() {
				defer wg.Done()
				a := r.RunAlloc(ctx, j, j.Groups[0], k, nil)
				if a.Status != store.AllocComplete {
					failed.Add(1)
				}
			}()
		}
		deadline := time.Now().Add(15 * time.Minute)
		for started.Load() < int64(n) {
			if time.Now().After(deadline) || failed.Load() > 0 {
				cancel()
				wg.Wait()
				b.Fatalf("%d of %d tasks started, %d allocations failed", started.Load(), n, failed.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
		startAll := time.Since(t0)
		time.Sleep(2 * time.Second) // let the last handles be recorded
		threads, rss, fds := selfCounts(b)
		supRSS, supPSS, sups := supervisorMemory(e.st.ID())
		if f := os.Getenv("BERTH_BENCH_THREADCREATE"); f != "" {
			// Where the OS threads were made (go tool pprof).
			if out, err := os.Create(f); err == nil {
				_ = pprof.Lookup("threadcreate").WriteTo(out, 1)
				out.Close()
			}
		}
		b.ReportMetric(float64(threads), "threads")
		b.ReportMetric(float64(rss)/1024, "RSS_MB")
		b.ReportMetric(float64(fds), "fds")
		if sups > 0 {
			b.ReportMetric(float64(supRSS)/float64(sups), "supervisor_RSS_kB/task")
			b.ReportMetric(float64(supPSS)/float64(sups), "supervisor_PSS_kB/task")
		}
		b.ReportMetric(startAll.Seconds(), "s_to_start_all")
		b.Logf("%d tasks running (started in %s): runner process %d threads, %d MB RSS, %d fds; %d supervisors, %d kB RSS and %d kB PSS each",
			n, startAll.Round(time.Millisecond), threads, rss/1024, fds, sups, supRSS/max(sups, 1), supPSS/max(sups, 1))
		cancel()
		wg.Wait()
		if failed.Load() > 0 {
			b.Fatalf("%d allocations did not complete when stopped", failed.Load())
		}
	}
}

// selfCounts is this process's OS threads, RSS (kB) and open fds.
func selfCounts(tb testing.TB) (threads, rss, fds int) {
	tb.Helper()
	ts, err := os.ReadDir("/proc/self/task")
	testenv.Must(tb, err)
	fs, err := os.ReadDir("/proc/self/fd")
	testenv.Must(tb, err)
	return len(ts), rssKB(), len(fs)
}

// supervisorMemory sums Rss and Pss (kB, smaps_rollup) of the store's
// task supervisors.
func supervisorMemory(storeID string) (rss, pss, count int) {
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		b, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if s, _, _, ok := supervisor.Identity(b); !ok || s != storeID {
			continue
		}
		m, err := os.ReadFile("/proc/" + de.Name() + "/smaps_rollup")
		if err != nil {
			continue
		}
		count++
		for _, l := range strings.Split(string(m), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "Rss:":
				rss += v
			case "Pss:":
				pss += v
			}
		}
	}
	return rss, pss, count
}
