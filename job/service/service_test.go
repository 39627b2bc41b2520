package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
)

var bridgeNet = AllocNet{
	Mode: "bridge", HostIP: "127.0.0.1", AllocIP: "10.199.140.5", NetnsPath: "/run/netns/x",
	Ports: []Port{{Label: "http", HostPort: 24000, To: 8080}, {Label: "same", HostPort: 24001}},
}

func TestResolveService(t *testing.T) {
	hostNet := AllocNet{Mode: "host", HostIP: "127.0.0.1", Ports: []Port{{Label: "http", HostPort: 25000, To: 25000}}}
	podman := bridgeNet
	podman.DriverNet = true
	for _, tc := range []struct {
		name                string
		mode, address, port string
		n                   AllocNet
		addr                string
		p                   int
		err                 string
	}{
		{"auto is host", "auto", "", "http", bridgeNet, "127.0.0.1", 24000, ""},
		{"auto with a driver network", "auto", "", "http", podman, "127.0.0.1", 24000, ""},
		{"host", "host", "", "http", bridgeNet, "127.0.0.1", 24000, ""},
		{"alloc", "alloc", "", "http", bridgeNet, "10.199.140.5", 8080, ""},
		{"alloc without to", "alloc", "", "same", bridgeNet, "10.199.140.5", 24001, ""},
		{"alloc number", "alloc", "", "9090", bridgeNet, "10.199.140.5", 9090, ""},
		{"no port", "host", "", "", bridgeNet, "127.0.0.1", 0, ""},
		{"custom address", "auto", "db.example", "http", bridgeNet, "db.example", 24000, ""},
		{"custom address number", "", "db.example", "5432", bridgeNet, "db.example", 5432, ""},
		{"custom address needs auto", "host", "db.example", "http", bridgeNet, "", 0, "needs address_mode \"auto\""},
		{"host number", "host", "", "8080", bridgeNet, "", 0, "not a port label"},
		{"unknown label", "auto", "", "nope", bridgeNet, "", 0, "not a port label"},
		{"alloc in host mode", "alloc", "", "http", hostNet, "", 0, "needs a network namespace"},
		{"driver without a driver network", "driver", "", "http", bridgeNet, "", 0, "no network of its own"},
		{"driver", "driver", "", "http", podman, "10.199.140.5", 8080, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, p, err := ResolveService(tc.mode, tc.address, tc.port, tc.n)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrAddress) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || addr != tc.addr || p != tc.p {
				t.Errorf("= %s, %d, %v; want %s, %d", addr, p, err, tc.addr, tc.p)
			}
		})
	}
}

