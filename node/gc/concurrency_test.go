package gc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/flock"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
)

// parallel runs one berth process per args at once and returns their
// results in order.
func (e *env) parallel(t *testing.T, cmds [][]string, points ...string) []result {
	t.Helper()
	out := make([]result, len(cmds))
	var wg sync.WaitGroup
	for i, args := range cmds {
		point := ""
		if i < len(points) {
			point = points[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = e.berth(t, e.dataDir, point, args...)
		}()
	}
	wg.Wait()
	return out
}

func mustAllExit0(t *testing.T, what string, rs []result) {
	t.Helper()
	for i, r := range rs {
		if !r.status.Exited() || r.status.ExitStatus() != 0 {
			t.Errorf("%s #%d: status %v\nstdout: %s\nstderr: %s", what, i, r.status, r.stdout, r.stderr)
		}
	}
}

// startAgent runs `berth agent` on the env's data dir, collecting garbage
// every 100 ms so that its sweeps race the CLI processes. It is stopped
// (SIGTERM, by its PID) at the end of the test.
func (e *env) startAgent(t *testing.T) (socket string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "berth.sock")
	args := append(e.flags(e.dataDir), "agent", "--api-socket", sock, "--gc-interval", "100ms", "--drain-on-shutdown")
	cmd := exec.Command(berthBinary.Path(t), args...)
	stderr, err := cmd.StderrPipe()
	testenv.Must(t, err)
	testenv.Must(t, cmd.Start())
	exited := make(chan struct{})
	ready := make(chan struct{})
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), "berth agent ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("agent log:\n%s", log.String())
			logMu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("agent exited before it was ready:\n%s", log.String())
	case <-time.After(time.Minute):
		t.Fatal("agent not ready within a minute")
	}
	return sock
}

// TestManyProcessesOneDataDir: 8 `net up` at once, then a gc, a dry-run gc
// and a doctor at once, then 8 `net down` at once, on one data dir, alone
// and beside a running agent whose own gc runs every 100 ms: every command
// exits 0, the 8 attachments get 8 distinct addresses, and nothing is left.
func TestManyProcessesOneDataDir(t *testing.T) {
	for i, beside := range []bool{false, true} {
		name := "alone"
		if beside {
			name = "beside-agent"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, full(fmt.Sprintf("10.199.%d.0/24", 100+i)))
			if beside {
				e.startAgent(t)
			}
			var ups, downs [][]string
			var ids []string
			for range 8 {
				id := e.id()
				ids = append(ids, id)
				ups = append(ups, []string{"net", "up", id, "--network", e.net.Name, "--json"})
				downs = append(downs, []string{"net", "down", id})
			}
			rs := e.parallel(t, ups)
			mustAllExit0(t, "net up", rs)
			addrs := map[string]string{}
			for i, r := range rs {
				var st attach.Status
				if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.IPv4) == 0 {
					t.Fatalf("net up %s: %v\n%s", ids[i], err, r.stdout)
				}
				if other, dup := addrs[st.IPv4[0]]; dup {
					t.Errorf("%s and %s got the same address %s", other, ids[i], st.IPv4[0])
				}
				addrs[st.IPv4[0]] = ids[i]
			}

			mustAllExit0(t, "gc, gc --dry-run, doctor", e.parallel(t, [][]string{{"gc"}, {"gc", "--dry-run"}, {"doctor"}}))
			for _, id := range ids {
				if _, err := os.Stat("/run/netns/" + id); err != nil {
					t.Errorf("gc beside live attachments removed %s: %v", id, err)
				}
			}
			mustAllExit0(t, "net down", e.parallel(t, downs))
			mustAllExit0(t, "gc", e.parallel(t, [][]string{{"gc"}}))
			e.assertClean(t, ids...)
		})
	}
}

