package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// Snapshot is the part of the host that berth (and its tests) could leak.
type Snapshot map[string]bool

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// TakeSnapshot reads namespaces, veths, bridges, host-local leases,
// CNI iptables chains and rules (and the FORWARD policy, Docker's
// chains), libcni cache entries, podman and docker containers.
func TakeSnapshot(ctx context.Context) (Snapshot, error) {
	s := Snapshot{}
	if des, err := os.ReadDir("/run/netns"); err == nil {
		for _, de := range des {
			s["netns "+de.Name()] = true
		}
	}
	for _, kind := range []string{"veth", "bridge"} {
		out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show", "type", kind).Output()
		if err != nil {
			return nil, fmt.Errorf("ip link show type %s: %w", kind, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				name := strings.TrimSuffix(f[1], ":")
				if i := strings.IndexByte(name, '@'); i >= 0 {
					name = name[:i]
				}
				s[kind+" "+name] = true
			}
		}
	}
	leases, _ := filepath.Glob("/var/lib/cni/networks/*/*")
	for _, l := range leases {
		b := filepath.Base(l)
		if b == "lock" || strings.HasPrefix(b, "last_reserved_ip") {
			continue
		}
		s["lease "+l] = true
	}
	cache, _ := filepath.Glob("/var/lib/cni/results/*")
	for _, c := range cache {
		s["cni-cache "+filepath.Base(c)] = true
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, tool).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
		}
		table := ""
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, ":FORWARD "), strings.HasPrefix(line, ":DOCKER"):
				// A dockerd started with iptables on sets the FORWARD
				// policy to DROP and adds its chains.
				f := strings.Fields(line)
				s[tool+" "+table+" chain "+f[0][1:]+" "+f[1]] = true
			case strings.HasPrefix(line, ":CNI-"):
				s[tool+" "+table+" chain "+strings.Fields(line)[0][1:]] = true
			case strings.HasPrefix(line, "-A ") && strings.Contains(line, "CNI"):
				s[tool+" "+table+" "+counters.ReplaceAllString(line, "")] = true
			}
		}
	}
	// Task supervisors and task cgroups (berth-supervisor, cgroups under
	// <hierarchy>/berth): nothing a task started may outlive the tests.
	if des, err := os.ReadDir("/proc"); err == nil {
		for _, de := range des {
			b, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
			if err != nil {
				continue
			}
			args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
			if filepath.Base(args[0]) == "berth-supervisor" && len(args) == 8 {
				s["supervisor "+args[3]+"/"+args[5]+"/"+args[7]] = true
			}
		}
	}
	for _, parent := range []string{"/sys/fs/cgroup/unified/berth", "/sys/fs/cgroup/memory/berth", "/sys/fs/cgroup/pids/berth", "/sys/fs/cgroup/cpu/berth", "/sys/fs/cgroup/berth"} {
		des, _ := os.ReadDir(parent)
		for _, de := range des {
			if de.IsDir() {
				s["cgroup "+filepath.Join(parent, de.Name())] = true
			}
		}
	}
	if _, err := exec.LookPath("podman"); err == nil {
		out, err := exec.CommandContext(ctx, "podman", "ps", "-a", "--format", "{{.Names}}").Output()
		if err == nil {
			for _, n := range strings.Fields(string(out)) {
				s["container "+n] = true
			}
		}
	}
	// Docker containers (the docker driver's tasks and pause containers),
	// when a daemon answers on its default socket.
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		bin := "/usr/bin/docker"
		if _, err := os.Stat(bin); err != nil {
			bin = "docker"
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(dctx, bin, "-H", "unix:///var/run/docker.sock", "ps", "-a", "--format", "{{.Names}}").Output()
		cancel()
		if err == nil {
			for _, n := range strings.Fields(string(out)) {
				s["docker container "+n] = true
			}
		}
	}
	return s, nil
}

// Leaked lists what after has that before had not.
func Leaked(before, after Snapshot) []string {
	var out []string
	for k := range after {
		if !before[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// buildTidyChains builds the command tidychains from this checkout: the
// shared chains go when nothing uses them, as berth's gc removes them.
// Built before the tests, run after them (tidySharedChains).
func buildTidyChains() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "berth-tidychains-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "tidychains")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/berth/berth/network/hostclean/tidychains").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build tidychains: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// tidySharedChains runs bin (buildTidyChains). A failure is printed; the
// snapshot after it shows what stayed.
func tidySharedChains(ctx context.Context, bin string) {
	if out, err := exec.CommandContext(ctx, bin).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "leak check: tidy shared chains: %v\n%s\n", err, strings.TrimSpace(string(out)))
	}
}

// LeakCheckMain runs a test binary's tests between two snapshots of the
// host and fails the binary if anything was left behind. Shared CNI chains
// that plugins create on first use and never remove are tidied first (when
// nothing uses them), as berth itself does. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }
func LeakCheckMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	done, err := BuildSupervisor()
	if err != nil {
		fmt.Fprintf(os.Stderr, "leak check: %v\n", err)
		return 1
	}
	defer done()
	tidy, removeTidy, err := buildTidyChains()
	if err != nil {
		fmt.Fprintf(os.Stderr, "leak check: %v\n", err)
		return 1
	}
	defer removeTidy()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	before, err := TakeSnapshot(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "leak check: before: %v\n", err)
		return 1
	}
	code := m.Run()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tidySharedChains(ctx, tidy)
	after, err := TakeSnapshot(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leak check: after: %v\n", err)
		return 1
	}
	if leaked := Leaked(before, after); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "LEAK CHECK FAILED: the tests left %d things on the host:\n  %s\n", len(leaked), strings.Join(leaked, "\n  "))
		return 1
	}
	fmt.Fprintln(os.Stderr, "leak check: host unchanged (netns, veths, bridges, leases, CNI chains and rules, CNI cache, containers, task supervisors and cgroups)")
	return code
}
