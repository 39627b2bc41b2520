package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/node"
	"github.com/berth/berth/store"
)

// The EXIT column of `alloc ls` / `job status JOB` and of `alloc status`:
// empty ("-") while a task runs, the code once it exited, "not started"
// for a task that never ran (never its placeholder code), and one entry
// per task, in order, when there are several.
func TestPrintAllocTableExit(t *testing.T) {
	running := api.TaskStub{Name: "main", State: "running"}
	pending := api.TaskStub{Name: "main", State: "pending"}
	exited0 := api.TaskStub{Name: "pre", State: "dead", ExitCode: 0}
	exited3 := api.TaskStub{Name: "main", State: "dead", ExitCode: 3, Failed: true}
	never := api.TaskStub{Name: "main", State: "dead", ExitCode: -1, NotStarted: "allocation stopped before it started"}
	for _, tc := range []struct {
		name  string
		tasks []api.TaskStub
		want  string
	}{
		{"running", []api.TaskStub{running}, "-"},
		{"pending", []api.TaskStub{pending}, "-"},
		{"exited", []api.TaskStub{exited3}, "3"},
		{"exited 0", []api.TaskStub{exited0}, "0"},
		{"never started", []api.TaskStub{never}, "not started"},
		{"several running", []api.TaskStub{running, running, running}, "-"},
		{"prestart done, main running", []api.TaskStub{exited0, running}, "0,-"},
		{"prestart done, main never started", []api.TaskStub{exited0, never}, "0,not started"},
		{"several ended", []api.TaskStub{exited0, exited3, never}, "0,3,not started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			g := &Globals{Config: node.Default(), stdout: &out}
			a := api.AllocStub{ID: "0123456789abcdef", JobID: "j", Group: "g", Status: api.AllocRunning, CreatedAt: time.Now(), Tasks: tc.tasks}
			if err := printAllocTable(g, []api.AllocStub{a}, false); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("table:\n%s", out.String())
			}
			// Columns are separated by two spaces or more; "not started"
			// has one.
			col := strings.Index(lines[0], "EXIT")
			cell := strings.TrimSpace(lines[1][col:])
			if i := strings.Index(cell, "  "); i >= 0 {
				cell = cell[:i]
			}
			if cell != tc.want {
				t.Errorf("EXIT %q, want %q\n%s", cell, tc.want, out.String())
			}

			// `berth run`'s allocation lines: the same cell.
			rec := &store.Allocation{ID: a.ID}
			for _, ts := range tc.tasks {
				rec.Tasks = append(rec.Tasks, store.TaskState{Name: ts.Name, State: ts.State, ExitCode: ts.ExitCode, NotStarted: ts.NotStarted})
			}
			if got := exitCodes(rec); got != tc.want {
				t.Errorf("berth run's EXIT %q, want %q", got, tc.want)
			}

			// `alloc status`: the same per task, and why one never started.
			full := &api.Allocation{ID: a.ID, JobID: "j", Group: "g", Status: a.Status}
			for _, ts := range tc.tasks {
				full.Tasks = append(full.Tasks, api.TaskState{Name: ts.Name, Driver: "raw_exec", State: ts.State, Failed: ts.Failed, ExitCode: ts.ExitCode, NotStarted: ts.NotStarted})
			}
			out.Reset()
			if err := printAlloc(g, full); err != nil {
				t.Fatal(err)
			}
			for _, ts := range full.Tasks {
				want := dash(ts.Exit())
				if !taskRowHas(out.String(), ts.Name, want) {
					t.Errorf("alloc status: task %s's row lacks EXIT %q:\n%s", ts.Name, want, out.String())
				}
				if ts.NotStarted != "" && !strings.Contains(out.String(), ts.Name+" never started: "+ts.NotStarted) {
					t.Errorf("alloc status does not say why %s never started:\n%s", ts.Name, out.String())
				}
			}
			if strings.Contains(out.String(), " -1 ") {
				t.Errorf("alloc status shows a placeholder exit code:\n%s", out.String())
			}
		})
	}
}

// taskRowHas reports whether the Tasks table of `alloc status` has a row
// for task name whose EXIT cell (after NAME, DRIVER, STATE, FAILED) is
// exit.
func taskRowHas(out, name, exit string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[0] != name || f[1] != "raw_exec" {
			continue
		}
		got := f[4]
		if got == "not" && len(f) > 5 {
			got += " " + f[5]
		}
		if got == exit {
			return true
		}
	}
	return false
}
