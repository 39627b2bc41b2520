// Package api is berth's agent HTTP API, version 1: its wire types and a
// client. The agent serves JSON over a unix socket (the file mode is the
// access control) and, optionally, over TCP where every request must carry
// "Authorization: Bearer <token>".
//
// This package imports only the standard library, so a client program
// links nothing else of berth. The types here are the contract: the agent
// converts its internal records (store, attach, runner, gc, jobspec) to
// them in one place, so that an internal rename cannot change the API.
//
// Routes (all JSON unless said otherwise):
//
//	GET    /v1/health                        Health
//	GET    /v1/agent/self                    AgentSelf
//	GET    /v1/jobs                          []JobStub
//	POST   /v1/jobs                          JobSubmitRequest -> JobSubmitResponse
//	POST   /v1/jobs/plan                     JobSubmitRequest -> JobPlanResponse
//	GET    /v1/job/{id}                      JobStatus
//	DELETE /v1/job/{id}[?purge=true][&detach=true]  JobStopResponse (202 while still stopping)
//	GET    /v1/job/{id}/versions             JobVersions, newest first
//	POST   /v1/job/{id}/dispatch             JobDispatchRequest -> JobDispatchResponse
//	GET    /v1/allocations[?job=ID]          []AllocStub, newest first
//	GET    /v1/allocation/{id}               Allocation (an ID prefix is accepted)
//	GET    /v1/allocation/{id}/logs/{task}   text; ?type=stdout|stderr, ?tail=BYTES
//	GET    /v1/namespaces                    []NetnsEntry
//	GET    /v1/services                      []ServiceStub
//	GET    /v1/service/{name}                []ServiceRegistration (404 when none)
//	POST   /v1/gc[?dry_run=true]             GCReport; also ?foreign_prefix=P, ?foreign_network=N (repeatable)
//	GET    /metrics                          Prometheus text format
//
// Errors are ErrorResponse ({"error": "..."}) with a 4xx or 5xx status.
//
// Compatibility within v1: fields may be added, never renamed, retyped or
// removed; a client ignores fields it does not know. Times are RFC 3339
// (encoding/json's time.Time); durations measured by berth are float
// milliseconds (fields ending in _ms) or seconds (_s); durations written in
// a job file are Go duration text ("15s", see Duration).
package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Version is the API version; every route but /metrics is under "/v1".
const Version = "v1"

const (
	// DefaultSocket is where the agent listens unless configured otherwise.
	DefaultSocket = "/run/berth/berth.sock"
	// DefaultAddress is DefaultSocket as a client address.
	DefaultAddress = "unix://" + DefaultSocket
	// MaxBodyBytes bounds a request body; larger ones get 413.
	MaxBodyBytes = 1 << 20
	// EnvAddress, EnvToken and the others name the environment variables
	// the CLI reads (OptionsFromEnv): the agent's address, its bearer token
	// (or a file holding it: a token is never a command-line argument,
	// which ps shows), and the TLS files of an https:// address.
	EnvAddress       = "BERTH_ADDR"
	EnvToken         = "BERTH_TOKEN"
	EnvTokenFile     = "BERTH_TOKEN_FILE"
	EnvCACert        = "BERTH_CACERT"
	EnvClientCert    = "BERTH_CLIENT_CERT"
	EnvClientKey     = "BERTH_CLIENT_KEY"
	EnvTLSServerName = "BERTH_TLS_SERVER_NAME"
)

// ErrorResponse is the body of every error.
type ErrorResponse struct {
	// Error is the message. When Diagnostics are set it has one
	// "file:line:col: summary; detail" line per diagnostic.
	Error string `json:"error"`
	// Diagnostics are set (with 400) when a submitted job file did not
	// parse or validate, sorted by position.
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
}

// Diagnostic is one problem in a job file, or one warning about it.
type Diagnostic struct {
	File    string `json:"file"`   // the filename of the submission
	Line    int    `json:"line"`   // 1-based
	Column  int    `json:"column"` // 1-based, in bytes
	Summary string `json:"summary"`
	Detail  string `json:"detail,omitempty"` // what to do about it, when known
}

// Pos is a place in a job file.
type Pos struct {
	File   string `json:"file"`
	Line   int    `json:"line"`   // 1-based; 0 when unknown
	Column int    `json:"column"` // 1-based; 0 when unknown
}

// Health is GET /v1/health.
type Health struct {
	// Status is "ok", or "draining" (with 503) while the agent shuts down.
	Status  string `json:"status"`
	Version string `json:"version"` // berth's version
	// Reconciling is set while the reconcile at start runs (the API
	// answers meanwhile; submitted jobs start once it is done).
	Reconciling bool `json:"reconciling,omitempty"`
}

// DrainResponse answers POST /v1/agent/drain: the agent stops every job
// (Jobs were running), tears their networks down, and exits.
type DrainResponse struct {
	Draining bool `json:"draining"`
	Jobs     int  `json:"jobs"`
	PID      int  `json:"pid"`
	// With ?wait=true the answer comes once the drain is done: Done is
	// set, Stopped are the allocations it ended and Left those it could
	// not end, or ended with something of them left on the host (a
	// network whose teardown failed, a task not destroyed), each with its
	// status and Why; the process exits right after.
	Done    bool           `json:"done,omitempty"`
	Stopped []DrainedAlloc `json:"stopped,omitempty"`
	Left    []DrainedAlloc `json:"left,omitempty"`
}

// DrainedAlloc is one allocation a drain found running.
type DrainedAlloc struct {
	ID     string `json:"id"`
	JobID  string `json:"job_id"`
	Status string `json:"status"`
	// Why says, for one left, what of it is still there and why (its
	// teardown's error): the next agent or berth gc finishes it.
	Why string `json:"why,omitempty"`
}

