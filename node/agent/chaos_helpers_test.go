package agent

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
)

// The invariants the crash-schedule suites (crash_schedule_test.go,
// chaos_test.go) check after every restart of the agent, and the host
// comparison after the final stop and drain.

// startArmed starts the agent binary with the crash point armed
// (BERTH_FAULT=point). healthy waits until it answers and has reconciled
// (the point is on the stop or drain path); otherwise it may die at once.
func (e *testEnv) startArmed(t *testing.T, cfgPath string, c *api.Client, point string, healthy bool) *agentProc {
	t.Helper()
	return e.startBinaryEnv(t, cfgPath, c, []string{fault.Env + "=" + point}, healthy)
}

// diedAt waits until the armed agent died by its own SIGKILL at point.
func diedAt(t *testing.T, p *agentProc, point string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the agent armed with %s=%s still runs after 2 minutes: the point was never reached", fault.Env, point)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		b, _ := os.ReadFile(p.log.Name())
		t.Fatalf("the agent armed with %s did not die by SIGKILL there: %v\n%s", point, p.cmd.ProcessState, tail(b, 40))
	}
}

func tail(b []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// invariantOpts says what the invariants allow.
type invariantOpts struct {
	jobs []string
	// services: the running allocations of these jobs register services.
	services map[string]bool
	// inFlight allows allocations the live agent is still starting
	// (pending, owned by it): a periodic job always has some.
	inFlight bool
	// quick checks a running allocation's tasks against the one podman
	// listing and its namespace by its path, without CNI CHECK or
	// services, and leaves to the live agent the allocations of ongoing
	// it owns: the pass TestChaosRandom makes after every kill (the whole
	// one every few kills).
	quick bool
	// ongoing names jobs whose allocations the live agent starts and ends
	// all the time (a periodic batch job): a quick pass checks of the
	// non-terminal ones it owns only that no task has two instances, and
	// does not wait for them to settle (the whole pass does).
	ongoing map[string]bool
}

// hostView is what runs on the host for allocations, read once per
// check: supervisors and containers by allocation, libcni cache files,
// iptables rules.
type hostView struct {
	supervisors map[string][]string // alloc ID -> "pid P task T"
	containers  map[string][]string // alloc ID -> "ID state task"
	ctrState    map[string]string   // full container ID -> state
	cache       []string
	rules       []string
}

func readHost(ctx context.Context) (*hostView, error) {
	v := &hostView{supervisors: map[string][]string{}, containers: map[string][]string{}, ctrState: map[string]string{}}
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		var pid int
		if _, err := fmt.Sscan(de.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
		if err != nil {
			continue
		}
		// supervisor.Args: berth-supervisor run --store S --alloc A --task T
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == "berth-supervisor" && len(args) == 8 {
			v.supervisors[args[5]] = append(v.supervisors[args[5]], fmt.Sprintf("pid %d task %s", pid, args[7]))
		}
	}
	if _, err := exec.LookPath("podman"); err == nil {
		out, err := exec.CommandContext(ctx, "podman", "ps", "-a", "--format", "json").Output()
		if err != nil {
			return nil, fmt.Errorf("podman ps: %w", err)
		}
		var cs []struct {
			ID     string `json:"Id"`
			State  string
			Labels map[string]string
		}
		if err := json.Unmarshal(out, &cs); err != nil {
			return nil, fmt.Errorf("podman ps: %w", err)
		}
		for _, c := range cs {
			v.ctrState[c.ID] = c.State
			if id := c.Labels["berth.alloc_id"]; id != "" {
				v.containers[id] = append(v.containers[id], fmt.Sprintf("%.12s %s %s", c.ID, c.State, c.Labels["berth.task"]))
			}
		}
	}
	v.cache, _ = filepath.Glob("/var/lib/cni/results/*")
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		b, err := exec.CommandContext(ctx, tool).Output()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			v.rules = append(v.rules, tool+": "+l)
		}
	}
	return v, nil
}

// instances lists what runs task of allocation id: its supervisors
// (raw_exec, exec) and its containers in any state (podman).
func (v *hostView) instances(id, task string) []string {
	var out []string
	for _, s := range v.supervisors[id] {
		if strings.HasSuffix(s, " task "+task) {
			out = append(out, "supervisor "+s)
		}
	}
	for _, c := range v.containers[id] {
		if strings.HasSuffix(c, " "+task) {
			out = append(out, "container "+c)
		}
	}
	return out
}

