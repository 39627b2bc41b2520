package agent

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/store"
)

const readoptServiceJob = `job "btsvc-ra" {
  type = "service"
  meta {
    probe_method = "GET"
  }
  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name         = "btsvc-ra"
      port         = "http"
      provider     = "nomad"
      address_mode = "alloc"
      check {
        # Interpolated at run time, as Nomad does.
        name         = "alive-${NOMAD_ALLOC_INDEX}"
        method       = "${NOMAD_META_probe_method}"
        type         = "http"
        path         = "/index.html"
        interval     = "1s"
        timeout      = "1s"
        address_mode = "alloc"
      }
    }
    task "server" {
      driver = "raw_exec"
      template {
        data        = "ALLOC={{ env \"NOMAD_ALLOC_ID\" }}\n"
        destination = "local/alloc.env"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "mkdir -p $NOMAD_TASK_DIR/www && echo hi > $NOMAD_TASK_DIR/www/index.html && exec /bin/busybox httpd -f -p 8080 -h $NOMAD_TASK_DIR/www"]
      }
    }
  }
}`

// passingSince waits until service name has one instance, passing, that
// this agent registered and checked at or after since.
func passingSince(t *testing.T, c *api.Client, name string, since time.Time) api.ServiceRegistration {
	t.Helper()
	var got api.ServiceRegistration
	waitFor(t, "service "+name+" passing, checked since "+since.Format(time.RFC3339Nano), time.Minute, func() (bool, error) {
		l, err := c.Service(context.Background(), name)
		if err != nil || len(l) != 1 {
			return false, fmt.Errorf("%d instances: %v", len(l), err)
		}
		got = l[0]
		return got.Health == api.CheckPassing && !got.CreatedAt.Before(since) && len(got.Checks) == 1 && !got.Checks[0].Time.Before(since), nil
	})
	return got
}

// An agent stopped by SIGTERM leaves its services registered with the
// task; the next agent, re-adopting the task, registers them again as its
// own and checks them; the drain deregisters them.
func TestSvcReadopted(t *testing.T) {
	e := newTestEnv(t, "10.199.154.0/24")
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	t0 := time.Now()
	p := e.startBinary(t, cfgPath, c)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, readoptServiceJob)), "svc.hcl")
	testenv.Must(t, err)
	old := runningAlloc(t, c, "btsvc-ra")
	before := passingSince(t, c, "btsvc-ra", t0)
	if before.Checks[0].Name != "alive-0" {
		t.Errorf("check name %q, want the interpolated alive-0", before.Checks[0].Name)
	}

	st, err := p.signal(syscall.SIGTERM, 2*time.Minute)
	testenv.Must(t, err)
	if st.ExitCode() != 0 {
		t.Errorf("agent exit status %v after SIGTERM, want 0", st)
	}
	sto, err := store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	recs, err := sto.ListServices(context.Background(), store.ServiceFilter{Name: "btsvc-ra"})
	sto.Close()
	if err != nil || len(recs) != 1 || recs[0].ID != before.ID {
		t.Errorf("registrations after SIGTERM: %+v, %v; want %s kept", recs, err, before.ID)
	}

	t1 := time.Now()
	p = e.startBinary(t, cfgPath, c)
	cur := readopted(t, c, old.ID)
	after := passingSince(t, c, "btsvc-ra", t1)
	now, err := c.Allocation(context.Background(), old.ID)
	testenv.Must(t, err)
	if n := countEvents(now, "Templates Rendered"); n != 2 {
		t.Errorf("templates rendered %d times, want before the start and at the re-adoption", n)
	}
	if after.ID != before.ID || after.Address != before.Address || after.Port != before.Port || after.AllocID != old.ID {
		t.Errorf("re-registered %+v, want the same instance as %+v", after, before)
	}
	drainAndCheck(t, e, p, cur)
	sto, err = store.Open(context.Background(), e.cfg.DataDir, store.Options{})
	testenv.Must(t, err)
	defer sto.Close()
	if recs, err := sto.ListServices(context.Background(), store.ServiceFilter{}); err != nil || len(recs) != 0 {
		t.Errorf("registrations after the drain: %+v, %v", recs, err)
	}
}

func countEvents(a *api.Allocation, typ string) int {
	n := 0
	for _, e := range a.Events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

const advertisedJob = `job "btsvc-adv" {
  type = "service"
  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }
    service {
      name         = "btsvc-adv"
      port         = "http"
      provider     = "nomad"
      address_mode = "host"
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo IP=$NOMAD_IP_http ADDR=$NOMAD_ADDR_http ATTR=${attr.unique.network.ip-address}; exec sleep 300"]
      }
    }
  }
}`

// The host address the node advertises (client.network_interface, "lo"
// in this package's agents) is the allocation's NOMAD_IP_<label> and
// NOMAD_ADDR_<label>, ${attr.unique.network.ip-address}, the address of
// an address_mode "host" service and the recorded port mapping's HostIP
// the API shows. Nothing is dialled.
func TestSvcAdvertisedHostIP(t *testing.T) {
	e := newTestEnv(t, "10.199.198.0/24")
	_, c := e.startAgent(t)
	_, err := c.SubmitJob(context.Background(), []byte(e.jobSource(t, advertisedJob)), "adv.hcl")
	testenv.Must(t, err)
	a := runningAlloc(t, c, "btsvc-adv")
	if a.Network == nil || len(a.Network.Ports) != 1 || a.Network.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("recorded ports %+v, want http on 127.0.0.1", a.Network)
	}
	port := 0
	if a.Network != nil && len(a.Network.Ports) == 1 {
		port = a.Network.Ports[0].HostPort
	}
	want := fmt.Sprintf("IP=127.0.0.1 ADDR=127.0.0.1:%d ATTR=127.0.0.1", port)
	waitFor(t, "the task's line", time.Minute, func() (bool, error) {
		b, err := c.AllocLogs(context.Background(), a.ID, "server", false, 0)
		return strings.Contains(string(b), want), err
	})
	waitFor(t, "service btsvc-adv on the host address", time.Minute, func() (bool, error) {
		l, err := c.Service(context.Background(), "btsvc-adv")
		if err != nil || len(l) != 1 {
			return false, fmt.Errorf("%d instances: %v", len(l), err)
		}
		return l[0].Address == "127.0.0.1" && l[0].Port == port, fmt.Errorf("registered at %s:%d", l[0].Address, l[0].Port)
	})
}
