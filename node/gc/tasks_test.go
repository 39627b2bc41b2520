package gc_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/gc"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/allocdir"
	"github.com/berth/berth/task/driver/podman"
)

// TestCrashBeforeTaskRecorded kills `berth run` between the making of a
// task (its supervisor running, its container created) and the record of
// its handle (issue 10 row 14): the store knows the allocation but not
// the task. `berth gc` must mark the allocation lost and remove what its
// task left by the marks the driver put on it: the podman container by
// its berth.store label, the raw_exec/exec task by its cgroup and its
// supervisor; and nothing else.
func TestCrashBeforeTaskRecorded(t *testing.T) {
	cases := []struct {
		name, driver, config, point, subnet string
	}{
		{name: "raw_exec", driver: "raw_exec", config: `command = "/bin/sleep"
        args = ["300"]`, point: fault.TaskStarted, subnet: "10.199.120.0/24"},
		{name: "exec", driver: "exec", config: `command = "/bin/sleep"
        args = ["300"]`, point: fault.TaskStarted, subnet: "10.199.121.0/24"},
		{name: "podman created", driver: "podman", config: `image = "localhost/busybox:latest"
        command = "sleep"
        args = ["300"]`, point: fault.AfterContainerCreate, subnet: "10.199.122.0/24"},
		{name: "podman started", driver: "podman", config: `image = "localhost/busybox:latest"
        command = "sleep"
        args = ["300"]`, point: fault.TaskStarted, subnet: "10.199.123.0/24"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.driver == "podman" {
				if err := exec.Command("podman", "image", "exists", "localhost/busybox:latest").Run(); err != nil {
					t.Skip("podman or localhost/busybox:latest missing: run scripts/setup.sh")
				}
			}
			e := newEnv(t, full(tc.subnet))
			job := filepath.Join(t.TempDir(), "crash.nomad.hcl")
			testenv.Must(t, os.WriteFile(job, []byte(`job "btgc-crash" {
  type = "batch"
  group "g" {
    network {
      mode = "cni/`+e.net.Name+`"
    }
    task "t" {
      driver = "`+tc.driver+`"
      config {
        `+tc.config+`
      }
    }
  }
}
`), 0o644))
			// Whatever happens, the podman service the crashed berth
			// started and its containers go with the test.
			t.Cleanup(func() { e.scrubTasks(t) })
			r := e.berth(t, e.dataDir, tc.point, "run", job, "--max-runs", "1")
			if !r.status.Signaled() || r.status.Signal() != syscall.SIGKILL {
				t.Fatalf("berth run did not die at %s: %v\nstdout: %s\nstderr: %s", tc.point, r.status, r.stdout, r.stderr)
			}
			st := e.openStore(t)
			allocs, err := st.ListAllocations(context.Background(), store.AllocFilter{})
			testenv.Must(t, err)
			if len(allocs) != 1 || allocs[0].Tasks[0].Handle != nil {
				t.Fatalf("after the crash: %+v", allocs)
			}
			allocID := allocs[0].ID
			st.Close()
			if left := e.taskLeftovers(t, allocID); len(left) == 0 {
				t.Fatalf("the crash left nothing of task %s to find: the test proves nothing", allocID)
			} else {
				t.Logf("left by the crash: %v", left)
			}

			rep, gr := e.gcJSON(t, e.dataDir)
			if !gr.status.Exited() || gr.status.ExitStatus() != 0 || rep.Failed() {
				t.Fatalf("berth gc: status %v, errors %v\nstderr: %s", gr.status, rep.Errors, gr.stderr)
			}
			if !has(rep.Reclaimed, gc.KindAllocOwner, allocID) || !has(rep.Reclaimed, gc.KindTask, allocID) || !has(rep.Reclaimed, gc.KindMount, allocID) {
				t.Errorf("gc did not reclaim allocation %s, its task and its secrets tmpfs: %+v", allocID, rep)
			}
			if left := e.taskLeftovers(t, allocID); len(left) > 0 {
				t.Errorf("after gc: %v", left)
			}
			st = e.openStore(t)
			a, err := st.GetAllocation(context.Background(), allocID)
			testenv.Must(t, err)
			if a.Status != store.AllocLost {
				t.Errorf("allocation status %s, want lost", a.Status)
			}
			st.Close()
			rep, _ = e.gcJSON(t, e.dataDir)
			if len(rep.Found) != 0 || rep.Failed() {
				t.Errorf("second gc found %+v, errors %v", rep.Found, rep.Errors)
			}
		})
	}
}

// taskLeftovers lists what is on the host of an allocation's task:
// containers labelled with it, task cgroups and supervisors naming it,
// mounts beneath its directory (its secrets/ tmpfs).
func (e *env) taskLeftovers(t *testing.T, allocID string) []string {
	t.Helper()
	var out []string
	if _, err := exec.LookPath("podman"); err == nil {
		b, _ := exec.Command("podman", "ps", "-a", "--filter", "label="+podman.LabelAllocID+"="+allocID, "--format", "{{.Names}}").Output()
		for _, n := range strings.Fields(string(b)) {
			out = append(out, "container "+n)
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/berth/" + store.IDFor(e.dataDir) + "." + allocID + ".*")
	for _, c := range cgs {
		out = append(out, "cgroup "+c)
	}
	if ms, err := allocdir.Mounts(filepath.Join(e.dataDir, "alloc")); err != nil {
		out = append(out, "mounts: "+err.Error())
	} else {
		for _, m := range ms[allocID] {
			out = append(out, "mount "+m)
		}
	}
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		b, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "berth-supervisor") && strings.Contains(string(b), "\x00"+allocID+"\x00") {
			out = append(out, "supervisor "+de.Name())
		}
	}
	return out
}

// scrubTasks runs gc on the env's data dir (it removes the tasks of the
// crashed berth) and stops a podman service left by it.
func (e *env) scrubTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBinary.Path(t), append(e.flags(e.dataDir), "gc")...)
	_ = cmd.Run()
	b, err := os.ReadFile(filepath.Join(e.dataDir, "podman", "service.pid"))
	if err != nil {
		return
	}
	var pid int
	for _, c := range strings.TrimSpace(string(b)) {
		pid = pid*10 + int(c-'0')
	}
	if cmdline, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "cmdline")); err == nil && strings.Contains(string(cmdline), e.dataDir) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}
