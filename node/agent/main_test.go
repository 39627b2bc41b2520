package agent

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
)

// berthBinary is the berth binary TestMain builds for the tests that
// signal an agent process.
var berthBinary testenv.Berth

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithBerth(m, &berthBinary))
}

func requireImage(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman not installed: run scripts/setup.sh")
	}
	if err := exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run(); err != nil {
		t.Skip("image localhost/busybox:latest missing: build it with scripts/image/build-busybox.sh (scripts/setup.sh does)")
	}
}

// testEnv is one agent's configuration on a throw-away network, data dir
// and socket.
type testEnv struct {
	cfg Config
	net *testenv.Network
	dir string
	// reaping: a cleanup that reconciles what killed agents left is
	// registered.
	reaping bool
}

// newTestEnv makes a CNI network on subnet (one of 10.199.70-89.0/24,
// this package's), and a config with a short temporary data dir (unix
// socket paths are limited to 107 bytes). gc_mode is "records": a full
// sweep would reclaim attachments of other berth processes on this host
// (other tests), which this agent's store does not know.
func newTestEnv(t *testing.T, subnet string) *testEnv {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	n := testenv.NewNetwork(t, testenv.NetworkSpec{Name: "btag-" + testenv.RandSuffix(6), Subnet: subnet, Portmap: true, Firewall: true, Loopback: true})
	dir, err := os.MkdirTemp("", "btag")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = n.ConfDir
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	cfg.GCMode = GCRecords
	cfg.GCInterval = "0"
	cfg.StopTimeout = "3m"
	// In-process agents stop with their test: they drain, leaving nothing.
	// The binary's tests (writeConfig) use the default, leaving workloads
	// to the next agent.
	cfg.DrainOnShutdown = true
	cfg.LogLevel = "debug"
	cfg.Bridge = &node.Bridge{Network: "btag-br-" + testenv.RandSuffix(6), Iface: "btag" + testenv.RandSuffix(6), Subnet: "10.199.89.0/24"}
	cfg.API = &APIConfig{Socket: filepath.Join(dir, "b.sock")}
	// Tests dial advertised addresses: loopback only, never the host's
	// default-route address.
	cfg.Client.NetworkInterface = "lo"
	return &testEnv{cfg: cfg, net: n, dir: dir}
}

// jobSource is a job file with its CNI network pointed at the test network.
func (e *testEnv) jobSource(t *testing.T, src string) string {
	t.Helper()
	if !strings.Contains(src, "cni/private") {
		t.Fatal("job source has no cni/private network to rewrite")
	}
	return strings.ReplaceAll(src, "cni/private", "cni/"+e.net.Name)
}

// testLog is a log destination that forwards to t.Log until the test ends.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Helper()
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startAgent runs an agent in this process until the test ends, and
// returns once its reconcile at start is done.
func (e *testEnv) startAgent(t *testing.T) (*Agent, *api.Client) {
	t.Helper()
	a, err := New(e.cfg, testLogger(t), WithVersion("test"))
	testenv.Must(t, err)
	testenv.Serve(t, "agent", a.Run, a.Reconciled())
	c, err := api.NewClient("unix://"+a.SocketPath(), "")
	testenv.Must(t, err)
	t.Cleanup(c.Close)
	return a, c
}

// waitFor polls cond until it is true or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last error: %v)", d, what, last)
}

// metricSum adds the samples of metric whose labels include every pair
// of want, from a Prometheus text exposition.
func metricSum(text, metric string, want map[string]string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		labels := ""
		switch {
		case strings.HasPrefix(rest, "{"):
			// Label values may hold braces ("/v1/job/{id}"); the value
			// after the set never does.
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer metric name with this prefix
		}
		ok := true
		for k, v := range want {
			if !strings.Contains(","+labels+",", ","+k+`="`+v+`",`) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func scrape(t *testing.T, c *api.Client) string {
	t.Helper()
	m, err := c.Metrics(context.Background())
	testenv.Must(t, err)
	return m
}

func netnsExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func allocsOf(t *testing.T, c *api.Client, job string) []api.AllocStub {
	t.Helper()
	l, err := c.Allocations(context.Background(), job)
	testenv.Must(t, err)
	return l
}

func countStatus(l []api.AllocStub, s string) int {
	n := 0
	for _, a := range l {
		if a.Status == s {
			n++
		}
	}
	return n
}

// readAll reads a response body, for error messages.
func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}
