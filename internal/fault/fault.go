// Package fault lets tests make berth die abruptly at a named point, to
// prove that whatever berth leaves half-done is finished or undone by the
// next berth process, or make one operation fail as a full disk would.
// It is driven by the environment variable BERTH_FAULT=<point> and does
// nothing when it is unset.
package fault

import (
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

// Failure points: the operation fails with ENOSPC instead of running.
const (
	FailPutAllocation = "fail-put-allocation" // store.PutAllocation: no allocation can be recorded
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
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered asynchronously
	}
}

// Active reports whether any crash point is armed (to skip work that only
// fault injection needs, such as wrapping the plugin exec).
func Active() bool { return os.Getenv(Env) != "" }
