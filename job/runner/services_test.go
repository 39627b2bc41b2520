package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/job/service"
	"github.com/berth/berth/store"
)

// newSvcEnv is newEnv with a service catalog and a checker.
func newSvcEnv(t *testing.T, subnet string) (*env, *service.Registry) {
	t.Helper()
	e := newEnv(t, subnet)
	reg := service.NewRegistry(e.st, nil)
	t.Cleanup(reg.Close)
	chk := service.NewChecker(0, nil)
	t.Cleanup(chk.Close)
	e.r = runner.New(runner.Options{
		Attach: e.m, Store: e.st, Drivers: e.drivers, AllocDir: filepath.Join(e.dataDir, "alloc"),
		Node: jobspec.LocalNode(), OwnerPID: os.Getpid(), Services: reg, Checks: chk,
	})
	return e, reg
}

func runAll(t *testing.T, e *env, j *jobspec.Job, o runner.RunOptions) map[string]*store.Allocation {
	t.Helper()
	var mu sync.Mutex
	got := map[string]*store.Allocation{}
	o.OnAlloc = func(a *store.Allocation) {
		mu.Lock()
		defer mu.Unlock()
		got[a.Group] = a
	}
	sum, err := e.r.RunJob(testenv.Context(t, 3*time.Minute), j, o)
	testenv.Must(t, err)
	checkClean(t, e, sum)
	return got
}

// A template that cannot render keeps its task from starting; the error
// is in the allocation's events.
func TestSvcTemplateFailureKeepsTaskFromStarting(t *testing.T) {
	e, _ := newSvcEnv(t, "10.199.153.0/24")
	a, _ := runOne(t, e, `job "tplfail" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      template {
        data        = "{{ file \"local/missing.txt\" }}"
        destination = "local/out"
      }
      config {
        command = "/bin/echo"
        args    = ["ran"]
      }
    }
  }
}`)
	ts := taskState(t, a, "t")
	if a.Status != store.AllocFailed || !ts.StartedAt.IsZero() || stdout(t, e, a, "t") != "" {
		t.Errorf("status %s, task %+v, stdout %q: the task started", a.Status, ts, stdout(t, e, a, "t"))
	}
	if ev := eventTypes(a); !strings.Contains(ev, "Template Failure (t): task \"t\": template local/out: render:") || !strings.Contains(ev, "missing.txt") {
		t.Errorf("events:\n%s", ev)
	}
}

// Templates render before the task starts: inline data and a source next
// to the job file, delimiters, perms, and env = true for the task's
// environment (over its env block, as Nomad).
func TestSvcTemplateRendering(t *testing.T) {
	e, _ := newSvcEnv(t, "10.199.153.0/24")
	j := e.job(t, `job "tpl" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      env {
        GREETING = "from the env block"
      }
      template {
        data        = "GREETING=hello-{{ env \"NOMAD_TASK_NAME\" }}\nexport QUOTED=\"a b\"\n"
        destination = "secrets/app.env"
        env         = true
      }
      template {
        source      = "app.tpl"
        destination = "local/app.conf"
        perms       = "0640"
      }
      template {
        data            = "[[ env \"NOMAD_GROUP_NAME\" ]] {{ kept }}"
        destination     = "local/delim.txt"
        left_delimiter  = "[["
        right_delimiter = "]]"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$GREETING|$QUOTED\"; cat local/app.conf; cat local/delim.txt; echo; stat -c %a local/app.conf"]
      }
    }
  }
}`)
	j.Dir = t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(j.Dir, "app.tpl"), []byte(`index={{ env "NOMAD_ALLOC_INDEX" }} {{ "x" | toUpper }}`+"\n"), 0o644))
	a := runAll(t, e, j, runner.RunOptions{})["g"]
	if a.Status != store.AllocComplete {
		t.Fatalf("status %s: %s\n%s", a.Status, a.StatusDesc, eventTypes(a))
	}
	want := "hello-t|a b\nindex=0 X\ng {{ kept }}\n640\n"
	if got := stdout(t, e, a, "t"); got != want {
		t.Errorf("task saw %q, want %q", got, want)
	}
}

