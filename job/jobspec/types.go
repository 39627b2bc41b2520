package jobspec

import (
	"encoding/json"
	"fmt"
	"time"
)

// Job types, as Nomad's. On one node a system job is a service job with
// one allocation per group, and a sysbatch job a batch job likewise.
const (
	TypeBatch    = "batch"
	TypeService  = "service"
	TypeSystem   = "system"
	TypeSysbatch = "sysbatch"
)

// Lifecycle hooks.
const (
	HookPrestart  = "prestart"
	HookPoststart = "poststart"
	HookPoststop  = "poststop"
)

// Parameterized payload requirements.
const (
	PayloadOptional  = "optional"
	PayloadRequired  = "required"
	PayloadForbidden = "forbidden"
)

// Network modes besides "cni/<name>".
const (
	NetworkHost   = "host"
	NetworkNone   = "none"
	NetworkBridge = "bridge"
	// NetworkCNIPrefix starts a mode naming a CNI network: "cni/<name>".
	NetworkCNIPrefix = "cni/"
)

// Restart modes.
const (
	RestartFail  = "fail"
	RestartDelay = "delay"
)

// Job is a parsed, validated job with every default filled in.
type Job struct {
	ID string `json:"id"`
	// Name is the job's name attribute; it defaults to ID.
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	Namespace   string            `json:"namespace"`
	Region      string            `json:"region"`
	Datacenters []string          `json:"datacenters"`
	Priority    int               `json:"priority"`
	Meta        map[string]string `json:"meta,omitempty"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	Periodic    *Periodic         `json:"periodic,omitempty"`
	// NodePool is recorded as written ("default" when unset); Placement
	// refuses a pool other than "default" and "all".
	NodePool string `json:"node_pool"`
	// Parameterized makes the job a template that only `job dispatch`
	// runs; nil for ordinary jobs.
	Parameterized *Parameterized `json:"parameterized,omitempty"`
	// ParentID, Dispatched and Payload are set on a job made by Dispatch.
	ParentID   string   `json:"parent_id,omitempty"`
	Dispatched bool     `json:"dispatched,omitempty"`
	Payload    []byte   `json:"payload,omitempty"`
	Groups     []*Group `json:"groups"`
	// Dir is the job file's directory when it was read with the
	// filesystem allowed (berth run): template sources missing from the
	// task dir are read from there. Empty for jobs sent to the agent.
	Dir string `json:"-"`
	// Warnings are accepted constructs that do nothing on berth (reschedule,
	// a datacenter list without this node's datacenter).
	Warnings []Diagnostic `json:"warnings,omitempty"`
	Pos      Pos          `json:"pos"`
}

// RunsToCompletion reports whether the job's tasks are done once they
// exit successfully (batch, sysbatch) rather than kept running (service,
// system).
func (j *Job) RunsToCompletion() bool {
	return j.Type == TypeBatch || j.Type == TypeSysbatch
}

// IsParameterized reports whether the job only runs when dispatched: it
// has a parameterized block and is not itself a dispatched child.
func (j *Job) IsParameterized() bool { return j.Parameterized != nil && !j.Dispatched }

// Group returns the group with that name, or nil.
func (j *Job) Group(name string) *Group {
	for _, g := range j.Groups {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// Group is a task group: the tasks that share one allocation and one
// network namespace.
type Group struct {
	Name        string            `json:"name"`
	Count       int               `json:"count"`
	Meta        map[string]string `json:"meta,omitempty"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	Restart     RestartPolicy     `json:"restart"`
	Reschedule  ReschedulePolicy  `json:"reschedule"`
	Network     Network           `json:"network"`
	// ShutdownDelay is the group's shutdown_delay: the wait between
	// deregistering its services and stopping its tasks.
	ShutdownDelay time.Duration      `json:"shutdown_delay,omitempty"`
	EphemeralDisk EphemeralDisk      `json:"ephemeral_disk"`
	Volumes       map[string]*Volume `json:"volumes,omitempty"`
	Services      []*Service         `json:"services,omitempty"`
	Tasks         []*Task            `json:"tasks"`
	Pos           Pos                `json:"pos"`
}

// Parameterized is a parameterized block.
type Parameterized struct {
	// Payload is PayloadOptional (the default), PayloadRequired or
	// PayloadForbidden.
	Payload      string   `json:"payload"`
	MetaRequired []string `json:"meta_required,omitempty"`
	MetaOptional []string `json:"meta_optional,omitempty"`
	Pos          Pos      `json:"pos"`
}

// EphemeralDisk is the group's ephemeral_disk block (Nomad's defaults:
// 300 MB, not sticky, not migrated). Only SizeMB is checked (against the
// tasks' log storage, as Nomad).
type EphemeralDisk struct {
	SizeMB  int  `json:"size"`
	Sticky  bool `json:"sticky,omitempty"`
	Migrate bool `json:"migrate,omitempty"`
}

