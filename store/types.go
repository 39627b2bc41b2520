// Package store persists berth's attachments and allocations in an embedded
// bbolt database so that a crashed or killed berth can finish or undo what it
// started.
package store

import (
	"encoding/json"
	"time"
)

// Phase is where an attachment stands in its lifecycle. The record is written
// before each side effect, so the phase names the step that may have
// happened, not only the ones that certainly did.
type Phase string

const (
	// PhaseIntent: recorded before anything is created; it covers the
	// namespace's creation and ADD, so a crash in either leaves this phase.
	PhaseIntent Phase = "intent"
	// PhaseReady: ADD succeeded; the attachment is in use.
	PhaseReady Phase = "ready"
	// PhaseTearingDown: teardown started or failed and must be retried until it succeeds.
	PhaseTearingDown Phase = "tearing-down"
	// PhaseUnreadable marks a record that could not be decoded: listings
	// return it as a stub (ID, this phase, the decode error in LastError)
	// instead of failing, so that one damaged record neither hides the
	// others nor lets a sweep take its attachment for nobody's.
	PhaseUnreadable Phase = "unreadable"
)

// Attachment is one ID's network namespace and its CNI attachment.
type Attachment struct {
	ID        string `json:"id"`
	NetnsPath string `json:"netns_path"`
	Network   string `json:"network"`
	IfName    string `json:"ifname"`
	// ConfList is the network configuration list used for ADD, kept so that
	// DEL and GC use exactly what ADD used even if the file changed since.
	ConfList       json.RawMessage   `json:"conflist,omitempty"`
	Result         json.RawMessage   `json:"result,omitempty"`
	Args           map[string]string `json:"args,omitempty"`
	CapabilityArgs map[string]any    `json:"capability_args,omitempty"`
	Phase          Phase             `json:"phase"`
	// Owner is the berth process that made the attachment (PID and its
	// start time in clock ticks since boot, so a reused PID is not mistaken
	// for it).
	OwnerPID       int       `json:"owner_pid,omitempty"`
	OwnerStartTime uint64    `json:"owner_start_time,omitempty"`
	AllocID        string    `json:"alloc_id,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	// TeardownAttempts and LastError describe a teardown that has not yet
	// succeeded; NextAttempt is when it may be retried.
	TeardownAttempts int       `json:"teardown_attempts,omitempty"`
	LastError        string    `json:"last_error,omitempty"`
	NextAttempt      time.Time `json:"next_attempt,omitempty"`
}

// AllocStatus is an allocation's client status, with Nomad's names.
type AllocStatus string

const (
	AllocPending  AllocStatus = "pending"
	AllocRunning  AllocStatus = "running"
	AllocComplete AllocStatus = "complete"
	AllocFailed   AllocStatus = "failed"
	AllocLost     AllocStatus = "lost"
	// AllocUnreadable marks an allocation record that could not be decoded
	// (see PhaseUnreadable); StatusDesc says why.
	AllocUnreadable AllocStatus = "unreadable"
)

// Terminal reports whether nothing more will happen to an allocation with this status.
func (s AllocStatus) Terminal() bool {
	return s == AllocComplete || s == AllocFailed || s == AllocLost
}

// TaskHandle is what is needed to find and stop a task's process or
// container after the berth that started it died.
type TaskHandle struct {
	Driver        string `json:"driver"`
	PID           int    `json:"pid,omitempty"`
	PIDStartTime  uint64 `json:"pid_start_time,omitempty"`
	ContainerID   string `json:"container_id,omitempty"`
	ContainerName string `json:"container_name,omitempty"`
	CgroupPath    string `json:"cgroup_path,omitempty"`
	// AllocID and Task name the task the handle is of; a driver checks
	// them against what it finds before it re-attaches anything.
	AllocID string `json:"alloc_id,omitempty"`
	Task    string `json:"task,omitempty"`
	// SupervisorPID and SupervisorStartTime are the raw_exec/exec task's
	// supervisor (berth-supervisor), its parent, which outlives berth;
	// StatusPath is where it writes the task's exit status.
	SupervisorPID       int    `json:"supervisor_pid,omitempty"`
	SupervisorStartTime uint64 `json:"supervisor_start_time,omitempty"`
	StatusPath          string `json:"status_path,omitempty"`
	// KillSignal is what a stop sends first (the task's kill_signal; 0:
	// SIGTERM), kept so that a re-attached task is stopped as it asked.
	KillSignal int `json:"kill_signal,omitempty"`
}

// TaskState is one task of an allocation.
type TaskState struct {
	Name       string      `json:"name"`
	Driver     string      `json:"driver"`
	State      string      `json:"state"` // pending, running, dead
	Failed     bool        `json:"failed"`
	ExitCode   int         `json:"exit_code"`
	Signal     int         `json:"signal,omitempty"`
	Restarts   int         `json:"restarts"`
	StartedAt  time.Time   `json:"started_at,omitempty"`
	FinishedAt time.Time   `json:"finished_at,omitempty"`
	Handle     *TaskHandle `json:"handle,omitempty"`
	// NotStarted says why a dead task never ran (its start failed);
	// ExitCode is then no exit status.
	NotStarted string `json:"not_started,omitempty"`
	// Exited is set once the task's process ended and its result
	// (ExitCode, Signal, FinishedAt) is recorded, before the driver lets
	// go of it (Handle kept until then): an agent killed in between leaves
	// the next one the exit, never a task to run again.
	Exited bool `json:"exited,omitempty"`
}

// Event is one line of an allocation's timeline.
type Event struct {
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Task is the task the event is about, as Nomad's task events (its
	// type and message Nomad's words); empty for the allocation's own.
	Task    string `json:"task,omitempty"`
	Message string `json:"message"`
}

// NetworkStatus is what the allocation's network looks like, as Nomad's
// NetworkStatus: where the namespace is and what CNI gave it.
type NetworkStatus struct {
	Mode      string   `json:"mode"`
	Network   string   `json:"network,omitempty"`
	NetnsPath string   `json:"netns_path,omitempty"`
	Interface string   `json:"interface,omitempty"`
	IPv4      []string `json:"ipv4,omitempty"`
	IPv6      []string `json:"ipv6,omitempty"`
	Gateway   []string `json:"gateway,omitempty"`
	DNS       *DNS     `json:"dns,omitempty"`
	// Ports are the group's port labels as mapped for this allocation.
	Ports []PortMapping `json:"ports,omitempty"`
}

// PortMapping is one port label of an allocation: HostIP:HostPort on the
// host reaches To inside the namespace (Nomad's AllocatedPorts).
type PortMapping struct {
	Label    string `json:"label"`
	HostIP   string `json:"host_ip,omitempty"`
	HostPort int    `json:"host_port"`
	To       int    `json:"to,omitempty"`
}

// DNS is the resolver configuration handed to the workload.
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// RescheduleEvent is one reschedule of an allocation's slot: when it was
// decided, which allocation failed, and the delay the policy gave.
type RescheduleEvent struct {
	RescheduleTime time.Time     `json:"reschedule_time"`
	PrevAllocID    string        `json:"prev_alloc_id"`
	Delay          time.Duration `json:"delay"`
}

// Allocation is one run of a task group.
type Allocation struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace,omitempty"`
	JobID     string `json:"job_id"`
	// ParentJobID is set on an allocation of a periodic job's launch
	// (JobID "<parent>/periodic-<unix>"): it names the periodic job, which
	// lists, re-adopts and stops its children's allocations, and whose
	// retention they share.
	ParentJobID    string         `json:"parent_job_id,omitempty"`
	Group          string         `json:"group"`
	Status         AllocStatus    `json:"status"`
	StatusDesc     string         `json:"status_description,omitempty"`
	Tasks          []TaskState    `json:"tasks"`
	Network        *NetworkStatus `json:"network,omitempty"`
	Events         []Event        `json:"events,omitempty"`
	OwnerPID       int            `json:"owner_pid,omitempty"`
	OwnerStartTime uint64         `json:"owner_start_time,omitempty"`
	// Index is the allocation's index in its group (NOMAD_ALLOC_INDEX):
	// the slot a re-adopted allocation keeps.
	Index int `json:"index"`
	// Agent is set on allocations an agent runs: only those may be
	// re-adopted by the next agent on the data dir.
	Agent bool `json:"agent,omitempty"`
	// Detached is set when a stopping agent left the allocation running
	// for the next one to re-adopt: gc keeps it (its owner is gone on
	// purpose) until an agent re-adopts it or gc is told to reclaim it.
	Detached bool `json:"detached,omitempty"`
	// StopRequested is set (to what asked: "alloc stop", "job stop",
	// "drain") when the operator stopped the allocation, before anything
	// is stopped: an agent that dies meanwhile leaves the stop to the next
	// one, which finishes it instead of re-adopting the allocation.
	StopRequested string `json:"stop_requested,omitempty"`
	// PreviousAllocation is the failed allocation this one reschedules
	// (same group and index), NextAllocation the one that rescheduled
	// this one: recorded on both in the transaction that records this
	// one's failure, so that the decision is never lost nor taken twice.
	PreviousAllocation string `json:"previous_allocation,omitempty"`
	NextAllocation     string `json:"next_allocation,omitempty"`
	// RescheduleTracker are the reschedules that led to this allocation,
	// oldest first (Nomad's RescheduleTracker.Events).
	RescheduleTracker []RescheduleEvent `json:"reschedule_tracker,omitempty"`
	// RescheduleAt is when a rescheduled allocation may start (its
	// previous one's failure plus the policy's delay): it is pending
	// until then, whichever agent waits.
	RescheduleAt time.Time `json:"reschedule_at,omitzero"`
	CreatedAt    time.Time `json:"created_at"`
	ModifiedAt   time.Time `json:"modified_at"`
	// Timings in milliseconds, by phase name (netns, add, task, driver_cleanup, del, remove).
	TimingsMS       map[string]float64 `json:"timings_ms,omitempty"`
	TeardownRetries int                `json:"teardown_retries,omitempty"`
	Holders         []string           `json:"holders,omitempty"`
}