// TestKilledMidAddBesideOthers: one `net up` is SIGKILLed in the middle of
// its plugin chain while three others run; the next gc reclaims exactly
// that attachment and leaves the three alone.
func TestKilledMidAddBesideOthers(t *testing.T) {
	e := newEnv(t, full("10.199.102.0/24"))
	var ups [][]string
	var ids []string
	for range 4 {
		id := e.id()
		ids = append(ids, id)
		ups = append(ups, []string{"net", "up", id, "--network", e.net.Name})
	}
	rs := e.parallel(t, ups, fault.MidChainPrefix+"firewall")
	if !rs[0].status.Signaled() || rs[0].status.Signal() != syscall.SIGKILL {
		t.Fatalf("net up %s did not die at its crash point: %v\n%s", ids[0], rs[0].status, rs[0].stderr)
	}
	mustAllExit0(t, "the other net ups", rs[1:])

	rep, r := e.gcJSON(t, e.dataDir)
	if r.status.ExitStatus() != 0 || rep.Failed() {
		t.Fatalf("gc: %v %v\n%s", r.status, rep.Errors, r.stderr)
	}
	if !has(rep.Reclaimed, gc.KindAttachment, ids[0]) {
		t.Errorf("gc did not reclaim the killed attachment %s: %+v", ids[0], rep.Reclaimed)
	}
	for _, it := range append(rep.Found, rep.Reclaimed...) {
		for _, id := range ids[1:] {
			if it.ID == id {
				t.Errorf("gc touched the live attachment %s: %+v", id, it)
			}
		}
	}
	st := e.openStore(t)
	for _, id := range ids[1:] {
		rec, err := st.GetAttachment(context.Background(), id)
		if err != nil || rec.Phase != store.PhaseReady {
			t.Errorf("live attachment %s after gc: %+v, %v", id, rec, err)
		}
		if _, err := os.Stat("/run/netns/" + id); err != nil {
			t.Errorf("namespace of live attachment %s gone: %v", id, err)
		}
	}
	st.Close()
	e.assertCleanOf(t, ids[0])
	e.downThenGC(t, ids[1:]...)
	e.assertClean(t, ids...)
}

