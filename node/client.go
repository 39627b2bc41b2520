package node

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/job/runner"
)

// Client is what the node offers its allocations and the limits it puts
// on them, with the names of Nomad's client block: the capacity that
// every task's resources are counted against (less Reserved), a hard cap
// on running allocations, how many are set up at once, and the longest
// kill_timeout a task gets.
type Client struct {
	// CPUTotalCompute and MemoryTotalMB override what the node detects
	// (0 means detect: cores x their maximum MHz, and MemTotal).
	CPUTotalCompute int `hcl:"cpu_total_compute,optional" help:"CPU the node offers in MHz (0: detected, cores x their maximum MHz)"`
	MemoryTotalMB   int `hcl:"memory_total_mb,optional" help:"memory the node offers in MB (0: detected, MemTotal of /proc/meminfo)"`
	// MaxAllocs is the hard cap on allocations running at once; a job
	// whose launch needs more is refused, and further allocations wait.
	MaxAllocs int `hcl:"max_allocs,optional" help:"allocations running at once, at most (a job whose one launch needs more is refused)"`
	// StartWorkers bounds the allocations being started (network set up,
	// tasks started) at once: the plugins and drivers are the bottleneck
	// of a start, and a burst of starts must not become a burst of
	// processes.
	StartWorkers int `hcl:"start_workers,optional" help:"allocations being started (network and tasks set up) at once"`
	// MaxPendingLaunches bounds, per periodic job, the launches whose
	// allocations have not all started: a launch that finds that many is
	// skipped and says so, so that a job firing faster than the node
	// starts it cannot pile up pending allocations. 0: no bound.
	MaxPendingLaunches int `hcl:"max_pending_launches,optional" help:"a periodic launch is skipped while this many earlier launches of the job have not started (0: no bound)"`
	// MaxKillTimeout caps a task's kill_timeout, as Nomad's client
	// setting: a stop or a drain never waits longer for one task.
	MaxKillTimeout string `hcl:"max_kill_timeout,optional" help:"longest kill_timeout a task gets (a job asking more gets this, with a warning)"`
	// NetworkInterface is Nomad's client network_interface: the interface
	// whose first IPv4 address the node advertises (NOMAD_IP_<label>,
	// services with address_mode "host", attr.unique.network.ip-address).
	// Empty: the interface of the IPv4 default route.
	NetworkInterface string `hcl:"network_interface,optional" help:"interface whose IPv4 address tasks and services are given as the host's (default: the IPv4 default route's; \"lo\" for 127.0.0.1)"`

	Reserved *Reserved `hcl:"reserved,block"`
	// HostVolumes are host directories jobs may mount (Nomad's client
	// host_volume blocks); the flag adds one per use.
	HostVolumes []*HostVolume `hcl:"host_volume,block" help:"a host volume jobs may mount: NAME=PATH, or NAME=PATH:ro for read-only mounts only (repeatable)"`
}

// Reserved is what the node keeps for itself (berth, the system): it is
// taken off the capacity before any allocation is counted.
type Reserved struct {
	CPU      int `hcl:"cpu,optional" help:"CPU in MHz kept for the host, not offered to allocations"`
	MemoryMB int `hcl:"memory,optional" help:"memory in MB kept for the host, not offered to allocations"`
}

// Client defaults.
const (
	DefaultMaxAllocs    = 1000
	DefaultStartWorkers = 8
	// DefaultMaxPendingLaunches lets a periodic job's starts run up to
	// three periods late before launches are skipped.
	DefaultMaxPendingLaunches = 3
	DefaultMaxKillTimeout     = 30 * time.Second
)

func defaultClient() *Client {
	return &Client{
		MaxAllocs:          DefaultMaxAllocs,
		StartWorkers:       DefaultStartWorkers,
		MaxPendingLaunches: DefaultMaxPendingLaunches,
		MaxKillTimeout:     DefaultMaxKillTimeout.String(),
		Reserved:           &Reserved{},
	}
}

func (c *Config) clientSettings() *Client {
	if c.Client == nil {
		c.Client = defaultClient()
	}
	if c.Client.Reserved == nil {
		c.Client.Reserved = &Reserved{}
	}
	return c.Client
}