// The types of a group volume.
const (
	VolumeHost = "host" // a host volume of the node's configuration
	VolumeCSI  = "csi"  // a CSI volume, which berth cannot mount
)

// Volume is a group volume block. Type VolumeHost names a host volume of
// the agent configuration; VolumeCSI a CSI volume, which berth cannot mount.
type Volume struct {
	Name           string   `json:"name"`
	Type           string   `json:"type"`
	Source         string   `json:"source"`
	ReadOnly       bool     `json:"read_only,omitempty"`
	AccessMode     string   `json:"access_mode,omitempty"`
	AttachmentMode string   `json:"attachment_mode,omitempty"`
	PerAlloc       bool     `json:"per_alloc,omitempty"`
	FSType         string   `json:"fs_type,omitempty"`
	MountFlags     []string `json:"mount_flags,omitempty"`
	Pos            Pos      `json:"pos"`
}

// SourceFor is the name of the node's host volume that allocation index
// mounts: with per_alloc, as Nomad, the source suffixed with "[index]"
// ("data" is "data[0]", "data[1]", ... for each allocation of the group).
func (v *Volume) SourceFor(index int) string {
	if !v.PerAlloc {
		return v.Source
	}
	return fmt.Sprintf("%s[%d]", v.Source, index)
}

// Sources are the host volumes the group's count allocations mount.
func (v *Volume) Sources(count int) []string {
	if !v.PerAlloc {
		return []string{v.Source}
	}
	out := make([]string, count)
	for i := range out {
		out[i] = v.SourceFor(i)
	}
	return out
}

// VolumeMount is a task's volume_mount block.
type VolumeMount struct {
	Volume          string `json:"volume"`
	Destination     string `json:"destination"`
	ReadOnly        bool   `json:"read_only,omitempty"`
	PropagationMode string `json:"propagation_mode,omitempty"`
	Pos             Pos    `json:"pos"`
}

// Lifecycle is a task's lifecycle block; a task without one (or with an
// empty hook, which Nomad drops) is a main task.
type Lifecycle struct {
	Hook    string `json:"hook"`
	Sidecar bool   `json:"sidecar,omitempty"`
}

// Logs is a task's logs block, with Nomad's defaults (10 files of 10 MB).
type Logs struct {
	MaxFiles      int  `json:"max_files"`
	MaxFileSizeMB int  `json:"max_file_size"`
	Disabled      bool `json:"disabled,omitempty"`
}

