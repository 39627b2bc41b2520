package nomad_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/attach"
	"github.com/berth/berth/cni"
	"github.com/berth/berth/gc"
	"github.com/berth/berth/hostclean"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/netns"
	"github.com/berth/berth/nomad"
	"github.com/berth/berth/nomad/nomadtest"
	"github.com/berth/berth/runner"
	"github.com/berth/berth/store"
)

// envInt is a benchmark size from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// latencies records what the janitor reports.
type latencies struct {
	mu   sync.Mutex
	seen []time.Duration
}

func (l *latencies) NomadAPIError(string)       {}
func (l *latencies) NomadReclaimed(string, int) {}
func (l *latencies) NomadConnected(bool)        {}
func (l *latencies) NomadReclaimLatency(d time.Duration) {
	l.mu.Lock()
	l.seen = append(l.seen, d)
	l.mu.Unlock()
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// unmountFailed matches Nomad 1.6.5's log line for a leaked namespace.
var unmountFailed = regexp.MustCompile(`failed to unmount NS.*?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})`)

// BenchmarkReclaimLatency measures the continuous mode on the real Nomad:
// periodic every-second raw_exec jobs in a cni/<net> network leak
// namespaces (Nomad logs "failed to unmount NS" for each), the janitor
// (nomad.Run, as `berth agent` with a nomad block runs it) follows the
// event stream and removes them. Latency is from the allocation turning
// terminal (its ModifyTime in the first terminal event) to its namespace
// gone (polled every 5 ms), over at least NOMAD_LEAKS (100) leaked
// allocations. One round whatever b.N: run with -benchtime=1x.
func BenchmarkReclaimLatency(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.RequirePlugins(b, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	want := envInt("NOMAD_LEAKS", 100)
	net, confs := network("10.199.155.0/24")
	a := nomadtest.Start(b, nomadtest.Options{Networks: confs})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)

	// The janitor, in process.
	dataDir := b.TempDir()
	st, err := store.Open(ctx, dataDir, store.Options{})
	testenv.Must(b, err)
	b.Cleanup(func() { st.Close() })
	m := attach.New(attach.Options{
		Netns: netns.NewManager(""), ConfDir: b.TempDir(), Store: st, LockDir: b.TempDir(),
		CNI: cni.NewClient(cni.Options{PluginPath: []string{testenv.ReferencePlugins}, Rules: hostclean.Rules{}}),
	})
	s, err := nomad.Config{Address: a.Addr, GracePeriod: "24h"}.Check()
	testenv.Must(b, err)
	rec := &latencies{}
	jctx, stopJanitor := context.WithCancel(ctx)
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		_ = nomad.Run(jctx, nomad.RunOptions{Settings: s, GC: gc.Options{Attach: m, Store: st, LockDir: b.TempDir()}, Interval: 5 * time.Minute, Metrics: rec})
	}()
	b.Cleanup(func() { stopJanitor(); <-janitorDone })

	// Terminal times from the event stream, as Nomad's server recorded them.
	c, err := nomad.NewClient(s, nil)
	testenv.Must(b, err)
	events, err := c.Follow(ctx, 0)
	testenv.Must(b, err)
	var mu sync.Mutex
	terminal := map[string]time.Time{}
	gone := map[string]time.Time{}
	go func() {
		for batch := range events {
			for _, ev := range batch.Events {
				if ev.Alloc.Terminal() {
					mu.Lock()
					if _, ok := terminal[ev.Alloc.ID]; !ok {
						terminal[ev.Alloc.ID] = ev.Alloc.Modified()
					}
					mu.Unlock()
				}
			}
		}
	}()
	go func() {
		for ctx.Err() == nil {
			mu.Lock()
			for id := range terminal {
				if _, ok := gone[id]; !ok && !pinned(id) {
					gone[id] = time.Now()
				}
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()

	b.ResetTimer()
	a.Run(b, nomadtest.PeriodicJob("tick-a", "cni/"+net))
	a.Run(b, nomadtest.PeriodicJob("tick-b", "cni/"+net))
	leaked := map[string]bool{}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		for _, mm := range unmountFailed.FindAllStringSubmatch(a.Log(), -1) {
			leaked[mm[1]] = true
		}
		mu.Lock()
		done := 0
		for id := range leaked {
			if _, ok := gone[id]; ok {
				done++
			}
		}
		mu.Unlock()
		if done >= want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d leaked namespaces reclaimed after 10 min", done, want)
		}
		time.Sleep(time.Second)
	}
	b.StopTimer()
	for _, j := range []string{"tick-a", "tick-b"} {
		_, _ = a.Nomad("job", "stop", "-detach", j)
	}

	mu.Lock()
	var lk, all []time.Duration
	for id, g := range gone {
		d := g.Sub(terminal[id])
		all = append(all, d)
		if leaked[id] {
			lk = append(lk, d)
		}
	}
	mu.Unlock()
	busy, other := 0, 0
	for _, mm := range regexp.MustCompile(`failed to unmount NS[^\n]*`).FindAllString(a.Log(), -1) {
		if regexp.MustCompile(`device or resource busy`).MatchString(mm) {
			busy++
		} else {
			other++
			if other <= 3 {
				b.Logf("other unmount failure: %s", mm)
			}
		}
	}
	b.Logf("Nomad's unmount failures: %d EBUSY (its leak), %d other (berth was first)", busy, other)
	rec.mu.Lock()
	own := append([]time.Duration(nil), rec.seen...)
	rec.mu.Unlock()
	b.ReportMetric(float64(len(lk)), "leaked-allocs")
	b.ReportMetric(percentile(lk, .5).Seconds()*1000, "p50-ms")
	b.ReportMetric(percentile(lk, .99).Seconds()*1000, "p99-ms")
	b.Logf("leaked allocations (Nomad: failed to unmount NS): %d, terminal -> namespace gone p50 %v p99 %v max %v",
		len(lk), percentile(lk, .5), percentile(lk, .99), percentile(lk, 1))
	b.Logf("all %d terminal allocations (leaked or not): p50 %v p99 %v", len(all), percentile(all, .5), percentile(all, .99))
	b.Logf("janitor's own measure (berth_nomad_reclaim_seconds), %d samples: p50 %v p99 %v", len(own), percentile(own, .5), percentile(own, .99))
}

// BenchmarkGCPass measures one `berth gc --nomad` pass (the binary, as an
// operator runs it) over NOMAD_NAMESPACES (1000) leaked namespaces named
// by allocation IDs the real Nomad does not know, older than the grace
// period: wall time and the process's peak RSS. The namespaces are pinned
// in a private netns dir (--netns-dir), so that nothing else on the host
// is judged.
func BenchmarkGCPass(b *testing.B) {
	testenv.RequireRoot(b)
	bin := berthBinary.Path(b)
	n := envInt("NOMAD_NAMESPACES", 1000)
	a := nomadtest.Start(b, nomadtest.Options{})
	dir := filepath.Join(b.TempDir(), "netns")
	mgr := netns.NewManager(dir)
	b.Cleanup(func() {
		des, _ := os.ReadDir(dir)
		for _, de := range des {
			_, _ = netns.RemovePath(context.Background(), filepath.Join(dir, de.Name()))
		}
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	var maxRSS int64
	var reclaimed int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for k := 0; k < n; k++ {
			if _, err := mgr.Create(context.Background(), runner.NewAllocID()); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(1100 * time.Millisecond) // past the grace period of 1 s
		args := []string{"gc", "--nomad", "--json", "--nomad-address", a.Addr, "--nomad-grace-period", "1s", "--netns-dir", dir,
			"--data-dir", filepath.Join(b.TempDir(), "data"), "--lock-dir", b.TempDir(), "--cni-config-dir", b.TempDir()}
		cmd := exec.Command(bin, args...)
		var out []byte
		b.StartTimer()
		out, err := cmd.Output()
		b.StopTimer()
		if err != nil {
			b.Fatalf("berth gc --nomad: %v\n%s", err, out)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > maxRSS {
			maxRSS = ru.Maxrss
		}
		var rep gc.Report
		testenv.Must(b, json.Unmarshal(out, &rep))
		reclaimed = len(reclaimedNetns(&rep))
		if reclaimed != n || len(rep.Errors) > 0 {
			b.Fatalf("reclaimed %d of %d, errors %v", reclaimed, n, rep.Errors)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(maxRSS)/1024, "peak-RSS-MB")
	b.ReportMetric(float64(reclaimed), "namespaces/pass")
	b.Logf("%s", fmt.Sprintf("one pass over %d unknown namespaces: peak RSS %.1f MB", n, float64(maxRSS)/1024))
}
