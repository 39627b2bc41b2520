package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/artifact"
)

// The artifact crash test uses the subnets 10.199.205.0/24 (its network)
// and 10.199.206.0/24 (its bridge).

// fetchChildren are the PIDs of artifact fetch children of allocation id.
func fetchChildren(id string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, de := range ents {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) >= 3 && artifact.IsStage(args[1]) && args[2] == id {
			out = append(out, pid)
		}
	}
	return out
}

// trickleServer answers every request with a first chunk, then a byte
// every 50ms until the client goes away; it counts requests and says
// when each starts and when its client left.
type trickleServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	started  chan struct{}
	gone     chan struct{}
}

func newTrickleServer(t *testing.T) *trickleServer {
	s := &trickleServer{started: make(chan struct{}, 16), gone: make(chan struct{}, 16)}
	end := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		_, _ = w.Write(make([]byte, 4096))
		w.(http.Flusher).Flush()
		s.started <- struct{}{}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				s.gone <- struct{}{}
				return
			case <-end:
				return
			case <-tick.C:
				if _, err := w.Write([]byte("x")); err != nil {
					s.gone <- struct{}{}
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(func() { close(end); s.Close() })
	return s
}

func (s *trickleServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func waitChan(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(2 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// An agent SIGKILLed while an artifact downloads (crash point
// artifact-fetching) leaves no fetch running and nothing of the download;
// the next agent fetches again for the allocation it re-adopts; a job
// stop then ends that fetch (no child left, nothing written), and the
// agent after that fetches nothing for the stopped allocation.
func TestArtifactSecCrashMidFetch(t *testing.T) {
	e := newTestEnv(t, "10.199.205.0/24")
	e.cfg.Bridge.Subnet = "10.199.206.0/24"
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	srv := newTrickleServer(t)
	cfgPath := e.writeConfig(t)
	t.Setenv(fault.Env, fault.ArtifactFetching)
	p := e.startBinary(t, cfgPath, c)
	os.Unsetenv(fault.Env)
	_, err = c.SubmitJob(context.Background(), []byte(`job "btag-fetch" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "`+srv.URL+`/slow.bin"
      }
      config {
        command = "/bin/true"
      }
    }
  }
}`), "fetch.hcl")
	testenv.Must(t, err)
	waitChan(t, "the agent to die at its crash point", p.done)
	waitChan(t, "the first download to start", srv.started)
	waitChan(t, "the first download's client to leave", srv.gone)
	allocs := allocsOfStore(t, e)
	if len(allocs) != 1 {
		t.Fatalf("%d allocations recorded, want 1", len(allocs))
	}
	id := allocs[0]
	if l := fetchChildren(id); len(l) != 0 {
		t.Errorf("fetch children %v still running after the agent died", l)
	}
	local := filepath.Join(e.cfg.DataDir, "alloc", id, "t", "local")
	if ents, _ := os.ReadDir(local); len(ents) != 0 {
		t.Errorf("%s holds %d entries after the crash", local, len(ents))
	}

	p = e.startBinary(t, cfgPath, c)
	waitChan(t, "the re-adopted allocation's download to start", srv.started)
	children := fetchChildren(id)
	if len(children) == 0 {
		t.Fatal("no fetch child for the re-adopted allocation")
	}
	if _, err := c.StopJob(context.Background(), "btag-fetch"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the allocation to stop", 2*time.Minute, func() (bool, error) {
		a, err := c.Allocation(context.Background(), id)
		return err == nil && a.Status != api.AllocRunning && a.Status != api.AllocPending, err
	})
	waitChan(t, "the second download's client to leave", srv.gone)
	if l := fetchChildren(id); len(l) != 0 {
		t.Errorf("fetch children %v still running after the job stop", l)
	}
	if ents, _ := os.ReadDir(local); len(ents) != 0 {
		t.Errorf("%s holds %d entries after the stop", local, len(ents))
	}
	n := srv.count()
	if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
		t.Fatal(err)
	}
	p = e.startBinary(t, cfgPath, c)
	if got := srv.count(); got != n {
		t.Errorf("the agent after the stop fetched again for the stopped allocation: %d requests, want %d", got, n)
	}
	if l := fetchChildren(id); len(l) != 0 {
		t.Errorf("fetch children %v after the last restart", l)
	}
	p.terminate()
}

// allocsOfStore are the allocations the data dir's store records (no
// agent running).
func allocsOfStore(t *testing.T, e *testEnv) []string {
	t.Helper()
	st, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	defer st.Close()
	l, err := st.ListAllocations(context.Background(), store.AllocFilter{})
	testenv.Must(t, err)
	var ids []string
	for _, a := range l {
		ids = append(ids, a.ID)
	}
	return ids
}
