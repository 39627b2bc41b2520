package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testNode() NodeAttrs {
	return NodeAttrs{
		"attr.unique.hostname": "hostname",
		"attr.kernel.name":     "linux",
		"attr.kernel.version":  "6.1.0-28-amd64",
		"attr.cpu.arch":        "amd64",
		"attr.cpu.numcores":    "2",
		"node.unique.name":     "testnode",
		"node.datacenter":      "dc1",
	}
}

func requireString(key string) func(map[string]any) error {
	return func(c map[string]any) error {
		if s, ok := c[key].(string); !ok || s == "" {
			return fmt.Errorf("%s is required: set %s = \"...\" in config", key, key)
		}
		return nil
	}
}

func testOptions() ParseOptions {
	return ParseOptions{
		Node: testNode(),
		Drivers: map[string]func(map[string]any) error{
			"podman":   requireString("image"),
			"exec":     requireString("command"),
			"raw_exec": requireString("command"),
		},
		Network: func(name string) error {
			switch name {
			case "private", "mynet":
				return nil
			}
			return fmt.Errorf("no CNI network named %q; known: mynet, private", name)
		},
	}
}

func mustParse(t *testing.T, path string, opts ParseOptions) *Job {
	t.Helper()
	j, err := ParseFile(path, opts)
	if err != nil {
		t.Fatalf("ParseFile(%s): %v", path, err)
	}
	return j
}

func TestSeedJob(t *testing.T) {
	j := mustParse(t, "testdata/corpus/seed.hcl", testOptions())

	if j.ID != "cni-debug" || j.Type != TypeBatch || j.Namespace != "default" || j.Region != "global" || j.Priority != 50 {
		t.Errorf("job header = %q %q %q %q %d", j.ID, j.Type, j.Namespace, j.Region, j.Priority)
	}
	if !reflect.DeepEqual(j.Datacenters, []string{"S10"}) {
		t.Errorf("datacenters = %v", j.Datacenters)
	}
	want := []Constraint{{Attribute: "${attr.unique.hostname}", Operator: "=", Value: "hostname", Pos: Pos{"testdata/corpus/seed.hcl", 9, 3}}}
	if !reflect.DeepEqual(j.Constraints, want) {
		t.Errorf("constraints = %+v, want %+v", j.Constraints, want)
	}

	per := j.Periodic
	if per == nil || !per.Enabled || per.ProhibitOverlap || per.TimeZone != "UTC" || !reflect.DeepEqual(per.Crons, []string{"*/1 * * * * *"}) {
		t.Fatalf("periodic = %+v", per)
	}
	// Six fields are minute..dow plus a trailing year: every minute.
	from := time.Date(2025, 3, 4, 10, 0, 30, 0, time.UTC)
	got := per.NextN(from, 3)
	wantTimes := []time.Time{
		time.Date(2025, 3, 4, 10, 1, 0, 0, time.UTC),
		time.Date(2025, 3, 4, 10, 2, 0, 0, time.UTC),
		time.Date(2025, 3, 4, 10, 3, 0, 0, time.UTC),
	}
	if !reflect.DeepEqual(got, wantTimes) {
		t.Errorf("NextN = %v, want %v", got, wantTimes)
	}
	// Exactly on a match, the next launch is the following minute.
	if n := per.Next(wantTimes[0]); !n.Equal(wantTimes[1]) {
		t.Errorf("Next(on the minute) = %v, want %v", n, wantTimes[1])
	}

	if len(j.Groups) != 1 {
		t.Fatalf("groups = %d", len(j.Groups))
	}
	g := j.Group("debug")
	if g == nil || g.Count != 1 {
		t.Fatalf("group = %+v", g)
	}
	if g.Restart != (RestartPolicy{Attempts: 0, Interval: 24 * time.Hour, Delay: 15 * time.Second, Mode: RestartFail}) {
		t.Errorf("restart = %+v", g.Restart)
	}
	if !g.Reschedule.Set || g.Reschedule.Applies || g.Reschedule.Attempts != 0 || g.Reschedule.Unlimited {
		t.Errorf("reschedule = %+v", g.Reschedule)
	}
	if g.Network.Mode != "cni/private" || g.Network.CNI != "private" || g.Network.ModePos != (Pos{"testdata/corpus/seed.hcl", 24, 14}) {
		t.Errorf("network = %+v", g.Network)
	}
	task := g.Task("sleep")
	if task == nil || task.Driver != "podman" {
		t.Fatalf("task = %+v", task)
	}
	wantCfg := map[string]any{"image": "busybox:latest", "command": "/bin/sh", "args": []any{"-c", "exit 0"}}
	if !reflect.DeepEqual(task.Config, wantCfg) {
		t.Errorf("config = %#v, want %#v", task.Config, wantCfg)
	}
	if task.KillTimeout != 5*time.Second || task.Resources != (Resources{CPU: 100, MemoryMB: 300}) || task.Restart != g.Restart {
		t.Errorf("task defaults = %v %+v %+v", task.KillTimeout, task.Resources, task.Restart)
	}
	if task.Pos != (Pos{"testdata/corpus/seed.hcl", 26, 5}) || task.ConfigPos != (Pos{"testdata/corpus/seed.hcl", 28, 7}) || task.DriverPos != (Pos{"testdata/corpus/seed.hcl", 27, 16}) {
		t.Errorf("task positions = %v %v %v", task.Pos, task.ConfigPos, task.DriverPos)
	}

	// Warnings: S10 is not this node's dc1.
	var sums []string
	for _, w := range j.Warnings {
		sums = append(sums, w.String())
	}
	all := strings.Join(sums, "\n")
	if len(j.Warnings) != 1 || !strings.Contains(all, `"dc1"`) {
		t.Errorf("warnings:\n%s", all)
	}
}