// A template that reads services is rendered again when the healthy
// instances change, and its change_mode applies: signal sends the signal
// to the running task, script runs the change script, restart restarts
// the task at once without counting it as a failure.
func TestSvcTemplateChangeModes(t *testing.T) {
	e, _ := newSvcEnv(t, "10.199.153.0/24")
	j := e.job(t, `job "tplchange" {
  type = "batch"
  group "web" {
    network {
      port "http" {}
    }
    service {
      name     = "tplweb"
      port     = "http"
      provider = "nomad"
    }
    # The service appears (and the client's templates re-render) only
    # once the client's tasks have had time to set their traps: a SIGHUP
    # before sh's trap would end the task instead.
    task "later" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sleep"
        args    = ["1"]
      }
    }
    task "w" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3"]
      }
    }
  }
  group "client" {
    task "sig" {
      driver = "raw_exec"
      template {
        data          = "{{ range nomadService \"tplweb\" }}{{ .Address }}:{{ .Port }}{{ end }}"
        destination   = "local/a"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "0s"
      }
      template {
        data        = "{{ range nomadService \"tplweb\" }}{{ .Port }}{{ end }}"
        destination = "local/b"
        change_mode = "script"
        splay       = "0s"
        change_script {
          command = "/bin/sh"
          args    = ["-c", "echo ran >> $NOMAD_TASK_DIR/script.log"]
        }
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo got-hup' HUP; i=0; while [ $i -lt 16 ]; do sleep 0.5; i=$((i+1)); done"]
      }
    }
    task "rs" {
      driver = "raw_exec"
      template {
        data        = "{{ range nomadService \"tplweb\" }}{{ .Port }}{{ end }}"
        destination = "local/c"
        change_mode = "restart"
        splay       = "0s"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo start; sleep 8"]
      }
    }
  }
}`)
	got := runAll(t, e, j, runner.RunOptions{})
	c := got["client"]
	if c == nil || c.Status != store.AllocComplete {
		t.Fatalf("client: %+v", c)
	}
	ev := eventTypes(c)
	if out := stdout(t, e, c, "sig"); !strings.Contains(out, "got-hup") {
		t.Errorf("sig did not get SIGHUP: %q\n%s", out, ev)
	}
	log := readFile(filepath.Join(e.dataDir, "alloc", c.ID, "sig", "local", "script.log"))
	if !strings.Contains(log, "ran") || !strings.Contains(ev, "Template Script (sig)") {
		t.Errorf("change script did not run: %q\n%s", log, ev)
	}
	rs := taskState(t, c, "rs")
	if rs.Restarts < 1 || rs.Failed || strings.Count(stdout(t, e, c, "rs"), "start") != rs.Restarts+1 {
		t.Errorf("rs: %+v, stdout %q\n%s", rs, stdout(t, e, c, "rs"), ev)
	}
	// Nomad's events: the template's Restart Signaled, then Restarting
	// at once (not after the policy's delay).
	if !strings.Contains(ev, "Restart Signaled (rs): Template with change_mode restart re-rendered: local/c") || !strings.Contains(ev, "Restarting (rs): Task restarting in 0s") {
		t.Errorf("rs restart events (a template restart is not the restart policy's):\n%s", ev)
	}
}

// Services are named and tagged with Nomad's interpolation; they are
// deregistered before the shutdown_delay (the group's before the
// group's, a task's before the task's) and gone from the store after.
func TestSvcDeregisteredBeforeShutdownDelay(t *testing.T) {
	e, reg := newSvcEnv(t, "10.199.153.0/24")
	j := e.job(t, `job "svcdelay" {
  group "g" {
    shutdown_delay = "1s"
    network {
      port "http" {}
    }
    service {
      name     = "${JOB}-${TASKGROUP}-grp"
      port     = "http"
      provider = "nomad"
      tags     = ["i${NOMAD_ALLOC_INDEX}"]
    }
    task "t" {
      driver         = "raw_exec"
      shutdown_delay = "1s"
      service {
        port     = "http"
        provider = "nomad"
      }
      config {
        command = "/bin/sleep"
        args    = ["60"]
      }
    }
  }
}`)
	ctx, cancel := context.WithCancel(testenv.Context(t, 3*time.Minute))
	defer cancel()
	var seen []*store.Service
	var a *store.Allocation
	sum, err := e.r.RunJob(ctx, j, runner.RunOptions{
		OnStart: func(*store.Allocation) {
			seen = reg.Own(store.ServiceFilter{})
			cancel()
		},
		OnAlloc: func(x *store.Allocation) { a = x },
	})
	testenv.Must(t, err)
	checkClean(t, e, sum)
	if len(seen) != 2 || seen[0].ServiceName != "svcdelay-g-grp" || seen[1].ServiceName != "svcdelay-g-t" || seen[0].Tags[0] != "i0" ||
		seen[0].Address != "127.0.0.1" || seen[0].Port == 0 || seen[0].Health != store.CheckPassing || seen[1].Task != "t" {
		t.Fatalf("registered when the start was told: %+v", seen)
	}
	ev := eventTypes(a)
	order := []string{
		"Services Registered: svcdelay-g-t at 127.0.0.1:",
		"Services Registered: svcdelay-g-grp at 127.0.0.1:",
		"Services Deregistered: allocation stopping: svcdelay-g-grp",
		"Waiting Shutdown Delay: group g",
		"Services Deregistered: task t stopping: svcdelay-g-t",
		"Waiting Shutdown Delay (t): Waiting 1s before killing (shutdown_delay)",
	}
	last := -1
	for _, o := range order {
		i := strings.Index(ev, o)
		if i < 0 || i < last {
			t.Fatalf("event %q missing or out of order:\n%s", o, ev)
		}
		last = i
	}
	if l, _ := e.st.ListServices(context.Background(), store.ServiceFilter{}); len(l) != 0 || len(reg.Own(store.ServiceFilter{})) != 0 {
		t.Errorf("registrations left: %+v", l)
	}
	if a.Status != store.AllocComplete {
		t.Errorf("status %s", a.Status)
	}
}

