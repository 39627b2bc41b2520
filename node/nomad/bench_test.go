package nomad_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad"
	"github.com/berth/berth/node/nomad/nomadtest"
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

func (l *latencies) NomadAPIError(string)               {}
func (l *latencies) NomadReclaimed(string, string, int) {}
func (l *latencies) NomadConnected(bool)                {}
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

// BenchmarkReclaimLatency measures the continuous mode on the real Nomad:
// periodic every-second raw_exec jobs in a cni/<net> network leak
// namespaces (Nomad logs "failed to unmount NS ... device or resource
// busy" for each), the janitor (nomad.Run, as `berth agent` with a nomad
// block runs it) follows the event stream, waits for Nomad's teardown and
// removes what it leaked. It runs until at least NOMAD_ALLOCS (100)
// allocations of the jobs have ended and at least NOMAD_LEAKS (1) of
// them leaked and were reclaimed (or NOMAD_BENCH_MINUTES, 12, have
// passed), stops the jobs, waits for their last teardowns and reports:
//
//   - allocations run (terminal), EBUSY leaks of Nomad's and how many of
//     them are gone;
//   - the leak lifetime: from Nomad's logged failed unmount to the
//     namespace gone (polled every 5 ms), p50 and p99;
//   - the Nomad errors berth caused: Nomad's unmount failures that are
//     not EBUSY (berth went before Nomad's own teardown);
//   - for reference, allocation terminal (its ModifyTime) to namespace
//     gone, for the leaks and for all allocations.
//
// One round whatever b.N: run with -benchtime=1x.
func BenchmarkReclaimLatency(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.RequirePlugins(b, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	wantAllocs := envInt("NOMAD_ALLOCS", 100)
	wantLeaks := envInt("NOMAD_LEAKS", 1)
	net, confs := network("10.199.218.0/24")
	a := nomadtest.Start(b, nomadtest.Options{Networks: confs})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	rec := &latencies{}
	runJanitor(b, a, nomad.Config{GracePeriod: "24h"}, testenv.ReferencePlugins, rec)

	// Terminal times from the event stream, as Nomad's server recorded them.
	s, err := nomad.Config{Address: a.Addr, DataDir: a.DataDir}.Check()
	testenv.Must(b, err)
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
				if ev.Alloc.Terminal() && strings.HasPrefix(ev.Alloc.JobID, "tick-") {
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
	// count is what the run has reached so far: allocations ended, EBUSY
	// leaks (one per allocation) and those of them gone.
	count := func() (ended, leaks, reclaimed int) {
		fails := unmountFailures(a.Log())
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, f := range fails {
			if !f.busy || seen[f.alloc] {
				continue
			}
			seen[f.alloc] = true
			leaks++
			if _, ok := gone[f.alloc]; ok {
				reclaimed++
			}
		}
		return len(terminal), leaks, reclaimed
	}

	b.ResetTimer()
	// The seed's job, every second (NOMAD_JOBS of them, default 1: more
	// put Nomad's one-at-a-time CNI calls minutes behind on 2 vCPUs, and
	// its namespace handles are then finalized before its unmount: few
	// leaks).
	var jobs []string
	for i := 0; i < envInt("NOMAD_JOBS", 1); i++ {
		jobs = append(jobs, fmt.Sprintf("tick-%d", i))
		a.Run(b, nomadtest.PeriodicJob(jobs[i], "cni/"+net))
	}
	// Nomad's own EBUSY is rare once its Go GC runs often (a loaded
	// host): with NOMAD_HOLD (default 1) every other namespace of the
	// jobs is held open, as Nomad's leaked handle holds it, and Nomad's
	// unmount of it fails the same way (EBUSY) after its DEL.
	if os.Getenv("NOMAD_HOLD") != "0" {
		holdNamespaces(b, a, "tick-")
	}
	limit := time.Duration(envInt("NOMAD_BENCH_MINUTES", 12)) * time.Minute
	deadline := time.Now().Add(limit)
	for {
		ended, _, reclaimed := count()
		if ended >= wantAllocs && reclaimed >= wantLeaks {
			break
		}
		if time.Now().After(deadline) {
			b.Errorf("after %s: %d of %d allocations ended, %d of %d leaks reclaimed (reported below)", limit, ended, wantAllocs, reclaimed, wantLeaks)
			break
		}
		time.Sleep(time.Second)
	}
	b.StopTimer()
	for _, j := range jobs {
		_, _ = a.Nomad("job", "stop", "-detach", j)
	}
	// The last allocations end and are torn down: a leak found later
	// still counts, and every one must go.
	settleBy := time.Now().Add(2 * time.Minute)
	for time.Now().Before(settleBy) {
		running := 0
		for _, j := range jobs {
			for _, al := range a.JobAllocs(b, j+"/") {
				if !al.Terminal() {
					running++
				}
			}
		}
		_, leaks, reclaimed := count()
		mu.Lock()
		left := len(terminal) - len(gone)
		mu.Unlock()
		if running == 0 && left == 0 && reclaimed == leaks {
			break
		}
		time.Sleep(time.Second)
	}

	fails := unmountFailures(a.Log())
	mu.Lock()
	var life, lk, all []time.Duration
	leaks, other := 0, 0
	var left []string
	seen := map[string]bool{}
	for _, f := range fails {
		if !f.busy {
			other++
			if other <= 3 {
				b.Logf("Nomad error berth caused: %s", f.line)
			}
			continue
		}
		if seen[f.alloc] {
			continue
		}
		seen[f.alloc] = true
		leaks++
		g, ok := gone[f.alloc]
		if !ok {
			left = append(left, f.alloc)
			continue
		}
		life = append(life, g.Sub(f.at))
		if t, ok := terminal[f.alloc]; ok {
			lk = append(lk, g.Sub(t))
		}
	}
	for id, g := range gone {
		all = append(all, g.Sub(terminal[id]))
	}
	ended, torn := len(terminal), len(gone)
	mu.Unlock()
	if len(left) > 0 {
		b.Errorf("%d of %d EBUSY leaks not reclaimed: %v", len(left), leaks, left)
	}
	if other > 0 {
		b.Errorf("%d Nomad errors caused by berth", other)
	}
	b.ReportMetric(float64(ended), "allocs")
	b.ReportMetric(float64(leaks), "ebusy-leaks")
	b.ReportMetric(float64(len(life)), "leaks-reclaimed")
	b.ReportMetric(float64(other), "nomad-errors-by-berth")
	b.ReportMetric(percentile(life, .5).Seconds()*1000, "leak-p50-ms")
	b.ReportMetric(percentile(life, .99).Seconds()*1000, "leak-p99-ms")
	b.Logf("%d allocations ended (%d namespaces gone); Nomad's unmount failures: %d EBUSY leaks (its own), %d reclaimed, %d other (errors berth caused)", ended, torn, leaks, len(life), other)
	b.Logf("leak lifetime (Nomad's failed unmount -> namespace gone), %d leaks: p50 %v p99 %v max %v", len(life), percentile(life, .5), percentile(life, .99), percentile(life, 1))
	b.Logf("terminal -> namespace gone: leaks p50 %v p99 %v; all p50 %v p99 %v", percentile(lk, .5), percentile(lk, .99), percentile(all, .5), percentile(all, .99))
	rec.mu.Lock()
	own := append([]time.Duration(nil), rec.seen...)
	rec.mu.Unlock()
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
		args := []string{"gc", "--nomad", "--json", "--nomad-address", a.Addr, "--nomad-data-dir", a.DataDir, "--nomad-reclaim-without-evidence",
			"--nomad-grace-period", "1s", "--netns-dir", dir,
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