// violations lists the allocations of o.jobs that are neither running
// (owned by the live agent, each task alive, one container or supervisor
// per task, the namespace there and passing CNI CHECK, services
// registered) nor terminal with nothing of them left. With o.inFlight,
// allocations created after since that are not terminal yet are the live
// agent's business and skipped (with o.quick, those of o.ongoing created
// at any time). The allocations are read before the host, so that what a
// terminal one left is no race with its teardown; a terminal one is read
// from its job's listing, which says all that is checked of it.
func (e *testEnv) violations(ctx context.Context, c *api.Client, agentPID int, o invariantOpts, since time.Time) []string {
	var out []string
	st, err := store.Open(ctx, e.cfg.DataDir, store.Options{})
	if err != nil {
		return []string{fmt.Sprintf("open store %s: %v", e.cfg.DataDir, err)}
	}
	defer st.Close()
	var allocs []*api.Allocation
	for _, job := range o.jobs {
		stubs, err := c.Allocations(ctx, job)
		if err != nil {
			out = append(out, fmt.Sprintf("job %s: list allocations: %v", job, err))
			continue
		}
		for _, s := range stubs {
			if s.Status != api.AllocRunning && s.Status != api.AllocPending {
				allocs = append(allocs, &api.Allocation{ID: s.ID, JobID: s.JobID, Status: s.Status, Network: &api.NetworkStatus{NetnsPath: s.NetnsPath}})
				continue
			}
			a, err := c.Allocation(ctx, s.ID)
			if err != nil {
				if !strings.Contains(err.Error(), "not found") { // retention removed it meanwhile
					out = append(out, fmt.Sprintf("allocation %s: %v", s.ID, err))
				}
				continue
			}
			allocs = append(allocs, a)
		}
	}
	v, err := readHost(ctx)
	if err != nil {
		return append(out, err.Error())
	}
	for _, a := range allocs {
		terminal := a.Status != api.AllocRunning && a.Status != api.AllocPending
		if o.inFlight && !terminal && a.CreatedAt.After(since) && a.OwnerPID == agentPID {
			continue
		}
		if o.quick && o.ongoing[a.JobID] && !terminal && a.OwnerPID == agentPID {
			for _, ts := range a.Tasks {
				if ins := v.instances(a.ID, ts.Name); len(ins) > 1 {
					out = append(out, fmt.Sprintf("allocation %s of %s (%s): task %s has %d instances: %s", a.ID, a.JobID, a.Status, ts.Name, len(ins), strings.Join(ins, ", ")))
				}
			}
			continue
		}
		switch a.Status {
		case api.AllocRunning:
			out = append(out, e.runningViolations(ctx, st, v, a, agentPID, o.services[a.JobID], o)...)
		case api.AllocPending:
			out = append(out, fmt.Sprintf("allocation %s of %s: pending, owner pid %d (agent %d)", a.ID, a.JobID, a.OwnerPID, agentPID))
		default:
			for _, l := range e.leftovers(ctx, st, v, a) {
				out = append(out, fmt.Sprintf("allocation %s of %s is %s but %s", a.ID, a.JobID, a.Status, l))
			}
		}
	}
	return out
}

func (e *testEnv) runningViolations(ctx context.Context, st *store.Store, v *hostView, a *api.Allocation, agentPID int, services bool, o invariantOpts) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("running allocation %s of %s: ", a.ID, a.JobID)+fmt.Sprintf(format, args...))
	}
	if a.OwnerPID != agentPID {
		bad("owner pid %d, not the agent %d", a.OwnerPID, agentPID)
		return out
	}
	running := 0
	for _, ts := range a.Tasks {
		if ts.State == "running" {
			running++
		}
	}
	if o.inFlight && running == 0 {
		// Starting its tasks, or finishing: the live agent's business.
		return out
	}
	for _, ts := range a.Tasks {
		ins := v.instances(a.ID, ts.Name)
		switch {
		case ts.State != "running" || ts.Handle == nil:
			if ts.State != "dead" {
				bad("task %s is %s (handle %v)", ts.Name, ts.State, ts.Handle != nil)
			}
		case !v.alive(ctx, ts.Handle, o.quick):
			bad("task %s is not alive (%+v)", ts.Name, *ts.Handle)
		case len(ins) != 1:
			bad("task %s has %d instances: %s (containers of it: %v)", ts.Name, len(ins), strings.Join(ins, ", "), v.containers[a.ID])
		}
	}
	if a.Network != nil && a.Network.NetnsPath != "" {
		if o.quick {
			if !netnsExists(a.Network.NetnsPath) {
				bad("namespace %s missing", a.Network.NetnsPath)
			}
		} else if err := checkAttachment(ctx, st, e.cfg.CNIPath, a.ID); err != nil {
			bad("%v", err)
		}
	}
	if services && !o.quick && len(a.Services) == 0 {
		bad("no service registered")
	}
	return out
}