// AgentSelf is GET /v1/agent/self.
type AgentSelf struct {
	Version   string    `json:"version"` // berth's version
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	Draining  bool      `json:"draining"` // shutting down: no new launches
	// Reconciling: the reconcile at start still runs.
	Reconciling bool          `json:"reconciling,omitempty"`
	Config      ConfigSummary `json:"config"`
	// Jobs counts the known jobs by status (JobRunning, ...).
	Jobs map[string]int `json:"jobs_by_status"`
	// Allocations counts the stored allocations by status (AllocPending, ...).
	Allocations map[string]int `json:"allocations_by_status"`
	// LastGC is the report of the last garbage collection that was not a
	// dry run (the reconcile at start, the periodic one, or one asked
	// through the API); absent before the first. Its lists are bounded
	// (MaxGCReportItems each, Omitted set); its totals are not.
	LastGC *GCReport `json:"last_gc,omitempty"`
}

// ConfigSummary is the agent's effective configuration, without secrets.
// Durations are Go duration text.
type ConfigSummary struct {
	DataDir       string   `json:"data_dir"`
	NetnsDir      string   `json:"netns_dir"`
	LockDir       string   `json:"lock_dir"`
	CNIConfigDir  string   `json:"cni_config_dir"`
	CNIPath       []string `json:"cni_path"`
	CNICacheDir   string   `json:"cni_cache_dir"`
	PodmanSocket  string   `json:"podman_socket,omitempty"`
	BridgeNetwork string   `json:"bridge_network"` // CNI network name of network mode "bridge"
	BridgeIface   string   `json:"bridge_iface"`   // its Linux bridge
	BridgeSubnet  string   `json:"bridge_subnet"`  // its IPv4 subnet (CIDR)
	Socket        string   `json:"socket"`
	TCPAddress    string   `json:"tcp_address,omitempty"` // host:port actually listened on
	TokenSet      bool     `json:"token_set"`             // a bearer token is configured
	// TLS: the TCP API is served over TLS; ClientCertRequired: clients
	// must present a certificate signed by the configured CA.
	TLS                bool   `json:"tls,omitempty"`
	ClientCertRequired bool   `json:"client_cert_required,omitempty"`
	MaxConnections     int    `json:"max_connections,omitempty"` // per listener
	ReadTimeout        string `json:"read_timeout,omitempty"`
	GCInterval         string `json:"gc_interval"`
	GCMode             string `json:"gc_mode"`   // "full" or "records"
	Retention          int    `json:"retention"` // terminal allocations kept per job
	StopTimeout        string `json:"stop_timeout"`
	LogLevel           string `json:"log_level"`
	LogFormat          string `json:"log_format"`
}

// JobSubmitRequest is the body of POST /v1/jobs and /v1/jobs/plan.
type JobSubmitRequest struct {
	JobHCL string `json:"job_hcl"` // the job file's text (Nomad HCL)
	// Filename is used in diagnostics' positions (its base name only);
	// "job.nomad.hcl" when empty.
	Filename string `json:"filename,omitempty"`
	// The job variables, as `nomad job run` takes them, weakest first:
	// EnvVars are the submitter's NOMAD_VAR_<name>=VALUE environment
	// entries (the agent never reads its own environment for them);
	// VarFiles are -var-file contents, in order; Vars are -var
	// NAME=VALUE arguments, in order (a later one wins). The agent keeps
	// them with the job, to parse it again after a restart.
	EnvVars  []string  `json:"env_vars,omitempty"`
	VarFiles []VarFile `json:"var_files,omitempty"`
	Vars     []string  `json:"vars,omitempty"`
	// EnforceIndex makes POST /v1/jobs refuse (409) unless the job's
	// current JobModifyIndex is JobModifyIndex (0: the job must not
	// exist), as `nomad job run -check-index`.
	EnforceIndex   bool   `json:"enforce_index,omitempty"`
	JobModifyIndex uint64 `json:"job_modify_index,omitempty"`
}

// VarFile is one -var-file: Name (its base name) says its format, JSON
// when it ends in ".json", HCL otherwise, and is used in positions.
type VarFile struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// JobDispatchRequest is the body of POST /v1/job/{id}/dispatch: the meta
// and payload of one dispatch of a parameterized job, checked against its
// parameterized block (meta_required, meta_optional, payload).
type JobDispatchRequest struct {
	Meta map[string]string `json:"meta,omitempty"`
	// Payload is base64 in JSON, as in Nomad's API; at most 16 KiB.
	Payload []byte `json:"payload,omitempty"`
}

// JobDispatchResponse answers POST /v1/job/{id}/dispatch: the child job
// that runs the dispatch, with its own ID ("<parent>/dispatch-<unix
// seconds>-<8 hex digits>", as Nomad's); follow it with GET
// /v1/job/{dispatched_job_id} (the ID path-escaped).
type JobDispatchResponse struct {
	DispatchedJobID string `json:"dispatched_job_id"`
	ParentJobID     string `json:"parent_job_id"`
}

// JobSubmitResponse answers POST /v1/jobs.
type JobSubmitResponse struct {
	JobID string `json:"job_id"`
	// Replaced is true when a job with that ID was running and was stopped
	// for this one.
	Replaced bool `json:"replaced"`
	// Warnings are accepted constructs that do nothing on berth, as
	// Diagnostic strings.
	Warnings []string `json:"warnings,omitempty"`
	// NextLaunches are a periodic job's next five launch times.
	NextLaunches []time.Time `json:"next_launches,omitempty"`
	// Parameterized: the job is registered and runs only when dispatched
	// (POST /v1/job/{id}/dispatch).
	Parameterized bool `json:"parameterized,omitempty"`
	// Update says what the submission did to a job already known: one of
	// UpdateCreate, UpdateNone, UpdateInPlace, UpdateDestructive.
	// Unchanged is Update == UpdateNone: the same job (comments and
	// layout do not count) was live, nothing was stopped or restarted
	// and no version was made.
	Update    string `json:"update"`
	Unchanged bool   `json:"unchanged,omitempty"`
	// Version is the job's version after the submission (0 for a new
	// job, +1 per change, as Nomad's); JobModifyIndex is what -check-index
	// compares with.
	Version        uint64 `json:"version"`
	JobModifyIndex uint64 `json:"job_modify_index"`
}

