// Package fault lets tests make berth die abruptly at a named point, to
// prove that whatever berth leaves half-done is finished or undone by the
// next berth process, or make one operation fail as a full disk would.
// It is driven by the environment variable BERTH_FAULT=<point> and does
// nothing when it is unset.
package fault

import (
	"context"
	"fmt"
	"os"
	"syscall"
)

// Env is the variable that names the crash point.
const Env = "BERTH_FAULT"

// Named crash points.
const (
	AfterIntent      = "after-intent"       // attachment recorded, nothing created
	AfterNetns       = "after-netns"        // namespace created, ADD not sent
	MidChainPrefix   = "before-plugin-add:" // + plugin type: ADD of earlier plugins done
	MidDelPrefix     = "before-plugin-del:" // + plugin type: DEL of the plugins after it in the chain done
	AfterAdd         = "after-add"          // ADD done, phase not yet ready
	TaskRunning      = "task-running"       // a task of the allocation is running
	AfterDel         = "after-del"          // DEL done, namespace still there
	DuringRemove     = "during-remove"      // namespace unmounted, mount point not unlinked
	BeforeAllocSetup = "before-alloc-setup" // allocation recorded, network not set up
	// A task started (its supervisor running, its container created), its
	// handle not recorded yet.
	AfterContainerCreate = "after-container-create" // podman: created, not started, not recorded
	TaskStarted          = "task-started"           // the driver's Start returned, handle not recorded
	// An artifact's fetch child has its first bytes in, the fetch not done.
	ArtifactFetching = "artifact-fetching"
)

// Crash points of the restore path: what the next agent does with the
// allocations a dead agent left (claim, re-attach, CHECK, heal).
const (
	AfterClaim   = "after-claim"   // allocation claimed (recorded as the new agent's), nothing resumed
	AfterRecover = "after-recover" // a task re-attached (driver Recover), not recorded
	AfterCheck   = "after-check"   // the namespace CHECKed, the result not acted on
	// Heal, after a failed CHECK: the running tasks stopped, then the
	// attachment torn down and made again. The teardown's and setup's own
	// points fire inside the heal as HealScope+"/"+point (heal/after-del,
	// heal/during-remove, heal/after-netns, heal/after-add), and the task
	// restarted into the new namespace as heal/task-started.
	HealTasksStopped = "heal-tasks-stopped" // tasks stopped and destroyed, recorded pending; namespace untouched
	Healed           = "healed"             // namespace made again and recorded, tasks not restarted
	HealScope        = "heal"
)

// Crash points of the stop path (job stop, alloc stop, drain).
const (
	StopRequested = "stop-requested" // a job stop received, nothing stopped
	// A job's new version recorded (to stop what is left of the old one
	// first), the old version's run not yet stopped.
	ReplaceRecorded = "replace-recorded"
	// The task exited (stopped, or by itself), not destroyed, its exit
	// not recorded.
	TaskExited = "task-exited"
	// Its exit recorded, the task not destroyed.
	TaskExitRecorded = "task-exit-recorded"
	// The task destroyed (driver holds nothing), its exit not recorded.
	TaskDestroyed = "task-destroyed"
	// Every task of the allocation ended and destroyed (a job that ran to
	// completion, or its main tasks dead), the network not torn down.
	AfterTasksDone       = "after-tasks-done"
	BeforeRecordTerminal = "before-record-terminal" // tasks gone, network torn down, allocation not yet terminal
	AfterRecordTerminal  = "after-record-terminal"  // allocation recorded terminal, the job's end not recorded
	// A failed allocation's reschedule recorded (the failure and its
	// pending replacement in one write), the replacement waiting out its
	// delay.
	RescheduleWaiting = "reschedule-waiting"
	DrainRequested    = "drain-requested" // drain received, nothing stopped
	DrainStopped      = "drain-stopped"   // every job stopped, the agent not yet exited
)

// Failure points: the operation fails with ENOSPC instead of running.
const (
	FailPutAllocation = "fail-put-allocation" // store.PutAllocation: no allocation can be recorded
	// attach.Manager.Teardown: no allocation's network can be torn down
	// (the record stays, for the next agent or berth gc).
	FailTeardown = "fail-teardown"
)

// Fail returns an error wrapping syscall.ENOSPC if BERTH_FAULT names this
// point, else nil.
func Fail(name string) error {
	if v := os.Getenv(Env); v != "" && v == name {
		return fmt.Errorf("%w (injected: %s=%s)", syscall.ENOSPC, Env, name)
	}
	return nil
}

// Point kills the process with SIGKILL if BERTH_FAULT names this point.
// SIGKILL, not exit: no deferred cleanup may run, as after a real crash.
func Point(name string) {
	if v := os.Getenv(Env); v != "" && v == name {
		// Cannot fail for our own PID; nothing would be left to report.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered asynchronously
	}
}

type scopeKey struct{}

// Within marks ctx as inside scope (such as HealScope): PointCtx(ctx, p)
// then also fires for BERTH_FAULT=<scope>/<p>, so that a step shared by
// several paths (a teardown) can be killed in one of them only.
func Within(ctx context.Context, scope string) context.Context {
	if !Active() {
		return ctx
	}
	if outer, _ := ctx.Value(scopeKey{}).(string); outer != "" {
		scope = outer + "/" + scope
	}
	return context.WithValue(ctx, scopeKey{}, scope)
}

// PointCtx is Point for a step that may run inside a scope (Within): it
// kills the process if BERTH_FAULT names the point, alone or as
// <scope>/<point> for ctx's scope.
func PointCtx(ctx context.Context, name string) {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	if scope, _ := ctx.Value(scopeKey{}).(string); scope != "" && v == scope+"/"+name {
		Point(v)
	}
	Point(name)
}

// Active reports whether any crash point is armed (to skip work that only
// fault injection needs, such as wrapping the plugin exec).
func Active() bool { return os.Getenv(Env) != "" }
