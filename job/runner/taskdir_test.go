package runner_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
)

func stdout(t *testing.T, e *env, a *store.Allocation, task string) string {
	t.Helper()
	return readFile(filepath.Join(e.dataDir, "alloc", a.ID, "alloc", "logs", task+".stdout.0"))
}

// The task dir layout and its variables, as Nomad's raw_exec: the task
// runs in <alloc>/<task>, NOMAD_TASK_DIR is its local/, NOMAD_SECRETS_DIR
// its secrets/ (0700, a tmpfs holding what its template rendered there,
// unmounted once the allocation ended), NOMAD_ALLOC_DIR the shared alloc/.
func TestTaskDirLayout(t *testing.T) {
	e := newEnv(t, "10.199.132.0/24")
	a, _ := runOne(t, e, `job "dirs" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      env {
        CONF = "${NOMAD_TASK_DIR}/app.conf"
      }
      template {
        data        = "tok"
        destination = "secrets/token"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "pwd; echo $NOMAD_ALLOC_DIR; echo $NOMAD_TASK_DIR; echo $NOMAD_SECRETS_DIR; echo $CONF; stat -c %a $NOMAD_SECRETS_DIR; stat -f -c %T $NOMAD_SECRETS_DIR; cat $NOMAD_SECRETS_DIR/token; echo; echo shared > $NOMAD_ALLOC_DIR/data/x"]
      }
    }
  }
}`)
	if a.Status != store.AllocComplete {
		t.Fatalf("allocation %s: %s", a.Status, a.StatusDesc)
	}
	dir := filepath.Join(e.dataDir, "alloc", a.ID)
	want := strings.Join([]string{
		filepath.Join(dir, "t"), filepath.Join(dir, "alloc"), filepath.Join(dir, "t", "local"),
		filepath.Join(dir, "t", "secrets"), filepath.Join(dir, "t", "local", "app.conf"), "700", "tmpfs", "tok",
	}, "\n") + "\n"
	if got := stdout(t, e, a, "t"); got != want {
		t.Errorf("task saw:\n%s\nwant:\n%s", got, want)
	}
	if ms, err := allocdir.Mounts(filepath.Join(e.dataDir, "alloc")); err != nil || len(ms[a.ID]) > 0 {
		t.Errorf("after the allocation: mounts %v (%v)", ms[a.ID], err)
	}
	if _, err := os.Stat(filepath.Join(dir, "t", "secrets", "token")); !os.IsNotExist(err) {
		t.Errorf("the secret is on disk after the allocation: %v", err)
	}
	if got := readFile(filepath.Join(dir, "alloc", "data", "x")); got != "shared\n" {
		t.Errorf("alloc/data/x: %q", got)
	}
	// The logs where Nomad keeps them (alloc/logs/<task>.stdout.N, 0644),
	// in a directory the tasks read but cannot plant names in.
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(dir, "alloc", "logs"), os.ModeDir | 0o755},
		{filepath.Join(dir, "alloc", "logs", "t.stdout.0"), 0o644},
		{filepath.Join(dir, "alloc", "logs", "t.stderr.0"), 0o644},
	} {
		fi, err := os.Lstat(f.path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if fi.Mode() != f.mode || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Errorf("%s: %v uid %d, want %v berth's", f.path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, f.mode)
		}
	}
}

func tarGz(t *testing.T, files map[string]string, modes map[string]int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		mode := int64(0o644)
		if m, ok := modes[name]; ok {
			mode = m
		}
		testenv.Must(t, tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(body))
		testenv.Must(t, err)
	}
	testenv.Must(t, tw.Close())
	testenv.Must(t, zw.Close())
	return buf.Bytes()
}

func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(name)
		testenv.Must(t, err)
		_, err = w.Write([]byte(body))
		testenv.Must(t, err)
	}
	testenv.Must(t, zw.Close())
	return buf.Bytes()
}

