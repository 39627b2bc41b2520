package docker

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/berth/berth/task/driver"
)

// containerConfig is the body of POST /containers/create (API 1.41), the
// part berth sets.
type containerConfig struct {
	Hostname    string            `json:"Hostname,omitempty"`
	User        string            `json:"User,omitempty"`
	Env         []string          `json:"Env,omitempty"`
	Cmd         []string          `json:"Cmd,omitempty"`
	Entrypoint  []string          `json:"Entrypoint,omitempty"`
	Image       string            `json:"Image"`
	WorkingDir  string            `json:"WorkingDir,omitempty"`
	Labels      map[string]string `json:"Labels,omitempty"`
	StopSignal  string            `json:"StopSignal,omitempty"`
	StopTimeout *int              `json:"StopTimeout,omitempty"`
	Tty         bool              `json:"Tty,omitempty"`
	OpenStdin   bool              `json:"OpenStdin,omitempty"`
	HostConfig  hostConfig        `json:"HostConfig"`
}

type hostConfig struct {
	NetworkMode       string            `json:"NetworkMode,omitempty"`
	Privileged        bool              `json:"Privileged,omitempty"`
	ReadonlyRootfs    bool              `json:"ReadonlyRootfs,omitempty"`
	CapAdd            []string          `json:"CapAdd,omitempty"`
	CapDrop           []string          `json:"CapDrop,omitempty"`
	SecurityOpt       []string          `json:"SecurityOpt,omitempty"`
	Tmpfs             map[string]string `json:"Tmpfs,omitempty"`
	Sysctls           map[string]string `json:"Sysctls,omitempty"`
	ShmSize           int64             `json:"ShmSize,omitempty"`
	PidsLimit         *int64            `json:"PidsLimit,omitempty"`
	Init              *bool             `json:"Init,omitempty"`
	DNS               []string          `json:"Dns,omitempty"`
	DNSSearch         []string          `json:"DnsSearch,omitempty"`
	DNSOptions        []string          `json:"DnsOptions,omitempty"`
	ExtraHosts        []string          `json:"ExtraHosts,omitempty"`
	Mounts            []mountSpec       `json:"Mounts,omitempty"`
	Ulimits           []ulimitSpec      `json:"Ulimits,omitempty"`
	CPUShares         int64             `json:"CpuShares,omitempty"`
	Memory            int64             `json:"Memory,omitempty"`
	MemoryReservation int64             `json:"MemoryReservation,omitempty"`
	LogConfig         logConfig         `json:"LogConfig"`
}

type mountSpec struct {
	Type        string        `json:"Type"`
	Source      string        `json:"Source"`
	Target      string        `json:"Target"`
	ReadOnly    bool          `json:"ReadOnly,omitempty"`
	BindOptions *bindOptions  `json:"BindOptions,omitempty"`
	TmpfsOpts   *tmpfsOptions `json:"TmpfsOptions,omitempty"`
}

type bindOptions struct {
	Propagation string `json:"Propagation,omitempty"`
}

type tmpfsOptions struct {
	SizeBytes int64 `json:"SizeBytes,omitempty"`
}

type ulimitSpec struct {
	Name string `json:"Name"`
	Soft int64  `json:"Soft"`
	Hard int64  `json:"Hard"`
}

type logConfig struct {
	Type   string            `json:"Type"`
	Config map[string]string `json:"Config,omitempty"`
}

// joinPause is the network mode Start replaces with container:<pause>.
const joinPause = "berth:pause"

// Where Nomad's docker driver mounts the task's directories.
const (
	ContainerAllocDir   = "/alloc"
	ContainerTaskDir    = "/local"
	ContainerSecretsDir = "/secrets"
)

// TaskPaths implements driver.PathMapper.
func (d *Driver) TaskPaths() driver.TaskPaths {
	return driver.TaskPaths{AllocDir: ContainerAllocDir, TaskDir: ContainerTaskDir, SecretsDir: ContainerSecretsDir}
}

