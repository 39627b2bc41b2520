// Package api is the client of berth's agent HTTP API (version 1) and the
// types it exchanges. The agent serves JSON over a unix socket (the file
// mode is the access control) and, optionally, over TCP where every
// request must carry "Authorization: Bearer <token>".
//
// Routes:
//
//	GET    /v1/health                        Health
//	GET    /v1/agent/self                    AgentSelf
//	GET    /v1/jobs                          []JobStub
//	POST   /v1/jobs                          JobSubmitRequest -> JobSubmitResponse
//	POST   /v1/jobs/plan                     JobSubmitRequest -> JobPlanResponse
//	GET    /v1/job/{id}                      JobStatus
//	DELETE /v1/job/{id}                      JobStopResponse
//	GET    /v1/allocations[?job=ID]          []AllocStub
//	GET    /v1/allocation/{id}               store.Allocation (an ID prefix is accepted)
//	GET    /v1/allocation/{id}/logs/{task}   text; ?type=stdout|stderr, ?tail=BYTES
//	GET    /v1/namespaces                    []attach.NetEntry
//	POST   /v1/gc[?dry_run=true]             GCReport; also ?foreign_prefix=P, ?foreign_network=N (repeatable)
//	GET    /metrics                          Prometheus text format
//
// Errors are {"error": "..."} (ErrorResponse) with a 4xx or 5xx status.
package api

import (
	"time"

	"github.com/berth/berth/jobspec"
	"github.com/berth/berth/runner"
	"github.com/berth/berth/store"
)

const (
	// DefaultSocket is where the agent listens unless configured otherwise.
	DefaultSocket = "/run/berth/berth.sock"
	// DefaultAddress is DefaultSocket as a client address.
	DefaultAddress = "unix://" + DefaultSocket
	// MaxBodyBytes bounds a request body; larger ones get 413.
	MaxBodyBytes = 1 << 20
	// EnvAddress and EnvToken name the environment variables the CLI reads
	// when --address and --token are not given.
	EnvAddress = "BERTH_ADDR"
	EnvToken   = "BERTH_TOKEN"
)

// ErrorResponse is the body of every error. Diagnostics are set when a job
// file did not parse; Error then has one "file:line:col: ..." line each.
type ErrorResponse struct {
	Error       string               `json:"error"`
	Diagnostics []jobspec.Diagnostic `json:"diagnostics,omitempty"`
}

// Health is GET /v1/health. Status is "ok", or "draining" (with 503)
// while the agent shuts down.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
}

// AgentSelf is GET /v1/agent/self.
type AgentSelf struct {
	Version     string         `json:"version"`
	PID         int            `json:"pid"`
	StartedAt   time.Time      `json:"started_at"`
	Draining    bool           `json:"draining"`
	Config      ConfigSummary  `json:"config"`
	Jobs        map[string]int `json:"jobs_by_status"`
	Allocations map[string]int `json:"allocations_by_status"`
	// LastGC is the report of the last garbage collection (the reconcile
	// at start, the periodic one, or one asked through the API).
	LastGC *GCReport `json:"last_gc,omitempty"`
}

// ConfigSummary is the agent's effective configuration, without secrets.
type ConfigSummary struct {
	DataDir       string   `json:"data_dir"`
	NetnsDir      string   `json:"netns_dir"`
	LockDir       string   `json:"lock_dir"`
	CNIConfigDir  string   `json:"cni_config_dir"`
	CNIPath       []string `json:"cni_path"`
	CNICacheDir   string   `json:"cni_cache_dir"`
	PodmanSocket  string   `json:"podman_socket,omitempty"`
	BridgeNetwork string   `json:"bridge_network"`
	BridgeIface   string   `json:"bridge_iface"`
	BridgeSubnet  string   `json:"bridge_subnet"`
	Socket        string   `json:"socket"`
	TCPAddress    string   `json:"tcp_address,omitempty"`
	TokenSet      bool     `json:"token_set"`
	GCInterval    string   `json:"gc_interval"`
	GCMode        string   `json:"gc_mode"`
	Retention     int      `json:"retention"`
	StopTimeout   string   `json:"stop_timeout"`
	LogLevel      string   `json:"log_level"`
	LogFormat     string   `json:"log_format"`
}

// JobSubmitRequest is the body of POST /v1/jobs and /v1/jobs/plan: the job
// file's HCL text, and the name used in error positions.
type JobSubmitRequest struct {
	JobHCL   string `json:"job_hcl"`
	Filename string `json:"filename,omitempty"`
}

// JobSubmitResponse answers POST /v1/jobs.
type JobSubmitResponse struct {
	JobID string `json:"job_id"`
	// Replaced is true when a job with that ID was running and was stopped
	// for this one.
	Replaced     bool        `json:"replaced"`
	Warnings     []string    `json:"warnings,omitempty"`
	NextLaunches []time.Time `json:"next_launches,omitempty"`
}