// Artifacts are fetched before the task starts: a local file of the
// allocation (a prestart task made it) by a relative path, another by a
// file:// URL in file mode, a directory of the allocation copied, a tar.gz
// unpacked (its script run by a relative command from the task dir), a
// zip over http from 127.0.0.1 with a header and its checksum checked.
func TestArtifacts(t *testing.T) {
	e := newEnv(t, "10.199.132.0/24")
	tool := tarGz(t,
		map[string]string{"bin/run.sh": "#!/bin/sh\necho tool ran in $(pwd)\n", "README": "readme\n"},
		map[string]int64{"bin/run.sh": 0o755})
	bundle := zipOf(t, map[string]string{"index.html": "<h1>hi</h1>\n", "css/site.css": "body{}\n"})
	sum := sha256.Sum256(bundle)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/tool.tar.gz":
			_, _ = w.Write(tool)
		case r.URL.Path != "/bundle.zip" || r.Header.Get("X-Token") != "s3cret" || r.URL.Query().Get("v") != "2":
			http.Error(w, "no", http.StatusForbidden)
		default:
			_, _ = w.Write(bundle)
		}
	}))
	defer srv.Close()

	a, _ := runOne(t, e, `job "fetch" {
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
        args    = ["-c", "cd $NOMAD_ALLOC_DIR/data && echo hello > hello.txt && echo conf > conf.txt && mkdir tree && echo leaf > tree/leaf.txt"]
      }
    }
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "../alloc/data/hello.txt"
      }
      artifact {
        source      = "file://${NOMAD_ALLOC_DIR}/data/conf.txt"
        destination = "local/etc/app.conf"
        mode        = "file"
      }
      artifact {
        source      = "../alloc/data/tree"
        destination = "local/tree"
      }
      artifact {
        source      = "`+srv.URL+`/tool.tar.gz"
        destination = "local/tool"
      }
      artifact {
        source      = "`+srv.URL+`/bundle.zip"
        destination = "${NOMAD_ALLOC_DIR}/../t/local/web"
        options {
          checksum = "sha256:`+hex.EncodeToString(sum[:])+`"
          v        = "2"
        }
        headers {
          X-Token = "s3cret"
        }
      }
      config {
        command = "local/tool/bin/run.sh"
      }
    }
    task "check" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cd ../t/local && cat hello.txt etc/app.conf tree/leaf.txt tool/README web/index.html web/css/site.css"]
      }
    }
  }
}`)
	if a.Status != store.AllocComplete {
		t.Fatalf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
	}
	if got, want := stdout(t, e, a, "t"), "tool ran in "+filepath.Join(e.dataDir, "alloc", a.ID, "t")+"\n"; got != want {
		t.Errorf("task output %q, want %q", got, want)
	}
	if got, want := stdout(t, e, a, "check"), "hello\nconf\nleaf\nreadme\n<h1>hi</h1>\nbody{}\n"; got != want {
		t.Errorf("fetched files: %q, want %q", got, want)
	}
	if !strings.Contains(eventTypes(a), "Downloading Artifacts (t): Client is downloading artifacts") {
		t.Errorf("events:\n%s", eventTypes(a))
	}
}