// What a submission does to the job known under its ID
// (JobSubmitResponse.Update, JobPlanResponse.Update).
const (
	// UpdateCreate: no live job had that ID (none, or a dead or stopped
	// one): the job starts.
	UpdateCreate = "create"
	// UpdateNone: the live job is the same; nothing happens.
	UpdateNone = "none"
	// UpdateInPlace: only fields that do not reach the tasks changed
	// (the job's meta, priority, datacenters): a new version is
	// recorded, the allocations keep running.
	UpdateInPlace = "in-place"
	// UpdateDestructive: the running allocations are stopped and
	// replaced by the new version's.
	UpdateDestructive = "destructive"
)

// JobPlanResponse answers POST /v1/jobs/plan: what submitting would do.
type JobPlanResponse struct {
	Job *Job `json:"job"` // the parsed job, every default filled in
	// Exists and Running describe a job already known under that ID;
	// submitting replaces it (stopping it first if it runs).
	Exists       bool        `json:"exists"`
	Running      bool        `json:"running"`
	Warnings     []string    `json:"warnings,omitempty"`      // as in JobSubmitResponse
	NextLaunches []time.Time `json:"next_launches,omitempty"` // as in JobSubmitResponse
	// Update is what submitting would do (UpdateCreate, ...); Diff is the
	// job against the current version (Type DiffNone when unchanged);
	// Annotations count the allocations per group, as Nomad's plan.
	Update      string           `json:"update"`
	Diff        *JobDiff         `json:"diff,omitempty"`
	Annotations *PlanAnnotations `json:"annotations,omitempty"`
	// JobModifyIndex is the current job's (0: none), for
	// JobSubmitRequest.JobModifyIndex (-check-index); Version its version.
	JobModifyIndex uint64 `json:"job_modify_index"`
	Version        uint64 `json:"version"`
	// CreatesOrDestroys is true when submitting would create or destroy
	// allocations: `job plan` then exits 1, as Nomad's.
	CreatesOrDestroys bool `json:"creates_or_destroys"`
}

// Diff types, as Nomad's.
const (
	DiffAdded   = "Added"
	DiffDeleted = "Deleted"
	DiffEdited  = "Edited"
	DiffNone    = "None"
)

// Keys of TaskGroupDiff.Updates, as Nomad's plan annotations.
const (
	UpdateKeyCreate      = "create"
	UpdateKeyDestroy     = "destroy"
	UpdateKeyInPlace     = "in-place update"
	UpdateKeyDestructive = "create/destroy update"
	UpdateKeyIgnore      = "ignore"
)

// JobDiff is a job against the current version, shaped as Nomad's
// structs.JobDiff. Field names are paths of the job's JSON (GET
// /v1/job/{id} "job"), without positions: "priority", "meta.owner",
// "network.ports[0].to".
type JobDiff struct {
	Type       string          `json:"type"` // DiffAdded, DiffDeleted, DiffEdited or DiffNone
	ID         string          `json:"id"`
	Fields     []FieldDiff     `json:"fields,omitempty"`
	TaskGroups []TaskGroupDiff `json:"task_groups,omitempty"`
}

// FieldDiff is one changed field; Old or New is "" when it was added or
// deleted.
type FieldDiff struct {
	Type        string   `json:"type"`
	Name        string   `json:"name"`
	Old         string   `json:"old,omitempty"`
	New         string   `json:"new,omitempty"`
	Annotations []string `json:"annotations,omitempty"`
}

// TaskGroupDiff is one group's diff. Updates counts its allocations by
// what happens to them (UpdateKeyCreate, ...).
type TaskGroupDiff struct {
	Type    string            `json:"type"`
	Name    string            `json:"name"`
	Fields  []FieldDiff       `json:"fields,omitempty"`
	Tasks   []TaskDiff        `json:"tasks,omitempty"`
	Updates map[string]uint64 `json:"updates,omitempty"`
}

// TaskDiff is one task's diff; Annotations say what it forces ("forces
// create/destroy update").
type TaskDiff struct {
	Type        string      `json:"type"`
	Name        string      `json:"name"`
	Fields      []FieldDiff `json:"fields,omitempty"`
	Annotations []string    `json:"annotations,omitempty"`
}

// PlanAnnotations are Nomad's plan annotations: per group, how many
// allocations each kind of update touches.
type PlanAnnotations struct {
	DesiredTGUpdates map[string]DesiredUpdates `json:"desired_tg_updates"`
}

// DesiredUpdates is Nomad's structs.DesiredUpdates for one group.
type DesiredUpdates struct {
	Ignore            uint64 `json:"ignore"`
	Place             uint64 `json:"place"`
	Stop              uint64 `json:"stop"`
	InPlaceUpdate     uint64 `json:"in_place_update"`
	DestructiveUpdate uint64 `json:"destructive_update"`
}

// JobVersions is GET /v1/job/{id}/versions: the versions the agent
// keeps of a job (at most MaxJobVersions), newest first.
type JobVersions struct {
	JobID    string       `json:"job_id"`
	Versions []JobVersion `json:"versions"`
}

