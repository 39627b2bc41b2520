package runner_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

const benchJob = `job "bench" {
  type = "batch"
  group "g" {
    count = %d
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "%s"
      config {
        %s
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
    }
  }
}`

// BenchmarkAllocations runs batch launches of count short-lived
// allocations (exit 0) and reports allocations per minute, phase p50s and
// berth's own time per allocation (total minus plugins, driver and task).
// The "seq" variants run count = 1 twenty times as often: the sequential
// baseline of the parallel speed-up. BERTH_BENCH_COUNT sets count
// (default 20).
func BenchmarkAllocations(b *testing.B) {
	par := 20
	if v, err := strconv.Atoi(os.Getenv("BERTH_BENCH_COUNT")); err == nil && v > 0 {
		par = v
	}
	for _, drv := range []string{"raw_exec", "podman"} {
		for _, chain := range []string{"full", "bridge", "full/seq", "bridge/seq"} {
			count, launches := par, 1
			if strings.HasSuffix(chain, "/seq") {
				count, launches = 1, par
			}
			chain := strings.TrimSuffix(chain, "/seq")
			name := drv + "/" + chain
			if count == 1 {
				name += "/seq"
			}
			b.Run(name, func(b *testing.B) {
				if drv == "podman" {
					requireImage(b)
				}
				spec := testenv.NetworkSpec{Subnet: "10.199.36.0/24"}
				if chain == "full" {
					spec = testenv.NetworkSpec{Subnet: "10.199.37.0/24", Portmap: true, Firewall: true, Loopback: true}
				}
				e := newEnvTB(b, spec)
				image := ""
				if drv == "podman" {
					image = `image = "localhost/busybox:latest"`
				}
				j := e.job(b, fmt.Sprintf(benchJob, count, drv, image))
				ctx := context.Background()
				var allocs []*store.Allocation
				rssBefore := rssKB()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N*launches; i++ {
					sum, err := e.r.RunJob(ctx, j, runner.RunOptions{OnAlloc: func(a *store.Allocation) { allocs = append(allocs, a) }})
					if err != nil || !sum.OK() {
						b.Fatalf("run: %v %+v", err, sum)
					}
				}
				elapsed := time.Since(start)
				b.StopTimer()
				phases := map[string][]float64{}
				for _, a := range allocs {
					for k, v := range a.TimingsMS {
						phases[k] = append(phases[k], v)
					}
					own := a.TimingsMS["total"] - a.TimingsMS["add"] - a.TimingsMS["del"] - a.TimingsMS["task"]
					phases["own"] = append(phases["own"], own)
				}
				b.ReportMetric(float64(len(allocs))/elapsed.Minutes(), "allocs/min")
				var keys []string
				for k := range phases {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					b.ReportMetric(median(phases[k]), k+"-p50-ms")
				}
				b.ReportMetric(float64(rssKB()-rssBefore)/1024, "rss-growth-MiB")
			})
		}
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

func rssKB() int {
	runtime.GC()
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}