// TestForeignBridgeKept: a bridge another runtime has an interface on is
// never deleted by berth, even when berth used its network and has no
// attachment left on it; once that interface is gone, gc tidies it.
func TestForeignBridgeKept(t *testing.T) {
	e := newEnv(t, full("10.199.103.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name)
	e.mustBerth(t, "net", "down", id)

	// Another runtime's interface on the bridge.
	foreign := "btfv" + testenv.RandSuffix(6)
	testenv.Run(t, "ip", "link", "add", foreign, "type", "veth", "peer", "name", foreign+"p")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", foreign).Run() })
	testenv.Run(t, "ip", "link", "set", foreign, "master", e.net.Bridge)

	rep, r := e.gcJSON(t, e.dataDir)
	if r.status.ExitStatus() != 0 || rep.Failed() {
		t.Fatalf("gc: %v %v\n%s", r.status, rep.Errors, r.stderr)
	}
	if err := exec.Command("ip", "link", "show", e.net.Bridge).Run(); err != nil {
		t.Fatalf("gc deleted bridge %s that another runtime uses", e.net.Bridge)
	}
	kept := false
	for _, it := range rep.Kept {
		if it.Kind == gc.KindBridge && strings.Contains(it.Reason, "another runtime") {
			kept = true
		}
	}
	if !kept {
		t.Errorf("gc does not say why it kept the bridge: %+v", rep.Kept)
	}

	testenv.Run(t, "ip", "link", "del", foreign)
	e.mustBerth(t, "gc")
	e.assertClean(t, id)
}

// TestRunBesideAgent: `berth run` on the data dir of a running agent runs
// on its own, in the same store: its reconcile at start spares the agent's
// running allocation, its job completes with a start line per allocation
// and a clean leak check, and the agent's allocation still runs after it.
func TestRunBesideAgent(t *testing.T) {
	e := newEnv(t, full("10.199.108.0/24"))
	sock := e.startAgent(t)
	dir := t.TempDir()
	svc := filepath.Join(dir, "svc.nomad.hcl")
	batch := filepath.Join(dir, "batch.nomad.hcl")
	job := func(name, typ, cmd string, count int) string {
		return fmt.Sprintf(`job %q {
  type = %q
  group "g" {
    count = %d
    network { mode = "cni/%s" }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
    }
  }
}
`, name, typ, count, e.net.Name, cmd)
	}
	testenv.Must(t, os.WriteFile(svc, []byte(job("btgc-svc", "service", "sleep 300", 1)), 0o644))
	testenv.Must(t, os.WriteFile(batch, []byte(job("btgc-batch", "batch", "exit 0", 3)), 0o644))
	addr := "unix://" + sock
	e.mustBerth(t, "job", "run", "--address", addr, svc)
	t.Cleanup(func() { e.berth(t, e.dataDir, "", "job", "stop", "--address", addr, "btgc-svc") })

	// The service's allocation, once its namespace exists.
	var svcNetns string
	deadline := time.Now().Add(time.Minute)
	for svcNetns == "" && time.Now().Before(deadline) {
		st := e.openStore(t)
		allocs, err := st.ListAllocations(context.Background(), store.AllocFilter{JobID: "btgc-svc", Status: store.AllocRunning})
		testenv.Must(t, err)
		st.Close()
		if len(allocs) == 1 && allocs[0].Network != nil {
			svcNetns = allocs[0].Network.NetnsPath
		}
		time.Sleep(50 * time.Millisecond)
	}
	if svcNetns == "" {
		t.Fatal("the agent's service allocation did not start")
	}

	r := e.mustBerth(t, "run", batch)
	if n := strings.Count(r.stdout, " started "); n != 3 {
		t.Errorf("berth run printed %d start lines, want 3:\n%s", n, r.stdout)
	}
	if !strings.Contains(r.stdout, "leak check: nothing left") {
		t.Errorf("berth run's leak check:\n%s", r.stdout)
	}
	if _, err := os.Stat(svcNetns); err != nil {
		t.Errorf("berth run beside the agent removed the agent's namespace %s: %v", svcNetns, err)
	}
	st := e.openStore(t)
	allocs, err := st.ListAllocations(context.Background(), store.AllocFilter{JobID: "btgc-svc"})
	testenv.Must(t, err)
	st.Close()
	if len(allocs) != 1 || allocs[0].Status != store.AllocRunning {
		t.Errorf("the agent's allocation after berth run: %+v", allocs)
	}
	e.mustBerth(t, "job", "stop", "--address", addr, "btgc-svc")
}

// TestDamagedRecordBesideAgent: one damaged allocation record (a byte
// changed) does not break the agent's listings or its gauges; `berth store
// check` names it and `berth store rm` removes it, beside the running agent.
func TestDamagedRecordBesideAgent(t *testing.T) {
	e := newEnv(t, full("10.199.109.0/24"))
	sock := e.startAgent(t)
	st := e.openStore(t)
	ctx := context.Background()
	for _, id := range []string{"btgc-good-alloc", "btgc-bad-alloc"} {
		testenv.Must(t, st.PutAllocation(ctx, &store.Allocation{ID: id, JobID: "btgc-job", Status: store.AllocComplete}))
	}
	st.Close()
	damageRecord(t, e.dataDir, "allocations", "btgc-bad-alloc")

	c, err := api.NewClient("unix://"+sock, "")
	testenv.Must(t, err)
	defer c.Close()
	allocs, err := c.Allocations(ctx, "")
	if err != nil {
		t.Fatalf("listing allocations beside a damaged record: %v", err)
	}
	statuses := map[string]string{}
	for _, a := range allocs {
		statuses[a.ID] = a.Status
	}
	if statuses["btgc-good-alloc"] != "complete" || statuses["btgc-bad-alloc"] != string(store.AllocUnreadable) {
		t.Errorf("allocations listed: %v", statuses)
	}
	metrics, err := c.Metrics(ctx)
	testenv.Must(t, err)
	if !strings.Contains(metrics, `status="unreadable"`) {
		t.Errorf("/metrics has no allocation gauge for unreadable records")
	}

	r := e.berth(t, e.dataDir, "", "store", "check")
	if r.status.ExitStatus() != 1 || !strings.Contains(r.stdout, "btgc-bad-alloc") {
		t.Errorf("store check: %v\n%s%s", r.status, r.stdout, r.stderr)
	}
	e.mustBerth(t, "store", "rm", "allocation", "btgc-bad-alloc")
	e.mustBerth(t, "store", "check")
}

// damageRecord flips a byte of one record in place, under the store's
// transaction lock, as a damaged disk block would.
func damageRecord(t *testing.T, dataDir, bucket, key string) {
	t.Helper()
	l, err := flock.Acquire(context.Background(), filepath.Join(dataDir, store.TxLockFile), flock.Options{Exclusive: true})
	testenv.Must(t, err)
	defer l.Unlock()
	db, err := bolt.Open(filepath.Join(dataDir, store.DBFile), 0o600, nil)
	testenv.Must(t, err)
	defer db.Close()
	testenv.Must(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		v := append([]byte(nil), b.Get([]byte(key))...)
		v[0] = '!'
		return b.Put([]byte(key), v)
	}))
}