// checkAttachment runs CNI CHECK on the allocation's recorded attachment,
// as the agent does at re-adoption.
func checkAttachment(ctx context.Context, st *store.Store, cniPath []string, id string) error {
	rec, err := st.GetAttachment(ctx, id)
	if err != nil {
		return fmt.Errorf("attachment record: %w", err)
	}
	if rec.Phase != store.PhaseReady {
		return fmt.Errorf("attachment in phase %s", rec.Phase)
	}
	if !netnsExists(rec.NetnsPath) {
		return fmt.Errorf("namespace %s missing", rec.NetnsPath)
	}
	net, err := cni.ParseNetwork(rec.ConfList, "record of "+id)
	if err != nil {
		return err
	}
	cl := cni.NewClient(cni.Options{PluginPath: cniPath})
	if err := cl.Check(ctx, net, &cni.Attachment{ContainerID: rec.ID, NetNS: rec.NetnsPath, IfName: rec.IfName, Args: rec.Args, CapabilityArgs: rec.CapabilityArgs}); err != nil {
		return fmt.Errorf("CNI CHECK of %s: %w", rec.NetnsPath, err)
	}
	return nil
}

// alive reports whether the task of handle h runs: quick takes a
// container's state from the listing v was read with, else podman
// inspects it now.
func (v *hostView) alive(ctx context.Context, h *api.TaskHandle, quick bool) bool {
	if quick && h.Driver == "podman" {
		for id, state := range v.ctrState {
			if h.ContainerID != "" && strings.HasPrefix(id, h.ContainerID) {
				return state == "running"
			}
		}
		return false
	}
	return handleAlive(ctx, h)
}

func handleAlive(ctx context.Context, h *api.TaskHandle) bool {
	if h.Driver == "podman" {
		out, err := exec.CommandContext(ctx, "podman", "inspect", "--format", "{{.State.Running}}", h.ContainerID).Output()
		return err == nil && strings.TrimSpace(string(out)) == "true"
	}
	return proc.Alive(h.PID, h.PIDStartTime)
}

// leftovers lists what is left of a terminal allocation: its namespace,
// attachment record, supervisors, mounts beneath its directory,
// containers, libcni cache entries and iptables rules naming it.
func (e *testEnv) leftovers(ctx context.Context, st *store.Store, v *hostView, a *api.Allocation) []string {
	var out []string
	if a.Network != nil && a.Network.NetnsPath != "" && netnsExists(a.Network.NetnsPath) {
		out = append(out, "its namespace "+a.Network.NetnsPath+" exists")
	}
	if _, err := st.GetAttachment(ctx, a.ID); err == nil {
		out = append(out, "its attachment is still recorded")
	}
	for _, s := range v.supervisors[a.ID] {
		out = append(out, "its supervisor "+s+" runs")
	}
	// Its tasks' secrets/ tmpfs (a mount of the host's namespace).
	if ms, err := allocdir.Mounts(filepath.Join(e.cfg.DataDir, "alloc")); err != nil {
		out = append(out, "mounts: "+err.Error())
	} else {
		for _, m := range ms[a.ID] {
			out = append(out, "mount "+m)
		}
	}
	for _, c := range v.containers[a.ID] {
		out = append(out, "its container "+c+" exists")
	}
	for _, f := range v.cache {
		if strings.Contains(filepath.Base(f), a.ID) {
			out = append(out, "libcni cache entry "+f)
		}
	}
	for _, l := range v.rules {
		if strings.Contains(l, a.ID) {
			out = append(out, "rule "+l)
		}
	}
	return out
}