func TestResolveCheck(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		check                     jobspec.Check
		svcMode, svcAddr, svcPort string
		want                      Target
		err                       string
	}{
		{"host by default, the service's port", jobspec.Check{}, "alloc", "", "http", Target{Address: "127.0.0.1", Port: 24000}, ""},
		{"alloc dials in the namespace", jobspec.Check{AddressMode: "alloc"}, "", "", "http", Target{Address: "10.199.140.5", Port: 8080, NetnsPath: "/run/netns/x"}, ""},
		{"own port", jobspec.Check{AddressMode: "alloc", Port: "9000"}, "", "", "http", Target{Address: "10.199.140.5", Port: 9000, NetnsPath: "/run/netns/x"}, ""},
		{"custom service address", jobspec.Check{}, "auto", "10.0.0.9", "http", Target{Address: "10.0.0.9", Port: 24000}, ""},
		{"no port", jobspec.Check{}, "", "", "", Target{}, "has no port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveCheck(&tc.check, tc.svcMode, tc.svcAddr, tc.svcPort, bridgeNet)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// Consul's counters: success_before_passing and failures_before_critical
// runs in a row move the status; one run the other way resets the count.
func TestMachine(t *testing.T) {
	m := machine{status: store.CheckPending, sbp: 2, fbc: 3}
	steps := []struct{ seen, want string }{
		{store.CheckPassing, store.CheckPending},
		{store.CheckPassing, store.CheckPassing},
		{store.CheckCritical, store.CheckPassing},
		{store.CheckCritical, store.CheckPassing},
		{store.CheckPassing, store.CheckPassing},
		{store.CheckCritical, store.CheckPassing},
		{store.CheckCritical, store.CheckPassing},
		{store.CheckCritical, store.CheckCritical},
		{store.CheckWarning, store.CheckWarning},
		{store.CheckPassing, store.CheckWarning},
		{store.CheckPassing, store.CheckPassing},
	}
	for i, s := range steps {
		m.observe(s.seen)
		if m.status != s.want {
			t.Fatalf("step %d (%s): status %s, want %s", i, s.seen, m.status, s.want)
		}
	}
	z := machine{status: store.CheckCritical}
	if !z.observe(store.CheckPassing) || z.status != store.CheckPassing {
		t.Errorf("thresholds 0: one run moves the status, got %s", z.status)
	}
}

func TestHealth(t *testing.T) {
	for _, tc := range []struct {
		checks []store.CheckStatus
		want   string
	}{
		{nil, store.CheckPassing},
		{[]store.CheckStatus{{Status: store.CheckPassing}, {Status: store.CheckWarning}}, store.CheckWarning},
		{[]store.CheckStatus{{Status: store.CheckPending}, {Status: store.CheckWarning}}, store.CheckPending},
		{[]store.CheckStatus{{Status: store.CheckCritical, OnUpdate: "ignore"}, {Status: store.CheckPassing}}, store.CheckPassing},
		{[]store.CheckStatus{{Status: store.CheckWarning, OnUpdate: "ignore_warnings"}}, store.CheckPassing},
		{[]store.CheckStatus{{Status: store.CheckCritical, OnUpdate: "ignore_warnings"}}, store.CheckCritical},
	} {
		if got := Health(tc.checks); got != tc.want {
			t.Errorf("Health(%+v) = %s, want %s", tc.checks, got, tc.want)
		}
	}
}

func hostPortOf(t *testing.T, u string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func TestProbe(t *testing.T) {
	var mu sync.Mutex
	var seen string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			b := make([]byte, 10)
			n, _ := r.Body.Read(b)
			mu.Lock()
			seen = r.Header.Get("X-A") + " " + r.Method + " " + string(b[:n]) + " " + r.URL.RawQuery
			mu.Unlock()
			w.Write([]byte("fine"))
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tls.Close()
	h, p := hostPortOf(t, srv.URL)
	th, tp := hostPortOf(t, tls.URL)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, cp := hostPortOf(t, "http://"+closed.Addr().String())
	closed.Close()
	for _, tc := range []struct {
		name   string
		probe  Probe
		status string
		out    string
	}{
		{"http 200", Probe{Type: "http", Target: Target{Address: h, Port: p}, Path: "/ok?x=1", Method: "POST", Header: map[string][]string{"X-A": {"b"}}, Body: "hi"},
			store.CheckPassing, "HTTP POST http://" + srv.Listener.Addr().String() + "/ok?x=1: 200 OK Output: fine"},
		{"http 429", Probe{Type: "http", Target: Target{Address: h, Port: p}, Path: "/busy"}, store.CheckWarning, "429 Too Many Requests"},
		{"http 503", Probe{Type: "http", Target: Target{Address: h, Port: p}, Path: "/down"}, store.CheckCritical, "503 Service Unavailable"},
		{"http refused", Probe{Type: "http", Target: Target{Address: "127.0.0.1", Port: cp}, Path: "/"}, store.CheckCritical, "connection refused"},
		{"https skip verify", Probe{Type: "http", Protocol: "https", TLSSkipVerify: true, Target: Target{Address: th, Port: tp}, Path: "/"}, store.CheckPassing, "200 OK"},
		{"https verified", Probe{Type: "http", Protocol: "https", Target: Target{Address: th, Port: tp}, Path: "/"}, store.CheckCritical, "certificate"},
		{"tcp", Probe{Type: "tcp", Target: Target{Address: h, Port: p}}, store.CheckPassing, "TCP connect " + srv.Listener.Addr().String() + ": Success"},
		{"tcp refused", Probe{Type: "tcp", Target: Target{Address: "127.0.0.1", Port: cp}}, store.CheckCritical, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, out := tc.probe.Run(context.Background(), 2*time.Second)
			if st != tc.status || !strings.Contains(out, tc.out) {
				t.Errorf("= %s %q, want %s %q", st, out, tc.status, tc.out)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if seen != "b POST hi x=1" {
		t.Errorf("the server saw %q, want header, method, body and query", seen)
	}
}

// A check that hangs until its timeout does not delay the others: with
// more slots than slow checks, every fast check runs on time.
func TestCheckerSlowCheckDoesNotDelayOthers(t *testing.T) {
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	// Accepts and never answers: an http check there waits its timeout.
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	h, p := hostPortOf(t, srv.URL)
	hh, hp := hostPortOf(t, "http://"+hang.Addr().String())
	c := NewChecker(8, nil)
	defer c.Close()
	var mu sync.Mutex
	runs := map[int]int{}
	var handles []*Handle
	for i := 0; i < 20; i++ {
		spec := Spec{Probe: Probe{Type: "http", Target: Target{Address: h, Port: p}, Path: "/"}, Interval: 200 * time.Millisecond, Timeout: time.Second}
		if i < 3 {
			spec.Probe.Target = Target{Address: hh, Port: hp}
			spec.Timeout = 2 * time.Second
		}
		spec.OnResult = func(r Result) {
			mu.Lock()
			runs[i]++
			mu.Unlock()
		}
		handles = append(handles, c.Start(spec))
	}
	time.Sleep(2 * time.Second)
	for _, hd := range handles {
		hd.Stop()
	}
	mu.Lock()
	defer mu.Unlock()
	// 10 runs each are due; the three slow ones finish at most one. Half
	// as many leaves room for a busy machine, and none would be possible
	// if the slow ones held the fast ones up.
	for i := 3; i < 20; i++ {
		if runs[i] < 5 {
			t.Errorf("fast check %d ran %d times in 2 s at 200 ms", i, runs[i])
		}
	}
	for i := 0; i < 3; i++ {
		if runs[i] > 1 {
			t.Errorf("hanging check %d reported %d runs", i, runs[i])
		}
	}
}

// Stop waits for a run in flight and nothing is reported after it.
func TestCheckerStop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
	}))
	defer srv.Close()
	h, p := hostPortOf(t, srv.URL)
	c := NewChecker(0, nil)
	defer c.Close()
	var mu sync.Mutex
	stopped, after := false, 0
	hd := c.Start(Spec{Probe: Probe{Type: "http", Target: Target{Address: h, Port: p}, Path: "/"}, Interval: 100 * time.Millisecond, Timeout: time.Second,
		OnResult: func(Result) {
			mu.Lock()
			if stopped {
				after++
			}
			mu.Unlock()
		}})
	time.Sleep(1200 * time.Millisecond)
	hd.Stop()
	mu.Lock()
	stopped = true
	mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if after != 0 {
		t.Errorf("%d results after Stop", after)
	}
}

type memStore struct {
	mu   sync.Mutex
	recs map[string]*store.Service
	puts int
}

func (m *memStore) PutServices(_ context.Context, l []*store.Service) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	for _, s := range l {
		m.recs[s.ID] = s.Clone()
	}
	return nil
}

func (m *memStore) DeleteServices(_ context.Context, ids ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.recs, id)
	}
	return nil
}