func TestSeedWithoutChecks(t *testing.T) {
	// With no node, drivers or networks known, nothing environment-specific
	// is checked.
	if _, err := ParseFile("testdata/corpus/seed.hcl", ParseOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSevenFieldCronEverySecond(t *testing.T) {
	j := mustParse(t, "testdata/every_second.hcl", testOptions())
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2025, 6, 1, 12, 0, 0, 500, time.UTC)
	got := j.Periodic.NextN(from, 5)
	if len(got) != 5 {
		t.Fatalf("NextN returned %d times: %v", len(got), got)
	}
	for i, tm := range got {
		want := from.Truncate(time.Second).Add(time.Duration(i+1) * time.Second)
		if !tm.Equal(want) {
			t.Errorf("time %d = %v, want %v", i, tm, want)
		}
		if tm.Location().String() != berlin.String() {
			t.Errorf("time %d is in %v, want the job's time zone %v", i, tm.Location(), berlin)
		}
		if i > 0 && !tm.After(got[i-1]) {
			t.Errorf("times not increasing: %v then %v", got[i-1], tm)
		}
	}
}

func TestPeriodicMultipleCronsTimeZone(t *testing.T) {
	j := mustParse(t, "testdata/periodic_multi.hcl", testOptions())
	p := j.Periodic
	if p.Enabled || !p.ProhibitOverlap || p.TimeZone != "America/New_York" {
		t.Fatalf("periodic = %+v", p)
	}
	ny, _ := time.LoadLocation("America/New_York")
	// Saturday 2025-03-08 10:00 in New York: the weekday cron is out, the
	// daily 12:30 one fires first, then Monday 09:00 comes after Sunday 12:30.
	from := time.Date(2025, 3, 8, 10, 0, 0, 0, ny)
	want := []time.Time{
		time.Date(2025, 3, 8, 12, 30, 0, 0, ny),
		time.Date(2025, 3, 9, 12, 30, 0, 0, ny), // across the DST change
		time.Date(2025, 3, 10, 9, 0, 0, 0, ny),
		time.Date(2025, 3, 10, 12, 30, 0, 0, ny),
	}
	got := p.NextN(from.UTC(), 4)
	if len(got) != len(want) {
		t.Fatalf("NextN = %v", got)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("launch %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestFullJob(t *testing.T) {
	j := mustParse(t, "testdata/full.hcl", testOptions())
	if j.Type != TypeService || j.Namespace != "team-a" || j.Region != "eu" || j.Priority != 70 {
		t.Errorf("header = %+v", j)
	}
	if !reflect.DeepEqual(j.Meta, map[string]string{"owner": "ops", "tier": "2"}) {
		t.Errorf("meta = %v", j.Meta)
	}
	if len(j.Constraints) != 3 || j.Constraints[1].Operator != "version" {
		t.Errorf("constraints = %+v", j.Constraints)
	}
	g := j.Group("api")
	if g.Count != 2 || g.Meta["role"] != "api" {
		t.Errorf("group = %+v", g)
	}
	if g.Restart != (RestartPolicy{Attempts: 5, Interval: 10 * time.Minute, Delay: 30 * time.Second, Mode: RestartDelay}) {
		t.Errorf("restart = %+v", g.Restart)
	}
	// Service reschedule defaults with the two fields overridden.
	wantRes := ReschedulePolicy{Delay: 30 * time.Second, DelayFunction: "fibonacci", MaxDelay: 2 * time.Hour, Unlimited: true, Set: true, Applies: true}
	if g.Reschedule != wantRes {
		t.Errorf("reschedule = %+v, want %+v", g.Reschedule, wantRes)
	}
	n := g.Network
	wantPorts := []Port{
		{Label: "http", Static: 8080, To: 80, Pos: Pos{"testdata/full.hcl", 45, 7}},
		{Label: "metrics", To: -1, HostNetwork: "private", Pos: Pos{"testdata/full.hcl", 49, 7}},
	}
	if n.Mode != "cni/mynet" || n.CNI != "mynet" || n.Hostname != "api" || !reflect.DeepEqual(n.Ports, wantPorts) {
		t.Errorf("network = %+v", n)
	}
	if !reflect.DeepEqual(n.DNS, &DNS{Servers: []string{"10.199.0.1", "fd00::1"}, Searches: []string{"svc.local"}, Options: []string{"ndots:2"}}) {
		t.Errorf("dns = %+v", n.DNS)
	}
	if !reflect.DeepEqual(n.CNIArgs, map[string]string{"IgnoreUnknown": "true"}) {
		t.Errorf("cni args = %v", n.CNIArgs)
	}

	srv := g.Task("server")
	if !srv.Leader || srv.User != "nobody" || srv.KillTimeout != 20*time.Second || srv.Env["LOG.LEVEL"] != "debug" {
		t.Errorf("server = %+v", srv)
	}
	if srv.Resources != (Resources{CPU: 500, MemoryMB: 256, MemoryMaxMB: 512}) {
		t.Errorf("resources = %+v", srv.Resources)
	}
	// The task's restart block overrides only attempts.
	if srv.Restart != (RestartPolicy{Attempts: 1, Interval: 10 * time.Minute, Delay: 30 * time.Second, Mode: RestartDelay}) {
		t.Errorf("task restart = %+v", srv.Restart)
	}
	wantCfg := map[string]any{
		"image":   "localhost/busybox:latest",
		"command": "httpd",
		"args":    []any{"-f", "-p", "80"},
		"ports":   []any{"http"},
		"weight":  1.5,
		"big":     int64(12345678901),
		"debug":   true,
		"labels":  map[string]any{"app": "api"},
		"mount": []any{
			map[string]any{"type": "bind", "source": "/srv"},
			map[string]any{"type": "tmpfs", "target": "/tmp"},
		},
		"logging": []any{map[string]any{"driver": "journald"}},
	}
	if !reflect.DeepEqual(srv.Config, wantCfg) {
		t.Errorf("config =\n%#v\nwant\n%#v", srv.Config, wantCfg)
	}
	side := g.Task("sidecar")
	if side.Resources != (Resources{Cores: 1, MemoryMB: 300}) || side.Restart != g.Restart {
		t.Errorf("sidecar = %+v", side)
	}
	if len(j.Warnings) != 0 { // dc1 is listed
		t.Errorf("warnings = %v", j.Warnings)
	}
}

func TestInterpolationSurvivesParsing(t *testing.T) {
	j := mustParse(t, "testdata/interpolation.hcl", testOptions())
	task := j.Group("web").Task("server")
	wantEnv := map[string]string{
		"ALLOC":    "${NOMAD_ALLOC_ID}",
		"ADDR":     "${NOMAD_ALLOC_IP_http}:${NOMAD_PORT_http}",
		"HOST":     "host-${attr.unique.hostname}",
		"SPACED":   "${NOMAD_TASK_NAME}",
		"INDEXED":  "${meta.rack}-${NOMAD_ALLOC_INDEX}",
		"ESCAPED":  "${NOT_A_VAR}",
		"CONSTANT": "2",
	}
	if !reflect.DeepEqual(task.Env, wantEnv) {
		t.Errorf("env =\n%v\nwant\n%v", task.Env, wantEnv)
	}
	wantArgs := []any{"-c", "echo ${NOMAD_ALLOC_ID} ${NOMAD_JOB_NAME}/${NOMAD_GROUP_NAME}", "${env.HOME}"}
	if !reflect.DeepEqual(task.Config["args"], wantArgs) {
		t.Errorf("args = %#v", task.Config["args"])
	}
	if s := task.Config["script"]; s != "alloc=${NOMAD_ALLOC_ID}\nport=${NOMAD_HOST_PORT_http}\n" {
		t.Errorf("heredoc = %q", s)
	}
	if !reflect.DeepEqual(task.Config["nested"], map[string]any{"id": "${NOMAD_ALLOC_ID}"}) {
		t.Errorf("nested = %#v", task.Config["nested"])
	}

	vars := map[string]string{"NOMAD_ALLOC_ID": "a1b2", "NOMAD_PORT_http": "8080", "NOMAD_ALLOC_IP_http": "10.199.3.2"}
	if got := Interpolate(task.Env["ADDR"], vars); got != "10.199.3.2:8080" {
		t.Errorf("Interpolate(ADDR) = %q", got)
	}
	if got := Interpolate(wantArgs[1].(string), vars); got != "echo a1b2 ${NOMAD_JOB_NAME}/${NOMAD_GROUP_NAME}" {
		t.Errorf("Interpolate(args) = %q", got)
	}
}

func TestInterpolate(t *testing.T) {
	vars := map[string]string{
		"NOMAD_ALLOC_ID":       "abc",
		"NOMAD_PORT_http":      "8080",
		"attr.unique.hostname": "vm",
		"EMPTY":                "",
		"LOOP":                 "${NOMAD_ALLOC_ID}",
	}
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"${NOMAD_ALLOC_ID}", "abc"},
		{"id=${NOMAD_ALLOC_ID}/${NOMAD_PORT_http}", "id=abc/8080"},
		{"${ NOMAD_ALLOC_ID }", "abc"},
		{"${attr.unique.hostname}", "vm"},
		{"${UNKNOWN}", "${UNKNOWN}"},
		{"a${UNKNOWN}b${NOMAD_ALLOC_ID}c", "a${UNKNOWN}babcc"},
		{"${EMPTY}x", "x"},
		{"${LOOP}", "${NOMAD_ALLOC_ID}"}, // values are not expanded again
		{"${unterminated", "${unterminated"},
		{"$NOMAD_ALLOC_ID", "$NOMAD_ALLOC_ID"},
		{"${}", "${}"},
		{"$${NOMAD_ALLOC_ID}", "$abc"},
		{"${a${NOMAD_ALLOC_ID}}", "${a${NOMAD_ALLOC_ID}}"},
		{"${NOMAD_ALLOC_ID}}", "abc}"},
		{"ü${NOMAD_ALLOC_ID}ü", "üabcü"},
	}
	for _, tt := range tests {
		if got := Interpolate(tt.in, vars); got != tt.want {
			t.Errorf("Interpolate(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Interpolate("${X}", nil); got != "${X}" {
		t.Errorf("Interpolate with nil vars = %q", got)
	}
}

func TestConstraintOperators(t *testing.T) {
	node := NodeAttrs{
		"attr.kernel.name":    "linux",
		"attr.kernel.version": "6.1.0-28-amd64",
		"attr.cpu.numcores":   "8",
		"attr.driver.list":    "exec, podman,raw_exec",
		"attr.os.version":     "1.2.0-rc.1",
	}
	tests := []struct {
		attr, op, val string
		want          bool
	}{
		{"${attr.kernel.name}", "=", "linux", true},
		{"${attr.kernel.name}", "==", "linux", true},
		{"${attr.kernel.name}", "is", "darwin", false},
		{"${attr.kernel.name}", "!=", "darwin", true},
		{"${attr.kernel.name}", "not", "linux", false},
		{"${attr.missing}", "!=", "x", true}, // Nomad: missing differs from anything
		{"${attr.missing}", "=", "x", false},
		{"${attr.cpu.numcores}", ">=", "10", false}, // numeric, not lexical
		{"${attr.cpu.numcores}", "<", "10", true},
		{"${attr.cpu.numcores}", ">", "7.5", true},
		{"${attr.kernel.name}", "<", "mac", true}, // lexical
		{"${attr.kernel.name}", "regexp", "^li", true},
		{"${attr.kernel.name}", "regexp", "^win", false},
		{"${attr.driver.list}", "set_contains", "podman,exec", true},
		{"${attr.driver.list}", "set_contains_all", "podman,docker", false},
		{"${attr.driver.list}", "set_contains_any", "podman,docker", true},
		{"${attr.driver.list}", "set_contains_any", "docker,qemu", false},
		{"${attr.kernel.name}", "is_set", "", true},
		{"${attr.missing}", "is_set", "", false},
		{"${attr.missing}", "is_not_set", "", true},
		{"${attr.kernel.version}", "version", ">= 5.10, < 7", true},
		{"${attr.kernel.version}", "version", "~> 6.1", true},
		{"${attr.kernel.version}", "version", "~> 6.1.1", false},
		{"${attr.kernel.version}", "version", "< 6.1", false},
		{"${attr.os.version}", "semver", ">= 1.2.0", false}, // rc sorts before its release
		{"${attr.os.version}", "semver", ">= 1.2.0-beta", true},
		{"${attr.os.version}", "version", ">= 1.2.0", true}, // version ignores the pre-release
		{"linux", "=", "${attr.kernel.name}", true},         // either side may be a reference
	}
	for _, tt := range tests {
		c := Constraint{Attribute: tt.attr, Operator: tt.op, Value: tt.val}
		got, detail := checkConstraint(c, node)
		if got != tt.want {
			t.Errorf("%s %s %q = %v, want %v (%s)", tt.attr, tt.op, tt.val, got, tt.want, detail)
		}
		if !got && detail == "" {
			t.Errorf("%s %s %q failed without saying why", tt.attr, tt.op, tt.val)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	j := mustParse(t, "testdata/full.hcl", testOptions())
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"kill_timeout":"20s"`, `"interval":"10m0s"`, `"max_delay":"2h0m0s"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("JSON lacks %s: %s", s, b)
		}
	}
	var back Job
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	// Config numbers come back as float64 from JSON; compare the rest.
	for _, g := range back.Groups {
		for _, tk := range g.Tasks {
			tk.Config = j.Group(g.Name).Task(tk.Name).Config
		}
	}
	if !reflect.DeepEqual(&back, j) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, *j)
	}

	seed := mustParse(t, "testdata/every_second.hcl", testOptions())
	b, err = json.Marshal(seed)
	if err != nil {
		t.Fatal(err)
	}
	var decoded Job
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if a, b := seed.Periodic.Next(from), decoded.Periodic.Next(from); !a.Equal(b) || a.Location().String() != b.Location().String() {
		t.Errorf("Next after JSON = %v, before = %v", b, a)
	}
}

func TestParseFileErrors(t *testing.T) {
	_, err := ParseFile(filepath.Join(t.TempDir(), "missing.hcl"), ParseOptions{})
	if err == nil || errors.Is(err, ErrInvalidJob) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.hcl") {
		t.Errorf("missing file: %v", err)
	}
	_, err = Parse([]byte(""), "", ParseOptions{})
	if !errors.Is(err, ErrInvalidJob) || !strings.HasPrefix(err.Error(), "<input>:1:1: the job file is empty") {
		t.Errorf("empty input: %v", err)
	}
}

