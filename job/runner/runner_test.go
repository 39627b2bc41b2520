package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/docker"
	execdrv "github.com/berth/berth/task/driver/exec"
	"github.com/berth/berth/task/driver/podman"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

type env struct {
	r       *runner.Runner
	m       *attach.Manager
	st      *store.Store
	net     *testenv.Network
	drivers *runner.Drivers
	dataDir string
}

func newEnv(t *testing.T, subnet string) *env {
	return newEnvTB(t, testenv.NetworkSpec{Subnet: subnet, Portmap: true, Firewall: true, Loopback: true})
}

func newEnvTB(t testing.TB, spec testenv.NetworkSpec) *env {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	n := testenv.NewNetwork(t, spec)
	dataDir := t.TempDir()
	st, err := store.Open(context.Background(), dataDir, store.Options{})
	testenv.Must(t, err)
	t.Cleanup(func() { st.Close() })
	m := attach.New(attach.Options{
		Netns:   netns.NewManager(""),
		CNI:     cni.NewClient(cni.Options{PluginPath: []string{testenv.ReferencePlugins}, Rules: hostclean.Rules{}}),
		ConfDir: n.ConfDir, Store: st, LockDir: t.TempDir(),
	})
	// Tasks marked with this data dir's store, as a berth on it marks them.
	eo := execdrv.Options{StoreID: st.ID()}
	drivers := runner.NewDrivers(map[string]runner.DriverFactory{
		"raw_exec": {
			New:      func(context.Context) (driver.Driver, error) { return execdrv.NewRawExec(eo), nil },
			Validate: execdrv.NewRawExec(eo).ValidateConfig,
		},
		"exec": {
			New:      func(context.Context) (driver.Driver, error) { return execdrv.NewExec(execdrv.Options{}), nil },
			Validate: execdrv.NewExec(execdrv.Options{}).ValidateConfig,
		},
		"podman": {
			New: func(ctx context.Context) (driver.Driver, error) {
				return podman.New(ctx, podman.Options{DataDir: dataDir})
			},
			Validate: func(c map[string]any) error { _, err := podman.ParseConfig(c); return err },
		},
		"docker": {
			New: func(ctx context.Context) (driver.Driver, error) {
				return docker.New(ctx, docker.Options{DataDir: dataDir})
			},
			Validate: func(c map[string]any) error { _, err := docker.ParseConfig(c); return err },
		},
	})
	t.Cleanup(func() { _ = drivers.Close(context.Background()) })
	r := runner.New(runner.Options{
		Attach: m, Store: st, Drivers: drivers, AllocDir: filepath.Join(dataDir, "alloc"),
		Node: jobspec.LocalNode(), OwnerPID: os.Getpid(),
	})
	return &env{r: r, m: m, st: st, net: n, drivers: drivers, dataDir: dataDir}
}

// job parses src after pointing its CNI network at the test network.
func (e *env) job(t testing.TB, src string) *jobspec.Job {
	t.Helper()
	src = strings.ReplaceAll(src, "cni/private", "cni/"+e.net.Name)
	j, err := jobspec.Parse([]byte(src), "test.nomad.hcl", jobspec.ParseOptions{
		Node: jobspec.LocalNode(), Drivers: e.drivers.Validators(),
		Network: func(name string) error {
			_, err := cni.LoadNetwork(context.Background(), e.net.ConfDir, name)
			return err
		},
	})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return j
}

func requireImage(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman not installed: run scripts/setup.sh")
	}
	if err := exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run(); err != nil {
		t.Skip("image localhost/busybox:latest missing: run scripts/setup.sh")
	}
}

func checkClean(t *testing.T, e *env, sum *runner.Summary) {
	t.Helper()
	if len(sum.Leaks) != 0 {
		t.Errorf("leaks: %v", sum.Leaks)
	}
	recs, _ := e.st.ListAttachments(context.Background())
	if len(recs) != 0 {
		t.Errorf("attachment records left: %d", len(recs))
	}
}

// The scenario of the Nomad issue: a periodic batch job whose task exits
// at once, in a CNI namespace. Nomad fails within 3-4 runs; berth must run
// 100 with no error and nothing left.
func TestSeedJobPeriodic(t *testing.T) {
	seed, err := os.ReadFile("../../examples/jobs/seed-podman-every-second.nomad.hcl")
	testenv.Must(t, err)
	cases := []struct {
		name, subnet string
		src          string
	}{
		{"podman", "10.199.30.0/24", string(seed)},
		{"raw_exec", "10.199.31.0/24", strings.NewReplacer(
			`driver = "podman"`, `driver = "raw_exec"`,
			`image   = "localhost/busybox:latest"`, "",
		).Replace(string(seed))},
	}
	const runs = 100
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.name == "podman" {
				requireImage(t)
			}
			e := newEnv(t, tc.subnet)
			j := e.job(t, tc.src)
			ctx := testenv.Context(t, 10*time.Minute)
			sum, err := e.r.RunJob(ctx, j, runner.RunOptions{MaxRuns: runs})
			if err != nil {
				t.Fatal(err)
			}
			if sum.ByStatus[store.AllocComplete] != runs || len(sum.Failed) != 0 {
				t.Errorf("want %d complete, got %v; failed: %v", runs, sum.ByStatus, sum.Failed)
			}
			if sum.Launches != runs {
				t.Errorf("launches = %d, want %d", sum.Launches, runs)
			}
			checkClean(t, e, sum)
			t.Logf("%s: setup p50 %.1f ms p99 %.1f ms, teardown p50 %.1f ms p99 %.1f ms, retries %d, holders %v",
				tc.name, sum.SetupP50, sum.SetupP99, sum.TeardownP50, sum.TeardownP99, sum.TeardownRetries, sum.Holders)
		})
	}
}

