package agent

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/attach"
)

// The banner names the scheme the TCP listener speaks: https with TLS,
// http without.
func TestReportBannerScheme(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, "10.199.236.0/24")
			e.cfg.API.TCPAddress, e.cfg.API.Token = "127.0.0.1:0", "btrep-"+testenv.RandSuffix(24)
			want := "http://"
			if withTLS {
				p := newPKI(t, e.dir, "api")
				e.cfg.API.TLS = &TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey}
				want = "https://"
			}
			var banner syncBuffer
			a, err := New(e.cfg, testLogger(t), WithVersion("test"), WithBanner(&banner))
			testenv.Must(t, err)
			testenv.Serve(t, "agent", a.Run, a.Reconciled())
			page := want + a.TCPAddr() + "/ui/"
			if !strings.Contains(banner.text(), page) {
				t.Errorf("banner does not name %s:\n%s", page, banner.text())
			}
		})
	}
}

func (s *syncBuffer) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// After a real agent restart, an allocation the new agent claimed is not
// reported running until it has re-attached the task and CHECKed the
// namespace: it is pending and says it is being re-adopted. The test
// holds the attachment's lock (taken by the CHECK) so that the window is
// as long as it needs, then lets go and sees the allocation running, the
// same task and namespace.
func TestReportReadoptingUntilChecked(t *testing.T) {
	e := newTestEnv(t, "10.199.72.0/24")
	e.cfg.Bridge.Subnet = "10.199.73.0/24"
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, serviceJob("raw_exec"))), "svc.hcl")
	testenv.Must(t, err)
	old := runningAlloc(t, c, "btag-svc")
	h := old.Tasks[0].Handle
	// Stopped without draining: the allocation is left to the next agent.
	if _, err := p.signal(syscall.SIGTERM, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	unlock, err := attach.LockAttachment(testenv.Context(t, time.Minute), e.cfg.LockDir, old.ID)
	testenv.Must(t, err)
	released := false
	release := func() {
		if !released {
			released = true
			unlock()
		}
	}
	t.Cleanup(release)

	p = e.startBinaryEnv(t, cfgPath, c, nil, false)
	var seen []string
	waitFor(t, "the claimed allocation to say it is being re-adopted", 2*time.Minute, func() (bool, error) {
		a, err := c.Allocation(context.Background(), old.ID)
		if err != nil {
			return false, err
		}
		if len(seen) == 0 || seen[len(seen)-1] != a.Status+" "+a.StatusDesc {
			seen = append(seen, a.Status+" "+a.StatusDesc)
		}
		if a.Status == api.AllocRunning && a.OwnerPID == p.cmd.Process.Pid {
			t.Fatalf("the new agent reports the allocation running before it could CHECK it: %v", seen)
		}
		return a.OwnerPID == p.cmd.Process.Pid && a.Status == api.AllocPending && strings.HasPrefix(a.StatusDesc, "re-adopting"), nil
	})
	// The list says the same.
	l, err := c.Allocations(context.Background(), "btag-svc")
	testenv.Must(t, err)
	if len(l) != 1 || l[0].Status != api.AllocPending || !strings.HasPrefix(l[0].StatusDesc, "re-adopting") {
		t.Errorf("allocation list while re-adopting: %+v", l)
	}

	release()
	cur := readopted(t, c, old.ID)
	t.Logf("states seen: %v, then %s", seen, cur.Status)
	if !sameTask(cur, h) || cur.Network.NetnsPath != old.Network.NetnsPath {
		t.Fatalf("after the restart: task %+v netns %s, want %+v %s", cur.Tasks[0].Handle, cur.Network.NetnsPath, h, old.Network.NetnsPath)
	}
	if cur.StatusDesc != "" {
		t.Errorf("running allocation still described %q", cur.StatusDesc)
	}
	drainAndCheck(t, e, p, cur)
}