// A template reading a service is not restarted when only the health of
// its instances changes (issue 23 item 9): as Nomad 1.6.5's nomadService,
// it renders every registered instance whatever its checks say, so the
// check turning passing re-renders the same bytes, and change_mode does
// not apply.
func TestSvcTemplateHealthChangeNoRestart(t *testing.T) {
	e, reg := newSvcEnv(t, "10.199.241.0/24")
	provider := e.job(t, `job "tplhp" {
  type = "service"
  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name         = "tplhealth"
      port         = "http"
      provider     = "nomad"
      address_mode = "alloc"
      check {
        type         = "http"
        path         = "/index.html"
        interval     = "1s"
        timeout      = "1s"
        address_mode = "alloc"
      }
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        # Not serving for a while: the check is not passing when the
        # client first renders.
        args    = ["-c", "mkdir -p $NOMAD_TASK_DIR/www && echo hi > $NOMAD_TASK_DIR/www/index.html && sleep 2 && exec /bin/busybox httpd -f -p 8080 -h $NOMAD_TASK_DIR/www"]
      }
    }
  }
}`)
	pctx, stopProvider := context.WithCancel(testenv.Context(t, 3*time.Minute))
	defer stopProvider()
	var web *store.Allocation
	var psum *runner.Summary
	var perr error
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		psum, perr = e.r.RunJob(pctx, provider, runner.RunOptions{OnAlloc: func(a *store.Allocation) { web = a }})
	}()
	deadline := time.Now().Add(time.Minute)
	for len(reg.Own(store.ServiceFilter{Name: "tplhealth"})) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the provider's service was not registered in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if own := reg.Own(store.ServiceFilter{Name: "tplhealth"}); own[0].Health == store.CheckPassing {
		t.Fatalf("the provider's check passes already (its server waits 2s): %+v", own[0])
	}
	client := e.job(t, `job "tplhc" {
  type = "batch"
  group "client" {
    task "rs" {
      driver = "raw_exec"
      template {
        data        = "{{ range nomadService \"tplhealth\" }}{{ .Port }}{{ end }}"
        destination = "local/c"
        change_mode = "restart"
        splay       = "0s"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo start; sleep 5"]
      }
    }
  }
}`)
	var c *store.Allocation
	csum, err := e.r.RunJob(testenv.Context(t, 3*time.Minute), client, runner.RunOptions{OnAlloc: func(a *store.Allocation) { c = a }})
	testenv.Must(t, err)
	stopProvider()
	<-pdone
	testenv.Must(t, perr)
	checkClean(t, e, csum)
	checkClean(t, e, psum)
	if c == nil || c.Status != store.AllocComplete || web == nil {
		t.Fatalf("client %+v, provider %+v", c, web)
	}
	ev := eventTypes(c)
	if rs := taskState(t, c, "rs"); rs.Restarts != 0 || strings.Contains(ev, "Restart Signaled") {
		t.Errorf("rs restarted: %+v\n%s", rs, ev)
	}
	if f := readFile(filepath.Join(e.dataDir, "alloc", c.ID, "rs", "local", "c")); f != "8080" {
		t.Errorf("rendered %q, want the instance's port from the first render", f)
	}
	// The health did change while the client ran: its check turned
	// passing before the client's task ended.
	var passed, ended time.Time
	for _, e := range web.Events {
		if e.Type == "Check Status" && strings.Contains(e.Message, "-> passing") && passed.IsZero() {
			passed = e.Time
		}
	}
	for _, e := range taskEvents(c, "rs") {
		if e.Type == runner.TaskTerminated {
			ended = e.Time
		}
	}
	if passed.IsZero() || ended.IsZero() || !passed.Before(ended) {
		t.Errorf("the provider's check did not turn passing while the client ran (passing %v, client ended %v)\nprovider:\n%s", passed, ended, eventTypes(web))
	}
}