func TestServiceWithMappedPort(t *testing.T) {
	cases := []struct {
		name, subnet, task string
		port               int
	}{
		{"raw_exec", "10.199.32.0/24", `
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/busybox"
        args    = ["httpd", "-f", "-p", "${NOMAD_PORT_http}", "-h", "${NOMAD_ALLOC_DIR}"]
      }
    }`, 28781},
		{"podman", "10.199.33.0/24", `
    task "web" {
      driver = "podman"
      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "mkdir -p /www && echo berth-ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
        ports   = ["http"]
      }
    }`, 28782},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "podman" {
				requireImage(t)
			}
			e := newEnv(t, tc.subnet)
			src := `job "web" {
  type = "service"
  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        static = ` + itoa(tc.port) + `
        to     = 8080
      }
    }` + tc.task + `
  }
}`
			j := e.job(t, src)
			ctx, cancel := context.WithCancel(testenv.Context(t, 5*time.Minute))
			done := make(chan *runner.Summary, 1)
			go func() {
				sum, _ := e.r.RunJob(ctx, j, runner.RunOptions{})
				done <- sum
			}()
			url := "http://127.0.0.1:" + itoa(tc.port) + "/"
			var status int
			var body string
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				resp, err := http.Get(url)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					status, body = resp.StatusCode, string(b)
					if status == 200 || status == 403 || status == 404 {
						break
					}
				}
				time.Sleep(200 * time.Millisecond)
			}
			if status == 0 {
				t.Fatalf("%s never answered through the mapped port", url)
			}
			if tc.name == "podman" && !strings.Contains(body, "berth-ok") {
				t.Errorf("body %q, status %d", body, status)
			}
			cancel()
			sum := <-done
			if sum == nil {
				t.Fatal("no summary")
			}
			if _, err := http.Get(url); err == nil {
				t.Errorf("%s still answers after stop", url)
			}
			if sum.ByStatus[store.AllocComplete] != 1 {
				t.Errorf("stopped service allocation: %v %v", sum.ByStatus, sum.Failed)
			}
			checkClean(t, e, sum)
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestThreeTasksShareNamespace(t *testing.T) {
	e := newEnv(t, "10.199.34.0/24")
	src := `job "trio" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/busybox"
        args    = ["sh", "-c", "echo hello-from-server > $NOMAD_ALLOC_DIR/index.html; busybox httpd -f -p 127.0.0.1:9000 -h $NOMAD_ALLOC_DIR & for i in $(seq 300); do [ -e $NOMAD_ALLOC_DIR/client1.done ] && [ -e $NOMAD_ALLOC_DIR/client2.done ] && break; sleep 0.1; done; kill $!; exit 0"]
      }
    }
    task "client1" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "for i in $(seq 100); do busybox wget -q -O- http://127.0.0.1:9000/ && touch $NOMAD_ALLOC_DIR/client1.done && exit 0; sleep 0.1; done; exit 1"]
      }
    }
    task "client2" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "for i in $(seq 100); do busybox wget -q -O- http://127.0.0.1:9000/ && touch $NOMAD_ALLOC_DIR/client2.done && exit 0; sleep 0.1; done; exit 1"]
      }
    }
  }
}`
	j := e.job(t, src)
	ctx := testenv.Context(t, 2*time.Minute)
	var alloc *store.Allocation
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{OnAlloc: func(a *store.Allocation) { alloc = a }})
	testenv.Must(t, err)
	if alloc == nil {
		t.Fatal("no allocation")
	}
	for _, ts := range alloc.Tasks {
		if ts.Name != "server" && (ts.ExitCode != 0 || ts.Failed) {
			t.Errorf("task %s: exit %d failed %v", ts.Name, ts.ExitCode, ts.Failed)
		}
	}
	for _, c := range []string{"client1", "client2"} {
		b, _ := os.ReadFile(filepath.Join(e.dataDir, "alloc", alloc.ID, "alloc", "logs", c+".stdout.0"))
		if !strings.Contains(string(b), "hello-from-server") {
			t.Errorf("%s did not reach the server over the shared loopback: %q", c, b)
		}
	}
	checkClean(t, e, sum)
}