// MaxJobVersions is how many versions of a job the agent keeps, the
// current one included, as Nomad's server keeps (JobTrackedVersions).
const MaxJobVersions = 6

// JobVersion is one kept version of a job: its source and variables as
// submitted, and the job they parse to now (nil, with ParseError, if
// they no longer parse on this node).
type JobVersion struct {
	Version     uint64    `json:"version"`
	SubmittedAt time.Time `json:"submitted_at"`
	// Stable: Nomad marks a version stable once its deployment is
	// healthy; berth marks one stable when a newer version replaces it
	// while it ran without error.
	Stable     bool      `json:"stable"`
	Current    bool      `json:"current"`
	Source     string    `json:"source"`
	Filename   string    `json:"filename"`
	EnvVars    []string  `json:"env_vars,omitempty"`
	VarFiles   []VarFile `json:"var_files,omitempty"`
	Vars       []string  `json:"vars,omitempty"`
	Job        *Job      `json:"job,omitempty"`
	ParseError string    `json:"parse_error,omitempty"`
}

// Job statuses.
const (
	JobRunning  = "running"  // launching or running allocations
	JobStopping = "stopping" // stop asked; tasks and networks going away
	JobDead     = "dead"     // finished by itself, or could not be resumed
	// JobRegistered is a parameterized job: kept, never run itself; each
	// dispatch runs a child job.
	JobRegistered = "registered"
)

// JobStub is one line of GET /v1/jobs.
type JobStub struct {
	ID        string `json:"id"`
	Type      string `json:"type"`      // "batch", "service", "system" or "sysbatch"; "" if the stored job no longer parses
	Namespace string `json:"namespace"` // the job's Nomad namespace (not a network namespace)
	Status    string `json:"status"`    // JobRunning, JobStopping, JobDead or JobRegistered
	// Parameterized is true for a job only dispatches run; ParentID is
	// set on a dispatched child, naming its parameterized job.
	Parameterized bool   `json:"parameterized,omitempty"`
	ParentID      string `json:"parent_id,omitempty"`
	// Periodic lists a periodic job's cron specs.
	Periodic    []string   `json:"periodic,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// NextLaunch is when a running periodic job launches next.
	NextLaunch *time.Time `json:"next_launch,omitempty"`
	// Allocations counts the job's stored allocations by status.
	Allocations map[string]int `json:"allocations_by_status"`
	// Error says why a job is dead without having run to its end (it
	// could not be resumed after a restart, for instance).
	Error string `json:"error,omitempty"`
	// Stopped: `job stop` stopped it (status dead, kept until a purge);
	// Version and JobModifyIndex are its current version's.
	Stopped        bool   `json:"stopped,omitempty"`
	Version        uint64 `json:"version"`
	JobModifyIndex uint64 `json:"job_modify_index"`
}

// JobStatus is GET /v1/job/{id}. Its allocations_by_status is the
// JobStub's; "allocations" lists them, newest first.
type JobStatus struct {
	JobStub
	Job *Job `json:"job"` // null if the stored job no longer parses
	// Summary is the last run's summary once it has finished.
	Summary     *JobSummary `json:"summary,omitempty"`
	Allocations []AllocStub `json:"allocations"`
	// Children are the child jobs of a periodic job (one per launch,
	// "<job>/periodic-<unix launch time>", as long as allocations of it
	// are kept) or of a parameterized one (its dispatches), sorted by ID:
	// Nomad's "Previously Launched Jobs" and "Dispatched Jobs".
	Children []JobStub `json:"children,omitempty"`
}

// JobStopResponse answers DELETE /v1/job/{id}. Stopped is false (with
// status 202) when the job was still stopping when the agent stopped
// waiting (or was asked not to wait: detach); it goes on stopping. A
// stopped job stays known as dead (Stopped) until a purge forgets it
// (Purged).
type JobStopResponse struct {
	JobID   string      `json:"job_id"`
	Stopped bool        `json:"stopped"`
	Purged  bool        `json:"purged,omitempty"`
	Summary *JobSummary `json:"summary,omitempty"`
}

// JobStopOptions are DELETE /v1/job/{id}'s query: purge=true forgets
// the job once stopped (as `nomad job stop -purge`); detach=true answers
// at once, without waiting for the tasks and networks to be gone.
type JobStopOptions struct {
	Purge  bool
	Detach bool
}

// JobSummary is what a run of a job did.
type JobSummary struct {
	Job      string `json:"job"`
	Launches int    `json:"launches"`
	// Skipped counts periodic launches skipped because the previous one
	// still ran (prohibit_overlap), or earlier ones still waited to be
	// admitted or started (client.max_pending_launches).
	Skipped  int            `json:"skipped_overlapping"`
	ByStatus map[string]int `json:"allocations_by_status"`
	// Network setup (namespace and CNI ADD) and teardown (CNI DEL and
	// namespace removal) per allocation, percentiles in milliseconds.
	SetupP50    float64 `json:"network_setup_ms_p50"`
	SetupP99    float64 `json:"network_setup_ms_p99"`
	TeardownP50 float64 `json:"network_teardown_ms_p50"`
	TeardownP99 float64 `json:"network_teardown_ms_p99"`
	// ExitToGoneP50 is from the last task's exit to the namespace being
	// gone (driver cleanup and teardown).
	ExitToGoneP50 float64 `json:"exit_to_netns_gone_ms_p50"`
	// TeardownRetries counts removals that found the namespace busy or
	// had to retry; Holders are who held it (Holder strings).
	TeardownRetries int      `json:"teardown_retries"`
	Holders         []string `json:"holders,omitempty"`
	// Leaks is what the leak check found left behind (gc retries them).
	Leaks    []string `json:"leaks"`
	Duration float64  `json:"duration_s"`
	// Failed describes each allocation that did not complete.
	Failed []string `json:"failed_allocations,omitempty"`
	// Networks are the CNI networks the allocations attached to; their
	// bridges and shared chains stay for the next attachment (`berth gc`
	// tidies them once idle).
	Networks []string `json:"networks,omitempty"`
}

// Allocation statuses, with Nomad's names.
const (
	AllocPending  = "pending"
	AllocRunning  = "running"
	AllocComplete = "complete"
	AllocFailed   = "failed"
	AllocLost     = "lost" // its berth died and gc found it
)

// TaskStub is a task of an AllocStub.
type TaskStub struct {
	Name     string `json:"name"`
	State    string `json:"state"` // "pending", "running" or "dead"
	Failed   bool   `json:"failed"`
	ExitCode int    `json:"exit_code"`
	Restarts int    `json:"restarts"`
	// NotStarted says why a dead task never ran (ExitCode is then no
	// exit status).
	NotStarted string `json:"not_started,omitempty"`
}

// ExitText is how an exit status reads in a table: empty while the task
// has not ended, "not started" for a task that never ran, "unknown" for
// one that ran while no agent could see its end, the code (and the
// signal) once it exited.
func ExitText(state string, notStarted bool, code, signal int) string {
	switch {
	case state != "dead":
		return ""
	case notStarted:
		return "not started"
	case signal != 0:
		return fmt.Sprintf("%d (signal %d)", code, signal)
	case code < 0:
		// No process exits below 0: berth recorded that it cannot know
		// (the task ended while no agent could see it).
		return "unknown"
	}
	return strconv.Itoa(code)
}

// Exit is the task's ExitText.
func (t TaskStub) Exit() string { return ExitText(t.State, t.NotStarted != "", t.ExitCode, 0) }

// AllocStub is one line of GET /v1/allocations.
type AllocStub struct {
	ID         string     `json:"id"` // a UUID
	JobID      string     `json:"job_id"`
	Group      string     `json:"group"`
	Status     string     `json:"status"` // AllocPending, ...
	StatusDesc string     `json:"status_description,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ModifiedAt time.Time  `json:"modified_at"`
	Tasks      []TaskStub `json:"tasks"`
	// Network is the CNI network's name, or the network mode ("host",
	// "none") when there is none; empty before the network is set up.
	Network   string   `json:"network,omitempty"`
	NetnsPath string   `json:"netns_path,omitempty"`
	IPv4      []string `json:"ipv4,omitempty"`
}

