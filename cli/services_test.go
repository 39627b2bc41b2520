package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
)

// servicesJob is the two-group job: "web" serves HTTP with busybox
// httpd (started in the background of a task that lives on, so that
// killing the server leaves the task running and only its check can tell)
// and registers it with an http check and check_restart; "client" renders
// the healthy instances of "web" into a config file with nomadService and
// reads the page the address in it serves.
const servicesJob = `job "btsvc" {
  group "web" {
    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
    }
    restart {
      attempts = 5
      interval = "5m"
      delay    = "1s"
      mode     = "fail"
    }
    service {
      name         = "btsvc-web"
      port         = "http"
      provider     = "nomad"
      address_mode = "alloc"
      tags         = ["v1", "${NOMAD_GROUP_NAME}"]
      meta {
        alloc = "${NOMAD_ALLOC_INDEX}"
      }
      check {
        name         = "index"
        type         = "http"
        path         = "/index.html"
        interval     = "1s"
        timeout      = "1s"
        address_mode = "alloc"
        check_restart {
          limit = 2
          grace = "2s"
        }
      }
      check {
        name     = "port"
        type     = "tcp"
        interval = "1s"
        timeout  = "1s"
      }
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "mkdir -p $NOMAD_TASK_DIR/www && echo hello-from-web > $NOMAD_TASK_DIR/www/index.html && { /bin/busybox httpd -f -p 8080 -h $NOMAD_TASK_DIR/www & echo $! > $NOMAD_TASK_DIR/httpd.pid; } && while true; do sleep 1; done"]
      }
    }
  }
  group "client" {
    network {
      mode = "bridge"
    }
    task "reader" {
      driver = "raw_exec"
      template {
        data        = <<EOT
{{ range nomadService "btsvc-web" }}UPSTREAM={{ .Address }}:{{ .Port }}
{{ end }}
EOT
        destination = "local/upstream.env"
        change_mode = "noop"
        splay       = "0s"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do . $NOMAD_TASK_DIR/upstream.env; if [ -n \"$UPSTREAM\" ]; then echo \"$UPSTREAM $(/bin/busybox wget -q -O - http://$UPSTREAM/index.html)\"; fi; sleep 0.5; done"]
      }
    }
  }
}
`

// waitFor polls cond every 200 ms until it holds or d passes; what says
// what was awaited.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) string {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return s
		}
		last = s
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last:\n%s", what, d, last)
	return ""
}

