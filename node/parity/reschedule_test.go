package parity_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/nomad/nomadtest"
	"github.com/berth/berth/store"
)

// Subnets of the reschedule case (never used: its job has no network).
const (
	rescheduleBerthSubnet = "10.199.244.0/24"
	rescheduleNomadSubnet = "10.199.245.0/24"
)

const rescheduleJob = "parity-reschedule"

// step is one allocation of a reschedule sequence as both systems
// record it; IDs are replaced by their place in the sequence ("#1").
type step struct {
	CreateTime         time.Time
	ID, Name, Status   string
	Index              int
	PreviousAllocation string
	NextAllocation     string
	Tracker            []string // "<previous>/<delay>", oldest first
	Output             string   // what the task printed
}

// TestParityReschedule runs testdata/reschedule.nomad.hcl on both
// systems and compares the sequence of allocations it leaves: how many,
// in order of creation, each one's name, index, status, the allocations
// it replaced and was replaced by, its reschedule tracker and what its
// task saw (facts "reschedule/<n>/<key>", differences listed in
// expected-differences.txt as the world's are).
func TestParityReschedule(t *testing.T) {
	testenv.RequireRoot(t)
	nomadtest.Binary(t)
	start := time.Now()
	all, err := readExpected("testdata/expected-differences.txt")
	testenv.Must(t, err)
	var accepted []expectation
	for _, e := range all {
		if strings.HasPrefix(e.pattern, "reschedule/") {
			accepted = append(accepted, e)
		}
	}
	berthSteps, err := rescheduleOnBerth(t)
	testenv.Must(t, err)
	a := nomadtest.Start(t, nomadtest.Options{BridgeSubnet: rescheduleNomadSubnet})
	nomadSteps, err := rescheduleOnNomad(a)
	testenv.Must(t, err)

	if len(nomadSteps) < 2 {
		t.Fatalf("nomad did not reschedule the failed allocation: %+v", nomadSteps)
	}
	compare(stepFacts(nomadSteps), stepFacts(berthSteps), accepted).report(t, "reschedule parity", start)
}

// stepFacts are the sequence's facts, one "task" per allocation.
func stepFacts(steps []step) output {
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].CreateTime.Before(steps[j].CreateTime) })
	place := map[string]string{"": ""}
	for i, s := range steps {
		place[s.ID] = "#" + strconv.Itoa(i+1)
	}
	out := output{"reschedule": {"sequence": facts{"allocations": strconv.Itoa(len(steps))}}}
	for i, s := range steps {
		var tracker []string
		for _, tr := range s.Tracker {
			prev, delay, _ := strings.Cut(tr, "/")
			tracker = append(tracker, place[prev]+"/"+delay)
		}
		out["reschedule"]["#"+strconv.Itoa(i+1)] = facts{
			"name": s.Name, "index": strconv.Itoa(s.Index), "status": s.Status,
			"previous": place[s.PreviousAllocation], "next": place[s.NextAllocation],
			"tracker": strings.Join(tracker, ","), "output": s.Output,
		}
	}
	return out
}