func (m *memStore) ListServices(_ context.Context, f store.ServiceFilter) ([]*store.Service, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*store.Service
	for _, s := range m.recs {
		if f.Name == "" || f.Name == s.ServiceName {
			out = append(out, s.Clone())
		}
	}
	return out, nil
}

func TestRegistry(t *testing.T) {
	ms := &memStore{recs: map[string]*store.Service{}}
	r := NewRegistry(ms, nil)
	ctx := context.Background()
	// Another process's registration, only in the store.
	ms.recs["other"] = &store.Service{ID: "other", ServiceName: "web", Namespace: "default", AllocID: "b", Health: store.CheckPassing}
	svc := &store.Service{ID: ID("a", "g", "", "web", "http"), ServiceName: "web", Namespace: "default", AllocID: "a",
		Address: "10.199.140.5", Port: 8080, Health: store.CheckPending,
		Checks: []store.CheckStatus{{Name: "alive", Type: "http", Status: store.CheckPending}}}
	changed := r.Changed()
	if err := r.Register(ctx, svc); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Error("Register did not wake the watchers")
	}
	if svc.ID != "_nomad-task-a-group-g-web-http" {
		t.Errorf("ID %s", svc.ID)
	}
	// Listed while its check is pending, as Nomad's catalog lists it.
	if got := r.Instances("default", "web"); len(got) != 1 {
		t.Errorf("a pending instance is not listed: %+v", got)
	}
	changed = r.Changed()
	if h, ch := r.UpdateCheck(svc.ID, 0, store.CheckPassing, "HTTP GET ...: 200 OK", time.Now()); h != store.CheckPassing || !ch {
		t.Errorf("UpdateCheck = %s, %v", h, ch)
	}
	<-changed
	if got := r.Instances("default", "web"); len(got) != 1 || got[0].Address != "10.199.140.5" || got[0].Port != 8080 {
		t.Errorf("Instances = %+v", got)
	}
	if n := r.Names("default"); len(n) != 1 || n[0].Name != "web" {
		t.Errorf("Names = %+v", n)
	}
	// The same status again writes nothing; the output is in memory.
	r.UpdateCheck(svc.ID, 0, store.CheckPassing, "again", time.Now())
	r.Close()
	ms.mu.Lock()
	rec := ms.recs[svc.ID]
	puts := ms.puts
	ms.mu.Unlock()
	if rec == nil || rec.Health != store.CheckPassing || puts != 2 {
		t.Errorf("store has %+v after %d writes; want passing after 2", rec, puts)
	}
	all, err := r.List(ctx, store.ServiceFilter{Name: "web"})
	if err != nil || len(all) != 2 || all[0].Checks[0].Output != "again" {
		t.Errorf("List = %+v, %v", all, err)
	}
	if err := r.Deregister(ctx, svc.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := ms.recs[svc.ID]; ok || len(r.Own(store.ServiceFilter{})) != 0 {
		t.Error("deregistered service is still there")
	}
}