// TestDamagedAttachmentKept: gc keeps an attachment whose record does not
// decode (never swept as nobody's); `berth net down` tears it down from
// libcni's cache and drops the record.
func TestDamagedAttachmentKept(t *testing.T) {
	e := newEnv(t, full("10.199.107.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name)
	damageRecord(t, e.dataDir, "attachments", id)
	rep, r := e.gcJSON(t, e.dataDir)
	if r.status.ExitStatus() != 0 || len(rep.Found) != 0 {
		t.Fatalf("gc with a damaged attachment record: %v found %+v errors %v", r.status, rep.Found, rep.Errors)
	}
	if !has(rep.Kept, gc.KindAttachment, id) {
		t.Errorf("gc does not report the damaged record as kept: %+v", rep.Kept)
	}
	if _, err := os.Stat("/run/netns/" + id); err != nil {
		t.Fatalf("namespace of a damaged record removed: %v", err)
	}
	if r := e.berth(t, e.dataDir, "", "net", "up", id, "--network", e.net.Name); r.status.ExitStatus() == 0 || !strings.Contains(r.stderr, "net down") {
		t.Errorf("net up over a damaged record: %v\n%s", r.status, r.stderr)
	}
	e.downThenGC(t, id)
	e.assertClean(t, id)
}

// TestSameIDTwoProcesses: two `net up` of one ID at once, in two
// processes: one creates it, the other waits for it and CHECKs it; both
// exit 0 with the same address.
func TestSameIDTwoProcesses(t *testing.T) {
	e := newEnv(t, full("10.199.112.0/24"))
	id := e.id()
	up := []string{"net", "up", id, "--network", e.net.Name, "--json"}
	rs := e.parallel(t, [][]string{up, up})
	mustAllExit0(t, "net up of one ID", rs)
	var created, checked int
	var addrs []string
	for _, r := range rs {
		var st attach.Status
		testenv.Must(t, json.Unmarshal([]byte(r.stdout), &st))
		if st.Created {
			created++
		} else if st.CheckSkipped == "" {
			checked++
		}
		addrs = append(addrs, strings.Join(st.IPv4, ","))
	}
	if created != 1 || checked != 1 || addrs[0] != addrs[1] {
		t.Errorf("created %d, checked %d, addresses %v; want one created, one checked, one address", created, checked, addrs)
	}
	e.downThenGC(t, id)
	e.assertClean(t, id)
}
