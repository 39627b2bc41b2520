package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/pty"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// berthRun runs the berth binary with extra environment; code is its
// exit status (-1 when killed).
func berthRun(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(testenv.Context(t, 3*time.Minute), berthBinary.Path(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("berth %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// rowKey is a row without its outcome and wording: what it acts on.
func rowKey(r gc.Row) string {
	return strings.Join([]string{r.Kind, r.ID, r.Network, r.Path}, "|")
}

// gcJSON runs `berth gc --json` with args and decodes the report.
func gcJSON(t *testing.T, args ...string) *gc.Report {
	t.Helper()
	out, errs, code := berthRun(t, nil, append([]string{"gc", "--json"}, args...)...)
	var rep gc.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("gc %v (exit %d): not a report: %v\n%s\n%s", args, code, err, out, errs)
	}
	if code != 0 {
		t.Errorf("gc %v: exit %d\n%s", args, code, errs)
	}
	return &rep
}

// checkPlanDone runs gc --dry-run and gc (both --json, then the same as
// text) and checks that the plan's rows are the real run's, each done, and
// that the summaries count those rows. want are kinds the plan must have.
func checkPlanDone(t *testing.T, args []string, want ...string) (plan, done *gc.Report) {
	t.Helper()
	// What the host has: link names (their carrier state settles by
	// itself), rules, host-local dirs, namespaces.
	host := func() string {
		var b strings.Builder
		for _, c := range [][]string{{"ip", "-o", "link", "show"}, {"iptables", "-w", "-S"}, {"iptables", "-w", "-t", "nat", "-S"}, {"ls", "/var/lib/cni/networks", "/run/netns"}} {
			out, _ := exec.Command(c[0], c[1:]...).Output()
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) > 1 && c[0] == "ip" {
					l = f[1]
				}
				if l = strings.TrimSpace(l); l != "" {
					b.WriteString(l + "\n")
				}
			}
		}
		return b.String()
	}
	before := host()
	plan = gcJSON(t, append([]string{"--dry-run"}, args...)...)
	text, _, _ := berthRun(t, nil, append([]string{"gc", "--dry-run"}, args...)...)
	if after := host(); after != before {
		t.Errorf("the dry run changed the host:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	done = gcJSON(t, args...)
	t.Logf("plan:\n%s", text)

	var planKeys, doneKeys []string
	kinds := map[string]bool{}
	for _, r := range plan.Rows {
		if r.State == gc.StateKept {
			continue
		}
		planKeys = append(planKeys, rowKey(r))
		kinds[r.Kind] = true
		if r.State != gc.StatePlanned {
			t.Errorf("plan row in state %q: %+v", r.State, r)
		}
		if !strings.Contains(text, r.Kind) || (r.ID != "" && !strings.Contains(text, r.ID)) {
			t.Errorf("the dry run's text lacks row %s:\n%s", rowKey(r), text)
		}
	}
	for _, r := range done.Rows {
		if r.State == gc.StateKept {
			continue
		}
		doneKeys = append(doneKeys, rowKey(r))
		if r.State != gc.StateReclaimed {
			t.Errorf("row not done: %+v", r)
		}
	}
	if strings.Join(planKeys, "\n") != strings.Join(doneKeys, "\n") {
		t.Errorf("plan rows:\n%s\nare not the done rows:\n%s", strings.Join(planKeys, "\n"), strings.Join(doneKeys, "\n"))
	}
	for _, k := range want {
		if !kinds[k] {
			t.Errorf("plan has no %s row: %v", k, planKeys)
		}
	}
	counts := func(rep *gc.Report) gc.Counts {
		var c gc.Counts
		for _, r := range rep.Rows {
			if r.Kind == gc.KindCNIGC && r.State != gc.StateFailed {
				c.GCSent++
				continue
			}
			switch r.State {
			case gc.StateKept:
				c.Kept++
			case gc.StateReclaimed:
				c.Found++
				c.Reclaimed++
			case gc.StatePlanned:
				c.Found++
			case gc.StateFailed:
				c.Errors++
			}
		}
		return c
	}
	if c := counts(plan); c != plan.Counts || c.Found+c.GCSent != len(planKeys) {
		t.Errorf("plan counts %+v, its rows say %+v", plan.Counts, c)
	}
	if c := counts(done); c != done.Counts || c.Reclaimed+c.GCSent != len(doneKeys) || c.Errors != 0 {
		t.Errorf("run counts %+v, its rows say %+v", done.Counts, c)
	}
	if plan.Counts.Found != done.Counts.Reclaimed || plan.Counts.GCSent != done.Counts.GCSent {
		t.Errorf("plan found %d, the run reclaimed %d", plan.Counts.Found, done.Counts.Reclaimed)
	}
	return plan, done
}

// After `net up` and `net down` the network keeps its bridge, host-local
// dir and the shared chains: the dry run plans their removal, the real
// run does exactly that and counts it, and then there is nothing left.
func TestReportGCPlanIdleNetwork(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "firewall")
	n := testenv.NewNetwork(t, testenv.NetworkSpec{Subnet: "10.199.236.0/24", Firewall: true})
	args := []string{"--data-dir", t.TempDir(), "--lock-dir", t.TempDir(), "--cni-config-dir", n.ConfDir, "--cni-path", testenv.ReferencePlugins}
	id := "treport-idle-" + testenv.RandSuffix(6)
	if out, errs, code := berthRun(t, nil, append([]string{"net", "up", id, "--network", n.Name}, args...)...); code != 0 {
		t.Fatalf("net up: exit %d\n%s%s", code, out, errs)
	}
	if out, errs, code := berthRun(t, nil, append([]string{"net", "down", id}, args...)...); code != 0 {
		t.Fatalf("net down: exit %d\n%s%s", code, out, errs)
	}
	_, done := checkPlanDone(t, args, gc.KindBridge, gc.KindLease, gc.KindIptables)
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.Bridge)); err == nil {
		t.Errorf("bridge %s is still there after: %+v", n.Bridge, done.Rows)
	}
	out, _, _ := berthRun(t, nil, append([]string{"gc"}, args...)...)
	if !strings.HasPrefix(out, "nothing to reclaim") {
		t.Errorf("a second gc found more:\n%s", out)
	}
}

