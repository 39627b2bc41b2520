package runner_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/artifact"
)

// The tests of artifact sandboxing use the subnet 10.199.204.0/24.
const artifactSecSubnet = "10.199.204.0/24"

// fetchers are the PIDs of artifact fetch children of allocation id.
func fetchers(id string) []int {
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

// A job's artifact cannot read the host: host paths and file:// URLs
// outside the allocation (which parse refuses when written out, and the
// runner when they come from a variable), paths climbing out of it, and
// links (made by a prestart task) that lead out are refused with the
// source and its position, for raw_exec (root) and exec (nobody) tasks
// alike; the task never starts and nothing of the host lands in the
// allocation.
func TestArtifactSecHostPaths(t *testing.T) {
	e := newEnv(t, artifactSecSubnet)
	cases := []struct {
		name, meta, source, want string
	}{
		{"host file", "/etc/shadow", "${NOMAD_META_src}", `artifact ${NOMAD_META_src} (test.nomad.hcl:27:7): artifact failed: local source outside the allocation directory: /etc/shadow is not in it`},
		{"file URL", "/etc/shadow", "file://${NOMAD_META_src}", `artifact file://${NOMAD_META_src} (test.nomad.hcl:27:7): artifact failed: local source outside the allocation directory: /etc/shadow is not in it`},
		{"host dir", "/root/", "${NOMAD_META_src}", "outside the allocation directory: /root is not in it"},
		{"climbing out", "", "${NOMAD_TASK_DIR}/../../../../../../../../../etc/shadow", "outside the allocation directory: /etc/shadow is not in it"},
		{"alloc dir itself", "", "..", "outside the allocation directory"},
		{"link to a host file", "", "../alloc/data/shadow", "is a symbolic link, which berth does not follow"},
		{"link to a host dir", "", "../alloc/data/etc/shadow", "a symbolic link leads out of the allocation directory"},
	}
	for _, drv := range []string{"raw_exec", "exec"} {
		for _, tc := range cases {
			t.Run(drv+"/"+tc.name, func(t *testing.T) {
				a, _ := runOne(t, e, `job "hostread" {
  type = "batch"
  group "g" {
    # One allocation per case: its failure is what is checked.
    reschedule {
      attempts = 0
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "seed" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "ln -s /etc/shadow $NOMAD_ALLOC_DIR/data/shadow && ln -s /etc $NOMAD_ALLOC_DIR/data/etc"]
      }
    }
    task "t" {
      driver = "`+drv+`"
      meta {
        src = "`+tc.meta+`"
      }
      artifact {
        source      = "`+tc.source+`"
        destination = "local/got"
      }
      config {
        command = "/bin/cat"
        args    = ["local/got/shadow"]
      }
    }
  }
}`)
				if a.Status != store.AllocFailed || !strings.Contains(a.StatusDesc, tc.want) {
					t.Errorf("allocation %s: %q, want failed with %q", a.Status, a.StatusDesc, tc.want)
				}
				if ev := eventTypes(a); !strings.Contains(ev, "Failed Artifact Download (t): task \"t\": artifact "+tc.source) {
					t.Errorf("events:\n%s", ev)
				}
				if ts := taskState(t, a, "t"); !ts.StartedAt.IsZero() {
					t.Errorf("the task started: %+v", ts)
				}
				shadow, _ := os.ReadFile("/etc/shadow")
				_ = filepath.WalkDir(filepath.Join(e.dataDir, "alloc", a.ID, "t"), func(p string, d os.DirEntry, err error) error {
					if err == nil && d.Type().IsRegular() {
						if b, _ := os.ReadFile(p); len(shadow) > 0 && bytes.Contains(b, shadow[:min(len(shadow), 32)]) {
							t.Errorf("%s holds the host's /etc/shadow", p)
						}
					}
					return nil
				})
			})
		}
	}
}

// Inside the allocation, fetches work as the task's user: an exec task
// (nobody) and a raw_exec task of user nobody get a file of the allocation
// and an http download from 127.0.0.1, both owned by nobody; a file the
// task's user may not read (0600 root) is refused.
func TestArtifactSecTaskUser(t *testing.T) {
	e := newEnv(t, artifactSecSubnet)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("downloaded\n"))
	}))
	defer srv.Close()
	job := func(drv, user, secret string) string {
		return `job "asuser" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "seed" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo local > $NOMAD_ALLOC_DIR/data/in.txt && echo secret > $NOMAD_ALLOC_DIR/data/secret.txt && chmod 600 $NOMAD_ALLOC_DIR/data/secret.txt"]
      }
    }
    task "t" {
      driver = "` + drv + `"
      ` + user + `
      artifact {
        source = "../alloc/data/in.txt"
      }
      artifact {
        source = "` + srv.URL + `/dl.txt"
      }
      ` + secret + `
      config {
        command = "/bin/sh"
        args    = ["-c", "cd local && stat -c '%U %n' in.txt dl.txt && cat in.txt dl.txt"]
      }
    }
  }
}`
	}
	nobody, err := user.Lookup("nobody")
	testenv.Must(t, err)
	for _, tc := range []struct{ drv, user string }{{"exec", ""}, {"raw_exec", `user = "nobody"`}} {
		t.Run(tc.drv, func(t *testing.T) {
			a, _ := runOne(t, e, job(tc.drv, tc.user, ""))
			local := filepath.Join(e.dataDir, "alloc", a.ID, "t", "local")
			for name, want := range map[string]string{"in.txt": "local\n", "dl.txt": "downloaded\n"} {
				fi, err := os.Stat(filepath.Join(local, name))
				if err != nil {
					t.Errorf("%s: %v\n%s", name, err, eventTypes(a))
					continue
				}
				if uid := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)); uid != nobody.Uid {
					t.Errorf("%s is owned by uid %s, want nobody (%s)", name, uid, nobody.Uid)
				}
				if got := readFile(filepath.Join(local, name)); got != want {
					t.Errorf("%s holds %q, want %q", name, got, want)
				}
			}
			// A raw_exec task of another user than root cannot enter its
			// allocation directory yet (0750 root): only exec's is run.
			if tc.drv == "exec" {
				if a.Status != store.AllocComplete {
					t.Fatalf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
				}
				if got, want := stdout(t, e, a, "t"), "nobody in.txt\nnobody dl.txt\nlocal\ndownloaded\n"; got != want {
					t.Errorf("task saw %q, want %q", got, want)
				}
			}
			a, _ = runOne(t, e, job(tc.drv, tc.user, `artifact {
        source = "../alloc/data/secret.txt"
      }`))
			if a.Status != store.AllocFailed || !strings.Contains(a.StatusDesc, "permission denied") {
				t.Errorf("a root-only file of the allocation: %s %q, want failed with permission denied", a.Status, a.StatusDesc)
			}
		})
	}
}

