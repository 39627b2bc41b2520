// Tests of the monitoring examples: prometheus/prometheus.yml,
// prometheus/berth-rules.yml and grafana/berth.json, run against Debian's
// promtool and prometheus and a real berth agent.
package examples

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
	"github.com/berth/berth/node/agent/agenttest"
	"github.com/berth/berth/node/metrics"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

const (
	promConfig = "prometheus/prometheus.yml"
	promRules  = "prometheus/berth-rules.yml"
	rulesTest  = "prometheus/berth-rules.test.yml"
	dashboard  = "grafana/berth.json"
)

// requireTool skips unless Debian's prometheus package is installed.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found: run scripts/setup.sh", name)
	}
	return p
}

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(requireTool(t, "promtool"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// scrapeSetup is how a test points the example configuration at its own
// agent.
type scrapeSetup struct {
	target, tokenFile string
	interval          string
}

// writeConfig writes the example prometheus.yml into dir with the agent's
// address, token file and scrape interval replaced, and the rules file
// beside it (rule_files is relative to the configuration). Each replaced
// value must occur exactly once, so that the test follows the example
// rather than a configuration of its own.
func writeConfig(t *testing.T, dir string, s scrapeSetup) string {
	t.Helper()
	src := string(readFile(t, promConfig))
	for _, r := range []struct{ old, new string }{
		{`targets: ["127.0.0.1:4646"]`, fmt.Sprintf("targets: [%q]", s.target)},
		{"credentials_file: /etc/prometheus/berth-token", "credentials_file: " + s.tokenFile},
		{"scrape_interval: 15s", "scrape_interval: " + s.interval},
		{"evaluation_interval: 15s", "evaluation_interval: " + s.interval},
	} {
		if n := strings.Count(src, r.old); n != 1 {
			t.Fatalf("%s: %q occurs %d times, want once", promConfig, r.old, n)
		}
		src = strings.Replace(src, r.old, r.new, 1)
	}
	path := filepath.Join(dir, "prometheus.yml")
	testenv.Must(t, os.WriteFile(path, []byte(src), 0o644))
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "berth-rules.yml"), readFile(t, promRules), 0o644))
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	testenv.Must(t, err)
	return b
}

// The rules file is valid, its alerts do what berth-rules.test.yml says,
// and the example configuration is valid once its token file exists.
func TestPromtool(t *testing.T) {
	promtool(t, "check", "rules", promRules)
	out := promtool(t, "test", "rules", rulesTest)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %s", out)
	}
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	testenv.Must(t, os.WriteFile(token, []byte("0123456789abcdef0123\n"), 0o600))
	promtool(t, "check", "config", writeConfig(t, dir, scrapeSetup{target: "127.0.0.1:4646", tokenFile: token, interval: "15s"}))
}

// seriesNames returns, by metric family, the series names berth's
// metrics package exports (a histogram's _bucket, _count and _sum too):
// each collector is made to hold a sample, then the registry gathered.
func seriesNames(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.CNIOp("ADD", "n", time.Millisecond, nil)
	m.NetnsOp("create", time.Millisecond, nil)
	m.Removed(&netns.RemoveReport{Busy: true, Retries: 1, Holders: []netns.Holder{{Kind: netns.HolderFD}}})
	m.CheckFailed("n")
	m.Healed("n", nil)
	m.GCRun(nil, map[string]int{"netns": 1})
	m.SetAllocations(map[string]int{"running": 1})
	m.AllocDone("complete")
	m.SetPendingTeardowns(1)
	m.AllocPhase("add", time.Millisecond)
	m.NomadReclaimed("netns", "teardown-failed:alloc-dir", 1)
	m.NomadAPIError("allocation")
	m.NomadReclaimLatency(time.Second)
	m.NomadConnected(true)
	rec := httptest.NewRecorder()
	m.InstrumentHandler("/x", http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	fams, err := reg.Gather()
	testenv.Must(t, err)
	out := map[string][]string{}
	for _, f := range fams {
		name := f.GetName()
		out[name] = []string{name}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[name] = append(out[name], name+"_bucket", name+"_count", name+"_sum")
		}
	}
	return out
}

var berthSeries = regexp.MustCompile(`\bberth_[a-z_]+`)

