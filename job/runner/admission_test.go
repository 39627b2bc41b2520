package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/job/jobspec"
)

func testJob(t *testing.T, src string) *jobspec.Job {
	t.Helper()
	j, err := jobspec.Parse([]byte(src), "a.hcl", jobspec.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func countJob(count int, resources string) string {
	return `job "big" {
  group "g" {
    count = ` + itoa(count) + `
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      ` + resources + `
    }
  }
}`
}

func itoa(i int) string {
	b := []byte{}
	if i == 0 {
		return "0"
	}
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// A job whose one launch can never fit is refused with the dimension
// named: the count = 100000 (and plan's 2147483647).
func TestAdmissible(t *testing.T) {
	node := Capacity{CPU: 4890, MemoryMB: 24105, Allocs: 1000, TotalCPU: 4890, TotalMemoryMB: 24105, Cores: 2}
	reserved := node
	reserved.MemoryMB, reserved.CPU = 23105, 4390
	cases := []struct {
		name string
		capa Capacity
		src  string
		dim  string
		want string // "" admissible
	}{
		{"defaults fit", node, countJob(40, ""), "", ""},
		{"count 100000", Capacity{CPU: 1 << 30, MemoryMB: 24105, Allocs: 1 << 30, TotalCPU: 1 << 30, TotalMemoryMB: 24105},
			countJob(100000, ""), "memory", `100000 x 300 MB (group "g") = 30000000 MB > 24105 MB (the node's)`},
		{"count 2147483647", node, countJob(2147483647, ""), "memory", `2147483647 x 300 MB (group "g") = 644245094100 MB > 24105 MB (the node's)`},
		{"count beyond max_allocs", node, countJob(1001, "resources {\n cpu = 1\n memory = 10\n}"), "allocations", `1001 (group "g") > 1000 running at once (client.max_allocs)`},
		{"cpu of defaults", node, countJob(49, ""), "cpu", `49 x 100 MHz (group "g") = 4900 MHz > 4890 MHz (the node's)`},
		{"memory less reserve", reserved, countJob(1, "resources { memory = 23106 }"), "memory", `1 x 23106 MB (group "g") = 23106 MB > 23105 MB (the node's 24105 MB less 1000 MB reserved)`},
		{"cores", node, countJob(3, "resources { cores = 1 }"), "cpu", `3 x 2445 MHz (group "g") = 7335 MHz`},
		{"max allocs", Capacity{CPU: 1 << 30, MemoryMB: 1 << 30, Allocs: 2}, countJob(3, "resources {\n cpu = 1\n memory = 10\n}"), "allocations", `3 (group "g") > 2 running at once`},
		{"count 0", node, countJob(0, "resources { memory = 99999999 }"), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.capa.Admissible(testJob(t, tc.src))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ee *ExhaustedError
			if !errors.As(err, &ee) || !errors.Is(err, ErrExhausted) {
				t.Fatalf("got %v, want an ExhaustedError", err)
			}
			if ee.Dimension != tc.dim || !strings.Contains(err.Error(), tc.dim+" exhausted: "+tc.want) {
				t.Errorf("error %q, want %s exhausted: ...%s...", err, tc.dim, tc.want)
			}
			if d := ee.Diagnostic(); d.File != "a.hcl" || d.Line != 2 {
				t.Errorf("diagnostic %+v, want at the group (a.hcl:2)", d)
			}
		})
	}
}

// Admission is first come, first served: what does not fit waits, says
// why, and goes once enough is released; a waiter whose context ends
// leaves the queue and lets those behind it in.
func TestAdmissionQueue(t *testing.T) {
	ad := newAdmission(Capacity{CPU: 1000, MemoryMB: 100, Allocs: 10})
	ctx := context.Background()
	d := Demand{CPU: 10, MemoryMB: 50, Allocs: 1}
	r1, err := ad.acquire(ctx, "j", d, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := ad.acquire(ctx, "j", d, nil)
	whys := make(chan string, 3)
	got := make(chan func(), 3)
	go func() {
		r, _ := ad.acquire(ctx, "j", d, func(why string) { whys <- why })
		got <- r
	}()
	if why := <-whys; why != "memory: needs 50 MB, 0 MB free of 100 MB" {
		t.Errorf("why %q", why)
	}
	if n := ad.queued("j"); n != 1 {
		t.Errorf("queued %d, want 1", n)
	}
	// A second waiter that gives up.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := ad.acquire(cctx, "k", d, func(string) { whys <- "k" })
		gaveUp <- err
	}()
	<-whys
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	select {
	case <-got:
		t.Fatal("admitted before anything was released")
	case <-time.After(20 * time.Millisecond):
	}
	r1()
	r1() // a second release gives nothing back twice
	r3 := <-got
	if u := ad.Used(); u != (Demand{CPU: 20, MemoryMB: 100, Allocs: 2}) {
		t.Errorf("used %+v", u)
	}
	r2()
	r3()
	if u := ad.Used(); u != (Demand{}) || ad.queued("j") != 0 || ad.queued("k") != 0 {
		t.Errorf("after release: used %+v, queued %d %d", u, ad.queued("j"), ad.queued("k"))
	}
}

// The start pool lets n through at once.
func TestStartPool(t *testing.T) {
	p := make(startPool, 2)
	ctx := context.Background()
	a, _ := p.acquire(ctx)
	b, _ := p.acquire(ctx)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := p.acquire(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third start: %v", err)
	}
	a()
	a()
	c, err := p.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b()
	c()
	if len(p) != 0 {
		t.Errorf("%d slots still taken", len(p))
	}
}

// ${env.X} reads the task's environment (base), never the process's own
// (what a task inherits of the agent's is in base already: agentEnv); a
// NOMAD_* variable of the runtime wins over the env block.
func TestTaskEnv(t *testing.T) {
	t.Setenv("BERTH_TEST_AGENT_SECRET", "agent-only")
	base := map[string]string{"PATH": "/bin", "NOMAD_ALLOC_ID": "real-id", "NOMAD_JOB_ID": "j"}
	vars := map[string]string{"NOMAD_ALLOC_ID": "real-id"}
	env := taskEnv(base, map[string]string{
		"NOMAD_ALLOC_ID": "forged",
		"NOMAD_OTHER":    "mine",
		"A":              "${env.NOMAD_JOB_ID}/${env.PATH}",
		"B":              "${env.BERTH_TEST_AGENT_SECRET}",
		"HOME":           "/home/task",
	}, vars)
	want := map[string]string{
		"PATH": "/bin", "NOMAD_ALLOC_ID": "real-id", "NOMAD_JOB_ID": "j", "NOMAD_OTHER": "mine",
		"A": "j//bin", "B": "${env.BERTH_TEST_AGENT_SECRET}", "HOME": "/home/task",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("env %v", env)
	}
	if vars["env.HOME"] != "/home/task" || vars["env.NOMAD_ALLOC_ID"] != "real-id" {
		t.Errorf("vars for the config: env.HOME %q env.NOMAD_ALLOC_ID %q", vars["env.HOME"], vars["env.NOMAD_ALLOC_ID"])
	}
}
