package agent

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/testenv"
)

// `berth agent drain` says what it could not stop: an allocation whose
// network teardown failed (a full disk, injected) is listed as LEFT with
// the teardown's error, and the command exits non-zero, so that nobody
// takes the host for clean. The next agent then finishes the teardown
// and a second drain leaves the host as it was.
func TestDrainReportsFailedTeardown(t *testing.T) {
	for _, drv := range []string{"raw_exec"} {
		t.Run(drv, func(t *testing.T) {
			e := newTestEnv(t, "10.199.76.0/24")
			before := hostSnapshot(t)
			c, err := api.NewClient("unix://"+e.cfg.API.Socket, "")
			testenv.Must(t, err)
			defer c.Close()
			cfgPath := e.writeConfig(t)
			const job = "bcs-svc"
			pa := e.startBinaryEnv(t, cfgPath, c, []string{fault.Env + "=" + fault.FailTeardown}, true)
			_, err = c.SubmitJob(context.Background(), []byte(e.jobSource(t, crashJob(drv))), "svc.hcl")
			testenv.Must(t, err)
			al := runningAlloc(t, c, job)

			ctx := testenv.Context(t, 3*time.Minute)
			out, err := exec.CommandContext(ctx, berthBinary.Path(t), "agent", "drain", "--address", "unix://"+e.cfg.API.Socket, "--wait", "2m").CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("berth agent drain with a failed teardown: %v, want a non-zero exit:\n%s", err, out)
			}
			for _, want := range []string{
				"LEFT " + al.ID + " (job " + job + ")",
				"its network teardown failed",
				"no space left on device",
				"were not fully stopped",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("berth agent drain says:\n%s\nwithout %q", out, want)
				}
			}
			select {
			case <-pa.done:
			case <-time.After(time.Minute):
				t.Fatalf("the agent still runs a minute after its drain returned")
			}

			// The next agent, unarmed, tears down what was left.
			p := e.startBinary(t, cfgPath, c)
			e.stopAndDrain(t, c, p, []string{job}, before)
		})
	}
}