// A berth killed right after its CNI ADD leaves a namespace, a veth, a
// lease, rules and a record: the plan lists their teardown and the tidy
// that follows, and the real run does the same rows.
func TestReportGCPlanCrashLeftovers(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "firewall")
	n := testenv.NewNetwork(t, testenv.NetworkSpec{Subnet: "10.199.237.0/24", Firewall: true})
	args := []string{"--data-dir", t.TempDir(), "--lock-dir", t.TempDir(), "--cni-config-dir", n.ConfDir, "--cni-path", testenv.ReferencePlugins}
	id := "treport-crash-" + testenv.RandSuffix(6)
	t.Cleanup(func() {
		// Only if the test failed before gc removed it.
		_, _, _ = berthRun(t, nil, append([]string{"net", "down", id}, args...)...)
	})
	_, errs, code := berthRun(t, []string{fault.Env + "=" + fault.AfterAdd}, append([]string{"net", "up", id, "--network", n.Name}, args...)...)
	if code != -1 {
		t.Fatalf("net up with %s=%s was not killed: exit %d\n%s", fault.Env, fault.AfterAdd, code, errs)
	}
	if ok, _ := netns.IsPinned(filepath.Join(netns.DefaultDir, id)); !ok {
		t.Fatalf("the crashed berth left no namespace %s", id)
	}
	plan, _ := checkPlanDone(t, args, gc.KindAttachment, gc.KindBridge, gc.KindLease, gc.KindIptables)
	if ok, _ := netns.IsPinned(filepath.Join(netns.DefaultDir, id)); ok {
		t.Errorf("namespace %s is still there; plan was %+v", id, plan.Rows)
	}
}