// Allocation is GET /v1/allocation/{id}: one run of a task group.
type Allocation struct {
	ID         string         `json:"id"`                  // a UUID
	Namespace  string         `json:"namespace,omitempty"` // the job's Nomad namespace
	JobID      string         `json:"job_id"`
	Group      string         `json:"group"`
	Status     string         `json:"status"` // AllocPending, ...
	StatusDesc string         `json:"status_description,omitempty"`
	Tasks      []TaskState    `json:"tasks"`
	Network    *NetworkStatus `json:"network,omitempty"` // absent before setup
	Events     []Event        `json:"events,omitempty"`  // oldest first
	// OwnerPID and OwnerStartTime name the berth process running the
	// allocation (the start time in clock ticks since boot tells a reused
	// PID apart).
	OwnerPID       int    `json:"owner_pid,omitempty"`
	OwnerStartTime uint64 `json:"owner_start_time,omitempty"`
	// Index is its index in the group (NOMAD_ALLOC_INDEX).
	Index int `json:"index,omitempty"`
	// Detached: a stopped agent left it running for the next agent to
	// re-adopt.
	Detached   bool      `json:"detached,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	ModifiedAt time.Time `json:"modified_at"`
	Timings    *Timings  `json:"timings_ms,omitempty"` // absent until something was timed
	// TeardownRetries counts namespace removals that found it busy or had
	// to retry; Holders are who held it (Holder strings).
	TeardownRetries int      `json:"teardown_retries,omitempty"`
	Holders         []string `json:"holders,omitempty"`
	// Services are its registrations in the native catalog, now.
	Services []ServiceRegistration `json:"services,omitempty"`
	// ParentJobID names the periodic job of a launch's allocation.
	ParentJobID string `json:"parent_job_id,omitempty"`
	// PreviousAllocation is the failed allocation this one reschedules
	// (same group and index), NextAllocation the one that rescheduled
	// this one (Nomad's fields of the same names).
	PreviousAllocation string `json:"previous_allocation,omitempty"`
	NextAllocation     string `json:"next_allocation,omitempty"`
	// RescheduleTracker are the reschedules that led to it, oldest first
	// (Nomad's RescheduleTracker.Events).
	RescheduleTracker []RescheduleEvent `json:"reschedule_tracker,omitempty"`
	// RescheduleAt is when a rescheduled allocation starts: it is pending
	// until then.
	RescheduleAt *time.Time `json:"reschedule_at,omitempty"`
}

// RescheduleEvent is one reschedule of an allocation's slot.
type RescheduleEvent struct {
	RescheduleTime time.Time `json:"reschedule_time"`
	PrevAllocID    string    `json:"prev_alloc_id"`
	Delay          Duration  `json:"delay"`
}

// TaskState is one task of an Allocation.
type TaskState struct {
	Name     string `json:"name"`
	Driver   string `json:"driver"`
	State    string `json:"state"` // "pending", "running" or "dead"
	Failed   bool   `json:"failed"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"` // the signal that ended it
	Restarts int    `json:"restarts"`
	// StartedAt and FinishedAt are the zero time (0001-01-01T00:00:00Z)
	// until the task has started, or finished.
	StartedAt  time.Time   `json:"started_at,omitempty"`
	FinishedAt time.Time   `json:"finished_at,omitempty"`
	Handle     *TaskHandle `json:"handle,omitempty"` // set once started
	// NotStarted says why a dead task never ran (its start failed):
	// ExitCode is then no exit status.
	NotStarted string `json:"not_started,omitempty"`
	// Resources are the task's resources block as its job (the current
	// version) has it; absent when the agent no longer knows the job.
	Resources *Resources `json:"resources,omitempty"`
}