func TestRestartKeepsNetwork(t *testing.T) {
	e := newEnv(t, "10.199.35.0/24")
	src := `job "flaky" {
  type = "batch"
  group "g" {
    restart {
      attempts = 2
      delay    = "100ms"
      interval = "1m"
      mode     = "fail"
    }
    network {
      mode = "cni/private"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "readlink /proc/self/ns/net; busybox ip -o -4 addr show eth0; exit 3"]
      }
    }
  }
}`
	j := e.job(t, src)
	ctx := testenv.Context(t, 2*time.Minute)
	var alloc *store.Allocation
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{OnAlloc: func(a *store.Allocation) { alloc = a }})
	testenv.Must(t, err)
	if alloc.Status != store.AllocFailed || alloc.Tasks[0].Restarts != 2 || alloc.Tasks[0].ExitCode != 3 || !alloc.Tasks[0].Failed {
		t.Errorf("want failed after 2 restarts with exit 3; got %s restarts %d exit %d", alloc.Status, alloc.Tasks[0].Restarts, alloc.Tasks[0].ExitCode)
	}
	out, _ := os.ReadFile(filepath.Join(e.dataDir, "alloc", alloc.ID, "alloc", "logs", "t.stdout.0"))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 6 {
		t.Fatalf("want 3 runs x 2 lines, got %q", out)
	}
	for i := 2; i < 6; i++ {
		if lines[i] != lines[i%2] {
			t.Errorf("run %d saw %q, first run saw %q: the network changed across restarts", i/2+1, lines[i], lines[i%2])
		}
	}
	if !strings.Contains(lines[1], e.net.Subnet[:len("10.199.35.")]) {
		t.Errorf("task did not see its CNI address: %q", lines[1])
	}
	// Failed allocations are expected here; nothing may be left.
	checkClean(t, e, sum)
}

// prohibit_overlap: a launch due while the previous one still runs is
// skipped; without it, launches overlap.
func TestProhibitOverlap(t *testing.T) {
	for _, prohibit := range []bool{true, false} {
		t.Run(strconv.FormatBool(prohibit), func(t *testing.T) {
			e := newEnvTB(t, testenv.NetworkSpec{Subnet: "10.199.38.0/24"})
			j := e.job(t, `job "overlap" {
  type = "batch"
  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = `+strconv.FormatBool(prohibit)+`
  }
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["2.5"]
      }
    }
  }
}`)
			ctx := testenv.Context(t, time.Minute)
			sum, err := e.r.RunJob(ctx, j, runner.RunOptions{MaxRuns: 3})
			testenv.Must(t, err)
			if prohibit && sum.Skipped == 0 {
				t.Errorf("no launch skipped with prohibit_overlap: %+v", sum)
			}
			if !prohibit && sum.Skipped != 0 {
				t.Errorf("launches skipped without prohibit_overlap: %+v", sum)
			}
			if sum.ByStatus[store.AllocComplete] != 3 {
				t.Errorf("want 3 complete allocations: %v %v", sum.ByStatus, sum.Failed)
			}
		})
	}
}

// The failure of the Nomad issue, provoked: something inspects the
// containers all the time (as Nomad's podman driver and monitoring agents
// do; podman's inspect enters the container's netns for a few ms). Every
// allocation must still complete with its namespace gone and nothing left;
// the summary says how often the namespace was found busy, and by whom.
func TestSeedJobWithInspector(t *testing.T) {
	requireImage(t)
	seed, err := os.ReadFile("../../examples/jobs/seed-podman-every-second.nomad.hcl")
	testenv.Must(t, err)
	e := newEnv(t, "10.199.39.0/24")
	j := e.job(t, string(seed))
	ctx := testenv.Context(t, 5*time.Minute)
	socket := filepath.Join(e.dataDir, "podman", "podman.sock")
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	stop := make(chan struct{})
	inspected := make(chan int, 1)
	go func() {
		n := 0
		defer func() { inspected <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := client.Get("http://d/v4.0.0/libpod/containers/json?all=true")
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			var list []struct{ Id string }
			_ = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			for _, c := range list {
				if r, err := client.Get("http://d/v4.0.0/libpod/containers/" + c.Id + "/json"); err == nil {
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
					n++
				}
			}
		}
	}()
	const runs = 20
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{MaxRuns: runs})
	close(stop)
	n := <-inspected
	testenv.Must(t, err)
	if sum.ByStatus[store.AllocComplete] != runs {
		t.Errorf("want %d complete: %v %v", runs, sum.ByStatus, sum.Failed)
	}
	checkClean(t, e, sum)
	t.Logf("%d inspects during %d allocations; namespace busy at removal %d times; holders: %v", n, runs, sum.TeardownRetries, sum.Holders)
}