// containerConfig is what every task's container gets: image, command,
// labels, environment, user, stop signal and timeout, the task's
// directories and volumes, its logs, its resources.
func (d *Driver) containerConfig(t *driver.Task, tc *TaskConfig) *containerConfig {
	labels := make(map[string]string, len(tc.Labels)+len(t.Labels)+3)
	for k, v := range tc.Labels {
		labels[k] = v
	}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[LabelAllocID] = t.AllocID
	labels[LabelTask] = t.TaskName
	labels[LabelStore] = d.storeID
	c := &containerConfig{
		Image:      tc.Image,
		Cmd:        tc.command(),
		Entrypoint: tc.Entrypoint,
		WorkingDir: tc.WorkDir,
		Labels:     labels,
		Env:        envList(t.Env),
		User:       t.User,
		StopSignal: signalName(int(t.KillSignal)),
		HostConfig: hostConfig{LogConfig: logConfig{Type: "json-file"}},
	}
	if t.KillTimeout > 0 {
		s := ceilSeconds(t.KillTimeout)
		c.StopTimeout = &s
	}
	if t.LogDir == "" || t.Logs.Disabled {
		c.HostConfig.LogConfig = logConfig{Type: "none"}
	}
	c.HostConfig.Mounts = append(taskDirMounts(t), volumeMounts(t)...)
	// Nomad's docker driver: cpu as CPU shares, memory the limit, a
	// higher memory_max the hard limit with memory the reservation.
	r := t.Resources
	c.HostConfig.CPUShares = int64(r.CPU)
	switch {
	case r.MemoryMaxMB > r.MemoryMB:
		c.HostConfig.Memory, c.HostConfig.MemoryReservation = int64(r.MemoryMaxMB)<<20, int64(r.MemoryMB)<<20
	case r.MemoryMaxMB < 0:
		c.HostConfig.MemoryReservation = int64(r.MemoryMB) << 20
	case r.MemoryMB > 0:
		c.HostConfig.Memory = int64(r.MemoryMB) << 20
	}
	return c
}

// command is what the container runs: with `command`, command and args
// replace the image's CMD; args alone replace it too, as in Nomad's
// docker driver. The entrypoint is the image's unless set.
func (tc *TaskConfig) command() []string {
	if tc.Command != "" {
		return append([]string{tc.Command}, tc.Args...)
	}
	return tc.Args
}

func taskDirMounts(t *driver.Task) []mountSpec {
	if t.AllocDir == "" {
		return nil
	}
	td := driver.TaskDir(t.AllocDir, t.TaskName)
	bind := func(src, dst string) mountSpec {
		return mountSpec{Type: "bind", Source: src, Target: dst, BindOptions: &bindOptions{Propagation: "rprivate"}}
	}
	return []mountSpec{
		bind(driver.SharedDir(t.AllocDir), ContainerAllocDir),
		bind(filepath.Join(td, "local"), ContainerTaskDir),
		bind(filepath.Join(td, "secrets"), ContainerSecretsDir),
	}
}

// volumeMounts are the task's host volumes (volume_mount blocks).
func volumeMounts(t *driver.Task) []mountSpec {
	var out []mountSpec
	for _, m := range t.Mounts {
		p := "rprivate"
		switch m.Propagation {
		case driver.PropagationHostToTask:
			p = "rslave"
		case driver.PropagationBidirectional:
			p = "rshared"
		}
		out = append(out, mountSpec{Type: "bind", Source: m.Source, Target: m.Dest, ReadOnly: m.ReadOnly, BindOptions: &bindOptions{Propagation: p}})
	}
	return out
}

