package runner_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

// requireDocker skips unless dockerd answers with the local images
// (scripts/setup.sh, scripts/image/docker-setup.sh).
func requireDocker(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd not installed: run scripts/setup.sh")
	}
	if out, err := exec.Command("bash", "../../scripts/image/docker-setup.sh").CombinedOutput(); err != nil {
		t.Skipf("no dockerd answers: %v\n%s", err, out)
	}
}

// dockerLeft lists the docker containers whose name has prefix.
func dockerLeft(t testing.TB) []string {
	t.Helper()
	out, _ := exec.Command("docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label=berth.alloc_id").Output()
	return strings.Fields(string(out))
}

// The seed job with driver = "docker": each run's task container joins
// the allocation's pause container, which holds the CNI namespace; all
// complete and nothing is left (containers, pause containers, namespaces,
// attachments).
func TestSeedJobDocker(t *testing.T) {
	requireDocker(t)
	seed, err := os.ReadFile("../../examples/jobs/seed-docker-every-second.nomad.hcl")
	testenv.Must(t, err)
	e := newEnv(t, "10.199.143.0/24")
	j := e.job(t, string(seed))
	runs := 20
	if n, err := strconv.Atoi(os.Getenv("BERTH_DOCKER_SEED_RUNS")); err == nil && n > 0 {
		runs = n // the README's comparison with podman: 100
	}
	sum, err := e.r.RunJob(testenv.Context(t, 5*time.Minute), j, runner.RunOptions{MaxRuns: runs})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ByStatus[store.AllocComplete] != runs || len(sum.Failed) != 0 {
		t.Errorf("want %d complete, got %v; failed: %v", runs, sum.ByStatus, sum.Failed)
	}
	checkClean(t, e, sum)
	if left := dockerLeft(t); len(left) > 0 {
		t.Errorf("docker containers left: %v", left)
	}
	t.Logf("docker: setup p50 %.1f ms p99 %.1f ms, teardown p50 %.1f ms p99 %.1f ms, retries %d, holders %v",
		sum.SetupP50, sum.SetupP99, sum.TeardownP50, sum.TeardownP99, sum.TeardownRetries, sum.Holders)
}

// A docker service's port, mapped by CNI's portmap to its `to` in the
// allocation's namespace, answers on the host; nothing is left once the
// job stops.
func TestDockerServiceMappedPort(t *testing.T) {
	requireDocker(t)
	e := newEnv(t, "10.199.144.0/24")
	const port = 28791
	src := `job "web" {
  type = "service"
  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        static = ` + itoa(port) + `
        to     = 8080
      }
    }
    task "web" {
      driver = "docker"
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "mkdir -p /tmp/www && echo berth-docker-ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
        ports   = ["http"]
      }
    }
  }
}`
	j := e.job(t, src)
	ctx, cancel := context.WithCancel(testenv.Context(t, 3*time.Minute))
	defer cancel()
	done := make(chan *runner.Summary, 1)
	go func() {
		sum, _ := e.r.RunJob(ctx, j, runner.RunOptions{})
		done <- sum
	}()
	url := "http://127.0.0.1:" + itoa(port) + "/"
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && body == "" {
		if resp, err := http.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !strings.Contains(body, "berth-docker-ok") {
		t.Errorf("%s: body %q", url, body)
	}
	cancel()
	sum := <-done
	if sum == nil {
		t.Fatal("no summary")
	}
	checkClean(t, e, sum)
	if left := dockerLeft(t); len(left) > 0 {
		t.Errorf("docker containers left: %v", left)
	}
}

// BenchmarkDockerVsPodman40 starts 40 allocations at once in a CNI
// network (Portmap, firewall, loopback) until all are terminal and torn
// down, with the docker driver and with podman: wall time, allocations
// per minute and phase p50s. BERTH_BENCH_COUNT sets the count.
func BenchmarkDockerVsPodman40(b *testing.B) {
	count := 40
	if v, err := strconv.Atoi(os.Getenv("BERTH_BENCH_COUNT")); err == nil && v > 0 {
		count = v
	}
	for _, drv := range []string{"docker", "podman"} {
		b.Run(drv, func(b *testing.B) {
			if drv == "docker" {
				requireDocker(b)
			} else {
				requireImage(b)
			}
			e := newEnvTB(b, testenv.NetworkSpec{Subnet: "10.199.147.0/24", Portmap: true, Firewall: true, Loopback: true})
			j := e.job(b, fmt.Sprintf(benchJob, count, drv, `image = "localhost/busybox:latest"`))
			var allocs []*store.Allocation
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				sum, err := e.r.RunJob(context.Background(), j, runner.RunOptions{OnAlloc: func(a *store.Allocation) { allocs = append(allocs, a) }})
				if err != nil || !sum.OK() {
					b.Fatalf("run: %v %+v", err, sum)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if left := dockerLeft(b); len(left) > 0 {
				b.Errorf("docker containers left: %v", left)
			}
			phases := map[string][]float64{}
			for _, a := range allocs {
				for k, v := range a.TimingsMS {
					phases[k] = append(phases[k], v)
				}
			}
			b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/launch")
			b.ReportMetric(float64(len(allocs))/elapsed.Minutes(), "allocs/min")
			for _, k := range []string{"total", "add", "task", "del"} {
				if len(phases[k]) > 0 {
					b.ReportMetric(median(phases[k]), k+"-p50-ms")
				}
			}
		})
	}
}
