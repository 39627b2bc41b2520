// Package nomadtest runs a private, real Nomad agent (server and client in
// one) for berth's tests and benchmarks, the way this host allows: bound
// and advertised on 127.0.0.1 only, cloud fingerprinters denied, its own
// data dir, ports (25600-25700) and CNI config dir, raw_exec enabled. Its
// cleanup stops its jobs and the agent (by PID), unmounts what the client
// left under its data dir (deepest first, detached), and removes what its
// allocations left on the host: namespaces, libcni cache entries, leases,
// rules, bridges, Nomad's NOMAD-ADMIN chain.
package nomadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/network/netns"
)

// Version is the Nomad these tests are written against.
const Version = "1.6.5"

// Ports: the range this package's agents take ports from.
const (
	PortFirst = 25600
	PortLast  = 25700
)

// Denylist is the client option every agent sets: the cloud
// fingerprinters probe a link-local metadata address, which must not be
// reached from this host.
const Denylist = "env_aws,env_gce,env_azure,env_digitalocean"

// Binary finds the nomad binary: a skip with the reason when it is
// missing, but a failure when CI=true (CI installs it: scripts/setup.sh).
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("nomad")
	if err != nil {
		p = "/usr/local/bin/nomad"
		if _, serr := os.Stat(p); serr != nil {
			msg := "nomad not installed (scripts/setup.sh installs Nomad " + Version + " from ../shared/tools/nomad)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	out, err := exec.Command(p, "version").Output()
	if err != nil || !strings.Contains(string(out), "Nomad v"+Version) {
		t.Fatalf("%s is not Nomad %s: %s %v", p, Version, out, err)
	}
	return p
}

// Options configure an agent.
type Options struct {
	// Networks are conflists (JSON) written into the agent's CNI config
	// dir, for `network { mode = "cni/<name>" }`.
	Networks map[string][]byte
	// BridgeName and BridgeSubnet configure bridge mode (a test subnet
	// is required when a job uses it).
	BridgeName, BridgeSubnet string
	// CNIPath is the plugin dir (testenv.ReferencePlugins).
	CNIPath string
	// Logf, when set, gets the agent's output lines (t.Logf is noisy).
	Logf func(format string, args ...any)
	// NetworkInterface, when set, is the client's network_interface:
	// "lo" makes it advertise 127.0.0.1 (tests dial only loopback), not
	// the default route's address.
	NetworkInterface string
}

// Agent is one running Nomad agent.
type Agent struct {
	Addr    string // http://127.0.0.1:<port>
	Dir     string
	DataDir string
	CNIDir  string
	Bin     string
	Bridge  string
	opts    Options

	cmd     *exec.Cmd
	exited  chan struct{}
	log     *bytes.Buffer
	logMu   sync.Mutex
	netnsAt map[string]bool
	stopped bool
}

// Start starts an agent and waits until its client node is ready. The
// cleanup registered with t removes everything it and its allocations
// left, even when the test failed.
func Start(t testing.TB, o Options) *Agent {
	t.Helper()
	testenv.RequireRoot(t)
	bin := Binary(t)
	if o.CNIPath == "" {
		o.CNIPath = testenv.ReferencePlugins
	}
	if o.BridgeName == "" {
		o.BridgeName = "btnmbr" + testenv.RandSuffix(4)
	}
	if o.BridgeSubnet == "" {
		o.BridgeSubnet = "10.199.159.0/24"
	}
	dir, err := os.MkdirTemp("", "btnomad-")
	testenv.Must(t, err)
	a := &Agent{Dir: dir, DataDir: filepath.Join(dir, "data"), CNIDir: filepath.Join(dir, "cni"), Bin: bin, Bridge: o.BridgeName, opts: o,
		exited: make(chan struct{}), log: &bytes.Buffer{}, netnsAt: uuidNamespaces()}
	t.Cleanup(func() { a.cleanup(t) })
	testenv.Must(t, os.MkdirAll(a.DataDir, 0o700))
	testenv.Must(t, os.MkdirAll(a.CNIDir, 0o755))
	for name, b := range o.Networks {
		testenv.Must(t, os.WriteFile(filepath.Join(a.CNIDir, name+".conflist"), b, 0o644))
	}
	port := freePorts(t)
	a.Addr = fmt.Sprintf("http://127.0.0.1:%d", port)
	iface := ""
	if o.NetworkInterface != "" {
		iface = fmt.Sprintf("  network_interface     = %q\n", o.NetworkInterface)
	}
	conf := fmt.Sprintf(`data_dir  = %q
bind_addr = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %d
  rpc  = %d
  serf = %d
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled               = true
  cni_path              = %q
  cni_config_dir        = %q
  bridge_network_name   = %q
  bridge_network_subnet = %q
  gc_max_allocs         = 500
%s  options = {
    "fingerprint.denylist" = %q
  }
}
consul {
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, a.DataDir, port, port+1, port+2, o.CNIPath, a.CNIDir, o.BridgeName, o.BridgeSubnet, iface, Denylist)
	cfgFile := filepath.Join(dir, "nomad.hcl")
	testenv.Must(t, os.WriteFile(cfgFile, []byte(conf), 0o644))
	a.cmd = exec.Command(bin, "agent", "-config", cfgFile)
	a.cmd.Stdout, a.cmd.Stderr = (*agentLog)(a), (*agentLog)(a)
	// Its own process group: a signal to the test's group is not its.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	testenv.Must(t, a.cmd.Start())
	go func() { _ = a.cmd.Wait(); close(a.exited) }()

	deadline := time.Now().Add(90 * time.Second)
	for {
		var nodes []struct{ Status string }
		if err := a.Get("/v1/nodes", &nodes); err == nil && len(nodes) > 0 && nodes[0].Status == "ready" {
			break
		}
		select {
		case <-a.exited:
			t.Fatalf("nomad agent exited at start:\n%s", a.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nomad client not ready after 90 s:\n%s", a.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return a
}

type agentLog Agent

func (l *agentLog) Write(p []byte) (int, error) {
	a := (*Agent)(l)
	a.logMu.Lock()
	defer a.logMu.Unlock()
	if a.log.Len() < 8<<20 {
		a.log.Write(p)
	}
	if a.opts.Logf != nil {
		sc := bufio.NewScanner(bytes.NewReader(p))
		for sc.Scan() {
			a.opts.Logf("nomad: %s", sc.Text())
		}
	}
	return len(p), nil
}

// Log is what the agent printed so far.
func (a *Agent) Log() string {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	return a.log.String()
}

// freePorts finds three consecutive free loopback ports in the range.
func freePorts(t testing.TB) int {
	t.Helper()
	start := PortFirst + int(time.Now().UnixNano()%int64(PortLast-PortFirst-3))
	for i := 0; i < PortLast-PortFirst; i++ {
		p := PortFirst + (start-PortFirst+i)%(PortLast-PortFirst-2)
		ok := true
		var ls []net.Listener
		for k := 0; k < 3; k++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+k))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatalf("no three free ports in %d-%d", PortFirst, PortLast)
	return 0
}

// Get decodes a GET of the agent's API into out.
func (a *Agent) Get(path string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.Addr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(b.String()))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Nomad runs the nomad CLI against the agent.
func (a *Agent) Nomad(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Bin, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+a.Addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nomad %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Run submits a job file's text (nomad job run -detach) with -var flags.
func (a *Agent) Run(t testing.TB, hcl string, vars ...string) {
	t.Helper()
	f := filepath.Join(a.Dir, fmt.Sprintf("job-%s.nomad.hcl", testenv.RandSuffix(6)))
	testenv.Must(t, os.WriteFile(f, []byte(hcl), 0o644))
	args := []string{"job", "run", "-detach"}
	for _, v := range vars {
		args = append(args, "-var", v)
	}
	if _, err := a.Nomad(append(args, f)...); err != nil {
		t.Fatal(err)
	}
}

// Alloc is an allocation as the tests read it.
type Alloc struct {
	ID, JobID, ClientStatus, DesiredStatus string
	NodeID                                 string
	ModifyTime                             int64
}

// Terminal: complete, failed or lost.
func (al Alloc) Terminal() bool {
	return al.ClientStatus == "complete" || al.ClientStatus == "failed" || al.ClientStatus == "lost"
}

// Allocs lists every allocation the cluster knows.
func (a *Agent) Allocs(t testing.TB) []Alloc {
	t.Helper()
	var out []Alloc
	testenv.Must(t, a.Get("/v1/allocations?namespace=*", &out))
	return out
}

// JobAllocs lists a job's allocations (a periodic job's children too).
func (a *Agent) JobAllocs(t testing.TB, prefix string) []Alloc {
	t.Helper()
	var out []Alloc
	for _, al := range a.Allocs(t) {
		if strings.HasPrefix(al.JobID, prefix) {
			out = append(out, al)
		}
	}
	return out
}

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// uuidNamespaces are the namespaces in /run/netns named like allocations.
func uuidNamespaces() map[string]bool {
	out := map[string]bool{}
	des, _ := os.ReadDir(netns.DefaultDir)
	for _, de := range des {
		if uuidRe.MatchString(de.Name()) {
			out[de.Name()] = true
		}
	}
	return out
}

// NewNamespaces are the allocation-named namespaces that appeared since
// the agent started, sorted.
func (a *Agent) NewNamespaces() []string {
	var out []string
	for n := range uuidNamespaces() {
		if !a.netnsAt[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// LeakNamespace leaves behind, for terminal allocation id of this agent,
// what Nomad's teardown leaves when its unmount fails (Nomad 1.6.5's
// EBUSY): the namespace pinned at /run/netns/<id> after Nomad's CNI DEL,
// its alloc dir still under the data dir. Nomad's own leak comes only
// now and then; a test that must have one to reclaim makes it here. The
// agent's cleanup removes it if the test did not.
func (a *Agent) LeakNamespace(t testing.TB, id string) string {
	t.Helper()
	if a.netnsAt[id] {
		t.Fatalf("namespace %s was there before the agent started: not this agent's to leak", id)
	}
	if fi, err := os.Stat(filepath.Join(a.DataDir, "alloc", id)); err != nil || !fi.IsDir() {
		t.Fatalf("allocation %s has no alloc dir under %s: %v", id, a.DataDir, err)
	}
	path, err := netns.NewManager(netns.DefaultDir).Create(context.Background(), id)
	if err != nil {
		t.Fatalf("leak a namespace for allocation %s: %v", id, err)
	}
	return path
}

// StopJob stops and purges a job.
func (a *Agent) StopJob(t testing.TB, job string) {
	t.Helper()
	if _, err := a.Nomad("job", "stop", "-purge", "-detach", job); err != nil {
		t.Fatal(err)
	}
}

// SystemGC runs `nomad system gc`: terminal allocations are forgotten.
func (a *Agent) SystemGC(t testing.TB) {
	t.Helper()
	if _, err := a.Nomad("system", "gc"); err != nil {
		t.Fatal(err)
	}
}

type jobRef struct{ namespace, id string }

// deleteJobs stops and purges jobs through the API, 8 at a time.
func (a *Agent) deleteJobs(jobs []jobRef) {
	work := make(chan jobRef)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				a.deleteJob(j.namespace, j.id)
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
}

// deleteJob stops and purges a job through the API.
func (a *Agent) deleteJob(namespace, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, a.Addr+"/v1/job/"+url.PathEscape(id)+"?purge=true&namespace="+url.QueryEscape(namespace), nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// Stop stops every job, then the agent (SIGINT, then SIGKILL), and waits
// for it. Idempotent; the cleanup calls it.
func (a *Agent) Stop(t testing.TB) {
	if a.stopped || a.cmd == nil || a.cmd.Process == nil {
		return
	}
	a.stopped = true
	var jobs []struct{ ID, Namespace, ParentID string }
	if err := a.Get("/v1/jobs?namespace=*", &jobs); err == nil {
		// Parents first (a periodic job launches no more children), then
		// the children, several at a time: a periodic job every second
		// leaves hundreds of them.
		var parents, children []jobRef
		for _, j := range jobs {
			if j.ParentID == "" {
				parents = append(parents, jobRef{j.Namespace, j.ID})
			} else {
				children = append(children, jobRef{j.Namespace, j.ID})
			}
		}
		a.deleteJobs(parents)
		a.deleteJobs(children)
		// Let the client stop the tasks and tear their networks down.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var allocs []Alloc
			if a.Get("/v1/allocations?namespace=*", &allocs) != nil {
				break
			}
			busy := false
			for _, al := range allocs {
				if !al.Terminal() {
					busy = true
				}
			}
			if !busy {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Fails only when the agent has exited already: a.exited says so.
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		// As above: the wait on a.exited is what counts.
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// Kill SIGKILLs the agent, as a crash would: no teardown of its
// allocations follows. The cleanup ends the helper processes it left
// (executors, logmon) and removes what its allocations left.
func (a *Agent) Kill(t testing.TB) {
	t.Helper()
	if a.stopped || a.cmd == nil || a.cmd.Process == nil {
		return
	}
	a.stopped = true
	testenv.Must(t, a.cmd.Process.Kill())
	<-a.exited
}

// PID is the agent's process ID.
func (a *Agent) PID() int { return a.cmd.Process.Pid }

// endGroup SIGKILLs what is left of the agent's process group (it was
// started as its leader): the executors and logmons of its tasks, which
// outlive an agent that did not stop its jobs.
func (a *Agent) endGroup() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	pgid := a.cmd.Process.Pid
	for i := 0; i < 20; i++ {
		left := 0
		des, _ := os.ReadDir("/proc")
		for _, de := range des {
			pid, err := strconv.Atoi(de.Name())
			if err != nil || pid == pgid {
				continue
			}
			if g, err := unix.Getpgid(pid); err == nil && g == pgid {
				// ESRCH when it exited meanwhile; the next round
				// counts what is left.
				_ = unix.Kill(pid, unix.SIGKILL)
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cleanup removes everything the agent and its allocations left.
func (a *Agent) cleanup(t testing.TB) {
	a.Stop(t)
	a.endGroup()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	// The client's mounts under its data dir (secrets tmpfs, private
	// dirs), deepest first.
	if mounts, err := evidence.ReadMountinfo("/proc/self/mountinfo"); err == nil {
		var under []string
		for _, m := range mounts {
			if strings.HasPrefix(m.MountPoint, a.Dir+"/") {
				under = append(under, m.MountPoint)
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(under)))
		for _, m := range under {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	// What its allocations left: first DEL what libcni still caches
	// (leases, veths, rules go with it), then the namespaces.
	nets := map[string]bool{"nomad": true}
	for name := range a.opts.Networks {
		nets[name] = true
	}
	client := cni.NewClient(cni.Options{PluginPath: []string{a.opts.CNIPath}, Rules: hostclean.Rules{}})
	if cache, err := evidence.ReadCache(ctx, cni.DefaultCacheDir, ""); err == nil {
		for _, e := range cache {
			if !nets[e.Network] || !uuidRe.MatchString(e.ContainerID) {
				continue
			}
			att := &cni.Attachment{ContainerID: e.ContainerID, IfName: e.IfName}
			if p := filepath.Join(netns.DefaultDir, e.ContainerID); pinnedPath(p) {
				att.NetNS = p
			}
			if err := client.Del(ctx, nil, e.Network, att); err != nil {
				errs = append(errs, err)
				// The DEL's error is the one reported; the entry would
				// only be a stale cache file.
				_ = os.Remove(e.File)
			}
		}
	}
	for _, n := range a.NewNamespaces() {
		if _, err := netns.RemovePath(ctx, filepath.Join(netns.DefaultDir, n)); err != nil {
			errs = append(errs, err)
		}
	}
	for name := range nets {
		if name == "nomad" && !a.usedBridge() {
			continue
		}
		dir := filepath.Join(evidence.HostLocalDir, name)
		ls, _ := evidence.ReadLeases(dir)
		for _, l := range ls {
			if _, err := hostclean.RemoveAttachmentRules(ctx, name, l.ID); err != nil {
				errs = append(errs, err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, b := range a.bridges() {
		// Fails when the bridge was never made (a network no task used);
		// the leak check reports a bridge that stays.
		_ = exec.Command("ip", "link", "del", b).Run()
	}
	removeAdminChain("NOMAD-ADMIN")
	if err := os.RemoveAll(a.Dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		t.Errorf("nomadtest cleanup: %v", errors.Join(errs...))
	}
}

// usedBridge: the "nomad" lease dir is the bridge mode's of this agent
// when its bridge exists.
func (a *Agent) usedBridge() bool {
	return exec.Command("ip", "link", "show", a.Bridge).Run() == nil
}

// bridges are the bridge interfaces of the agent's networks.
func (a *Agent) bridges() []string {
	out := []string{a.Bridge}
	for _, b := range a.opts.Networks {
		var c struct {
			Plugins []struct{ Type, Bridge string }
		}
		if json.Unmarshal(b, &c) == nil {
			for _, p := range c.Plugins {
				if p.Type == "bridge" && p.Bridge != "" {
					out = append(out, p.Bridge)
				}
			}
		}
	}
	return out
}

func pinnedPath(p string) bool {
	ok, _ := netns.IsPinned(p)
	return ok
}

// removeAdminChain removes Nomad's admin chain and the firewall plugin's
// jump to it (Nomad makes them for bridge mode and never removes them).
func removeAdminChain(chain string) {
	for {
		err := exec.Command("iptables", "-w", "-D", "CNI-FORWARD", "-m", "comment", "--comment", "CNI firewall plugin admin overrides", "-j", chain).Run()
		if err != nil {
			break
		}
	}
	_ = exec.Command("iptables", "-w", "-F", chain).Run()
	_ = exec.Command("iptables", "-w", "-X", chain).Run()
}

// Conflist is a bridge network of the test subnet for cni/<name> mode:
// bridge, host-local, portmap, firewall, loopback (as in the seed issue).
func Conflist(name, bridge, subnet string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
  {"type": "firewall", "backend": "iptables"},
  {"type": "loopback"}]}`, name, bridge, subnet))
}