// limitedEnv is e with a runner whose artifact limits are l.
func limitedEnv(e *env, l artifact.Limits) *env {
	c := *e
	c.r = runner.New(runner.Options{
		Attach: e.m, Store: e.st, Drivers: e.drivers, AllocDir: filepath.Join(e.dataDir, "alloc"),
		Node: jobspec.LocalNode(), OwnerPID: os.Getpid(), ArtifactLimits: l,
	})
	return &c
}

// The limits: a download past http_max_size, an archive unpacking past
// decompression_size_limit or with more files than
// decompression_file_count_limit fail the task's setup with an event
// naming the limit; the task never starts.
func TestArtifactSecLimits(t *testing.T) {
	base := newEnv(t, artifactSecSubnet)
	e := limitedEnv(base, artifact.Limits{HTTPMaxSize: 1 << 20, DecompressionSizeLimit: 1 << 20, DecompressionFileCountLimit: 5})
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	tw := tar.NewWriter(zw)
	testenv.Must(t, tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: 8 << 20, Typeflag: tar.TypeReg}))
	_, err := tw.Write(make([]byte, 8<<20))
	testenv.Must(t, err)
	testenv.Must(t, tw.Close())
	testenv.Must(t, zw.Close())
	many := map[string]string{}
	for i := range 10 {
		many[fmt.Sprintf("f%d", i)] = "x"
	}
	files := map[string][]byte{"/big.bin": make([]byte, 2<<20), "/bomb.tar.gz": bomb.Bytes(), "/many.tar.gz": tarGz(t, many, nil)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") != "" {
			// No Content-Length: the limit is met while reading.
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write(files[r.URL.Path])
	}))
	defer srv.Close()
	for _, tc := range []struct{ name, source, want string }{
		{"download", srv.URL + "/big.bin", "more than http_max_size (1048576 bytes)"},
		{"download without length", srv.URL + "/big.bin?chunked=1", "more than http_max_size (1048576 bytes)"},
		{"decompression bomb", srv.URL + "/bomb.tar.gz", "more than decompression_size_limit (1048576 bytes)"},
		{"file count", srv.URL + "/many.tar.gz", "more than decompression_file_count_limit (5) files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := runOne(t, e, `job "limits" {
  type = "batch"
  group "g" {
    # One allocation per case: its failure is what is checked.
    reschedule {
      attempts = 0
    }
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "`+tc.source+`"
      }
      config {
        command = "/bin/true"
      }
    }
  }
}`)
			if a.Status != store.AllocFailed || !strings.Contains(a.StatusDesc, tc.want) {
				t.Errorf("allocation %s: %q, want failed with %q", a.Status, a.StatusDesc, tc.want)
			}
			if ev := eventTypes(a); !strings.Contains(ev, "Failed Artifact Download (t): task \"t\": artifact ") || !strings.Contains(ev, tc.want) {
				t.Errorf("events:\n%s", ev)
			}
			if ts := taskState(t, a, "t"); !ts.StartedAt.IsZero() {
				t.Errorf("the task started: %+v", ts)
			}
		})
	}
}

// slowServer sends a first chunk, then holds the response open until the
// client goes away (or the test ends), and says when a client went away.
type slowServer struct {
	*httptest.Server
	started chan struct{}
	gone    chan struct{}
}

func newSlowServer(t *testing.T) *slowServer {
	s := &slowServer{started: make(chan struct{}, 16), gone: make(chan struct{}, 16)}
	end := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// A slow download stops when the allocation is stopped: the fetch child
// is gone when the stop returns, the server sees the client leave, the
// task is not failed and nothing is in its destination.
func TestArtifactSecStopDuringFetch(t *testing.T) {
	e := newEnv(t, artifactSecSubnet)
	srv := newSlowServer(t)
	j := e.job(t, `job "slowfetch" {
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
}`)
	ids := make(chan string, 1)
	var alloc *store.Allocation
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.r.RunJob(testenv.Context(t, 3*time.Minute), j, runner.RunOptions{
			OnStart: func(a *store.Allocation) { ids <- a.ID },
			OnAlloc: func(a *store.Allocation) { alloc = a },
		})
	}()
	id := <-ids
	select {
	case <-srv.started:
	case <-done:
		t.Fatalf("the allocation ended before its download started: %s\n%s", alloc.StatusDesc, eventTypes(alloc))
	}
	pids := fetchers(id)
	if len(pids) == 0 {
		t.Fatal("no fetch child while the download runs")
	}
	stopped, err := e.r.StopAlloc(id)
	testenv.Must(t, err)
	<-stopped
	<-done
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("fetch child %d still there after the stop", pid)
		}
	}
	<-srv.gone
	if alloc == nil || taskState(t, alloc, "t").Failed {
		t.Errorf("allocation after the stop: %+v", alloc)
	}
	ents, _ := os.ReadDir(filepath.Join(e.dataDir, "alloc", id, "t", "local"))
	if len(ents) != 0 {
		t.Errorf("the destination holds %d entries after the stop", len(ents))
	}
}

// An http source that stalls (no headers, or a first chunk and then
// nothing) is cut off by the fetch's time limit (http_read_timeout): the
// task's setup fails naming the limit, the task never starts, and the
// server sees the client leave. Loopback only.
func TestArtifactSecStalledSourceCutOff(t *testing.T) {
	base := newEnv(t, "10.199.42.0/24")
	e := limitedEnv(base, artifact.Limits{HTTPReadTimeout: 2 * time.Second})
	gone := make(chan string, 4)
	end := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body.bin" {
			w.Header().Set("Content-Length", "1048576")
			_, _ = w.Write(make([]byte, 4096))
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			gone <- r.URL.Path
		case <-end:
		}
	}))
	t.Cleanup(func() { close(end); srv.Close() })
	for _, path := range []string{"/headers.bin", "/body.bin"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			a, _ := runOne(t, e, `job "stalled" {
  type = "batch"
  group "g" {
    # One fetch per case: the server tells which client left.
    reschedule {
      attempts = 0
    }
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "`+srv.URL+path+`"
      }
      config {
        command = "/bin/true"
      }
    }
  }
}`)
			want := "fetch stopped after http_read_timeout (2s)"
			if a.Status != store.AllocFailed || !strings.Contains(a.StatusDesc, want) {
				t.Errorf("allocation %s: %q, want failed with %q", a.Status, a.StatusDesc, want)
			}
			if ts := taskState(t, a, "t"); !ts.StartedAt.IsZero() || ts.NotStarted == "" {
				t.Errorf("the task started, or does not say it never did: %+v", ts)
			}
			select {
			case got := <-gone:
				if got != path {
					t.Errorf("the server saw the client of %s leave, want %s", got, path)
				}
			case <-testenv.Context(t, time.Minute).Done():
				t.Errorf("the server never saw the client of %s leave", path)
			}
		})
	}
}
