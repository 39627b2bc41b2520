package runner_test

import (
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/runner"
)

// A periodic job resumed after a restart goes on from its last launch: a
// launch missed while no agent ran runs once at start (Nomad's periodic
// dispatcher does the same), and one that did happen is never repeated.
// Subnet 10.199.180.0/24 (shared with agent's re-adoption tests, which
// never run in the same binary).
func TestPeriodicResumesFromLastLaunch(t *testing.T) {
	e := newEnv(t, "10.199.180.0/24")
	// Hourly: without the catch-up the first launch would be up to an hour
	// away.
	j := e.job(t, `job "btrun-hourly" {
  type = "batch"
  periodic {
    crons = ["0 * * * *"]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`)
	cases := []struct {
		name       string
		lastLaunch time.Time
		launches   int
	}{
		// Two hours ago: the last hour's launch was missed.
		{"missed launch runs once", time.Now().Add(-2 * time.Hour), 1},
		// The latest launch time happened: nothing is due until the next hour.
		{"done launch not repeated", latestSlot(t, j.Periodic.Next), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testenv.Context(t, time.Minute)
			var launched []time.Time
			sum, err := e.r.RunJob(ctx, j, runner.RunOptions{
				MaxRuns: 1, For: 3 * time.Second, LastLaunch: tc.lastLaunch,
				OnLaunch: func(at time.Time) { launched = append(launched, at) },
			})
			testenv.Must(t, err)
			if sum.Launches != tc.launches || len(launched) != tc.launches {
				t.Errorf("launches %d (told %v), want %d", sum.Launches, launched, tc.launches)
			}
			checkClean(t, e, sum)
		})
	}
}

// latestSlot is the newest launch time at or before now.
func latestSlot(t *testing.T, next func(time.Time) time.Time) time.Time {
	t.Helper()
	from := time.Now().Add(-2 * time.Hour)
	var last time.Time
	for s := next(from); !s.IsZero() && !s.After(time.Now()); s = next(s) {
		last = s
	}
	if last.IsZero() {
		t.Fatal("no launch time in the last two hours")
	}
	return last
}