// An artifact that cannot be fetched or checked fails the allocation with
// an event saying why, and its task never starts.
func TestArtifactFailures(t *testing.T) {
	e := newEnv(t, "10.199.132.0/24")
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	testenv.Must(t, tw.WriteHeader(&tar.Header{Name: "../../../../escape.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
	_, _ = tw.Write([]byte("x"))
	testenv.Must(t, tw.Close())
	var link bytes.Buffer
	tw = tar.NewWriter(&link)
	testenv.Must(t, tw.WriteHeader(&tar.Header{Name: "etc", Linkname: "/etc", Typeflag: tar.TypeSymlink}))
	testenv.Must(t, tw.Close())
	files := map[string][]byte{"/f.txt": []byte("data\n"), "/evil.tar": evil.Bytes(), "/link.tar": link.Bytes()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()

	cases := []struct {
		name, artifact, want string
	}{
		{"checksum mismatch", `source = "` + srv.URL + `/f.txt"
        options {
          checksum = "sha256:` + strings.Repeat("0", 64) + `"
        }`, "checksum mismatch: sha256 is "},
		// Interpolated at run time, as Nomad does (NOMAD_ALLOC_INDEX is 0).
		{"checksum interpolated, mismatch", `source = "` + srv.URL + `/f.txt"
        options {
          checksum = "sha256:${NOMAD_ALLOC_INDEX}` + strings.Repeat("0", 63) + `"
        }`, "checksum mismatch: sha256 is "},
		{"checksum interpolated, malformed", `source = "` + srv.URL + `/f.txt"
        options {
          checksum = "${NOMAD_TASK_NAME}"
        }`, `checksum "t" in artifact ` + srv.URL + `/f.txt is not type:value`},
		{"missing file", `source = "local/nope.txt"`, "no such file or directory"},
		{"http 404", `source = "` + srv.URL + `/gone.tar.gz"`, "404 Not Found"},
		{"entry leaving the destination", `source = "` + srv.URL + `/evil.tar"`, `archive entry "../../../../escape.txt" leads out of the destination`},
		{"absolute symlink", `source = "` + srv.URL + `/link.tar"`, "is a symbolic link to the absolute path /etc"},
		{"git getter", `source = "git::https://example.com/repo.git"`, `uses go-getter's "git" getter, which berth does not have`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := runOne(t, e, `job "badfetch" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      artifact {
        `+tc.artifact+`
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
			if ev := eventTypes(a); !strings.Contains(ev, "Failed Artifact Download (t): task \"t\": artifact ") {
				t.Errorf("events:\n%s", ev)
			}
			if ts := taskState(t, a, "t"); !ts.StartedAt.IsZero() || !ts.Failed {
				t.Errorf("task: %+v", ts)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "escape.txt")); err == nil {
		t.Error("an archive entry was written outside the allocation directory")
	}
}

// A dispatched job's payload is written to local/<file>; its meta and
// parent are in the task's environment.
func TestDispatchPayload(t *testing.T) {
	e := newEnv(t, "10.199.132.0/24")
	parent := e.job(t, `job "transcode" {
  type = "batch"
  meta {
    priority = "normal"
  }
  parameterized {
    payload       = "required"
    meta_required = ["input"]
    meta_optional = ["priority"]
  }
  group "work" {
    task "t" {
      driver = "raw_exec"
      dispatch_payload {
        file = "in/job.json"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cat ${NOMAD_TASK_DIR}/in/job.json; echo $NOMAD_META_input $NOMAD_META_priority $NOMAD_JOB_PARENT_ID $NOMAD_JOB_ID"]
      }
    }
  }
}`)
	if _, err := e.r.RunJob(testenv.Context(t, time.Minute), parent, runner.RunOptions{}); err == nil {
		t.Error("a parameterized job ran without being dispatched")
	}
	child, err := parent.Dispatch(map[string]string{"input": "a.mp4"}, []byte(`{"codec":"av1"}`+"\n"), time.Now(), nil)
	testenv.Must(t, err)
	var alloc *store.Allocation
	sum, err := e.r.RunJob(testenv.Context(t, time.Minute), child, runner.RunOptions{OnAlloc: func(a *store.Allocation) { alloc = a }})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if alloc.Status != store.AllocComplete || alloc.JobID != child.ID {
		t.Fatalf("allocation %s of %s: %s", alloc.Status, alloc.JobID, alloc.StatusDesc)
	}
	if got, want := stdout(t, e, alloc, "t"), "{\"codec\":\"av1\"}\na.mp4 normal transcode "+child.ID+"\n"; got != want {
		t.Errorf("task output %q, want %q", got, want)
	}
}

// memory_max is enforced in the exec task's cgroup: memory the soft limit,
// memory_max the hard one (a task using more than memory but less than
// memory_max survives); memory alone is the hard limit and a task beyond
// it is killed. dd's buffer of bs bytes is what it uses.
func TestExecMemoryMax(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			t.Skip("no cgroup v1 memory hierarchy nor pure cgroup2 on this host")
		}
	}
	e := newEnv(t, "10.199.132.0/24")
	a, _ := runOne(t, e, `job "mem" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "limited" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "dd if=/dev/zero of=/dev/null bs=24M count=2 2>/dev/null && echo survived"]
      }
      resources {
        memory     = 16
        memory_max = 48
      }
    }
    task "hog" {
      driver = "exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "exec dd if=/dev/zero of=/dev/null bs=64M count=2"]
      }
      resources {
        memory = 16
      }
    }
  }
}`)
	if out := stdout(t, e, a, "limited"); !strings.Contains(out, "survived") {
		t.Errorf("a task above memory (soft) but below memory_max (hard) did not survive: %q %+v", out, taskState(t, a, "limited"))
	}
	if ts := taskState(t, a, "hog"); !ts.Failed || ts.Signal != 9 {
		t.Errorf("a task past its memory limit was not killed: %+v", ts)
	}
}

// An exec task's NOMAD_TASK_DIR is /local, inside its root, as in Nomad:
// a command written "${NOMAD_TASK_DIR}/run.sh" is found there and runs,
// the script sees the same paths, and a template written to
// "${NOMAD_ALLOC_DIR}/..." lands in the shared dir the task sees there.
func TestExecCommandInTaskDir(t *testing.T) {
	e := newEnv(t, "10.199.207.0/24")
	a, _ := runOne(t, e, `job "execdir" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "exec"
      template {
        destination = "local/run.sh"
        perms       = "755"
        data        = "#!/bin/sh\necho ran $0 in $NOMAD_TASK_DIR\ncat $NOMAD_ALLOC_DIR/greeting\n"
      }
      template {
        destination = "${NOMAD_ALLOC_DIR}/greeting"
        data        = "hello from the shared dir\n"
      }
      config {
        command = "${NOMAD_TASK_DIR}/run.sh"
      }
    }
  }
}`)
	if a.Status != store.AllocComplete {
		t.Fatalf("allocation %s: %s %+v", a.Status, a.StatusDesc, taskState(t, a, "t"))
	}
	if got, want := stdout(t, e, a, "t"), "ran /local/run.sh in /local\nhello from the shared dir\n"; got != want {
		t.Errorf("task printed %q, want %q", got, want)
	}
}

// On one node a system job is one allocation per group, restarted as a
// service; a sysbatch job one allocation per group, run to completion,
// also periodically.
func TestSystemAndSysbatch(t *testing.T) {
	e := newEnv(t, "10.199.132.0/24")
	job := func(typ, extra string) string {
		return `job "sys-` + typ + `" {
  type = "` + typ + `"
  ` + extra + `
  group "a" {
    restart {
      attempts = 2
      delay    = "50ms"
      interval = "1m"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
  group "b" {
    count = 1
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}`
	}
	run := func(t *testing.T, src string, o runner.RunOptions) []*store.Allocation {
		t.Helper()
		var mu sync.Mutex
		var allocs []*store.Allocation
		o.OnAlloc = func(a *store.Allocation) { mu.Lock(); allocs = append(allocs, a); mu.Unlock() }
		sum, err := e.r.RunJob(testenv.Context(t, 2*time.Minute), e.job(t, src), o)
		testenv.Must(t, err)
		checkClean(t, e, sum)
		return allocs
	}
	t.Run("system", func(t *testing.T) {
		allocs := run(t, strings.Replace(job("system", ""), `group "b" {
    count = 1`, `group "b" {
    restart {
      attempts = 0
      mode     = "fail"
    }`, 1), runner.RunOptions{})
		if len(allocs) != 2 {
			t.Fatalf("%d allocations, want one per group", len(allocs))
		}
		for _, a := range allocs {
			// A service-like task that exits is restarted, success or not,
			// until its attempts are spent.
			want := map[string]int{"a": 2, "b": 0}[a.Group]
			if ts := a.Tasks[0]; ts.Restarts != want || !ts.Failed {
				t.Errorf("group %s task: %+v, want %d restarts then failed", a.Group, ts, want)
			}
		}
	})
	t.Run("sysbatch", func(t *testing.T) {
		allocs := run(t, job("sysbatch", ""), runner.RunOptions{})
		if len(allocs) != 2 {
			t.Fatalf("%d allocations, want one per group", len(allocs))
		}
		for _, a := range allocs {
			if a.Status != store.AllocComplete || a.Tasks[0].Restarts != 0 {
				t.Errorf("group %s: %s, task %+v", a.Group, a.Status, a.Tasks[0])
			}
		}
	})
	t.Run("periodic sysbatch", func(t *testing.T) {
		allocs := run(t, job("sysbatch", `periodic {
    crons = ["*/1 * * * * * *"]
  }`), runner.RunOptions{MaxRuns: 2})
		if len(allocs) != 4 {
			t.Fatalf("%d allocations, want 2 launches of 2 groups", len(allocs))
		}
		for _, a := range allocs {
			if a.Status != store.AllocComplete {
				t.Errorf("group %s: %s: %s", a.Group, a.Status, a.StatusDesc)
			}
		}
	})
}

// secrets/ is a tmpfs for every driver's task (Nomad's is, whatever the
// driver): the template rendered there before the start is in it, the
// task sees a tmpfs at NOMAD_SECRETS_DIR (podman: the host's tmpfs bound
// in), and once the allocation ended nothing is mounted beneath its
// directory and the secret is gone.
func TestSecretsTmpfsEveryDriver(t *testing.T) {
	tests := []struct{ driver, config string }{
		{"raw_exec", `command = "/bin/sh"`},
		{"exec", `command = "/bin/sh"`},
		{"podman", `image = "localhost/busybox:latest"
        command = "sh"`},
	}
	e := newEnv(t, "10.199.190.0/24")
	for _, tc := range tests {
		t.Run(tc.driver, func(t *testing.T) {
			if tc.driver == "podman" {
				requireImage(t)
			}
			a, _ := runOne(t, e, `job "secrets-`+strings.ReplaceAll(tc.driver, "_", "-")+`" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "`+tc.driver+`"
      template {
        data        = "tok"
        destination = "secrets/token"
      }
      config {
        `+tc.config+`
        args = ["-c", "awk -v d=\"$NOMAD_SECRETS_DIR\" '$2 == d { print $3 }' /proc/mounts; cat \"$NOMAD_SECRETS_DIR/token\""]
      }
    }
  }
}`)
			if a.Status != store.AllocComplete {
				t.Fatalf("allocation %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
			}
			if got := stdout(t, e, a, "t"); got != "tmpfs\ntok" {
				t.Errorf("the task saw %q, want a tmpfs holding the template", got)
			}
			if ms, err := allocdir.Mounts(filepath.Join(e.dataDir, "alloc")); err != nil || len(ms[a.ID]) > 0 {
				t.Errorf("after the allocation: mounts %v (%v)", ms[a.ID], err)
			}
			if _, err := os.Stat(filepath.Join(e.dataDir, "alloc", a.ID, "t", "secrets", "token")); !os.IsNotExist(err) {
				t.Errorf("the secret is on disk after the allocation: %v", err)
			}
		})
	}
}