// Artifact is a task's artifact block: something fetched into the task
// directory before the task starts.
type Artifact struct {
	Source string `json:"source"`
	// Destination is relative to the task directory ("local/" unless set);
	// Parse has checked it stays inside the allocation directory.
	Destination string `json:"destination"`
	// Mode is "any" (the default: a file or an unpacked archive), "file"
	// or "dir".
	Mode string `json:"mode"`
	// Options are go-getter options; Checksum is options.checksum split
	// into its type ("sha256") and hex value.
	Options      map[string]string `json:"options,omitempty"`
	ChecksumType string            `json:"checksum_type,omitempty"`
	Checksum     string            `json:"checksum,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	Pos          Pos               `json:"pos"`
}

// DispatchPayload says where a dispatched job's payload is written,
// relative to the task's local/ directory.
type DispatchPayload struct {
	File string `json:"file"`
	Pos  Pos    `json:"pos"`
}

// Vault is a vault block. Berth has no Vault: a job with one is accepted
// with a warning and the task gets no token.
type Vault struct {
	Policies     []string `json:"policies,omitempty"`
	Namespace    string   `json:"namespace,omitempty"`
	Env          bool     `json:"env"`
	DisableFile  bool     `json:"disable_file,omitempty"`
	ChangeMode   string   `json:"change_mode"`
	ChangeSignal string   `json:"change_signal,omitempty"`
	Pos          Pos      `json:"pos"`
}

// Identity is a task's or a service's identity block (workload
// identity), recorded only. Name, Audience and the fields after them are
// newer Nomad's (1.7+).
type Identity struct {
	Env          bool          `json:"env,omitempty"`
	File         bool          `json:"file,omitempty"`
	Name         string        `json:"name,omitempty"`
	Audience     []string      `json:"aud,omitempty"`
	FilePath     string        `json:"filepath,omitempty"`
	TTL          time.Duration `json:"ttl,omitempty"`
	ChangeMode   string        `json:"change_mode,omitempty"`
	ChangeSignal string        `json:"change_signal,omitempty"`
	Pos          Pos           `json:"pos"`
}

// Schedule is a task's schedule block (newer Nomad Enterprise's time based
// task execution), recorded only.
type Schedule struct {
	Start    string `json:"start"`
	End      string `json:"end"`
	Timezone string `json:"timezone,omitempty"`
	Pos      Pos    `json:"pos"`
}

// Task returns the task with that name, or nil.
func (g *Group) Task(name string) *Task {
	for _, t := range g.Tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Constraint is Nomad's constraint block. Attribute and Value keep the
// "${attr.x}" text; they are resolved against node attributes.
type Constraint struct {
	Attribute string `json:"attribute,omitempty"`
	Operator  string `json:"operator"`
	Value     string `json:"value,omitempty"`
	Pos       Pos    `json:"pos"`
}

// RestartPolicy says what happens when a task exits, as Nomad's restart
// block. A task's policy is its group's, overridden field by field by the
// task's own restart block.
type RestartPolicy struct {
	Attempts int           `json:"attempts"`
	Interval time.Duration `json:"interval"`
	Delay    time.Duration `json:"delay"`
	Mode     string        `json:"mode"`
}

// ReschedulePolicy is a group's reschedule block with Nomad's defaults: a
// failed allocation is replaced, on this node, by a new one of the same
// index after the policy's delay, within its attempts.
type ReschedulePolicy struct {
	Attempts      int           `json:"attempts"`
	Interval      time.Duration `json:"interval"`
	Delay         time.Duration `json:"delay"`
	DelayFunction string        `json:"delay_function"`
	MaxDelay      time.Duration `json:"max_delay"`
	Unlimited     bool          `json:"unlimited"`
	// Applies: the runner reschedules with it (a batch or service job,
	// with attempts or unlimited).
	Applies bool `json:"applies"`
	// Set reports whether the job file had a reschedule block.
	Set bool `json:"set"`
}

// Network is a group's network block. Mode is "host" unless set.
type Network struct {
	Mode string `json:"mode"`
	// CNI is the network name when Mode is "cni/<name>", else "".
	CNI      string            `json:"cni,omitempty"`
	Hostname string            `json:"hostname,omitempty"`
	Ports    []Port            `json:"ports,omitempty"`
	DNS      *DNS              `json:"dns,omitempty"`
	CNIArgs  map[string]string `json:"cni_args,omitempty"`
	Pos      Pos               `json:"pos"`
	ModePos  Pos               `json:"mode_pos"`
}

// Port is one port block. Static 0 means a dynamic host port; To -1 means
// "same as the host port", as in Nomad.
type Port struct {
	Label       string `json:"label"`
	Static      int    `json:"static,omitempty"`
	To          int    `json:"to,omitempty"`
	HostNetwork string `json:"host_network,omitempty"`
	Pos         Pos    `json:"pos"`
}

// DNS is the group's resolver configuration.
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Task is one process or container of a group.
type Task struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// Config is the driver's config block: strings, int64 (whole numbers),
	// float64, bool, []any, map[string]any and nil. A nested block becomes
	// a []any of map[string]any under its type, one element per block.
	Config      map[string]any    `json:"config"`
	Env         map[string]string `json:"env,omitempty"`
	KillTimeout time.Duration     `json:"kill_timeout"`
	Resources   Resources         `json:"resources"`
	Meta        map[string]string `json:"meta,omitempty"`
	Leader      bool              `json:"leader,omitempty"`
	User        string            `json:"user,omitempty"`
	Restart     RestartPolicy     `json:"restart"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	// KillSignal is sent to stop the task (default SIGTERM, as "" here).
	KillSignal string `json:"kill_signal,omitempty"`
	// ShutdownDelay is waited between deregistering the task's services
	// and sending KillSignal.
	ShutdownDelay time.Duration `json:"shutdown_delay,omitempty"`
	// MaxRunDuration, when set, is how long the task may run before it is
	// killed and fails. Not in Nomad 1.6.5 (see README).
	MaxRunDuration  time.Duration    `json:"max_run_duration,omitempty"`
	Lifecycle       *Lifecycle       `json:"lifecycle,omitempty"`
	Logs            Logs             `json:"logs"`
	Artifacts       []*Artifact      `json:"artifacts,omitempty"`
	DispatchPayload *DispatchPayload `json:"dispatch_payload,omitempty"`
	Templates       []*Template      `json:"templates,omitempty"`
	Services        []*Service       `json:"services,omitempty"`
	VolumeMounts    []*VolumeMount   `json:"volume_mounts,omitempty"`
	Vault           *Vault           `json:"vault,omitempty"`
	Identity        *Identity        `json:"identity,omitempty"`
	// Identities are the named identity blocks newer Nomad allows beside
	// the default one.
	Identities []*Identity `json:"identities,omitempty"`
	Schedule   *Schedule   `json:"schedule,omitempty"`
	// Kind is Nomad's task kind (Consul Connect proxies); recorded only.
	Kind string `json:"kind,omitempty"`
	// Pos is the task block; ConfigPos its config block (the task block when
	// there is none); DriverPos the driver attribute.
	Pos       Pos `json:"pos"`
	ConfigPos Pos `json:"config_pos"`
	DriverPos Pos `json:"driver_pos"`
}