func TestAllErrorsReported(t *testing.T) {
	src := `job "j" {
  bogus = 1
  group "g" {
    count = -3
    task "t" {
      driver = "podman"
      config {}
      oops = true
    }
  }
}
`
	_, err := Parse([]byte(src), "multi.hcl", testOptions())
	var diags Diagnostics
	if !errors.As(err, &diags) {
		t.Fatalf("error %T is not Diagnostics: %v", err, err)
	}
	var got []string
	for _, d := range diags {
		got = append(got, d.Pos().String())
	}
	want := []string{"multi.hcl:2:3", "multi.hcl:4:13", "multi.hcl:7:7", "multi.hcl:8:7"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("positions = %v, want %v\n%v", got, want, err)
	}
	if lines := strings.Count(err.Error(), "\n") + 1; lines != len(want) {
		t.Errorf("Error() has %d lines, want one per diagnostic:\n%v", lines, err)
	}
}

func TestLocalNode(t *testing.T) {
	n := LocalNode()
	host, _ := os.Hostname()
	if n["attr.unique.hostname"] != host || n["node.unique.name"] != host {
		t.Errorf("hostname attrs = %q %q, want %q", n["attr.unique.hostname"], n["node.unique.name"], host)
	}
	if n["attr.kernel.name"] != "linux" || n["attr.kernel.version"] == "" || n["attr.cpu.arch"] == "" || n["node.datacenter"] != "dc1" {
		t.Errorf("LocalNode = %v", n)
	}
	// A job constrained to this very node parses against it.
	src := fmt.Sprintf(`job "j" {
  constraint {
    attribute = "${attr.unique.hostname}"
    value     = %q
  }
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "g" {
    task "t" {
      driver = "exec"
    }
  }
}
`, host)
	if _, err := Parse([]byte(src), "local.hcl", ParseOptions{Node: n}); err != nil {
		t.Error(err)
	}
}

func BenchmarkParseSeed(b *testing.B) {
	src, err := os.ReadFile("testdata/corpus/seed.hcl")
	if err != nil {
		b.Fatal(err)
	}
	opts := testOptions()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(src, "seed.hcl", opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPeriodicNext(b *testing.B) {
	j, err := ParseFile("testdata/periodic_multi.hcl", testOptions())
	if err != nil {
		b.Fatal(err)
	}
	from := time.Date(2025, 3, 8, 10, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		from = j.Periodic.Next(from)
	}
}

// cronexpr's Next writes to its Expression; Periodic.Next must still be
// safe to call from several goroutines (run with -race).
func TestPeriodicNextConcurrent(t *testing.T) {
	j := mustParse(t, "testdata/periodic_multi.hcl", testOptions())
	from := time.Date(2025, 3, 8, 10, 0, 0, 0, time.UTC)
	want := j.Periodic.Next(from)
	done := make(chan time.Time)
	for range 4 {
		go func() { done <- j.Periodic.Next(from) }()
	}
	for range 4 {
		if got := <-done; !got.Equal(want) {
			t.Errorf("concurrent Next = %v, want %v", got, want)
		}
	}
}
