package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/berth/berth/network/hostclean"
	"github.com/berth/berth/store"
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
}

// hostView is what runs on the host for allocations, read once per
// check: supervisors and containers by allocation, libcni cache files,
// iptables rules.
type hostView struct {
	supervisors map[string][]string // alloc ID -> "pid P task T"
	containers  map[string][]string // alloc ID -> "ID state task"
	cache       []string
	rules       []string
}

func readHost(ctx context.Context) (*hostView, error) {
	v := &hostView{supervisors: map[string][]string{}, containers: map[string][]string{}}
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
// agent's business and skipped. The allocations are read before the host,
// so that what a terminal one left is no race with its teardown.
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
		switch a.Status {
		case api.AllocRunning:
			out = append(out, e.runningViolations(ctx, st, v, a, agentPID, o.services[a.JobID], o.inFlight)...)
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

func (e *testEnv) runningViolations(ctx context.Context, st *store.Store, v *hostView, a *api.Allocation, agentPID int, services, inFlight bool) []string {
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
	if inFlight && running == 0 {
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
		case !handleAlive(ctx, ts.Handle):
			bad("task %s is not alive (%+v)", ts.Name, *ts.Handle)
		case len(ins) != 1:
			bad("task %s has %d instances: %s (containers of it: %v)", ts.Name, len(ins), strings.Join(ins, ", "), v.containers[a.ID])
		}
	}
	if a.Network != nil && a.Network.NetnsPath != "" {
		if err := checkAttachment(ctx, st, e.cfg.CNIPath, a.ID); err != nil {
			bad("%v", err)
		}
	}
	if services && len(a.Services) == 0 {
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

func handleAlive(ctx context.Context, h *api.TaskHandle) bool {
	if h.Driver == "podman" {
		out, err := exec.CommandContext(ctx, "podman", "inspect", "--format", "{{.State.Running}}", h.ContainerID).Output()
		return err == nil && strings.TrimSpace(string(out)) == "true"
	}
	return proc.Alive(h.PID, h.PIDStartTime)
}

// leftovers lists what is left of a terminal allocation: its namespace,
// attachment record, supervisors, containers, libcni cache entries and
// iptables rules naming it.
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