// With --nomad the rows are Nomad's leftovers: namespaces of terminal
// allocations of a periodic job that stayed after Nomad's CNI DEL. Nomad
// leaks one only now and then (its EBUSY unmount), so the test makes the
// leak (nomadtest's LeakNamespace) for terminal allocations Nomad tore
// down cleanly: the plan is never empty, and plan rows = done rows =
// counts, each leak planned, reclaimed and gone.
func TestReportGCPlanNomad(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	name := "btrep-" + testenv.RandSuffix(5)
	a := nomadtest.Start(t, nomadtest.Options{Networks: map[string][]byte{name: nomadtest.Conflist(name, "btrepb"+testenv.RandSuffix(4), "10.199.40.0/24")},
		BridgeSubnet: "10.199.41.0/24"})
	a.Run(t, nomadtest.PeriodicJob("tick", "cni/"+name))
	pinned := func(id string) bool {
		ok, _ := netns.IsPinned(filepath.Join(netns.DefaultDir, id))
		return ok
	}
	// Leaked: terminal, its namespace still pinned, no cache entry left
	// (Nomad's CNI DEL is done).
	leakedNow := func() []string {
		var out []string
		for _, al := range a.JobAllocs(t, "tick/") {
			es, _ := evidence.ReadCache(t.Context(), "/var/lib/cni", al.ID)
			if pinned(al.ID) && al.Terminal() && len(es) == 0 {
				out = append(out, al.ID)
			}
		}
		return out
	}
	terminal := func() (n int) {
		for _, al := range a.JobAllocs(t, "tick/") {
			if al.Terminal() {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && terminal() < 2 {
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := a.Nomad("job", "stop", "-detach", "tick"); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		busy := 0
		for _, al := range a.JobAllocs(t, "tick") {
			if !al.Terminal() {
				busy++
			}
		}
		if busy == 0 {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // Nomad's teardown of the last ones
	natural := len(leakedNow())
	made := 0
	for _, al := range a.JobAllocs(t, "tick/") {
		es, _ := evidence.ReadCache(t.Context(), "/var/lib/cni", al.ID)
		if made < 2 && al.Terminal() && len(es) == 0 && !pinned(al.ID) {
			a.LeakNamespace(t, al.ID)
			made++
		}
	}
	leaked := leakedNow()
	t.Logf("%d namespaces leaked by Nomad, %d made by the test", natural, made)
	if len(leaked) == 0 {
		t.Fatalf("no leaked namespace to reclaim (Nomad leaked %d, the test made %d): allocations %+v", natural, made, a.JobAllocs(t, "tick/"))
	}
	args := []string{"--nomad", "--nomad-address", a.Addr, "--nomad-data-dir", a.DataDir, "--nomad-grace-period", "24h",
		"--data-dir", t.TempDir(), "--lock-dir", t.TempDir(), "--cni-config-dir", t.TempDir(), "--cni-path", testenv.ReferencePlugins}
	plan, done := checkPlanDone(t, args, gc.KindNetns)
	planned, reclaimed := map[string]bool{}, map[string]bool{}
	for _, r := range plan.Rows {
		if r.Kind == gc.KindNetns && r.State == gc.StatePlanned {
			planned[r.ID] = true
		}
	}
	for _, r := range done.Rows {
		if r.Kind == gc.KindNetns && r.State == gc.StateReclaimed {
			reclaimed[r.ID] = true
		}
	}
	if plan.Counts.Found < len(leaked) || done.Counts.Reclaimed < len(leaked) {
		t.Errorf("plan found %d, the run reclaimed %d; %d namespaces were leaked", plan.Counts.Found, done.Counts.Reclaimed, len(leaked))
	}
	for _, id := range leaked {
		if !planned[id] || !reclaimed[id] {
			t.Errorf("leaked namespace %s: planned %v, reclaimed %v; plan %+v", id, planned[id], reclaimed[id], plan.Rows)
		}
		if pinned(id) {
			t.Errorf("leaked namespace %s is still there", id)
		}
	}
}

// The progress line of a long gc: done of planned and the current item.
func TestReportGCProgressText(t *testing.T) {
	for _, tc := range []struct {
		p    gc.Progress
		want string
	}{
		{gc.Progress{}, "gc: planning..."},
		{gc.Progress{Done: 2, Planned: 5, Current: gc.Item{Kind: gc.KindNetns, ID: "a1", Network: "private"}}, "gc: 2 of 5 · netns a1 (private)"},
		{gc.Progress{Done: 5, Planned: 5}, "gc: 5 of 5"},
	} {
		if got := progressText(tc.p); got != tc.want {
			t.Errorf("progressText(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// On a terminal, `berth run`'s status line stays at the bottom: log
// records (here --log-level debug) and allocation lines print above it,
// never into it, and it names the phase in progress.
func TestReportRunStatusLine(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "firewall")
	n := testenv.NewNetwork(t, testenv.NetworkSpec{Subnet: "10.199.239.0/24", Firewall: true})
	job := filepath.Join(t.TempDir(), "burst.nomad.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`job "btrep-burst" {
  type = "batch"
  group "g" {
    count = 3
    network {
      mode = "cni/`+n.Name+`"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 0.5"]
      }
    }
  }
}`), 0o644))
	master, slave, err := pty.Open()
	testenv.Must(t, err)
	defer master.Close()
	cmd := exec.CommandContext(testenv.Context(t, 2*time.Minute), berthBinary.Path(t), "run", job, "--log-level", "debug",
		"--data-dir", t.TempDir(), "--lock-dir", t.TempDir(), "--cni-config-dir", n.ConfDir, "--cni-path", testenv.ReferencePlugins)
	cmd.Stdout, cmd.Stderr = slave, slave
	testenv.Must(t, cmd.Start())
	slave.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = out.ReadFrom(master); close(copied) }() // EIO once the last writer is gone
	if err := cmd.Wait(); err != nil {
		t.Errorf("berth run: %v", err)
	}
	<-copied
	s := strings.ReplaceAll(out.String(), "\r\n", "\n") // the pty's output processing
	if !strings.Contains(s, "level=DEBUG") {
		t.Fatalf("no log records in the output:\n%q", s)
	}
	for i := 0; ; {
		j := strings.Index(s[i:], "time=")
		if j < 0 {
			break
		}
		at := i + j
		if !(at == 0 || s[at-1] == '\n' || strings.HasSuffix(s[:at], "\r\033[K")) {
			start := max(at-80, 0)
			t.Errorf("a log record is printed into another line: %q", s[start:at+20])
		}
		i = at + 1
	}
	for _, want := range []string{"setting up", "tearing down", "launches 1"} {
		if !strings.Contains(s, want) {
			t.Errorf("the status line never said %q:\n%q", want, s)
		}
	}
	if !strings.Contains(s, "leak check: nothing left") {
		t.Errorf("no summary:\n%s", s)
	}
}

// The status line names the phases in progress, and log records written
// meanwhile land above it.
func TestReportRunStatusPhases(t *testing.T) {
	var b bytes.Buffer
	o := &runOutput{w: &b, live: true, start: time.Now(), started: map[string]bool{}, phases: map[string]string{}}
	opts := o.options(0, 0)
	opts.OnPhase("a1", runner.PhaseNetwork)
	opts.OnPhase("a2", runner.PhaseNetwork)
	if last := b.String()[strings.LastIndex(b.String(), "\r\033[K")+4:]; !strings.HasPrefix(last, "setting up 2 networks · launches 0 · running 0") {
		t.Errorf("status line %q", last)
	}
	fmt.Fprint(o.logTo(&b), "time=x level=INFO msg=hello\n")
	if !strings.Contains(b.String(), "\r\033[Ktime=x level=INFO msg=hello\n\r\033[Ksetting up 2 networks") {
		t.Errorf("log record not above the status line: %q", b.String())
	}
	opts.OnPhase("a1", runner.PhaseStarting)
	opts.OnPhase("a2", runner.PhaseTeardown)
	if last := b.String()[strings.LastIndex(b.String(), "\r\033[K")+4:]; !strings.HasPrefix(last, "starting 1 · tearing down 1 · launches 0") {
		t.Errorf("status line %q", last)
	}
	opts.OnPhase("a1", runner.PhaseDone)
	opts.OnPhase("a2", runner.PhaseDone)
	if last := b.String()[strings.LastIndex(b.String(), "\r\033[K")+4:]; !strings.HasPrefix(last, "launches 0") {
		t.Errorf("status line %q", last)
	}
}