// rescheduleOnBerth runs the job with `berth run` (it exits 1: its
// allocations failed) and reads the allocations from its store.
func rescheduleOnBerth(t *testing.T) ([]step, error) {
	bridge, iface := "btprs-"+testenv.RandSuffix(4), "btprs"+testenv.RandSuffix(4)
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(bridge, iface) })
	dataDir := filepath.Join(t.TempDir(), "data")
	args := []string{"run", "--data-dir", dataDir, "--lock-dir", t.TempDir(),
		"--cni-config-dir", t.TempDir(), "--cni-path", testenv.ReferencePlugins,
		"--bridge-network", bridge, "--bridge-iface", iface, "--bridge-subnet", rescheduleBerthSubnet,
		filepath.Join("testdata", "reschedule.nomad.hcl")}
	cmd := exec.Command(berthBinary.Path(t), args...)
	var outb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Run(); err == nil {
		return nil, fmt.Errorf("berth run of a failing job exited 0:\n%s", outb.String())
	}
	ctx := testenv.Context(t, time.Minute)
	st, err := store.Open(ctx, dataDir, store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	allocs, err := st.ListAllocations(ctx, store.AllocFilter{JobID: rescheduleJob})
	if err != nil {
		return nil, err
	}
	var steps []step
	for _, al := range allocs {
		s := step{CreateTime: al.CreatedAt, ID: al.ID, Name: fmt.Sprintf("%s.%s[%d]", al.JobID, al.Group, al.Index), Status: string(al.Status),
			Index: al.Index, PreviousAllocation: al.PreviousAllocation, NextAllocation: al.NextAllocation}
		for _, e := range al.RescheduleTracker {
			s.Tracker = append(s.Tracker, e.PrevAllocID+"/"+e.Delay.String())
		}
		// In its log dir, or beside it before logs moved there.
		b, err := os.ReadFile(filepath.Join(dataDir, "alloc", al.ID, "alloc", "logs", "reschedule.stdout.0"))
		if err != nil {
			b, _ = os.ReadFile(filepath.Join(dataDir, "alloc", al.ID, "reschedule.stdout"))
		}
		s.Output = strings.TrimSpace(string(b))
		steps = append(steps, s)
	}
	return steps, nil
}

// nomadAllocation is what the sequence reads of a Nomad allocation.
type nomadAllocation struct {
	ID, Name, ClientStatus             string
	PreviousAllocation, NextAllocation string
	CreateTime                         int64
	RescheduleTracker                  *struct {
		Events []struct {
			PrevAllocID string
			Delay       int64
		}
	}
	TaskStates map[string]struct{ State string }
}

// rescheduleOnNomad runs the job and waits for its two allocations to
// fail (the second after the 5 s delay), then reads them.
func rescheduleOnNomad(a *nomadtest.Agent) ([]step, error) {
	if _, err := a.Nomad("job", "run", "-detach", filepath.Join("testdata", "reschedule.nomad.hcl")); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	var stubs []struct{ ID, ClientStatus string }
	for {
		if err := a.Get("/v1/job/"+rescheduleJob+"/allocations", &stubs); err != nil {
			return nil, err
		}
		failed := 0
		for _, s := range stubs {
			if s.ClientStatus == "failed" {
				failed++
			}
		}
		// Two failed, and a moment more for a third that must not come.
		if failed >= 2 {
			time.Sleep(7 * time.Second)
			if err := a.Get("/v1/job/"+rescheduleJob+"/allocations", &stubs); err != nil {
				return nil, err
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nomad: %s has %d failed allocations after 2 minutes: %+v", rescheduleJob, failed, stubs)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var steps []step
	for _, s := range stubs {
		var al nomadAllocation
		if err := a.Get("/v1/allocation/"+s.ID, &al); err != nil {
			return nil, err
		}
		st := step{CreateTime: time.Unix(0, al.CreateTime), ID: al.ID, Name: al.Name, Status: al.ClientStatus,
			PreviousAllocation: al.PreviousAllocation, NextAllocation: al.NextAllocation}
		if i := strings.LastIndex(al.Name, "["); i >= 0 {
			st.Index, _ = strconv.Atoi(strings.TrimSuffix(al.Name[i+1:], "]"))
		}
		if al.RescheduleTracker != nil {
			for _, e := range al.RescheduleTracker.Events {
				st.Tracker = append(st.Tracker, e.PrevAllocID+"/"+time.Duration(e.Delay).String())
			}
		}
		logs, err := a.Nomad("alloc", "logs", al.ID, "reschedule")
		if err != nil {
			return nil, err
		}
		st.Output = strings.TrimSpace(logs)
		steps = append(steps, st)
	}
	return steps, nil
}