// dashboardExprs returns the PromQL of every panel target, by panel title,
// with Grafana's variables replaced by what the test queries with.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	var d struct {
		UID        string
		Templating struct{ List []struct{ Name, Type string } }
		Panels     []struct {
			ID         int
			Type       string
			Title      string
			Datasource struct{ Type, UID string }
			Targets    []struct{ Expr string }
		}
	}
	testenv.Must(t, json.Unmarshal(readFile(t, dashboard), &d))
	if d.UID == "" {
		t.Errorf("%s has no uid", dashboard)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "job", "instance"} {
		if !vars[v] {
			t.Errorf("%s: no template variable %q", dashboard, v)
		}
	}
	repl := strings.NewReplacer("$__rate_interval", "1m", "$job", "berth", "$instance", ".*")
	out := map[string][]string{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d used twice", dashboard, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], repl.Replace(tg.Expr))
		}
	}
	return out
}

// The rules and the dashboard use only series berth exports (a typo
// would make an alert that never fires or a panel that is always empty).
func TestSeriesNames(t *testing.T) {
	families := seriesNames(t)
	if len(families) < 17 {
		t.Fatalf("only %d metric families gathered; is every collector exercised?", len(families))
	}
	exported := map[string]bool{}
	for _, names := range families {
		for _, n := range names {
			exported[n] = true
		}
	}
	used := map[string][]string{}
	for _, m := range berthSeries.FindAllString(string(readFile(t, promRules)), -1) {
		used[m] = append(used[m], promRules)
	}
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			for _, m := range berthSeries.FindAllString(e, -1) {
				used[m] = append(used[m], dashboard+": "+title)
			}
		}
	}
	for name, where := range used {
		if !exported[name] {
			t.Errorf("%s is not a berth series (used in %s)", name, strings.Join(where, ", "))
		}
	}
	// Every family shows up somewhere: the dashboard is over all of them.
	for fam, names := range families {
		seen := false
		for _, n := range names {
			seen = seen || len(used[n]) > 0
		}
		if !seen {
			t.Errorf("berth exports %s but neither the rules nor the dashboard use it", fam)
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// promServer is a Prometheus of the test's own: its configuration and
// storage in a temporary directory, listening on a loopback port,
// stopped by its PID when the test ends.
type promServer struct {
	url string
	log string
}

func startPrometheus(t *testing.T, config, dir string) *promServer {
	t.Helper()
	bin := requireTool(t, "prometheus")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	testenv.Must(t, err)
	defer logf.Close()
	cmd := exec.Command(bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.console.templates="+filepath.Join(dir, "consoles"),
		"--web.console.libraries="+filepath.Join(dir, "console_libraries"),
	)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	testenv.Must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	p := &promServer{url: "http://" + addr, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", readFile(t, logPath))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("prometheus exited: %v\n%s", err, readFile(t, logPath))
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after a minute: %v\n%s", err, readFile(t, logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apiGet calls Prometheus's HTTP API and decodes its data field.
func (p *promServer) apiGet(t *testing.T, path string, q url.Values, data any) {
	t.Helper()
	resp, err := http.Get(p.url + path + "?" + q.Encode())
	testenv.Must(t, err)
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		Error     string          `json:"error"`
		ErrorType string          `json:"errorType"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s?%s: %d, undecodable body: %v", path, q.Encode(), resp.StatusCode, err)
	}
	if body.Status != "success" {
		t.Fatalf("GET %s?%s: %s: %s", path, q.Encode(), body.ErrorType, body.Error)
	}
	testenv.Must(t, json.Unmarshal(body.Data, data))
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) float(t *testing.T) float64 {
	t.Helper()
	str, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(str, 64)
	testenv.Must(t, err)
	return f
}

// query runs an instant query now and returns its vector.
func (p *promServer) query(t *testing.T, expr string) []sample {
	t.Helper()
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	p.apiGet(t, "/api/v1/query", url.Values{"query": {expr}}, &data)
	if data.ResultType != "vector" {
		t.Fatalf("query %s: result type %s, want vector", expr, data.ResultType)
	}
	return data.Result
}

// scalar runs a query whose result is one sample, or none (read as 0: a
// counter that never moved may not exist yet).
func (p *promServer) scalar(t *testing.T, expr string) float64 {
	t.Helper()
	r := p.query(t, expr)
	switch len(r) {
	case 0:
		return 0
	case 1:
		return r[0].float(t)
	}
	t.Fatalf("query %s: %d samples, want one: %v", expr, len(r), r)
	return 0
}

// lastScrape is the time of the newest sample of the agent's target.
func (p *promServer) lastScrape(t *testing.T) time.Time {
	t.Helper()
	ts := p.scalar(t, `timestamp(up{job="berth"})`)
	return time.Unix(0, int64(ts*1e9))
}

// waitScrapeAfter waits until Prometheus holds a scrape of the agent that
// started after at.
func (p *promServer) waitScrapeAfter(t *testing.T, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !p.lastScrape(t).After(at) {
		if time.Now().After(deadline) {
			t.Fatalf("no scrape of the agent after %s within a minute", at.Format(time.RFC3339Nano))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const countJob = `job "btex-count" {
  type = "batch"
  group "g" {
    count = %d
    network {
      mode = "cni/%s"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
    }
  }
}
`

// A private berth agent, scraped over TCP with the bearer token by a
// Prometheus running the example configuration and rules, runs a job of
// n allocations in a CNI network and collects garbage k times; every
// series of that work moves by exactly n or k in Prometheus, each scrape
// is counted by the agent, the rules evaluate without error and nothing
// alerts, and every dashboard query is valid PromQL.
func TestPrometheusScrapesAgent(t *testing.T) {
	testenv.RequireRoot(t)
	requireTool(t, "prometheus")
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "loopback")
	const n, k = 3, 2
	nw := testenv.NewNetwork(t, testenv.NetworkSpec{Name: "btex-" + testenv.RandSuffix(6), Subnet: "10.199.160.0/24", Loopback: true})

	// Short: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "btex")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	token := "btex-" + testenv.RandSuffix(24)
	tokenFile := filepath.Join(dir, "token")
	// A trailing newline, as `base64 >file` leaves: both sides ignore it.
	testenv.Must(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))

	cfg := agent.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = nw.ConfDir
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	// "records": a full sweep would reclaim other berths' attachments on
	// this shared host. No periodic run: only the test's gc runs count.
	cfg.GCMode = agent.GCRecords
	cfg.GCInterval = "0"
	cfg.DrainOnShutdown = true // stopped with the test: leave nothing
	cfg.Bridge = &node.Bridge{Network: "btex-br-" + testenv.RandSuffix(6), Iface: "btex" + testenv.RandSuffix(6), Subnet: "10.199.161.0/24"}
	cfg.API = &agent.APIConfig{Socket: filepath.Join(dir, "b.sock"), TCPAddress: "127.0.0.1:0", TokenFile: tokenFile}
	a := startAgent(t, cfg, filepath.Join(dir, "agent.log"))
	c, err := api.NewClient("http://"+a.TCPAddr(), token)
	testenv.Must(t, err)
	t.Cleanup(c.Close)
	ctx := testenv.Context(t, 5*time.Minute)

	promDir := t.TempDir()
	config := writeConfig(t, promDir, scrapeSetup{target: a.TCPAddr(), tokenFile: tokenFile, interval: "1s"})
	p := startPrometheus(t, config, promDir)

	// The target is up: Prometheus sent the token from the file.
	deadline := time.Now().Add(time.Minute)
	for p.scalar(t, `up{job="berth"}`) != 1 {
		if time.Now().After(deadline) {
			var targets any
			p.apiGet(t, "/api/v1/targets", nil, &targets)
			t.Fatalf("target not up within a minute: %v", targets)
		}
		time.Sleep(200 * time.Millisecond)
	}

	sel := fmt.Sprintf(`job="berth", instance=%q`, a.TCPAddr())
	counters := []struct {
		expr string
		want float64
	}{
		{fmt.Sprintf(`sum(berth_cni_operations_total{%s, network=%q, verb="ADD", result="ok"})`, sel, nw.Name), n},
		{fmt.Sprintf(`sum(berth_cni_operations_total{%s, network=%q, verb="DEL", result="ok"})`, sel, nw.Name), n},
		{fmt.Sprintf(`sum(berth_cni_operations_total{%s, result="error"})`, sel), 0},
		{fmt.Sprintf(`sum(berth_cni_operation_duration_seconds_count{%s, network=%q, verb="ADD"})`, sel, nw.Name), n},
		{fmt.Sprintf(`sum(berth_netns_operation_duration_seconds_count{%s, op="create"})`, sel), n},
		{fmt.Sprintf(`sum(berth_netns_operation_duration_seconds_count{%s, op="remove"})`, sel), n},
		{fmt.Sprintf(`sum(berth_netns_operation_errors_total{%s})`, sel), 0},
		{fmt.Sprintf(`sum(berth_alloc_phase_duration_seconds_count{%s, phase="add"})`, sel), n},
		{fmt.Sprintf(`sum(berth_allocations_total{%s, status="complete"})`, sel), n},
		{fmt.Sprintf(`sum(berth_allocations_total{%s, status!="complete"})`, sel), 0},
		{fmt.Sprintf(`sum(berth_gc_runs_total{%s, result="ok"})`, sel), k},
		{fmt.Sprintf(`sum(berth_gc_runs_total{%s, result="error"})`, sel), 0},
		{fmt.Sprintf(`sum(berth_http_requests_total{%s, route="/v1/jobs", method="post", code="200"})`, sel), 1},
		{fmt.Sprintf(`sum(berth_http_requests_total{%s, route="/v1/gc", method="post", code="200"})`, sel), k},
		{fmt.Sprintf(`sum(berth_http_requests_total{%s, route="unauthorized"})`, sel), 0},
	}
	before := make([]float64, len(counters))
	for i, q := range counters {
		before[i] = p.scalar(t, q.expr)
	}

	_, err = c.SubmitJob(ctx, []byte(fmt.Sprintf(countJob, n, nw.Name)), "count.nomad.hcl")
	testenv.Must(t, err)
	deadline = time.Now().Add(3 * time.Minute)
	for {
		l, err := c.Allocations(ctx, "btex-count")
		testenv.Must(t, err)
		done := 0
		for _, al := range l {
			if al.Status == api.AllocComplete || al.Status == api.AllocFailed {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d allocations finished after 3 minutes: %+v", done, n, l)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := 0; i < k; i++ {
		rep, err := c.GC(ctx, api.GCRequest{})
		testenv.Must(t, err)
		if len(rep.Errors) > 0 {
			t.Fatalf("gc: %v", rep.Errors)
		}
	}
	// Two scrapes after the work: a rate() needs two samples of a series,
	// and those of the test network appeared with the work.
	p.waitScrapeAfter(t, time.Now())
	p.waitScrapeAfter(t, p.lastScrape(t))

	for i, q := range counters {
		if got := p.scalar(t, q.expr) - before[i]; got != q.want {
			t.Errorf("%s moved by %v, want %v", q.expr, got, q.want)
		}
	}
	for _, g := range []struct {
		expr string
		want float64
	}{
		{fmt.Sprintf(`berth_allocations{%s, status="complete"}`, sel), n},
		{fmt.Sprintf(`berth_allocations{%s, status="running"}`, sel), 0},
		{fmt.Sprintf(`berth_pending_teardowns{%s}`, sel), 0},
	} {
		if got := p.scalar(t, g.expr); got != g.want {
			t.Errorf("%s = %v, want %v", g.expr, got, g.want)
		}
	}
	// The agent counts every scrape once it has answered it: the counter
	// in a scrape is the number of scrapes before it.
	scrapes := p.scalar(t, fmt.Sprintf(`count_over_time(up{%s}[1h])`, sel))
	counted := p.scalar(t, fmt.Sprintf(`max_over_time(berth_http_requests_total{%s, route="/metrics", method="get", code="200"}[1h])`, sel))
	if scrapes < 3 || counted != scrapes-1 {
		t.Errorf("%v scrapes in Prometheus, the agent counted %v before the last", scrapes, counted)
	}

	// The rules loaded, evaluate without error, and nothing alerts.
	var rules struct {
		Groups []struct {
			Rules []struct {
				Name, Health, LastError, State string
			}
		}
	}
	p.apiGet(t, "/api/v1/rules", nil, &rules)
	seen := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			seen++
			if r.Health != "ok" || r.State != "inactive" {
				t.Errorf("rule %s: health %q (%s), state %q", r.Name, r.Health, r.LastError, r.State)
			}
		}
	}
	if seen != 7 {
		t.Errorf("%d rules loaded, want 7", seen)
	}

	// Every dashboard query runs; those over what the test did have data.
	mayBeEmpty := regexp.MustCompile(`result="error"|check_failures|heals|holders_seen|gc_reclaimed|nomad_`)
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			if r := p.query(t, e); len(r) == 0 && !mayBeEmpty.MatchString(e) {
				t.Errorf("dashboard panel %q: %s has no data", title, e)
			}
		}
	}
}

// startAgent runs a berth agent in this process until the test ends,
// its reconcile at start done.
func startAgent(t *testing.T, cfg agent.Config, logPath string) *agent.Agent {
	t.Helper()
	a := agenttest.Start(t, cfg, logPath)
	select {
	case <-a.Reconciled():
	case <-time.After(2 * time.Minute):
		t.Fatal("agent's reconcile at start not done after 2 minutes")
	}
	return a
}
