package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
)

// cliBench is what the CLI benchmarks share: a berth and a cnitool binary
// and a network with the example network's whole plugin chain.
type cliBench struct {
	berth, cnitool string
	net            *testenv.Network
	flags          []string
}

func newCLIBench(b *testing.B, subnet string) *cliBench {
	b.Helper()
	testenv.RequireRoot(b)
	testenv.RequirePlugins(b, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	dir := b.TempDir()
	c := &cliBench{berth: berthBinary.Path(b), cnitool: filepath.Join(dir, "cnitool")}
	const pkg = "github.com/containernetworking/cni/cnitool"
	if out, err := exec.Command("go", "build", "-o", c.cnitool, pkg).CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	c.net = testenv.NewNetwork(b, testenv.NetworkSpec{Subnet: subnet, Portmap: true, Firewall: true, Loopback: true})
	c.flags = []string{"--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", c.net.ConfDir,
		"--cni-path", testenv.ReferencePlugins, "--lock-dir", filepath.Join(dir, "lock")}
	return c
}

func (c *cliBench) run(b *testing.B, name string, env []string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

func (c *cliBench) berthCycle(b *testing.B, id string) {
	c.run(b, c.berth, nil, append(c.flags, "net", "up", id, "--network", c.net.Name)...)
	c.run(b, c.berth, nil, append(c.flags, "net", "down", id)...)
}

// cnitoolCycle is what a user of the plain tools types.
func (c *cliBench) cnitoolCycle(b *testing.B, id string) {
	env := []string{"NETCONFPATH=" + c.net.ConfDir, "CNI_PATH=" + testenv.ReferencePlugins}
	c.run(b, "ip", nil, "netns", "add", id)
	c.run(b, c.cnitool, env, "add", c.net.Name, "/run/netns/"+id)
	c.run(b, c.cnitool, env, "del", c.net.Name, "/run/netns/"+id)
	c.run(b, "ip", nil, "netns", "del", id)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkCLICycle: `berth net up` + `berth net down` against
// `ip netns add` + `cnitool add` + `cnitool del` + `ip netns del`, same
// conflist and plugins, alternating (one of each per iteration). Reports
// the medians and their ratio (target <= 1.10). Run with -benchtime=8x or
// more:
//
//	go test -run XXX -bench CLICycle -benchtime 10x ./cli
func BenchmarkCLICycle(b *testing.B) {
	c := newCLIBench(b, "10.199.104.0/24")
	// One cycle of each first: the bridge and the shared chains are made
	// once, by whichever runs first, and stay (as with every runtime).
	c.berthCycle(b, "btbench-warm-"+testenv.RandSuffix(6))
	c.cnitoolCycle(b, "btbench-warm-"+testenv.RandSuffix(6))
	var berth, tool []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		c.berthCycle(b, fmt.Sprintf("btbench-b%d-%s", i, testenv.RandSuffix(4)))
		berth = append(berth, time.Since(start))
		start = time.Now()
		c.cnitoolCycle(b, fmt.Sprintf("btbench-c%d-%s", i, testenv.RandSuffix(4)))
		tool = append(tool, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(ms(median(berth)), "berth-ms/cycle")
	b.ReportMetric(ms(median(tool)), "cnitool-ms/cycle")
	b.ReportMetric(float64(median(berth))/float64(median(tool)), "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkParallelProcesses: 8 `berth net up` processes at once, then 8
// `net down`, against the same 16 commands one after another. Reports the
// wall times and their ratio (target <= 0.6).
func BenchmarkParallelProcesses(b *testing.B) {
	c := newCLIBench(b, "10.199.105.0/24")
	c.berthCycle(b, "btbench-warm-"+testenv.RandSuffix(6))
	var par, seq []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ids := make([]string, 8)
		for j := range ids {
			ids[j] = fmt.Sprintf("btbench-p%d-%d-%s", i, j, testenv.RandSuffix(4))
		}
		start := time.Now()
		for _, verb := range [][]string{{"up", "--network", c.net.Name}, {"down"}} {
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.run(b, c.berth, nil, append(append(slices.Clone(c.flags), "net", verb[0], id), verb[1:]...)...)
				}()
			}
			wg.Wait()
		}
		par = append(par, time.Since(start))
		start = time.Now()
		for _, id := range ids {
			c.run(b, c.berth, nil, append(c.flags, "net", "up", id+"s", "--network", c.net.Name)...)
		}
		for _, id := range ids {
			c.run(b, c.berth, nil, append(c.flags, "net", "down", id+"s")...)
		}
		seq = append(seq, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(ms(median(par)), "parallel-ms")
	b.ReportMetric(ms(median(seq)), "sequential-ms")
	b.ReportMetric(float64(median(par))/float64(median(seq)), "ratio")
	b.ReportMetric(0, "ns/op")
}
