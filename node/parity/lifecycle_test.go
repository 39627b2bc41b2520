package parity_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// Subnets of the lifecycle cases (their job files use no bridge; set so
// that nothing takes another test's default).
const (
	lcBerthSubnet = "10.199.240.0/24"
	lcNomadSubnet = "10.199.241.0/24"
)

// An eventCase is a job file whose task events (types, descriptions with
// durations normalised, order) are compared; a stopped one is stopped
// from outside once its tasks printed "ready" (nomad job stop; berth:
// its run interrupted, as Ctrl-C).
type eventCase struct {
	name, file, job string
	stop            bool
	// order are pairs "task.Type<task.Type" whose order across tasks the
	// job file fixes (first event of each type).
	order []string
}

var eventCases = []eventCase{
	{name: "restart", file: "lifecycle-restart.nomad.hcl", job: "parity-lc-restart"},
	{name: "delay", file: "lifecycle-delay.nomad.hcl", job: "parity-lc-delay"},
	{name: "kill", file: "lifecycle-kill.nomad.hcl", job: "parity-lc-kill", stop: true},
	{name: "order", file: "lifecycle-order.nomad.hcl", job: "parity-lc-order", order: []string{
		"pre.Terminated<main.Started",
		"main.Started<post.Started",
		"main.Terminated<stop.Started",
		"post.Terminated<stop.Started",
	}},
}

// A taskEvent is one event of one task, as both systems report it.
type taskEvent struct {
	Type, Desc string
	Time       time.Time
}

// TestParityLifecycle compares the task events of restart, kill and
// lifecycle-hook sequences, with the same expected-differences file as
// TestParity (facts <case>/<task>/events and <case>/order/<pair>).
func TestParityLifecycle(t *testing.T) {
	testenv.RequireRoot(t)
	nomadtest.Binary(t)
	start := time.Now()
	accepted, err := readExpected("testdata/expected-differences.txt")
	testenv.Must(t, err)
	var names []string
	for _, c := range eventCases {
		names = append(names, c.name)
	}
	accepted = ofCases(accepted, names)

	bin := berthBinary.Path(t)
	var berthOut output
	var berthErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		berthOut, berthErr = runBerthEvents(t, bin)
	}()
	a := nomadtest.Start(t, nomadtest.Options{BridgeSubnet: lcNomadSubnet})
	nomadOut, nomadErr := runNomadEvents(t, a)
	wg.Wait()
	if berthErr != nil || nomadErr != nil {
		t.Fatalf("berth: %v\nnomad: %v", berthErr, nomadErr)
	}
	if testing.Verbose() {
		for _, o := range []output{nomadOut, berthOut} {
			for c, tasks := range o {
				for task, fs := range tasks {
					for k, v := range fs {
						t.Logf("%s/%s/%s = %s", c, task, k, v)
					}
				}
			}
		}
	}
	compare(nomadOut, berthOut, accepted).report(t, "lifecycle parity", start)
}

// ofCases keeps the expectations about the named cases: the file is
// shared by the suite's tests, and a line of another's is not stale.
func ofCases(es []expectation, names []string) []expectation {
	var out []expectation
	for _, e := range es {
		c, _, _ := strings.Cut(e.pattern, "/")
		if slices.Contains(names, c) {
			out = append(out, e)
		}
	}
	return out
}

// berthRunLine is a line of `berth run --json` this suite reads.
type berthRunLine struct {
	Event      string `json:"event"`
	Allocation struct {
		Events []struct {
			Time    time.Time `json:"time"`
			Type    string    `json:"type"`
			Task    string    `json:"task"`
			Message string    `json:"message"`
		} `json:"events"`
	} `json:"allocation"`
}