// Exit is the task's ExitText.
func (t TaskState) Exit() string {
	return ExitText(t.State, t.NotStarted != "", t.ExitCode, t.Signal)
}

// TaskHandle is what finds a task's process or container.
type TaskHandle struct {
	Driver        string `json:"driver"`
	PID           int    `json:"pid,omitempty"`            // raw_exec, exec: the task's process
	PIDStartTime  uint64 `json:"pid_start_time,omitempty"` // its start time in clock ticks since boot
	ContainerID   string `json:"container_id,omitempty"`   // podman
	ContainerName string `json:"container_name,omitempty"` // podman
	CgroupPath    string `json:"cgroup_path,omitempty"`    // exec
}

// Event is one line of an allocation's timeline.
type Event struct {
	Time time.Time `json:"time"`
	Type string    `json:"type"` // e.g. "Received", "Started", "Terminated", "Restarting", "Killed", "Network removed"
	// Task names the task of a task event (Nomad's TaskEvent: its Type
	// and, as Message, its DisplayMessage); empty for the allocation's.
	Task    string `json:"task,omitempty"`
	Message string `json:"message"`
}

// NetworkStatus is where an allocation's namespace is and what CNI gave
// it, as Nomad's NetworkStatus.
type NetworkStatus struct {
	Mode      string   `json:"mode"`              // the group's network mode: "host", "none", "bridge", "cni/<name>"
	Network   string   `json:"network,omitempty"` // the CNI network's name
	NetnsPath string   `json:"netns_path,omitempty"`
	Interface string   `json:"interface,omitempty"` // inside the namespace, e.g. "eth0"
	IPv4      []string `json:"ipv4,omitempty"`      // addresses, without prefix length
	IPv6      []string `json:"ipv6,omitempty"`
	Gateway   []string `json:"gateway,omitempty"`
	DNS       *DNS     `json:"dns,omitempty"`
	// Ports are the group's port labels as mapped for this allocation.
	Ports []PortMapping `json:"ports,omitempty"`
}

// PortMapping is one port label of an allocation: HostIP:HostPort on the
// host reaches To inside the namespace.
type PortMapping struct {
	Label    string `json:"label"`
	HostIP   string `json:"host_ip,omitempty"`
	HostPort int    `json:"host_port"`
	To       int    `json:"to,omitempty"`
}

// DNS is a resolver configuration: a group's dns block, or what CNI
// handed to the workload.
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Timings are how long an allocation's steps took, in milliseconds, summed
// over its restarts; a step that did not happen is absent (0).
type Timings struct {
	Netns float64 `json:"netns,omitempty"` // creating and pinning the namespace
	Add   float64 `json:"add,omitempty"`   // CNI ADD
	// Berth is berth's own work around setup and teardown: records,
	// locks, CHECK.
	Berth         float64 `json:"berth,omitempty"`
	TaskStart     float64 `json:"task_start,omitempty"`     // the driver starting the tasks
	Task          float64 `json:"task,omitempty"`           // the tasks running, restarts included
	DriverCleanup float64 `json:"driver_cleanup,omitempty"` // the driver releasing the tasks (container removed)
	Del           float64 `json:"del,omitempty"`            // CNI DEL
	Remove        float64 `json:"remove,omitempty"`         // unmounting and removing the namespace
	// ExitToNetnsGone is from the last task's exit to the namespace being
	// gone.
	ExitToNetnsGone float64 `json:"exit_to_netns_gone,omitempty"`
	Total           float64 `json:"total,omitempty"` // the whole allocation
}

// Step is one step of Timings.
type Step struct {
	Name string  // its JSON name
	MS   float64 // milliseconds
}