// IsMain reports whether the task is a main task (no lifecycle hook).
func (t *Task) IsMain() bool { return t.Lifecycle == nil || t.Lifecycle.Hook == "" }

// Resources is accepted and recorded with Nomad's defaults (cpu 100 MHz,
// memory 300 MB).
type Resources struct {
	CPU      int `json:"cpu,omitempty"`
	Cores    int `json:"cores,omitempty"`
	MemoryMB int `json:"memory"`
	// MemoryMaxMB is the hard limit when above MemoryMB; 0 means MemoryMB
	// is the limit and MemoryUnlimited (-1) means no limit.
	MemoryMaxMB int `json:"memory_max,omitempty"`
}

// MemoryUnlimited is memory_max = -1.
const MemoryUnlimited = -1

// Durations are written as Go duration strings ("15s") in JSON, the form
// the job file uses. The shadow structs below do only that.

func (r RestartPolicy) MarshalJSON() ([]byte, error) {
	type plain RestartPolicy
	return json.Marshal(struct {
		plain
		Interval string `json:"interval"`
		Delay    string `json:"delay"`
	}{plain(r), r.Interval.String(), r.Delay.String()})
}

func (r *RestartPolicy) UnmarshalJSON(b []byte) error {
	type plain RestartPolicy
	aux := struct {
		*plain
		Interval string `json:"interval"`
		Delay    string `json:"delay"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return parseDurations(map[string]durField{
		"restart.interval": {aux.Interval, &r.Interval},
		"restart.delay":    {aux.Delay, &r.Delay},
	})
}

func (r ReschedulePolicy) MarshalJSON() ([]byte, error) {
	type plain ReschedulePolicy
	return json.Marshal(struct {
		plain
		Interval string `json:"interval"`
		Delay    string `json:"delay"`
		MaxDelay string `json:"max_delay"`
	}{plain(r), r.Interval.String(), r.Delay.String(), r.MaxDelay.String()})
}

func (r *ReschedulePolicy) UnmarshalJSON(b []byte) error {
	type plain ReschedulePolicy
	aux := struct {
		*plain
		Interval string `json:"interval"`
		Delay    string `json:"delay"`
		MaxDelay string `json:"max_delay"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return parseDurations(map[string]durField{
		"reschedule.interval":  {aux.Interval, &r.Interval},
		"reschedule.delay":     {aux.Delay, &r.Delay},
		"reschedule.max_delay": {aux.MaxDelay, &r.MaxDelay},
	})
}

func (t Task) MarshalJSON() ([]byte, error) {
	type plain Task
	return json.Marshal(struct {
		plain
		KillTimeout    string `json:"kill_timeout"`
		ShutdownDelay  string `json:"shutdown_delay,omitempty"`
		MaxRunDuration string `json:"max_run_duration,omitempty"`
	}{plain(t), t.KillTimeout.String(), durText(t.ShutdownDelay), durText(t.MaxRunDuration)})
}

func (t *Task) UnmarshalJSON(b []byte) error {
	type plain Task
	aux := struct {
		*plain
		KillTimeout    string `json:"kill_timeout"`
		ShutdownDelay  string `json:"shutdown_delay,omitempty"`
		MaxRunDuration string `json:"max_run_duration,omitempty"`
	}{plain: (*plain)(t)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return parseDurations(map[string]durField{
		"task.kill_timeout":     {aux.KillTimeout, &t.KillTimeout},
		"task.shutdown_delay":   {aux.ShutdownDelay, &t.ShutdownDelay},
		"task.max_run_duration": {aux.MaxRunDuration, &t.MaxRunDuration},
	})
}

func (g Group) MarshalJSON() ([]byte, error) {
	type plain Group
	return json.Marshal(struct {
		plain
		ShutdownDelay string `json:"shutdown_delay,omitempty"`
	}{plain(g), durText(g.ShutdownDelay)})
}

func (g *Group) UnmarshalJSON(b []byte) error {
	type plain Group
	aux := struct {
		*plain
		ShutdownDelay string `json:"shutdown_delay,omitempty"`
	}{plain: (*plain)(g)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return parseDurations(map[string]durField{"group.shutdown_delay": {aux.ShutdownDelay, &g.ShutdownDelay}})
}

// durText leaves an unset duration out of JSON.
func durText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

type durField struct {
	text string
	dst  *time.Duration
}

func parseDurations(fields map[string]durField) error {
	for name, f := range fields {
		if f.text == "" {
			*f.dst = 0
			continue
		}
		d, err := time.ParseDuration(f.text)
		if err != nil {
			return fmt.Errorf("decode %s: %w", name, err)
		}
		*f.dst = d
	}
	return nil
}
