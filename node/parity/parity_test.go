// Package parity_test is the parity suite: the job files in testdata make
// their tasks print the world they see (environment, identity,
// capabilities, directories) as key=value lines; each file runs unchanged
// on the real Nomad 1.6.5 (nomadtest) and on berth (`berth run`), the two
// outputs are normalised (allocation IDs, data dirs, dispatch IDs) and
// compared fact by fact. A difference fails the suite unless
// testdata/expected-differences.txt lists it with its reason; a listed
// difference that no longer occurs fails it too, so that the file says
// what is true today.
package parity_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// berthBinary is the berth binary TestMain builds from this checkout (node
// may not import cli: berth runs as a process, as an operator runs it).
var berthBinary testenv.Berth

func TestMain(m *testing.M) { os.Exit(testenv.MainWithBerth(m, &berthBinary)) }

// Subnets of this suite (bridge mode is never used by its job files; the
// subnets are set so that nothing takes another test's default).
const (
	berthSubnet = "10.199.84.0/24"
	nomadSubnet = "10.199.85.0/24"
)

// agentEnv is set in the environment of both agents (the test's, which
// Nomad and berth inherit): what a task inherits of its agent's
// environment, and which secrets it must not see.
var agentEnv = map[string]string{
	"PARITY_PLAIN":          "plain value",
	"VAULT_TOKEN":           "parity-vault-token",
	"CONSUL_HTTP_TOKEN":     "parity-consul-token",
	"AWS_ACCESS_KEY_ID":     "parity-aws-key-id",
	"AWS_SECRET_ACCESS_KEY": "parity-aws-secret",
	"NOMAD_TOKEN":           "parity-nomad-token",
	"BERTH_TOKEN":           "parity-berth-token",
}

// A jobCase is one job file run on both; a parameterized one is
// dispatched with meta and payload.
type jobCase struct {
	name, file, job string
	meta            []string // K=V, for a dispatch
	payload         string   // testdata file, for a dispatch
	logs            bool     // add what the log readers return (logs_test.go)
	periodic        bool     // its first launch is read, then the job stopped
	// vars are the job's -var NAME=VALUE on a system ("nomad", "berth"):
	// what two runs side by side must not share (host ports, networks).
	vars func(system string) []string
	// normalise, when set, rewrites one system's parsed facts further.
	normalise func(system string, f facts) facts
}

var cases = []jobCase{
	{name: "world", file: "world.nomad.hcl", job: "parity-world"},
	{name: "dispatch", file: "dispatch.nomad.hcl", job: "parity-dispatch", meta: []string{"greeting=hello"}, payload: "payload.txt"},
	{name: "logs", file: "logs.nomad.hcl", job: "parity-logs", logs: true},
	{name: "caps", file: "caps.nomad.hcl", job: "parity-caps"},
	{name: "periodic", file: "periodic.nomad.hcl", job: "parity-periodic", periodic: true},
	{name: "network", file: "network.nomad.hcl", job: "parity-network", vars: networkVars, normalise: normaliseNetwork},
}

// facts are one task's normalised key=value lines.
type facts map[string]string

// output is what one system printed: facts by task name, per case.
type output map[string]map[string]facts

