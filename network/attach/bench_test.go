package attach_test

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
)

// cycle is one Setup+Teardown of a fresh ID, by berth or by the floor.
type cycle func(ctx context.Context, id string) error

// berthCycleOwn also records berth's own time per cycle: the cycle less
// the plugins' ADD and DEL.
func berthCycleOwn(e *env, own *[]time.Duration) cycle {
	return func(ctx context.Context, id string) error {
		start := time.Now()
		st, err := e.m.Setup(ctx, attach.Request{ID: id, Network: e.net.Name})
		if err != nil {
			return err
		}
		rep, err := e.m.Teardown(ctx, id)
		if err == nil && own != nil {
			plugins := time.Duration((st.Timings.Add + rep.Timings.Del) * float64(time.Millisecond))
			*own = append(*own, time.Since(start)-plugins)
		}
		return err
	}
}

// floorCycle drives the same plugins directly through libcni, with
// `ip netns add/del` for the namespace: what any runtime must pay.
func floorCycle(t testing.TB, e *env) cycle {
	list, err := libcni.ConfListFromFile(e.net.File)
	testenv.Must(t, err)
	c := libcni.NewCNIConfigWithCacheDir([]string{testenv.ReferencePlugins}, "", nil)
	return func(ctx context.Context, id string) error {
		// Held as berth holds it, so that a concurrent tidy of the shared
		// chains (by another berth) cannot pull them from under the plugins.
		unlock, err := attach.LockHost(ctx, "", false)
		if err != nil {
			return err
		}
		defer unlock()
		if out, err := exec.Command("ip", "netns", "add", id).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns add: %v %s", err, out)
		}
		rt := &libcni.RuntimeConf{ContainerID: id, NetNS: "/run/netns/" + id, IfName: "eth0"}
		if _, err := c.AddNetworkList(ctx, list, rt); err != nil {
			_ = c.DelNetworkList(ctx, list, rt)
			_ = exec.Command("ip", "netns", "del", id).Run()
			return err
		}
		if err := c.DelNetworkList(ctx, list, rt); err != nil {
			return err
		}
		if out, err := exec.Command("ip", "netns", "del", id).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns del: %v %s", err, out)
		}
		return nil
	}
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)/2]
}

// BenchmarkSetupTeardown compares berth's Setup+Teardown with the floor,
// for the full chain and for bridge+host-local only. Read p50-ms.
func BenchmarkSetupTeardown(b *testing.B) {
	chains := []struct {
		name string
		spec testenv.NetworkSpec
	}{
		{"full", full("10.199.27.0/24")},
		{"bridge", testenv.NetworkSpec{Subnet: "10.199.28.0/24"}},
	}
	for _, ch := range chains {
		for _, who := range []string{"floor", "berth"} {
			b.Run(ch.name+"/"+who, func(b *testing.B) {
				e := newBenchEnv(b, ch.spec)
				var own []time.Duration
				run := berthCycleOwn(e, &own)
				if who == "floor" {
					run = floorCycle(b, e)
				}
				ctx := context.Background()
				// One warm-up so that the bridge and shared chains exist for both.
				if err := run(ctx, "btbench-warm-"+testenv.RandSuffix(6)); err != nil {
					b.Fatal(err)
				}
				var ds []time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					if err := run(ctx, "btbench-"+testenv.RandSuffix(8)); err != nil {
						b.Fatal(err)
					}
					ds = append(ds, time.Since(start))
				}
				b.ReportMetric(float64(p50(ds).Microseconds())/1000, "p50-ms")
				if who == "berth" {
					b.ReportMetric(float64(p50(own[1:]).Microseconds())/1000, "own-p50-ms")
				}
			})
		}
	}
}

// BenchmarkParallel4 runs cycles with 1 and with 4 IDs in flight; read
// cycles/s and the speed-up.
func BenchmarkParallel4(b *testing.B) {
	for _, ch := range []struct {
		name string
		spec testenv.NetworkSpec
	}{{"full", full("10.199.29.0/24")}, {"bridge", testenv.NetworkSpec{Subnet: "10.199.27.0/24"}}} {
		for _, who := range []string{"floor", "berth"} {
			b.Run(ch.name+"/"+who, func(b *testing.B) {
				e := newBenchEnv(b, ch.spec)
				var own []time.Duration
				run := berthCycleOwn(e, &own)
				if who == "floor" {
					run = floorCycle(b, e)
				}
				ctx := context.Background()
				if err := run(ctx, "btbench-warm-"+testenv.RandSuffix(6)); err != nil {
					b.Fatal(err)
				}
				n := 8 * b.N
				measure := func(workers int) float64 {
					start := time.Now()
					var wg sync.WaitGroup
					work := make(chan int, n)
					for i := 0; i < n; i++ {
						work <- i
					}
					close(work)
					for w := 0; w < workers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range work {
								if err := run(ctx, "btbench-"+testenv.RandSuffix(8)); err != nil {
									b.Error(err)
								}
							}
						}()
					}
					wg.Wait()
					return float64(n) / time.Since(start).Seconds()
				}
				b.ResetTimer()
				seq := measure(1)
				par := measure(4)
				b.ReportMetric(seq, "seq-cycles/s")
				b.ReportMetric(par, "par4-cycles/s")
				b.ReportMetric(par/seq, "speedup")
			})
		}
	}
}

// newBenchEnv is newEnv for benchmarks.
func newBenchEnv(b *testing.B, spec testenv.NetworkSpec) *env {
	b.Helper()
	return newEnvTB(b, spec, []string{testenv.ReferencePlugins}, cni.Timeouts{})
}
