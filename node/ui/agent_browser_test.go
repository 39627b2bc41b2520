package ui_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
	"github.com/berth/berth/node/agent/agenttest"
	"github.com/berth/berth/node/ui"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

// This package's test subnets: the CNI network of the jobs, and the
// agent's (unused) bridge network.
const (
	jobSubnet    = "10.199.165.0/24"
	bridgeSubnet = "10.199.166.0/24"
)

// A service with a mapped port, running for the whole test.
const webJob = `job "btui-web" {
  type = "service"
  group "frontend" {
    network {
      mode = "cni/%s"
      port "http" {
        to = 8080
      }
    }
    task "server" {
      driver       = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo serving on 8080; exec sleep 600"]
      }
    }
  }
}
`

// A periodic batch job launching every 2 s, each run printing a line.
const tickJob = `job "btui-tick" {
  type = "batch"
  periodic {
    crons            = ["*/2 * * * * * *"]
    prohibit_overlap = true
  }
  group "tick" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    network {
      mode = "cni/%s"
    }
    task "tick" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello from tick; echo tick stderr >&2"]
      }
    }
  }
}
`

// The status page of a real agent, with a service and a periodic job in a
// CNI network, in headless Chromium over the agent's TCP listener: 401
// and the login page without a token; the token in the URL's fragment
// gives an HttpOnly, SameSite=Strict session cookie and the page, and
// leaves the address bar; the overview, job, allocation and namespace
// pages render the agent's real state without a console error and
// refresh themselves; they fit a phone; the login form and sign out
// work; the unix socket serves the page with no token; and the token
// never appears in the agent's log. Screenshots go to ScreenshotDir.
func TestStatusPageOfRealAgent(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	b := ui.NewBrowser(t)
	shots := ui.ScreenshotDir(t)
	nw := testenv.NewNetwork(t, testenv.NetworkSpec{Name: "btui-" + testenv.RandSuffix(6), Subnet: jobSubnet, Portmap: true, Firewall: true, Loopback: true})

	// Short: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "btui")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	token := "btui-" + testenv.RandSuffix(32)
	cfg := agent.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = nw.ConfDir
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	// "records": a full sweep would reclaim other berths' attachments on
	// this shared host.
	cfg.GCMode = agent.GCRecords
	cfg.GCInterval = "0"
	cfg.DrainOnShutdown = true // stopped with the test: leave nothing
	cfg.Bridge = &node.Bridge{Network: "btui-br-" + testenv.RandSuffix(6), Iface: "btui" + testenv.RandSuffix(6), Subnet: bridgeSubnet}
	cfg.API = &agent.APIConfig{Socket: filepath.Join(dir, "b.sock"), TCPAddress: "127.0.0.1:0", Token: token}
	cfg.Client.NetworkInterface = "lo" // the page shows ports on 127.0.0.1
	logPath := filepath.Join(dir, "agent.log")
	a := startAgent(t, cfg, logPath)
	c, err := api.NewClient("unix://"+a.SocketPath(), "")
	testenv.Must(t, err)
	t.Cleanup(c.Close)
	ctx := testenv.Context(t, 10*time.Minute)

	for _, j := range []struct{ src, file string }{{webJob, "web.nomad.hcl"}, {tickJob, "tick.nomad.hcl"}} {
		_, err := c.SubmitJob(ctx, []byte(fmt.Sprintf(j.src, nw.Name)), j.file)
		testenv.Must(t, err)
	}
	var web api.AllocStub
	var ticks []api.AllocStub
	waitFor(t, "the service to run and three ticks to complete", 3*time.Minute, func() bool {
		w, err1 := c.Allocations(ctx, "btui-web")
		tk, err2 := c.Allocations(ctx, "btui-tick")
		if err1 != nil || err2 != nil || len(w) != 1 || w[0].Status != api.AllocRunning || len(w[0].IPv4) == 0 {
			return false
		}
		web, ticks = w[0], nil
		for _, al := range tk {
			if al.Status == api.AllocComplete {
				ticks = append(ticks, al)
			}
		}
		return len(ticks) >= 3
	})
	if rep, err := c.GC(ctx, api.GCRequest{}); err != nil || len(rep.Errors) > 0 {
		t.Fatalf("gc: %v %v", err, rep)
	}
	base := "http://" + a.TCPAddr()

	// Without a token: 401, the login page for a browser, and the API
	// still answers JSON.
	for _, p := range []string{"/ui/", "/ui/job/btui-web", "/ui"} {
		resp, err := http.Get(base + p)
		testenv.Must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `id="login"`) {
			t.Errorf("GET %s without a token: %d, login form %v", p, resp.StatusCode, strings.Contains(string(body), `id="login"`))
		}
	}
	if resp, err := http.Get(base + "/v1/jobs"); err != nil || resp.StatusCode != http.StatusUnauthorized ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("API without a token: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	// A bearer token is enough for the page too, as for the API.
	req, _ := http.NewRequest(http.MethodGet, base+"/ui/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/ui/ with the bearer token: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	// The unix socket is its own access control.
	if resp, err := c.Do(ctx, http.MethodGet, "/ui/", nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/ui/ on the unix socket: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	allow401 := regexp.MustCompile(`status of 401`)
	if code := b.Open(base + "/ui/"); code != http.StatusUnauthorized {
		t.Errorf("browser, no session: %d, want 401", code)
	}
	b.WaitVisible("#login")
	b.Screenshot(shots, "agent-login")
	b.Settle("login page", allow401)

	// The token in the fragment: a session cookie, the page, and an
	// address bar without the token.
	b.Blank()
	b.Open(base + "/ui/#token=" + token)
	b.WaitVisible("#overview")
	if href := ui.Eval[string](b, `location.href`); strings.Contains(href, token) || strings.Contains(href, "#") {
		t.Errorf("address after login: %q", href)
	}
	checkSessionCookie(t, b.Cookies())
	b.Settle("login by fragment", allow401)

	overview := b.Text("#main")
	for _, want := range []string{"btui-web", "btui-tick", "*/2 * * * * * *", web.IPv4[0], "http 127.0.0.1:", "→8080", "api", "start"} {
		if !strings.Contains(overview, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if got := ui.Eval[int](b, `document.querySelectorAll('.plot .s-setup.dot').length`); got == 0 {
		t.Errorf("the latency plot has no setup point")
	}
	if got := ui.Eval[int](b, `document.querySelectorAll('.plot .s-complete').length`); got == 0 {
		t.Errorf("the allocation rate plot has no bar")
	}
	b.Screenshot(shots, "agent-overview")
	b.Settle("overview")
	b.WaitRefresh("overview", 15*time.Second)
	b.Settle("overview, refreshed")

	tick := ticks[0]
	pages := []struct {
		name, path, sel string
		want            []string
	}{
		{"agent-job-periodic", "/ui/job/btui-tick", "#job", []string{"Next launch", "*/2 * * * * * *", "complete", tick.ID[:8]}},
		{"agent-job-service", "/ui/job/btui-web", "#job", []string{"service", "http dynamic → 8080", web.IPv4[0]}},
		{"agent-alloc-service", "/ui/alloc/" + web.ID, "#alloc", []string{web.IPv4[0], "http 127.0.0.1:", "CNI ADD", "serving on 8080", "running"}},
		{"agent-alloc-periodic", "/ui/alloc/" + tick.ID, "#alloc", []string{"hello from tick", "tick stderr", "CNI DEL", "netns remove", "complete"}},
		{"agent-namespaces", "/ui/namespaces", "#namespaces", []string{web.ID, "member", "sleep"}},
	}
	for _, p := range pages {
		if code := b.Open(base + p.path); code != http.StatusOK {
			t.Errorf("%s: %d", p.path, code)
		}
		b.WaitVisible(p.sel)
		text := b.Text("#main")
		for _, w := range p.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q", p.path, w)
			}
		}
		b.Screenshot(shots, p.name)
		b.Settle(p.path)
	}

	b.Phone(true)
	for _, p := range []struct{ name, path, sel string }{
		{"agent-phone-overview", "/ui/", "#overview"},
		{"agent-phone-alloc", "/ui/alloc/" + web.ID, "#alloc"},
	} {
		b.Open(base + p.path)
		b.WaitVisible(p.sel)
		b.NoHorizontalScroll(p.name)
		b.Screenshot(shots, p.name)
		b.Settle(p.name)
	}
	b.Phone(false)

	// Sign out, then the form: a wrong token is refused, the right one
	// leads back to the page asked for.
	b.Open(base + "/ui/")
	b.Do("sign out", chromedp.Click(chromedp.CSS(`form[action="/ui/logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#login")))
	for _, c := range b.Cookies() {
		if c.Name == "berth_session" {
			t.Errorf("session cookie left after sign out: %+v", c)
		}
	}
	b.Settle("signed out", allow401)
	if code := b.Open(base + "/ui/job/btui-web"); code != http.StatusUnauthorized {
		t.Errorf("job page after sign out: %d", code)
	}
	b.Do("wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token-0123456789"), chromedp.Submit(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS(`#login-page [role="alert"]`)))
	b.Settle("wrong token", allow401)
	b.Do("right token", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Submit(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#job")))
	if href := ui.Eval[string](b, `location.pathname`); href != "/ui/job/btui-web" {
		t.Errorf("after the login form: at %s, want /ui/job/btui-web", href)
	}
	checkSessionCookie(t, b.Cookies())
	b.Settle("login by form", allow401)

	// Stopping the jobs here rather than in the drain keeps the agent's
	// log whole for the check below.
	for _, id := range []string{"btui-tick", "btui-web"} {
		if _, err := c.StopJob(ctx, id); err != nil {
			t.Errorf("stop %s: %v", id, err)
		}
	}
	log, err := os.ReadFile(logPath)
	testenv.Must(t, err)
	if strings.Contains(string(log), token) {
		t.Errorf("the agent's log contains the token")
	}
	for _, want := range []string{"status page login", "status page login rejected", `path=/ui/job/btui-web`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the agent's log lacks %q", want)
		}
	}
}

func checkSessionCookie(t *testing.T, cs []*network.Cookie) {
	t.Helper()
	for _, c := range cs {
		if c.Name != "berth_session" {
			continue
		}
		if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/ui/" {
			t.Errorf("session cookie: HttpOnly %v, SameSite %q, path %q; want HttpOnly, Strict, /ui/", c.HTTPOnly, c.SameSite, c.Path)
		}
		return
	}
	t.Errorf("no session cookie after login (cookies: %d)", len(cs))
}

// startAgent runs a berth agent in this process until the test ends.
func startAgent(t *testing.T, cfg agent.Config, logPath string) *agent.Agent {
	t.Helper()
	return agenttest.Start(t, cfg, logPath)
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