// waitInvariants waits (at most d) until the invariants hold, and fails
// the test with the last violations if they never do.
func (e *testEnv) waitInvariants(t *testing.T, c *api.Client, agentPID int, o invariantOpts, d time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, d+time.Minute)
	since := time.Now()
	deadline := since.Add(d)
	for {
		v := e.violations(ctx, c, agentPID, o, since)
		if len(v) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("invariants do not hold %s after the restart:\n  %s", d, strings.Join(v, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hostSnapshot is the host as the leak check sees it.
func hostSnapshot(t *testing.T) testenv.Snapshot {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	s, err := testenv.TakeSnapshot(ctx)
	testenv.Must(t, err)
	return s
}

// assertHostAsBefore compares the host after the stop and drain with
// before: only what the network keeps by design (its bridge, the shared
// CNI chains, tidied as the leak check does) may differ.
func (e *testEnv) assertHostAsBefore(t *testing.T, before testenv.Snapshot) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	if unlock, err := attach.LockHost(ctx, "", true); err == nil {
		_, _ = hostclean.TidySharedChains(ctx, hostclean.Plan{})
		unlock()
	}
	var left []string
	for _, l := range testenv.Leaked(before, hostSnapshot(t)) {
		if l == "bridge "+e.net.Bridge {
			continue
		}
		left = append(left, l)
	}
	if len(left) > 0 {
		t.Errorf("after the stop and drain the host has %d things it had not before:\n  %s", len(left), strings.Join(left, "\n  "))
	}
}

// stopAndDrain stops the jobs, drains the agent (`berth agent drain`) and
// checks that nothing is left: no live allocation or attachment recorded,
// the host as before.
func (e *testEnv) stopAndDrain(t *testing.T, c *api.Client, p *agentProc, jobs []string, before testenv.Snapshot) {
	t.Helper()
	for _, j := range jobs {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		_, err := c.StopJob(ctx, j)
		cancel()
		if err != nil && !strings.Contains(err.Error(), "no such job") {
			t.Errorf("stop job %s: %v", j, err)
		}
	}
	testenv.Must(t, p.drain())
	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	live, _ := st.ListAllocations(context.Background(), store.AllocFilter{NonTerminal: true})
	recs, _ := st.ListAttachments(context.Background())
	st.Close()
	for _, a := range live {
		t.Errorf("after the stop and drain allocation %s of %s is still %s (owner pid %d)", a.ID, a.JobID, a.Status, a.OwnerPID)
	}
	for _, r := range recs {
		t.Errorf("after the stop and drain attachment %s is still recorded (phase %s)", r.ID, r.Phase)
	}
	e.assertHostAsBefore(t, before)
}

// uuidRE finds an allocation ID in the name of what the host holds for it
// (its namespace, container, supervisor, cgroup, libcni cache entry).
var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// pluginSharedChain reports whether chain is one the firewall and portmap
// plugins share among attachments (hostclean.TidySharedChains removes
// them once nothing uses them); every other CNI-* chain is one
// attachment's.
func pluginSharedChain(chain string) bool {
	return strings.HasPrefix(chain, "CNI-HOSTPORT-") || chain == "CNI-FORWARD" || chain == "CNI-ADMIN"
}

// allocStatuses reads the status of every allocation the agent's store
// records.
func (e *testEnv) allocStatuses(ctx context.Context) (map[string]store.AllocStatus, error) {
	st, err := store.Open(ctx, e.cfg.DataDir, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", e.cfg.DataDir, err)
	}
	defer st.Close()
	all, err := st.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		return nil, fmt.Errorf("list allocations of %s: %w", e.cfg.DataDir, err)
	}
	out := make(map[string]store.AllocStatus, len(all))
	for _, a := range all {
		out[a.ID] = a.Status
	}
	return out, nil
}

// attachmentChain is the name the bridge (prefix "") and portmap ("DN-")
// plugins give an attachment's own chain (FormatChainName and
// MustFormatChainNameWithPrefix of containernetworking/plugins'
// pkg/utils): a chain emptied or made by a plugin that died names its
// attachment by nothing else.
func attachmentChain(network, id, prefix string) string {
	return fmt.Sprintf("CNI-%s%x", prefix, sha512.Sum512([]byte(network+id)))[:28]
}

// vethPeers maps each host veth to the named namespace its peer is in
// (`ip -o link` prints "link-netns NAME"), or to its whole line when the
// peer's namespace has no name.
func vethPeers(ctx context.Context) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show", "type", "veth").Output()
	if err != nil {
		return nil, fmt.Errorf("ip link show type veth: %w", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		m[name] = "?" + line
		for i := 2; i+1 < len(f); i++ {
			if f[i] == "link-netns" {
				m[name] = f[i+1]
			}
		}
	}
	return m, nil
}

// strays lists what the host has that it had not before (the leak
// check's snapshot: namespaces, veths, bridges, leases, CNI chains and
// rules, libcni cache, containers, supervisors, cgroups) and that no live
// allocation of this agent accounts for: each thing is traced to the
// allocation it is of (by the ID in its name, a lease's holder, a rule's
// marker or address, a veth's peer namespace, a chain's rules), and that
// allocation must be running or pending. What the plugins share among
// attachments (the test network's bridge, the shared chains and the jumps
// to them) is not an allocation's. The store is read before and after the
// host, so that an allocation being started (recorded before its
// namespace) or torn down (recorded terminal after its DEL) meanwhile is
// live in one of the reads.
func (e *testEnv) strays(ctx context.Context, before testenv.Snapshot) []string {
	first, err := e.allocStatuses(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	now, err := testenv.TakeSnapshot(ctx)
	if err != nil {
		return []string{fmt.Sprintf("host snapshot: %v", err)}
	}
	veths, err := vethPeers(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	leases, _ := evidence.ReadAllLeases(evidence.HostLocalDir)
	second, err := e.allocStatuses(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	byIP := map[string]string{}
	for _, l := range leases {
		byIP[l.IP.String()] = l.ID
	}
	chainOwner := map[string]string{}
	for _, m := range []map[string]store.AllocStatus{first, second} {
		for id := range m {
			for _, prefix := range []string{"", "DN-"} {
				chainOwner[attachmentChain(e.net.Name, id, prefix)] = id
			}
		}
	}
	live := func(id string) bool {
		return (first[id] != "" && !first[id].Terminal()) || (second[id] != "" && !second[id].Terminal())
	}
	status := func(id string) string {
		if s := second[id]; s != "" {
			return string(s)
		}
		return "no longer recorded"
	}
	// A rule: "<tool> <table> -A <chain> ..."; a chain: "<tool> <table> chain <name>".
	type rule struct{ key, chain, jump, owner string }
	var rules []rule
	var out []string
	for _, k := range testenv.Leaked(before, now) {
		kind, rest, _ := strings.Cut(k, " ")
		owner := ""
		switch kind {
		case "netns":
			owner = rest
		case "veth":
			owner = veths[rest]
			if strings.HasPrefix(owner, "?") {
				out = append(out, fmt.Sprintf("%s: its peer is in no named namespace (%s; namespace IDs: %s)", k, owner[1:], netnsIDs(ctx)))
				continue
			}
			if owner == "" {
				continue // gone since the snapshot
			}
		case "bridge":
			if rest == e.net.Bridge {
				continue
			}
		case "lease":
			id, _, err := evidence.ReadLease(rest)
			if err != nil {
				continue // released since the snapshot
			}
			owner = id
		case "iptables-save", "ip6tables-save":
			_, line, _ := strings.Cut(rest, " ")
			if name, ok := strings.CutPrefix(line, "chain "); ok {
				rules = append(rules, rule{key: k, chain: name})
				continue
			}
			r := rule{key: k, jump: evidence.Rule{Line: line}.Jump()}
			if f := strings.Fields(line); len(f) > 1 {
				r.chain = f[1]
			}
			if _, id, ok := evidence.ParseMarker(line); ok {
				r.owner = id
			} else if ip, ok := evidence.FirewallIP(line); ok {
				if r.owner = byIP[ip.String()]; r.owner == "" {
					r.owner = "no lease holds " + ip.String()
				}
			}
			if r.owner != "" {
				for _, c := range []string{r.chain, r.jump} {
					if strings.HasPrefix(c, "CNI-") && !pluginSharedChain(c) {
						chainOwner[c] = r.owner
					}
				}
			}
			rules = append(rules, r)
			continue
		default:
			owner = uuidRE.FindString(rest)
		}
		switch {
		case owner == "":
			out = append(out, k+": of no allocation")
		case !live(owner):
			out = append(out, fmt.Sprintf("%s: of allocation %s, %s", k, owner, status(owner)))
		}
	}
	for _, r := range rules {
		owner := r.owner
		if owner == "" {
			owner = chainOwner[r.chain]
		}
		if owner == "" && r.jump != "" {
			owner = chainOwner[r.jump]
		}
		switch {
		case owner != "" && !live(owner):
			out = append(out, fmt.Sprintf("%s: of allocation %s, %s", r.key, owner, status(owner)))
		case owner != "":
		case pluginSharedChain(r.jump), pluginSharedChain(r.chain) && !strings.HasPrefix(r.jump, "CNI-"):
			// The shared chains, the jumps to them and their own rules.
		default:
			out = append(out, r.key+": of no allocation")
		}
	}
	return out
}

// netnsIDs is `ip netns list-id`, to tell what a veth's peer is in.
func netnsIDs(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list-id").CombinedOutput()
	if err != nil {
		return err.Error()
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

// waitStrays waits (at most d) until the host holds nothing new that no
// live allocation accounts for (strays), and fails the test with what is
// left if it never does.
func (e *testEnv) waitStrays(t *testing.T, before testenv.Snapshot, d time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, d+time.Minute)
	deadline := time.Now().Add(d)
	for {
		s := e.strays(ctx, before)
		if len(s) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host still holds, %s after the kill, %d things no live allocation accounts for:\n  %s", d, len(s), strings.Join(s, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