// applyConfig puts what the config block asks for into the container's
// config. Its errors are what only the task can tell (its network, its
// ports), naming the key.
func applyConfig(c *containerConfig, t *driver.Task, tc *TaskConfig) error {
	if err := applyNetwork(c, t, tc); err != nil {
		return err
	}
	h := &c.HostConfig
	c.Tty, c.OpenStdin = tc.TTY, tc.Interactive
	h.Privileged = tc.Privileged
	h.ReadonlyRootfs = tc.ReadonlyRootfs
	h.CapAdd, h.CapDrop = upperCaps(tc.CapAdd), upperCaps(tc.CapDrop)
	h.SecurityOpt = tc.SecurityOpt
	if len(tc.Tmpfs) > 0 {
		h.Tmpfs = map[string]string{}
		for _, s := range tc.Tmpfs {
			path, opts, _ := strings.Cut(s, ":")
			h.Tmpfs[path] = opts
		}
	}
	h.Sysctls = tc.Sysctl
	h.ShmSize = tc.ShmSize
	if tc.PidsLimit > 0 {
		n := int64(tc.PidsLimit)
		h.PidsLimit = &n
	}
	if tc.Init {
		b := true
		h.Init = &b
	}
	names := make([]string, 0, len(tc.Ulimit))
	for k := range tc.Ulimit {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		soft, hard := ulimitValues(tc.Ulimit[k])
		h.Ulimits = append(h.Ulimits, ulimitSpec{Name: k, Soft: soft, Hard: hard})
	}
	return nil
}

func upperCaps(caps []string) []string {
	var out []string
	for _, c := range caps {
		if c == "all" {
			out = append(out, "ALL")
			continue
		}
		out = append(out, "CAP_"+strings.ToUpper(c))
	}
	return out
}

// applyNetwork: a task of a group with a namespace joins the allocation's
// pause container; host and none are Docker's. Docker refuses a hostname,
// DNS settings and extra hosts for a container that joins another's
// network (they are the pause container's), so there they are refused
// naming the group's network block; ports are published by the group's
// network, and refused in the host's, where nothing is mapped.
func applyNetwork(c *containerConfig, t *driver.Task, tc *TaskConfig) error {
	h := &c.HostConfig
	switch m := tc.NetworkMode; {
	case m == "host":
		h.NetworkMode = "host"
	case m == "none":
		h.NetworkMode = "none"
	case t.NetnsPath != "":
		h.NetworkMode = joinPause
	case m == "bridge":
		return &configError{field: "network_mode", msg: `docker: config.network_mode "bridge": the group is in the host's network, berth has no bridge to put the task on: set the group's network { mode = "bridge" }`}
	default:
		h.NetworkMode = "host"
	}
	for _, p := range tc.Ports {
		if _, ok := t.Env["NOMAD_HOST_PORT_"+p]; !ok {
			return &configError{field: "ports", msg: fmt.Sprintf("docker: config.ports: port %q is not a port of the group's network block", p)}
		}
		if h.NetworkMode == "host" {
			return &configError{field: "ports", msg: fmt.Sprintf("docker: config.ports: the task is in the host's network, where nothing is mapped: "+
				"port %q is the host's port %s, drop ports and have the task listen on NOMAD_PORT_%s, or set the group's network { mode = \"bridge\" } to map it to its `to`",
				p, t.Env["NOMAD_HOST_PORT_"+p], p)}
		}
	}
	if h.NetworkMode == joinPause {
		for _, f := range []struct {
			key string
			set bool
		}{{"hostname", tc.Hostname != ""}, {"dns_servers", len(tc.DNSServers) > 0}, {"dns_search_domains", len(tc.DNSSearchDomains) > 0},
			{"dns_options", len(tc.DNSOptions) > 0}, {"extra_hosts", len(tc.ExtraHosts) > 0}} {
			if f.set {
				return &configError{field: f.key, msg: "docker: config." + f.key + " is not supported in a group network: the task shares the allocation's network (and its " +
					"name and resolver files) with the other tasks: set it in the group's network block (hostname, dns)"}
			}
		}
		return nil
	}
	c.Hostname = tc.Hostname
	h.DNS, h.DNSSearch, h.DNSOptions, h.ExtraHosts = tc.DNSServers, tc.DNSSearchDomains, tc.DNSOptions, tc.ExtraHosts
	return nil
}

// registryAuth is the X-Registry-Auth header of a pull; "" without auth.
func registryAuth(a Auth) string {
	if a == (Auth{}) {
		return ""
	}
	b, _ := json.Marshal(map[string]string{"username": a.Username, "password": a.Password, "email": a.Email, "serveraddress": a.ServerAddress})
	return base64.URLEncoding.EncodeToString(b)
}