// runBerthEvents runs each case with `berth run --json` and reads its
// allocation's events from the "finished" line.
func runBerthEvents(t *testing.T, bin string) (output, error) {
	bridge, iface := "btlc-"+testenv.RandSuffix(4), "btlc"+testenv.RandSuffix(4)
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(bridge, iface) })
	out := output{}
	for _, c := range eventCases {
		dataDir := filepath.Join(t.TempDir(), "data")
		args := []string{"--json", "run", "--max-runs", "1", "--data-dir", dataDir, "--lock-dir", t.TempDir(),
			"--cni-config-dir", t.TempDir(), "--cni-path", testenv.ReferencePlugins,
			"--bridge-network", bridge, "--bridge-iface", iface, "--bridge-subnet", lcBerthSubnet,
			filepath.Join("testdata", c.file)}
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		if c.stop {
			// Stopped as Ctrl-C stops it, once the task set its trap.
			if err := waitReady(func() string {
				logs, _ := filepath.Glob(filepath.Join(dataDir, "alloc", "*", "alloc", "logs", "*.stdout.*"))
				var s string
				for _, l := range logs {
					b, _ := os.ReadFile(l)
					s += string(b)
				}
				return s
			}); err != nil {
				// Stopped as an operator stops it, so that it tears down
				// what it made (a SIGKILL leaves that to gc).
				_ = cmd.Process.Signal(syscall.SIGINT)
				_ = cmd.Wait()
				return nil, fmt.Errorf("berth case %s: %w", c.name, err)
			}
			_ = cmd.Process.Signal(syscall.SIGINT)
		}
		// A failed or stopped allocation makes the run exit 1: what
		// counts is its "finished" line.
		waitErr := cmd.Wait()
		byTask := map[string][]taskEvent{}
		found := false
		sc := bufio.NewScanner(&stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l berthRunLine
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Event != "finished" {
				continue
			}
			found = true
			for _, e := range l.Allocation.Events {
				if e.Task != "" {
					byTask[e.Task] = append(byTask[e.Task], taskEvent{e.Type, e.Message, e.Time})
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("berth case %s (%v): no finished allocation in\n%s%s", c.name, waitErr, stdout.String(), stderr.String())
		}
		out[c.name] = eventFacts(c, byTask)
	}
	return out, nil
}

// waitReady waits until read returns "ready" on a line.
func waitReady(read func() string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for !regexp.MustCompile(`(?m)^ready$`).MatchString(read()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the task printed no \"ready\" in 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// nomadEventAlloc is an allocation as this file reads it.
type nomadEventAlloc struct {
	ID, ClientStatus string
	TaskStates       map[string]struct {
		State  string
		Events []struct {
			Type, DisplayMessage string
			Time                 int64
		}
	}
}

// runNomadEvents submits every case, stops the stopped ones once ready,
// waits for their allocations to end and reads their task events.
func runNomadEvents(t *testing.T, a *nomadtest.Agent) (output, error) {
	for _, c := range eventCases {
		if _, err := a.Nomad("job", "run", "-detach", filepath.Join("testdata", c.file)); err != nil {
			return nil, err
		}
	}
	out := output{}
	deadline := time.Now().Add(3 * time.Minute)
	for _, c := range eventCases {
		var allocs []nomadEventAlloc
		stopped := !c.stop
		for {
			var stubs []struct{ ID string }
			if err := a.Get("/v1/job/"+c.job+"/allocations", &stubs); err != nil {
				return nil, err
			}
			allocs = allocs[:0]
			for _, s := range stubs {
				var al nomadEventAlloc
				if err := a.Get("/v1/allocation/"+s.ID, &al); err != nil {
					return nil, err
				}
				allocs = append(allocs, al)
			}
			if !stopped && len(allocs) == 1 {
				logs, _ := a.Nomad("alloc", "logs", allocs[0].ID)
				if regexp.MustCompile(`(?m)^ready$`).MatchString(logs) {
					if _, err := a.Nomad("job", "stop", "-detach", c.job); err != nil {
						return nil, err
					}
					stopped = true
				}
			}
			done := len(allocs) > 0 && stopped
			for _, al := range allocs {
				if al.ClientStatus != "complete" && al.ClientStatus != "failed" {
					done = false
				}
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("nomad: job %s not done after 3 minutes: %+v", c.job, allocs)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if len(allocs) != 1 {
			return nil, fmt.Errorf("nomad: job %s has %d allocations, want 1", c.job, len(allocs))
		}
		byTask := map[string][]taskEvent{}
		for task, ts := range allocs[0].TaskStates {
			for _, e := range ts.Events {
				byTask[task] = append(byTask[task], taskEvent{e.Type, e.DisplayMessage, time.Unix(0, e.Time)})
			}
		}
		out[c.name] = eventFacts(c, byTask)
	}
	return out, nil
}

// durationRE matches a Go duration as events print them ("1.03s",
// "250ms", "1m0s").
var durationRE = regexp.MustCompile(`\b[0-9][0-9.]*(h|m|s|ms|µs|us|ns)([0-9][0-9.]*(m|s|ms|µs|us|ns))*\b`)

// eventFacts are a case's facts: per task, its events in order
// ("Type: description", durations as <d>); per order pair, whether it
// holds.
func eventFacts(c eventCase, byTask map[string][]taskEvent) map[string]facts {
	out := map[string]facts{}
	for task, evs := range byTask {
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
		var types, full []string
		for _, e := range evs {
			types = append(types, e.Type)
			full = append(full, e.Type+": "+durationRE.ReplaceAllString(e.Desc, "<d>"))
		}
		out[task] = facts{"types": strings.Join(types, ", "), "events": strings.Join(full, " | ")}
	}
	if len(c.order) > 0 {
		first := func(task, typ string) (time.Time, bool) {
			for _, e := range byTask[task] {
				if e.Type == typ {
					return e.Time, true
				}
			}
			return time.Time{}, false
		}
		f := facts{}
		for _, p := range c.order {
			x, y, _ := strings.Cut(p, "<")
			xt, xTyp, _ := strings.Cut(x, ".")
			yt, yTyp, _ := strings.Cut(y, ".")
			tx, ok1 := first(xt, xTyp)
			ty, ok2 := first(yt, yTyp)
			switch {
			case !ok1 || !ok2:
				f[p] = absent
			default:
				f[p] = fmt.Sprint(!ty.Before(tx))
			}
		}
		out["order"] = f
	}
	return out
}
