package jobspec

import (
	"encoding/json"
	"fmt"
	"time"
)

// Job types berth runs. Nomad's system and sysbatch need a cluster of
// nodes to mean anything, so berth rejects them.
const (
	TypeBatch   = "batch"
	TypeService = "service"
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
	ID          string            `json:"id"`
	Type        string            `json:"type"`
	Namespace   string            `json:"namespace"`
	Region      string            `json:"region"`
	Datacenters []string          `json:"datacenters"`
	Priority    int               `json:"priority"`
	Meta        map[string]string `json:"meta,omitempty"`
	Constraints []Constraint      `json:"constraints,omitempty"`
	Periodic    *Periodic         `json:"periodic,omitempty"`
	Groups      []*Group          `json:"groups"`
	// Warnings are accepted constructs that do nothing on berth (reschedule,
	// a datacenter list without this node's datacenter).
	Warnings []Diagnostic `json:"warnings,omitempty"`
	Pos      Pos          `json:"pos"`
}

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
	Tasks       []*Task           `json:"tasks"`
	Pos         Pos               `json:"pos"`
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

// ReschedulePolicy is recorded as written (with Nomad's defaults) but never
// applies: rescheduling moves an allocation to another node, and berth has
// one.
type ReschedulePolicy struct {
	Attempts      int           `json:"attempts"`
	Interval      time.Duration `json:"interval"`
	Delay         time.Duration `json:"delay"`
	DelayFunction string        `json:"delay_function"`
	MaxDelay      time.Duration `json:"max_delay"`
	Unlimited     bool          `json:"unlimited"`
	// Applies is always false on berth; it is here so nobody has to guess.
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
	// Pos is the task block; ConfigPos its config block (the task block when
	// there is none); DriverPos the driver attribute.
	Pos       Pos `json:"pos"`
	ConfigPos Pos `json:"config_pos"`
	DriverPos Pos `json:"driver_pos"`
}

// Resources is accepted and recorded with Nomad's defaults (cpu 100 MHz,
// memory 300 MB).
type Resources struct {
	CPU         int `json:"cpu,omitempty"`
	Cores       int `json:"cores,omitempty"`
	MemoryMB    int `json:"memory"`
	MemoryMaxMB int `json:"memory_max,omitempty"`
}

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
		KillTimeout string `json:"kill_timeout"`
	}{plain(t), t.KillTimeout.String()})
}

func (t *Task) UnmarshalJSON(b []byte) error {
	type plain Task
	aux := struct {
		*plain
		KillTimeout string `json:"kill_timeout"`
	}{plain: (*plain)(t)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return parseDurations(map[string]durField{"task.kill_timeout": {aux.KillTimeout, &t.KillTimeout}})
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
