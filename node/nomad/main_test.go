package nomad_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// berthBinary is the berth binary TestMain builds (the janitor job runs
// it).
var berthBinary testenv.Berth

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithBerth(m, &berthBinary))
}

// berth runs the berth binary TestMain built, as an operator would; code
// is its exit status. (Not the CLI in process: node may not import cli.)
func berth(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	testenv.RequireRoot(t)
	var out, errb bytes.Buffer
	cmd := exec.Command(berthBinary.Path(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &exit):
		return out.String(), errb.String(), exit.ExitCode()
	default:
		t.Fatalf("berth %s: %v", strings.Join(args, " "), err)
		return "", "", 0
	}
}

// dirs are a test's private berth directories, as gc flags.
func dirs(t *testing.T) []string {
	return []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--lock-dir", t.TempDir(), "--cni-config-dir", t.TempDir(),
		"--cni-path", testenv.ReferencePlugins}
}

// gcNomad runs `berth gc --nomad --json` against agent a and decodes the report.
func gcNomad(t *testing.T, a *nomadtest.Agent, extra ...string) (*gc.Report, string, int) {
	t.Helper()
	args := append([]string{"gc", "--nomad", "--json", "--nomad-address", a.Addr, "--nomad-data-dir", a.DataDir}, dirs(t)...)
	out, errs, code := berth(t, append(args, extra...)...)
	var rep gc.Report
	if out != "" {
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("gc output is not a report: %v\n%s\nstderr:\n%s", err, out, errs)
		}
	}
	return &rep, errs, code
}

// network is a cni/<name> network of one test subnet for a test agent.
func network(subnet string) (name string, conflists map[string][]byte) {
	name = "btnm-" + testenv.RandSuffix(6)
	return name, map[string][]byte{name: nomadtest.Conflist(name, "btnmb"+testenv.RandSuffix(5), subnet)}
}

func pinned(id string) bool {
	ok, _ := netns.IsPinned(filepath.Join(netns.DefaultDir, id))
	return ok
}

func cached(t *testing.T, id string) bool {
	es, err := evidence.ReadCache(t.Context(), "/var/lib/cni", id)
	testenv.Must(t, err)
	return len(es) > 0
}

// waitRunning waits until job has a running allocation and returns it.
func waitRunning(t *testing.T, a *nomadtest.Agent, job string) nomadtest.Alloc {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, al := range a.JobAllocs(t, job) {
			if al.JobID == job && al.ClientStatus == "running" && pinned(al.ID) {
				return al
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("job %s has no running allocation after 60 s:\n%s", job, tail(a.Log(), 30))
	return nomadtest.Alloc{}
}

// leaks waits until at least n allocations of job prefix are terminal with
// their namespace left behind and no cache entry (Nomad's DEL done), and
// returns them.
func leaks(t *testing.T, a *nomadtest.Agent, prefix string, n int, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	var got []string
	for time.Now().Before(deadline) {
		got = got[:0]
		for _, al := range a.JobAllocs(t, prefix) {
			if al.JobID != prefix && al.Terminal() && pinned(al.ID) && !cached(t, al.ID) {
				got = append(got, al.ID)
			}
		}
		if len(got) >= n {
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("only %d leaked namespaces of %s after %s (want %d):\n%s", len(got), prefix, within, n, tail(a.Log(), 40))
	return nil
}

// settle stops a periodic job's launches and waits until all its
// allocations are terminal, then returns those that leaked.
func settle(t *testing.T, a *nomadtest.Agent, job string) []string {
	t.Helper()
	if _, err := a.Nomad("job", "stop", "-detach", job); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		busy := 0
		for _, al := range a.JobAllocs(t, job) {
			if !al.Terminal() {
				busy++
			}
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d allocations of %s not terminal after 60 s", busy, job)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Nomad's teardown of the last ones.
	time.Sleep(2 * time.Second)
	var out []string
	for _, al := range a.JobAllocs(t, job) {
		if al.JobID != job && pinned(al.ID) {
			out = append(out, al.ID)
		}
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func ipOf(t *testing.T, id string) string {
	t.Helper()
	out := testenv.Run(t, "ip", "-n", id, "-4", "-o", "addr", "show", "dev", "eth0")
	f := strings.Fields(out)
	for i, w := range f {
		if w == "inet" && i+1 < len(f) {
			return f[i+1]
		}
	}
	t.Fatalf("no IPv4 address on eth0 in namespace %s: %s", id, out)
	return ""
}

func reclaimedNetns(rep *gc.Report) map[string]bool {
	out := map[string]bool{}
	for _, it := range rep.Reclaimed {
		if it.Kind == gc.KindNetns {
			out[it.ID] = true
		}
	}
	return out
}