// PeriodicJob is a raw_exec job that runs `sh -c "exit 0"` every second
// in the network mode given ("cni/<name>" or "bridge").
func PeriodicJob(name, mode string) string {
	return fmt.Sprintf(`job %q {
  datacenters = ["dc1"]
  type        = "batch"
  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = false
  }
  group "g" {
    network { mode = %q }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`, name, mode)
}

// ServiceJob is a long-running raw_exec service (sleep) in the network
// mode given.
func ServiceJob(name, mode string) string {
	return fmt.Sprintf(`job %q {
  datacenters = ["dc1"]
  type        = "service"
  group "g" {
    network { mode = %q }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`, name, mode)
}

// FakeClientState makes a Nomad data dir for node nodeID as a client
// leaves it (client/client-id, client/state.db, root's alone) and keeps
// its state.db open in the calling process until the test ends: the
// process then is the "client" by the host's evidence, and a fake Nomad
// API it serves passes the janitor's identity check. allocs get an alloc
// dir each (host evidence that they were Nomad's).
func FakeClientState(t testing.TB, nodeID string, allocs ...string) (dataDir string) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), "nomad-data")
	testenv.Must(t, os.MkdirAll(filepath.Join(dataDir, "client"), 0o700))
	testenv.Must(t, os.WriteFile(filepath.Join(dataDir, "client", "client-id"), []byte(nodeID), 0o600))
	db, err := os.OpenFile(filepath.Join(dataDir, "client", "state.db"), os.O_CREATE|os.O_RDWR, 0o600)
	testenv.Must(t, err)
	t.Cleanup(func() { db.Close() })
	for _, id := range allocs {
		testenv.Must(t, os.MkdirAll(filepath.Join(dataDir, "alloc", id), 0o755))
	}
	return dataDir
}
