package runner

import (
	"context"
	"errors"
	"maps"
	mrand "math/rand/v2"
	"time"

	"github.com/berth/berth/task/driver"
)

// errRestart is the cause of an attempt's context when the task is to be
// restarted (check_restart, a template's change_mode).
var errRestart = errors.New("task restart requested")

// attempt is one run of a task, as restartTask sees it.
type attempt struct {
	cancel context.CancelCauseFunc
	// Set by restartTask: asked, whether it counts against the restart
	// policy (check_restart: yes; a template: no), whether the task is to
	// stop for good (a failed change_script with fail_on_error).
	asked, failure, fatal bool
}

// restartOutcome is what endAttempt reports.
type restartOutcome struct {
	restarted, failure, fatal bool
}

// beginAttempt is called before each run of task i. The returned context
// ends with ctx, or when restartTask asks for a restart; the environment
// of dt gets what the task's env templates rendered last. end says whether
// a restart was asked during the run.
func (a *allocRun) beginAttempt(ctx context.Context, i int, dt *driver.Task) (context.Context, func() restartOutcome) {
	actx, cancel := context.WithCancelCause(ctx)
	at := &attempt{cancel: cancel}
	x := &a.ext
	x.mu.Lock()
	if x.attempts == nil {
		x.attempts = map[int]*attempt{}
	}
	x.attempts[i] = at
	if tt := x.tmpl[i]; tt != nil && len(tt.envVars) > 0 {
		// The task's own environment, then what its env templates say
		// now, as Nomad (they override the env block).
		env := maps.Clone(tt.env)
		maps.Copy(env, tt.envVars)
		dt.Env = env
	}
	x.mu.Unlock()
	return actx, func() restartOutcome {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.attempts[i] == at {
			delete(x.attempts, i)
		}
		cancel(nil)
		return restartOutcome{restarted: at.asked, failure: at.failure, fatal: at.fatal}
	}
}

// restartTask stops the current run of task i so that runTask starts it
// again: as a failure of the restart policy when failure is set, at once
// and uncounted otherwise; fatal ends the task for good, failed. It
// reports false when the task is not running.
func (a *allocRun) restartTask(i int, failure, fatal bool, why string) bool {
	x := &a.ext
	x.mu.Lock()
	at := x.attempts[i]
	if at == nil || at.asked || x.closed {
		x.mu.Unlock()
		return false
	}
	at.asked, at.failure, at.fatal = true, failure, fatal
	x.mu.Unlock()
	typ := TaskRestartSignal
	if fatal {
		typ = TaskKilling
	}
	a.taskEvent(i, typ, why)
	at.cancel(errRestart)
	return true
}

// jitter is Nomad's restart delay: d plus a random part of a quarter of it.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + time.Duration(float64(mrand.Int64N(int64(d)))*0.25)
}