func (c *Config) checkClient(p *Problems) {
	cl := c.clientSettings()
	for _, s := range []struct {
		path string
		v    int
	}{
		{"client.cpu_total_compute", cl.CPUTotalCompute}, {"client.memory_total_mb", cl.MemoryTotalMB},
		{"client.reserved.cpu", cl.Reserved.CPU}, {"client.reserved.memory", cl.Reserved.MemoryMB},
	} {
		if s.v < 0 {
			p.Add(s.path, "%d must not be negative", s.v)
		}
	}
	if cl.MaxAllocs < 1 {
		p.Add("client.max_allocs", "%d: allow at least 1 running allocation", cl.MaxAllocs)
	}
	if cl.StartWorkers < 1 {
		p.Add("client.start_workers", "%d: use at least 1", cl.StartWorkers)
	}
	if cl.MaxPendingLaunches < 0 {
		p.Add("client.max_pending_launches", "%d: use 0 (no bound) or more", cl.MaxPendingLaunches)
	}
	if d, err := time.ParseDuration(cl.MaxKillTimeout); err != nil || d <= 0 {
		p.Add("client.max_kill_timeout", "%q: use a positive duration such as \"30s\"", cl.MaxKillTimeout)
	}
	c.checkHostVolumes(p)
}

// MaxKillTimeout is client.max_kill_timeout (after Validate).
func (c *Config) MaxKillTimeout() time.Duration {
	d, err := time.ParseDuration(c.clientSettings().MaxKillTimeout)
	if err != nil || d <= 0 {
		return DefaultMaxKillTimeout
	}
	return d
}

// Capacity is what allocations may use on this node: the configured or
// detected totals, less the reserve. Detection reads /proc and /sys; a
// total that cannot be detected is an error naming the setting to set.
func (c *Config) Capacity() (runner.Capacity, error) {
	cl := c.clientSettings()
	cpu, mem := cl.CPUTotalCompute, cl.MemoryTotalMB
	var err error
	if cpu == 0 {
		if cpu, err = detectCPUMHz(); err != nil {
			return runner.Capacity{}, fmt.Errorf("%w (set %s)", err, SettingName("client.cpu_total_compute"))
		}
	}
	if mem == 0 {
		if mem, err = detectMemoryMB(); err != nil {
			return runner.Capacity{}, fmt.Errorf("%w (set %s)", err, SettingName("client.memory_total_mb"))
		}
	}
	capa := runner.Capacity{
		TotalCPU: cpu, TotalMemoryMB: mem,
		CPU: cpu - cl.Reserved.CPU, MemoryMB: mem - cl.Reserved.MemoryMB,
		Allocs: cl.MaxAllocs, Cores: runtime.NumCPU(),
	}
	if capa.CPU < 1 || capa.MemoryMB < 1 {
		return runner.Capacity{}, fmt.Errorf("%w: the reserve (%d MHz, %d MB) leaves nothing of the node's %d MHz and %d MB: lower %s or %s",
			ErrInvalidConfig, cl.Reserved.CPU, cl.Reserved.MemoryMB, cpu, mem, SettingName("client.reserved.cpu"), SettingName("client.reserved.memory"))
	}
	return capa, nil
}

// detectCPUMHz is Nomad's cpu fingerprint: the CPUs this process may run
// on times their maximum frequency (cpufreq's cpuinfo_max_freq, or the
// highest "cpu MHz" of /proc/cpuinfo where there is no cpufreq, as in
// most VMs).
func detectCPUMHz() (int, error) {
	cores := runtime.NumCPU()
	mhz := 0
	if paths, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"); len(paths) > 0 {
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if khz, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && khz/1000 > mhz {
				mhz = khz / 1000
			}
		}
	}
	if mhz == 0 {
		b, err := os.ReadFile("/proc/cpuinfo")
		if err != nil {
			return 0, fmt.Errorf("detect the CPU's frequency: %w", err)
		}
		mhz = cpuinfoMHz(b)
	}
	if mhz <= 0 {
		return 0, fmt.Errorf("detect the CPU's frequency: neither cpufreq nor /proc/cpuinfo gives one")
	}
	return cores * mhz, nil
}

// cpuinfoMHz is the highest "cpu MHz" of a /proc/cpuinfo.
func cpuinfoMHz(b []byte) int {
	best := 0.0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > best {
			best = f
		}
	}
	return int(best)
}

// detectMemoryMB is MemTotal of /proc/meminfo in MB.
func detectMemoryMB() (int, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("detect the node's memory: %w", err)
	}
	if mb := meminfoTotalMB(b); mb > 0 {
		return mb, nil
	}
	return 0, fmt.Errorf("detect the node's memory: /proc/meminfo has no MemTotal")
}

func meminfoTotalMB(b []byte) int {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