// JobPlanResponse answers POST /v1/jobs/plan: what submitting would do.
type JobPlanResponse struct {
	Job *jobspec.Job `json:"job"`
	// Exists and Running describe a job already known under that ID;
	// submitting replaces it (stopping it first if it runs).
	Exists       bool        `json:"exists"`
	Running      bool        `json:"running"`
	Warnings     []string    `json:"warnings,omitempty"`
	NextLaunches []time.Time `json:"next_launches,omitempty"`
}

// Job statuses.
const (
	JobRunning  = "running"  // launching or running allocations
	JobStopping = "stopping" // stop asked; tasks and networks going away
	JobDead     = "dead"     // finished by itself, or could not be resumed
)

// JobStub is one line of GET /v1/jobs.
type JobStub struct {
	ID          string         `json:"id"`
	Type        string         `json:"type"`
	Namespace   string         `json:"namespace"`
	Status      string         `json:"status"`
	Periodic    []string       `json:"periodic,omitempty"`
	SubmittedAt time.Time      `json:"submitted_at"`
	FinishedAt  *time.Time     `json:"finished_at,omitempty"`
	NextLaunch  *time.Time     `json:"next_launch,omitempty"`
	Allocations map[string]int `json:"allocations_by_status"`
	// Error says why a job is dead without having run to its end (it
	// could not be resumed after a restart, for instance).
	Error string `json:"error,omitempty"`
}

// JobStatus is GET /v1/job/{id}.
type JobStatus struct {
	JobStub
	Job *jobspec.Job `json:"job"`
	// Summary is the runner's summary once the job has finished.
	Summary     *runner.Summary `json:"summary,omitempty"`
	Allocations []AllocStub     `json:"allocations"`
}

// JobStopResponse answers DELETE /v1/job/{id}. Stopped is false (with
// status 202) when the job was still stopping when the agent stopped
// waiting; it goes on stopping and is removed when done.
type JobStopResponse struct {
	JobID   string          `json:"job_id"`
	Stopped bool            `json:"stopped"`
	Summary *runner.Summary `json:"summary,omitempty"`
}

// TaskStub is a task of an AllocStub.
type TaskStub struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Failed   bool   `json:"failed"`
	ExitCode int    `json:"exit_code"`
	Restarts int    `json:"restarts"`
}

// AllocStub is one line of GET /v1/allocations.
type AllocStub struct {
	ID         string            `json:"id"`
	JobID      string            `json:"job_id"`
	Group      string            `json:"group"`
	Status     store.AllocStatus `json:"status"`
	StatusDesc string            `json:"status_description,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	ModifiedAt time.Time         `json:"modified_at"`
	Tasks      []TaskStub        `json:"tasks"`
	Network    string            `json:"network,omitempty"`
	NetnsPath  string            `json:"netns_path,omitempty"`
	IPv4       []string          `json:"ipv4,omitempty"`
}

// NewAllocStub summarises an allocation record.
func NewAllocStub(a *store.Allocation) AllocStub {
	s := AllocStub{
		ID: a.ID, JobID: a.JobID, Group: a.Group, Status: a.Status, StatusDesc: a.StatusDesc,
		CreatedAt: a.CreatedAt, ModifiedAt: a.ModifiedAt, Tasks: make([]TaskStub, 0, len(a.Tasks)),
	}
	for _, t := range a.Tasks {
		s.Tasks = append(s.Tasks, TaskStub{Name: t.Name, State: t.State, Failed: t.Failed, ExitCode: t.ExitCode, Restarts: t.Restarts})
	}
	if n := a.Network; n != nil {
		s.Network, s.NetnsPath, s.IPv4 = n.Network, n.NetnsPath, n.IPv4
		if s.Network == "" {
			s.Network = n.Mode
		}
	}
	return s
}

// GCRequest asks for a garbage collection: see `berth gc --help` for the
// foreign prefixes and networks.
type GCRequest struct {
	DryRun          bool
	ForeignPrefixes []string
	ForeignNetworks []string
}

// GCItem is one thing garbage collection found, reclaimed or kept.
type GCItem struct {
	Kind    string `json:"kind"`
	ID      string `json:"id,omitempty"`
	Network string `json:"network,omitempty"`
	Path    string `json:"path,omitempty"`
	Reason  string `json:"reason"`
}

// GCReport is POST /v1/gc: the gc package's report, as JSON.
type GCReport struct {
	DryRun           bool     `json:"dry_run"`
	StoreUnavailable string   `json:"store_unavailable,omitempty"`
	Reboot           bool     `json:"reboot_detected,omitempty"`
	Found            []GCItem `json:"found"`
	Reclaimed        []GCItem `json:"reclaimed"`
	Kept             []GCItem `json:"kept"`
	Errors           []string `json:"errors"`
	DurationMS       float64  `json:"duration_ms"`
}
