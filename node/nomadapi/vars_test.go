package nomadapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
)

// varJob is a service job whose task's template renders the variable of
// its own job's path (and of path, when it is another one).
func varJob(id, path string) string {
	return `job "` + id + `" {
  type = "service"
  group "g" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name     = "` + id + `-svc"
      provider = "nomad"
      port     = "http"
      tags     = ["t1", "t2"]
    }
    task "web" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 600"]
      }
      template {
        data        = "{{ with nomadVar \"` + path + `\" }}user={{ .user }}{{ end }}\n"
        destination = "local/conf"
        change_mode = "noop"
      }
    }
  }
}
`
}

// TestNomadCLIVar: Nomad Variables through the real CLI (put, get, list,
// CAS, purge), rendered by a job's template with Nomad's default access
// rule (its own nomad/jobs/<job> only) and rendered again on a change;
// and the native services of the same job through `nomad service`.
func TestNomadCLIVar(t *testing.T) {
	e := startNomadEnv(t, "10.199.139.0/24", "10.199.155.0/24")
	const path = "nomad/jobs/napi-var"

	e.must(t, 0, nil, "var", "put", path, "user=alice", "pass=s3cret")
	e.must(t, 0, []string{"alice", "s3cret", path}, "var", "get", path)
	e.must(t, 0, []string{"alice"}, "var", "get", "-item", "user", path)
	e.must(t, 0, []string{path}, "var", "list")
	e.must(t, 0, []string{path}, "var", "list", "nomad/jobs/")
	out := e.must(t, 0, nil, "var", "list", "other/")
	if strings.Contains(out, path) {
		t.Errorf("var list other/ lists %s", path)
	}
	// A stale check index is refused (CAS), -force writes.
	out, code := e.nomad(t, "var", "put", "-check-index", "999", path, "user=mallory")
	if code == 0 || !strings.Contains(strings.ToLower(out), "check-and-set") {
		t.Errorf("var put with a stale check index: exit %d, want a check-and-set conflict", code)
	}
	e.must(t, 1, []string{"reserved"}, "var", "put", "nomad/other", "a=b")

	al := e.submit(t, "napi-var", varJob("napi-var", path), true)
	id := al.ID[:8]
	e.must(t, 0, []string{"user=alice"}, "alloc", "fs", id, "web/local/conf")

	// A change is rendered again.
	e.must(t, 0, nil, "var", "put", "-force", path, "user=bob", "pass=x")
	waitFor(t, "the template to render the new value", 30*time.Second, func() bool {
		out, _ := e.nomad(t, "alloc", "fs", id, "web/local/conf")
		return strings.Contains(out, "user=bob")
	})

	t.Run("service", func(t *testing.T) {
		e.must(t, 0, []string{"napi-var-svc", "t1", "t2"}, "service", "list")
		out := e.must(t, 0, []string{"napi-var", al.ID[:8]}, "service", "info", "napi-var-svc")
		if !strings.Contains(out, ":") {
			t.Errorf("service info: no address:port")
		}
	})

	// Another job's path is not readable: the template fails, the task
	// does not start.
	b := e.submit(t, "napi-var-denied", strings.Replace(varJob("napi-var-denied", path), `type = "service"`, `type = "batch"`, 1), false)
	waitFor(t, "the denied template's failure", time.Minute, func() bool {
		a, err := e.c.Allocation(context.Background(), b.ID)
		return err == nil && a.Status == api.AllocFailed
	})
	e.must(t, 0, []string{"access denied"}, "alloc", "status", b.ID[:8])

	e.must(t, 0, nil, "var", "purge", path)
	e.must(t, 1, nil, "var", "get", path)
}
