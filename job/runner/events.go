package runner

import (
	"fmt"
	"strings"
	"time"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// Task event types, Nomad 1.6.5's (api.TaskEvent.Type); their messages
// are Nomad's DisplayMessage. The parity suite (node/parity,
// TestParityLifecycle) compares both with what Nomad emits.
const (
	TaskReceived          = "Received"
	TaskSetup             = "Task Setup"
	TaskSetupFailure      = "Setup Failure"
	TaskDriverFailure     = "Driver Failure"
	TaskStarted           = "Started"
	TaskTerminated        = "Terminated"
	TaskKilling           = "Killing"
	TaskKilled            = "Killed"
	TaskRestarting        = "Restarting"
	TaskNotRestarting     = "Not Restarting"
	TaskDownloadArtifacts = "Downloading Artifacts"
	TaskArtifactFailed    = "Failed Artifact Download"
	TaskSiblingFailed     = "Sibling Task Failed"
	TaskLeaderDead        = "Leader Task Dead"
	TaskMainDead          = "Main Tasks Dead"
	TaskSignaling         = "Signaling"
	TaskRestartSignal     = "Restart Signaled"
)

// Nomad's reasons (its restart tracker's) in Restarting and Not
// Restarting events.
const (
	reasonNoRestarts = "Policy allows no restarts"
	reasonDelay      = "Exceeded allowed attempts, applying a delay"
)

// taskEvent records an event of task i.
func (a *allocRun) taskEvent(i int, typ, msg string) {
	a.mu.Lock()
	a.taskEventLocked(i, typ, msg)
	a.mu.Unlock()
}

func (a *allocRun) taskEventLocked(i int, typ, msg string) {
	a.alloc.Events = append(a.alloc.Events, store.Event{Time: a.now(), Type: typ, Task: a.alloc.Tasks[i].Name, Message: msg})
}

// terminatedMsg is Nomad's Terminated message: "Exit Code: N", then the
// signal and the driver's message when there are.
func terminatedMsg(res *driver.ExitResult) string {
	parts := []string{fmt.Sprintf("Exit Code: %d", res.ExitCode)}
	if res.Signal != 0 {
		parts = append(parts, fmt.Sprintf("Signal: %d", res.Signal))
	}
	if res.OOMKilled {
		parts = append(parts, `Exit Message: "OOM Killed"`)
	}
	return strings.Join(parts, ", ")
}

// restartingMsg is Nomad's Restarting message; a reason other than a
// restart within the policy comes first.
func restartingMsg(reason string, d time.Duration) string {
	in := fmt.Sprintf("Task restarting in %v", d)
	if reason == "" {
		return in
	}
	return reason + " - " + in
}

// killingMsg is Nomad's Killing message for a stop ("interrupt" whatever
// the kill_signal, as Nomad says).
func killingMsg(timeout time.Duration) string {
	if timeout <= 0 {
		return "Sent interrupt"
	}
	return fmt.Sprintf("Sent interrupt. Waiting %v before force killing", timeout)
}