// The "done when", through the agent and the CLI: the web service
// registers with its checks and becomes passing, `berth service info`
// finds it, the client's template renders its address and the client
// reaches it; killing the server turns its check critical and
// check_restart restarts the task (counted against its restart policy),
// after which it passes again; stopping the job deregisters everything
// and leaves nothing (the leak check of TestMain).
func TestServicesAndTemplates(t *testing.T) {
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	addr, dataDir := startAgentOn(t, "10.199.150.0/24")
	c, err := api.NewClient(addr, "")
	testenv.Must(t, err)
	defer c.Close()
	ctx := context.Background()
	job := filepath.Join(t.TempDir(), "svc.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(servicesJob), 0o644))
	out, _, err := run(t, "job", "run", "--address", addr, job)
	if err != nil {
		t.Fatalf("job run: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _, _ = run(t, "job", "stop", "--address", addr, "btsvc") })

	// Registered, then passing, and found by name.
	info := waitFor(t, 30*time.Second, "service info says passing", func() (bool, string) {
		out, _, err := run(t, "service", "info", "--address", addr, "btsvc-web")
		return err == nil && strings.Contains(out, "passing"), fmt.Sprint(out, err)
	})
	row := regexp.MustCompile(`(?m)^btsvc\s+(10\.199\.150\.\d+):8080\s+\[v1,web\]\s+\S+\s+([0-9a-f]{8})\s+passing$`).FindStringSubmatch(info)
	if row == nil || !strings.HasPrefix(info, "Job ID") {
		t.Fatalf("service info:\n%s", info)
	}
	webIP, short := row[1], row[2]
	out, _, err = run(t, "service", "info", "--address", addr, "-verbose", "btsvc-web")
	for _, want := range []string{"Service Name = btsvc-web", "Address      = " + webIP + ":8080", "Meta         = alloc=0", "Health       = passing",
		"index  http  passing", "port   tcp   passing", "200 OK Output: hello-from-web"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("service info -verbose: no %q in:\n%s%v", want, out, err)
		}
	}
	out, _, err = run(t, "service", "list", "--address", addr)
	if err != nil || !regexp.MustCompile(`(?m)^btsvc-web\s+\[v1,web\]\s+1/1$`).MatchString(out) {
		t.Errorf("service list: %v\n%s", err, out)
	}
	st, err := c.Job(ctx, "btsvc")
	testenv.Must(t, err)
	var webID, clientID string
	for _, a := range st.Allocations {
		if a.Group == "web" {
			webID = a.ID
		} else {
			clientID = a.ID
		}
	}
	if !strings.HasPrefix(webID, short) || clientID == "" {
		t.Fatalf("allocations %+v, service on %s", st.Allocations, short)
	}
	out, _, err = run(t, "alloc", "status", "--address", addr, webID)
	if err != nil || !regexp.MustCompile(`btsvc-web\s+-\s+`+regexp.QuoteMeta(webIP)+`:8080\s+\[v1,web\]\s+passing\s+index: passing; port: passing`).MatchString(out) {
		t.Errorf("alloc status has no Services section with the instance:\n%s%v", out, err)
	}

	// The client read the rendered address and reached the server.
	waitFor(t, 30*time.Second, "the client reaches web through its template", func() (bool, string) {
		b, err := c.AllocLogs(ctx, clientID, "reader", false, 0)
		return err == nil && strings.Contains(string(b), webIP+":8080 hello-from-web"), string(b)
	})
	conf, err := os.ReadFile(filepath.Join(dataDir, "alloc", clientID, "reader", "local", "upstream.env"))
	if err != nil || string(conf) != "UPSTREAM="+webIP+":8080\n\n" {
		t.Errorf("rendered config %q, %v", conf, err)
	}

	// Kill the server, not its task: the check goes critical, and
	// check_restart restarts the task, which serves again.
	pidFile := filepath.Join(dataDir, "alloc", webID, "server", "local", "httpd.pid")
	b, err := os.ReadFile(pidFile)
	testenv.Must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	testenv.Must(t, err)
	testenv.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	waitFor(t, 20*time.Second, "check_restart restarts the server", func() (bool, string) {
		a, err := c.Allocation(ctx, webID)
		if err != nil {
			return false, err.Error()
		}
		var ev []string
		critical, restarted := false, false
		for _, e := range a.Events {
			ev = append(ev, e.Type+": "+e.Message)
			critical = critical || e.Type == "Check Status" && strings.Contains(e.Message, `check "index": passing -> critical`)
			restarted = restarted || e.Type == "Restart Signaled" && strings.Contains(e.Message, `healthcheck: check "index" of service "btsvc-web" unhealthy`)
		}
		return critical && restarted && a.Tasks[0].Restarts == 1, strings.Join(ev, "\n")
	})
	waitFor(t, 30*time.Second, "passing again after the restart", func() (bool, string) {
		l, err := c.Service(ctx, "btsvc-web")
		return err == nil && len(l) == 1 && l[0].Health == api.CheckPassing, fmt.Sprint(l, err)
	})
	if b, err := os.ReadFile(pidFile); err != nil || strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
		t.Errorf("the server was not started again: pid file %q, %v", b, err)
	}

	// Stop: everything is deregistered; the allocations are complete.
	out, _, err = run(t, "job", "stop", "--address", addr, "btsvc")
	if err != nil {
		t.Fatalf("job stop: %v\n%s", err, out)
	}
	out, _, err = run(t, "service", "list", "--address", addr)
	if err != nil || strings.TrimSpace(out) != "No services found" {
		t.Errorf("after stop, service list: %v\n%s", err, out)
	}
	if _, err := c.Service(ctx, "btsvc-web"); !api.IsNotFound(err) {
		t.Errorf("after stop, service info: %v", err)
	}
	for _, id := range []string{webID, clientID} {
		a, err := c.Allocation(ctx, id)
		if err != nil || a.Status != api.AllocComplete || len(a.Services) != 0 {
			t.Errorf("allocation %s after stop: %v, %+v", id, err, a)
		}
	}
}

// `berth run` without an agent: the run has its own catalog; the web's
// start line says where its service is, a line says when it passes, the
// client's template finds it, and the run leaves nothing behind (no
// registration either).
func TestSvcRun(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	job := filepath.Join(t.TempDir(), "svc.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(servicesJob), 0o644))
	dataDir, flags := localFlags(t)
	bridge, iface := "btsvc-run-"+testenv.RandSuffix(4), "btsvcr"+testenv.RandSuffix(4)
	t.Cleanup(func() { testenv.RemoveNetworkLeftovers(bridge, iface) })
	flags = append(flags, "--bridge-network", bridge, "--bridge-iface", iface, "--bridge-subnet", "10.199.151.0/24")
	out, _, err := run(t, append([]string{"run", "--for", "8s", job}, flags...)...)
	if err != nil || !strings.Contains(out, "leak check: nothing left") || !strings.Contains(out, "allocations: complete 2") {
		t.Fatalf("run: %v\n%s", err, out)
	}
	start := regexp.MustCompile(`(?m)^([0-9a-f-]{36})  started   10\.199\.151\.(\d+)/24  http 127\.0\.0\.1:\d+ -> 8080  services: btsvc-web 10\.199\.151\.(\d+):8080 \(pending\)$`).FindStringSubmatch(out)
	if start == nil || start[2] != start[3] {
		t.Fatalf("no start line with the service's address:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^` + start[1] + `  service   btsvc-web 10\.199\.151\.` + start[3] + `:8080 passing$`).MatchString(out) {
		t.Errorf("no line saying the service passes:\n%s", out)
	}
	var client string
	ents, err := os.ReadDir(filepath.Join(dataDir, "alloc"))
	testenv.Must(t, err)
	for _, e := range ents {
		if e.Name() != start[1] {
			client = e.Name()
		}
	}
	logs := readFile(filepath.Join(dataDir, "alloc", client, "alloc", "logs", "reader.stdout.0"))
	if !strings.Contains(logs, "10.199.151."+start[3]+":8080 hello-from-web") {
		t.Errorf("the client did not reach the web service:\n%s", logs)
	}
}