func TestParity(t *testing.T) {
	testenv.RequireRoot(t)
	nomadtest.Binary(t)
	start := time.Now()
	accepted, err := readExpected("testdata/expected-differences.txt")
	testenv.Must(t, err)
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	accepted = ofCases(accepted, names)
	for k, v := range agentEnv {
		t.Setenv(k, v)
	}

	// berth's runs go on while Nomad starts and runs its copies.
	bin := berthBinary.Path(t)
	var berthOut output
	var berthErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		berthOut, berthErr = runBerth(t, bin, cniNetworks(t, "berth"))
	}()

	// Both advertise 127.0.0.1 (network_interface "lo"): the test's
	// traffic stays on loopback, never the host's default-route address.
	a := nomadtest.Start(t, nomadtest.Options{BridgeSubnet: nomadSubnet, Networks: cniNetworks(t, "nomad"), NetworkInterface: "lo"})
	// memory_max is honoured only with oversubscription on (off by
	// default): without it Nomad drops the value and sets no
	// NOMAD_MEMORY_MAX_LIMIT.
	if _, err := a.Nomad("operator", "scheduler", "set-config", "-memory-oversubscription=true"); err != nil {
		t.Fatal(err)
	}
	nomadOut, nomadErr := runNomad(t, a)
	wg.Wait()
	if berthErr != nil || nomadErr != nil {
		t.Fatalf("berth: %v\nnomad: %v", berthErr, nomadErr)
	}

	compare(nomadOut, berthOut, accepted).report(t, "parity", start)
}

// runBerth runs every case with `berth run` (one run at a time, each with
// its own data dir, networks the conflists of its CNI config dir) and
// reads each task's stdout from its allocation dir as berth's log reader
// serves it. It runs in its own goroutine: it returns errors, never
// fails t.
func runBerth(t *testing.T, bin string, networks map[string][]byte) (output, error) {
	bridge, iface := "btpar-"+testenv.RandSuffix(4), "btpar"+testenv.RandSuffix(4)
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(bridge, iface) })
	out := output{}
	for _, c := range cases {
		dataDir, cniDir := filepath.Join(t.TempDir(), "data"), t.TempDir()
		for name, b := range networks {
			if err := os.WriteFile(filepath.Join(cniDir, name+".conflist"), b, 0o644); err != nil {
				return nil, err
			}
		}
		args := []string{"run", "--max-runs", "1", "--data-dir", dataDir, "--lock-dir", t.TempDir(),
			"--cni-config-dir", cniDir, "--cni-path", testenv.ReferencePlugins,
			"--bridge-network", bridge, "--bridge-iface", iface, "--bridge-subnet", berthSubnet, "--client-network-interface", "lo"}
		for _, v := range c.varsOn("berth") {
			args = append(args, "-var", v)
		}
		for _, m := range c.meta {
			args = append(args, "-meta", m)
		}
		if c.payload != "" {
			args = append(args, "--payload", filepath.Join("testdata", c.payload))
		}
		args = append(args, filepath.Join("testdata", c.file))
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("berth %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		allocs, err := os.ReadDir(filepath.Join(dataDir, "alloc"))
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.name, err)
		}
		out[c.name] = map[string]facts{}
		for _, al := range allocs {
			tasks, err := berthTasks(dataDir, al.Name())
			if err != nil {
				return nil, fmt.Errorf("case %s: %w", c.name, err)
			}
			for _, task := range tasks {
				b, err := berthRead(dataDir, al.Name(), task, "stdout", 0)
				if err != nil {
					return nil, fmt.Errorf("case %s: %w", c.name, err)
				}
				out[c.name][task] = c.parse("berth", b, dataDir)
				if c.logs {
					if err := berthLogFacts(out[c.name][task], dataDir, al.Name(), task, b); err != nil {
						return nil, fmt.Errorf("case %s: %w", c.name, err)
					}
				}
			}
		}
	}
	return out, nil
}

var dispatchedRE = regexp.MustCompile(`Dispatched Job ID = (\S+)`)

// nomadAlloc is an allocation as this suite reads it.
type nomadAlloc struct {
	ID, ClientStatus string
	TaskStates       map[string]struct{ State string }
}

