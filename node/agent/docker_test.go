package agent

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/internal/testenv"
)

// The docker driver across an agent SIGKILL: the task's container and
// the allocation's pause container outlive the agent; the restarted agent
// re-adopts the task by its container ID and labels, its output goes on
// from the recorded offset (nothing lost or repeated, through alloc logs
// -f), and stopping the job removes both containers and the namespace.
func TestDockerSIGKILLReadopts(t *testing.T) {
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd not installed: run scripts/setup.sh")
	}
	if out, err := exec.Command("bash", "../../scripts/image/docker-setup.sh").CombinedOutput(); err != nil {
		t.Skipf("no dockerd answers: %v\n%s", err, out)
	}
	e := newTestEnv(t, "10.199.146.0/24")
	c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
	testenv.Must(t, err)
	defer c.Close()
	cfgPath := e.writeConfig(t)
	p := e.startBinary(t, cfgPath, c)
	src := strings.Replace(logsJob("podman"), `driver       = "podman"`, `driver       = "docker"`, 1)
	src = strings.Replace(src, `seq -w 1 200000`, `seq -w 1 20000`, 1)
	src = strings.Replace(src, `seq 200001 400000`, `seq 20001 40000`, 1)
	_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, src)), "logs.hcl")
	testenv.Must(t, err)
	al := runningAlloc(t, c, "btag-logs")
	if len(al.Tasks) != 1 || al.Tasks[0].Driver != "docker" || al.Tasks[0].Handle == nil || al.Tasks[0].Handle.ContainerID == "" {
		t.Fatalf("allocation's task: %+v", al.Tasks)
	}
	id := al.Tasks[0].Handle.ContainerID
	dir := filepath.Join(e.cfg.AllocDir(), al.ID, "alloc", "logs")
	waitFor(t, "the first half written (20000)", time.Minute, func() (bool, error) {
		b, err := logfile.ReadTail(context.Background(), dir, "t.stdout", 6)
		return string(b) == "20000\n", err
	})
	if _, err := p.signal(syscall.SIGKILL, time.Minute); err != nil {
		t.Fatal(err)
	}
	p = e.startBinary(t, cfgPath, c)
	cur := readopted(t, c, al.ID)
	if h := cur.Tasks[0].Handle; h == nil || h.ContainerID != id {
		t.Errorf("re-adopted handle %+v, want container %s", h, id)
	}
	testenv.Must(t, os.WriteFile(filepath.Join(e.cfg.AllocDir(), al.ID, "alloc", "data", "go"), nil, 0o644))
	var out bytes.Buffer
	waitFor(t, "the second half through alloc logs", time.Minute, func() (bool, error) {
		out.Reset()
		err := c.StreamAllocLogs(context.Background(), al.ID, "t", api.LogsOptions{}, &out)
		return strings.HasSuffix(out.String(), "\n40000\n"), err
	})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for j, l := range lines {
		if n, err := strconv.Atoi(l); err != nil || n != j+1 {
			t.Fatalf("line %d of alloc logs is %q, want %d: lost or repeated across the agent's death", j+1, l, j+1)
		}
	}
	drainAndCheck(t, e, p, cur)
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=berth.alloc_id="+al.ID).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("containers of the allocation left: %s", out)
	}
}