// Steps lists the steps that took time, by name.
func (t *Timings) Steps() []Step {
	if t == nil {
		return nil
	}
	all := []Step{
		{"netns", t.Netns}, {"add", t.Add}, {"berth", t.Berth}, {"task_start", t.TaskStart},
		{"task", t.Task}, {"driver_cleanup", t.DriverCleanup}, {"del", t.Del}, {"remove", t.Remove},
		{"exit_to_netns_gone", t.ExitToNetnsGone}, {"total", t.Total},
	}
	var out []Step
	for _, s := range all {
		if s.MS != 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NetnsEntry is one line of GET /v1/namespaces: a namespace of the agent's
// netns dir, or a pending teardown whose namespace is already gone, joined
// with berth's record of it.
type NetnsEntry struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Pinned bool   `json:"pinned"` // mounted at Path (false: a leftover file, or gone)
	Berth  bool   `json:"berth"`  // berth has a record of it
	// Network, Phase, IPv4, AllocID and LastError come from berth's record.
	Network string `json:"network,omitempty"`
	// Phase is "intent" (being set up), "ready" or "tearing-down" (a
	// teardown that must be retried; LastError says why it failed).
	Phase     string   `json:"phase,omitempty"`
	IPv4      []string `json:"ipv4,omitempty"`
	AllocID   string   `json:"alloc_id,omitempty"`
	LastError string   `json:"last_error,omitempty"`
	Holders   []Holder `json:"holders"` // of a pinned namespace; never null
}

// Holder kinds.
const (
	// HolderFD: the process has a file descriptor open on the namespace;
	// a plain unmount fails with EBUSY.
	HolderFD = "fd"
	// HolderMount: the namespace is mounted in another mount namespace;
	// it stays alive until that is unmounted.
	HolderMount = "mount"
	// HolderMember: the process lives in the namespace; the namespace
	// survives the removal of its pin until the process exits.
	HolderMember = "member"
)

// Holder is one process that keeps a namespace busy or alive.
type Holder struct {
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
	Cmdline string `json:"cmdline,omitempty"`
	Kind    string `json:"kind"` // HolderFD, HolderMount or HolderMember
	// Detail is the fd number, or the mount point in the other mount
	// namespace.
	Detail string `json:"detail,omitempty"`
}

// String is "pid 12 (sh) fd 3", as berth logs and reports holders.
func (h Holder) String() string {
	s := fmt.Sprintf("pid %d (%s) %s", h.PID, h.Comm, h.Kind)
	if h.Detail != "" {
		s += " " + h.Detail
	}
	return s
}

// GCRequest asks for a garbage collection (POST /v1/gc's query): see
// `berth gc --help` for the foreign prefixes and networks.
type GCRequest struct {
	DryRun          bool
	ForeignPrefixes []string
	ForeignNetworks []string
}

// GCItem kinds.
const (
	GCAllocOwner = "alloc-owner" // an allocation whose owning berth process is gone
	GCAttachment = "attachment"  // a store record driven to a clean state
	GCNetns      = "netns"       // a namespace berth made that nothing owns
	GCCNICache   = "cni-cache"   // a libcni cache entry of berth's that nothing owns
	GCCNIGC      = "cni-gc"      // the CNI GC verb sent to a network
	GCLease      = "lease"       // a host-local lease of an unknown container ID
	GCIptables   = "iptables"    // CNI rules and chains of an unknown ID
	GCBridge     = "bridge"      // what a network keeps after its last attachment
	GCService    = "service"     // a service registration whose allocation is gone
)

// GCItem is one thing garbage collection found, reclaimed or kept.
type GCItem struct {
	Kind    string `json:"kind"`              // GCNetns, ...
	ID      string `json:"id,omitempty"`      // attachment, allocation or container ID, or an address
	Network string `json:"network,omitempty"` // the CNI network it belongs to
	Path    string `json:"path,omitempty"`    // the file or namespace path
	Reason  string `json:"reason"`            // why it was found, or kept
}

// GCReport is POST /v1/gc: what a garbage collection found and did.
type GCReport struct {
	DryRun bool `json:"dry_run"`
	// StoreUnavailable is why the store could not be read; the sweep then
	// used host evidence only and kept every namespace that still exists.
	StoreUnavailable string `json:"store_unavailable,omitempty"`
	// Reboot is set when berth's attachments expect namespaces and none
	// of them exists any more.
	Reboot bool     `json:"reboot_detected,omitempty"`
	Found  []GCItem `json:"found"`
	// Reclaimed repeats the Found items it reclaimed, and adds what
	// followed from them (tidying, the GC verb).
	Reclaimed []GCItem `json:"reclaimed"`
	// Kept lists suspicious things left alone on purpose.
	Kept []GCItem `json:"kept"`
	// Errors are what could not be reclaimed; a later run retries.
	Errors     []string `json:"errors"`
	DurationMS float64  `json:"duration_ms"`
	// FoundTotal, ReclaimedTotal, KeptTotal and ErrorsTotal count every
	// item, also those a bounded copy of the report leaves out (Omitted).
	FoundTotal     int `json:"found_total"`
	ReclaimedTotal int `json:"reclaimed_total"`
	KeptTotal      int `json:"kept_total"`
	ErrorsTotal    int `json:"errors_total"`
	// ReclaimedByKind counts the reclaimed items by kind (GCNetns, ...).
	ReclaimedByKind map[string]int `json:"reclaimed_by_kind,omitempty"`
	// Omitted is set when the lists hold only the first MaxGCReportItems
	// items each (AgentSelf.LastGC): the totals count them all.
	Omitted bool `json:"omitted,omitempty"`
}

// MaxGCReportItems is how many items of each list AgentSelf.LastGC keeps.
const MaxGCReportItems = 100

// Job is a parsed, validated job with every default filled in, as
// POST /v1/jobs/plan and GET /v1/job/{id} show it.
type Job struct {
	ID          string            `json:"id"`
	Type        string            `json:"type"` // "batch", "service", "system" or "sysbatch"
	Namespace   string            `json:"namespace"`
	Region      string            `json:"region"`
	Datacenters []string          `json:"datacenters"`
	Priority    int               `json:"priority"`
	Meta        map[string]string `json:"meta,omitempty"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	Periodic    *Periodic         `json:"periodic,omitempty"`
	// Parameterized is set on a job only dispatches run; ParentID on a
	// dispatched child.
	Parameterized *Parameterized `json:"parameterized,omitempty"`
	ParentID      string         `json:"parent_id,omitempty"`
	Groups        []*Group       `json:"groups"`
	// Warnings are accepted constructs that do nothing on berth
	// (reschedule, a datacenter list without this node's datacenter).
	Warnings []Diagnostic `json:"warnings,omitempty"`
	Pos      Pos          `json:"pos"` // the job block
}

// Parameterized is a job's parameterized block.
type Parameterized struct {
	Payload      string   `json:"payload"` // "optional", "required" or "forbidden"
	MetaRequired []string `json:"meta_required,omitempty"`
	MetaOptional []string `json:"meta_optional,omitempty"`
}

// Periodic is a job's periodic block.
type Periodic struct {
	Crons           []string `json:"crons"` // cron = "..." is a one-element list
	ProhibitOverlap bool     `json:"prohibit_overlap"`
	TimeZone        string   `json:"time_zone"` // IANA name the crons are evaluated in
	Enabled         bool     `json:"enabled"`
	Pos             Pos      `json:"pos"`
}

// Group is a task group: the tasks that share one allocation and one
// network namespace.
type Group struct {
	Name        string            `json:"name"`
	Count       int               `json:"count"` // allocations per launch
	Meta        map[string]string `json:"meta,omitempty"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	Restart     RestartPolicy     `json:"restart"`
	Reschedule  ReschedulePolicy  `json:"reschedule"`
	Network     Network           `json:"network"`
	Tasks       []*Task           `json:"tasks"`
	Pos         Pos               `json:"pos"`
}

// Constraint is a constraint block. Attribute and Value keep the
// "${attr.x}" text as written.
type Constraint struct {
	Attribute string `json:"attribute,omitempty"`
	Operator  string `json:"operator"`
	Value     string `json:"value,omitempty"`
	Pos       Pos    `json:"pos"`
}

// RestartPolicy is a restart block: the group's, or a task's with the
// group's filled in.
type RestartPolicy struct {
	Attempts int      `json:"attempts"`
	Interval Duration `json:"interval"`
	Delay    Duration `json:"delay"`
	Mode     string   `json:"mode"` // "fail" or "delay"
}

// ReschedulePolicy is recorded as written (with Nomad's defaults) but never
// applies: rescheduling moves an allocation to another node.
type ReschedulePolicy struct {
	Attempts      int      `json:"attempts"`
	Interval      Duration `json:"interval"`
	Delay         Duration `json:"delay"`
	DelayFunction string   `json:"delay_function"`
	MaxDelay      Duration `json:"max_delay"`
	Unlimited     bool     `json:"unlimited"`
	Applies       bool     `json:"applies"` // the agent reschedules with it (batch or service, attempts or unlimited)
	Set           bool     `json:"set"`     // the job file had a reschedule block
}

// Network is a group's network block.
type Network struct {
	Mode     string            `json:"mode"`          // "host" (default), "none", "bridge" or "cni/<name>"
	CNI      string            `json:"cni,omitempty"` // <name> of "cni/<name>"
	Hostname string            `json:"hostname,omitempty"`
	Ports    []Port            `json:"ports,omitempty"`
	DNS      *DNS              `json:"dns,omitempty"`
	CNIArgs  map[string]string `json:"cni_args,omitempty"`
	Pos      Pos               `json:"pos"`
	ModePos  Pos               `json:"mode_pos"`
}

// Port is a port block. Static 0 means a dynamic host port; To -1 means
// "same as the host port".
type Port struct {
	Label       string `json:"label"`
	Static      int    `json:"static,omitempty"`
	To          int    `json:"to,omitempty"`
	HostNetwork string `json:"host_network,omitempty"`
	Pos         Pos    `json:"pos"`
}

// Task is one process or container of a group.
type Task struct {
	Name   string `json:"name"`
	Driver string `json:"driver"` // "raw_exec", "exec" or "podman"
	// Config is the driver's config block as JSON values; a nested block
	// is a list of objects under its type, one per block.
	Config      map[string]any    `json:"config"`
	Env         map[string]string `json:"env,omitempty"`
	KillTimeout Duration          `json:"kill_timeout"`
	Resources   Resources         `json:"resources"`
	Meta        map[string]string `json:"meta,omitempty"`
	Leader      bool              `json:"leader,omitempty"`
	User        string            `json:"user,omitempty"`
	Restart     RestartPolicy     `json:"restart"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	// Lifecycle is the task's lifecycle block; absent for a main task.
	Lifecycle      *Lifecycle `json:"lifecycle,omitempty"`
	KillSignal     string     `json:"kill_signal,omitempty"` // SIGTERM when empty
	ShutdownDelay  Duration   `json:"shutdown_delay,omitempty"`
	MaxRunDuration Duration   `json:"max_run_duration,omitempty"`
	Pos            Pos        `json:"pos"`        // the task block
	ConfigPos      Pos        `json:"config_pos"` // its config block
	DriverPos      Pos        `json:"driver_pos"` // its driver attribute
}

// Lifecycle is a task's lifecycle block.
type Lifecycle struct {
	Hook    string `json:"hook"` // "prestart", "poststart" or "poststop"
	Sidecar bool   `json:"sidecar,omitempty"`
}

// Resources is a resources block, recorded with Nomad's defaults; the exec
// driver enforces the memory (memory_max above memory: the hard limit,
// memory the soft one; -1: no hard limit).
type Resources struct {
	CPU         int `json:"cpu,omitempty"` // MHz
	Cores       int `json:"cores,omitempty"`
	MemoryMB    int `json:"memory"`
	MemoryMaxMB int `json:"memory_max,omitempty"`
}

// Duration is a duration from a job file, written in JSON as Go duration
// text ("15s", "1m30s", "0s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"15s\": %w", err)
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// AllocStopResponse answers POST /v1/allocation/{id}/stop. Stopped is
// false when the agent gave up waiting (stop_timeout) for the tasks and
// the network to be gone; the stop goes on.
type AllocStopResponse struct {
	AllocID string `json:"alloc_id"`
	Stopped bool   `json:"stopped"`
}

// AllocRestartResponse answers POST /v1/allocation/{id}/restart: the
// tasks restarted (each runs again when it returns).
type AllocRestartResponse struct {
	AllocID string   `json:"alloc_id"`
	Tasks   []string `json:"tasks"`
}

// AllocSignalResponse answers POST /v1/allocation/{id}/signal.
type AllocSignalResponse struct {
	AllocID string   `json:"alloc_id"`
	Signal  string   `json:"signal"`
	Tasks   []string `json:"tasks"`
}