// runNomad submits every case at once (Nomad runs them side by side; an
// exec task's chroot takes it most of a minute to build), waits for their
// allocations to end and reads each task's stdout with `nomad alloc logs`.
func runNomad(t *testing.T, a *nomadtest.Agent) (output, error) {
	jobs := map[string]string{}
	for _, c := range cases {
		args := []string{"job", "run", "-detach"}
		for _, v := range c.varsOn("nomad") {
			args = append(args, "-var", v)
		}
		if _, err := a.Nomad(append(args, filepath.Join("testdata", c.file))...); err != nil {
			return nil, err
		}
		id := c.job
		if c.payload != "" {
			args := []string{"job", "dispatch", "-detach"}
			for _, m := range c.meta {
				args = append(args, "-meta", m)
			}
			out, err := a.Nomad(append(args, id, filepath.Join("testdata", c.payload))...)
			if err != nil {
				return nil, err
			}
			m := dispatchedRE.FindStringSubmatch(out)
			if m == nil {
				return nil, fmt.Errorf("nomad job dispatch %s: no job ID in %q", id, out)
			}
			id = m[1]
		}
		if c.periodic {
			child, err := firstLaunch(a, id)
			if err != nil {
				return nil, err
			}
			id = child
		}
		jobs[c.name] = id
	}
	out := output{}
	deadline := time.Now().Add(3 * time.Minute)
	for _, c := range cases {
		id := jobs[c.name]
		var allocs []nomadAlloc
		for {
			allocs = nil
			if err := a.Get("/v1/job/"+urlPath(id)+"/allocations", &allocs); err != nil {
				return nil, err
			}
			done := len(allocs) > 0
			for _, al := range allocs {
				if al.ClientStatus != "complete" && al.ClientStatus != "failed" {
					done = false
				}
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("nomad: job %s not done after 3 minutes: %+v", id, allocs)
			}
			time.Sleep(500 * time.Millisecond)
		}
		out[c.name] = map[string]facts{}
		for _, al := range allocs {
			for task := range al.TaskStates {
				logs, err := a.Nomad("alloc", "logs", al.ID, task)
				if err != nil {
					return nil, err
				}
				out[c.name][task] = c.parse("nomad", []byte(logs), a.DataDir)
				if c.logs {
					if err := nomadLogFacts(out[c.name][task], a, al.ID, task, []byte(logs)); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return out, nil
}

// firstLaunch waits for the periodic job's first child and stops the job
// (no more launches); its children are left to run.
func firstLaunch(a *nomadtest.Agent, job string) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var jobs []struct{ ID, ParentID string }
		if err := a.Get("/v1/jobs?prefix="+urlPath(job+"/periodic-"), &jobs); err != nil {
			return "", err
		}
		sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
		if len(jobs) > 0 {
			if jobs[0].ParentID != job {
				return "", fmt.Errorf("nomad: child %s of %s has parent %q", jobs[0].ID, job, jobs[0].ParentID)
			}
			_, err := a.Nomad("job", "stop", "-detach", job)
			return jobs[0].ID, err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nomad: periodic job %s launched nothing in a minute", job)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c jobCase) varsOn(system string) []string {
	if c.vars == nil {
		return nil
	}
	return c.vars(system)
}

// parse is parse, then the case's own normalisation.
func (c jobCase) parse(system string, b []byte, dataDir string) facts {
	f := parse(b, dataDir)
	if c.normalise != nil {
		f = c.normalise(system, f)
	}
	return f
}

func urlPath(id string) string { return strings.ReplaceAll(id, "/", "%2F") }

var (
	uuidRE     = regexp.MustCompile(`[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}`)
	dispatchRE = regexp.MustCompile(`/dispatch-[0-9]+-[0-9a-f]{8}`)
	periodicRE = regexp.MustCompile(`/periodic-[0-9]+`)
)

// parse reads key=value lines and normalises their values: the data dir,
// the allocation's ID (and its short form), a dispatched job's suffix and
// a periodic launch's time are what differ between two runs of the same
// job anywhere.
func parse(b []byte, dataDir string) facts {
	f := facts{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && k != "" {
			f[k] = v
		}
	}
	allocID := f["env.NOMAD_ALLOC_ID"]
	norm := func(s string) string {
		s = strings.ReplaceAll(s, dataDir, "<data>")
		if allocID != "" {
			s = strings.ReplaceAll(s, allocID, "<alloc-id>")
			s = strings.ReplaceAll(s, allocID[:8], "<alloc-short>")
		}
		s = uuidRE.ReplaceAllString(s, "<uuid>")
		s = periodicRE.ReplaceAllString(s, "/periodic-<time>")
		return dispatchRE.ReplaceAllString(s, "/dispatch-<time>-<rand>")
	}
	out := make(facts, len(f))
	for k, v := range f {
		// Keys too: a listed file may be named after an ID.
		out[norm(k)] = norm(v)
	}
	return out
}

// An expectation is a line of expected-differences.txt: a fact (or, with
// a trailing *, every fact it begins) and why berth differs there.
type expectation struct {
	pattern, reason string
}

func (e expectation) matches(fact string) bool {
	if p, ok := strings.CutSuffix(e.pattern, "*"); ok {
		return strings.HasPrefix(fact, p)
	}
	return fact == e.pattern
}

func readExpected(path string) ([]expectation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []expectation
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, reason, _ := strings.Cut(line, " ")
		if reason = strings.TrimSpace(reason); reason == "" {
			return nil, fmt.Errorf("%s:%d: %q has no reason", path, i+1, pattern)
		}
		out = append(out, expectation{pattern, reason})
	}
	return out, nil
}

// A difference is one fact whose normalised values differ ("<absent>"
// where one side has none).
type difference struct{ fact, nomad, berth string }

type result struct {
	total, equal         int
	accepted, unexpected []difference
	stale                []string
}

const absent = "<absent>"

// report fails t on each unexpected difference and each stale line of
// expected-differences.txt, and logs the agreement (the accepted
// differences too, with -v).
func (r result) report(t *testing.T, what string, start time.Time) {
	t.Helper()
	for _, d := range r.unexpected {
		t.Errorf("unexpected difference (fix berth, or list it with its reason in testdata/expected-differences.txt):\n\t%s\tnomad=%q berth=%q", d.fact, d.nomad, d.berth)
	}
	for _, p := range r.stale {
		t.Errorf("testdata/expected-differences.txt: %q matches no difference any more: remove its line", p)
	}
	t.Logf("%s: %d of %d facts agree (%.1f %%); %d accepted differences, %d unexpected; %s", what,
		r.equal, r.total, 100*float64(r.equal)/float64(max(r.total, 1)), len(r.accepted), len(r.unexpected), time.Since(start).Round(time.Second))
	if testing.Verbose() {
		for _, d := range r.accepted {
			t.Logf("accepted: %s nomad=%q berth=%q", d.fact, d.nomad, d.berth)
		}
	}
}

// compare compares fact by fact: every fact either side has, named
// <case>/<task>/<key>.
func compare(nomad, berth output, accepted []expectation) result {
	all := map[string][2]string{}
	add := func(o output, side int) {
		for c, tasks := range o {
			for task, fs := range tasks {
				for k, v := range fs {
					name := c + "/" + task + "/" + k
					pair, ok := all[name]
					if !ok {
						pair = [2]string{absent, absent}
					}
					pair[side] = v
					all[name] = pair
				}
			}
		}
	}
	add(nomad, 0)
	add(berth, 1)
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var r result
	used := map[string]bool{}
	for _, n := range names {
		pair := all[n]
		r.total++
		if pair[0] == pair[1] {
			r.equal++
			continue
		}
		d := difference{n, pair[0], pair[1]}
		listed := false
		for _, e := range accepted {
			if e.matches(n) {
				listed, used[e.pattern] = true, true
			}
		}
		if listed {
			r.accepted = append(r.accepted, d)
		} else {
			r.unexpected = append(r.unexpected, d)
		}
	}
	for _, e := range accepted {
		if !used[e.pattern] {
			r.stale = append(r.stale, e.pattern)
		}
	}
	return r
}
