package docker

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/drivercfg"
)

// TaskConfig is a task's `config {}` block for the docker driver, with
// the keys of Nomad's docker driver. Each key is acted on or refused
// (configKeys says which and why): none is dropped.
type TaskConfig struct {
	Image      string
	Command    string
	Args       []string
	Entrypoint []string
	WorkDir    string
	Hostname   string
	Labels     map[string]string

	// NetworkMode is "" or "bridge" (the group's network), "host" or
	// "none"; Ports are the group's port labels the task uses.
	NetworkMode      string
	Ports            []string
	DNSServers       []string
	DNSSearchDomains []string
	DNSOptions       []string
	ExtraHosts       []string

	Tmpfs          []string
	CapAdd         []string
	CapDrop        []string
	SecurityOpt    []string
	Privileged     bool
	ReadonlyRootfs bool
	Init           bool
	TTY            bool
	Interactive    bool
	Sysctl         map[string]string
	// Ulimit maps a limit name to "n" or "soft:hard".
	Ulimit    map[string]string
	ShmSize   int64
	PidsLimit int

	Logging Logging

	// Image pulls: the daemon pulls, from a registry on this host only,
	// when the image is not local or force_pull is set; otherwise the
	// error names the image.
	Auth             Auth
	AuthSoftFail     bool
	ForcePull        bool
	ImagePullTimeout time.Duration
}

// Logging is the logging block: type "" or "json-file" (what berth
// reads the output from) and no config.
type Logging struct {
	Type   string
	Config map[string]string
}

// Auth is the registry auth block.
type Auth struct {
	Username, Password, Email, ServerAddress string
}

// Why berth refuses what it cannot give.
const (
	whyGroupNet    = "the task is in its group's network: set the group's network mode (bridge, host, none, cni/<name>)"
	whyPortMap     = "is Nomad 0.12's form: give the group's port a `to` and list its label in ports"
	whyVolumes     = "would bind host paths the job chooses: berth binds the task's directories (NOMAD_ALLOC_DIR, NOMAD_TASK_DIR, NOMAD_SECRETS_DIR) and the group's host volumes (volume_mount); use a template, an artifact or a volume_mount"
	whyCPUQuota    = "berth sets no CPU quota on docker tasks (resources.cpu is CPU shares here)"
	whyLogDriver   = "berth copies the container's output into the task's logs itself (the logs block), from Docker's json-file log"
	whyAddress     = "the group's network assigns the task's addresses"
	whyNamespaces  = "docker tasks keep private IPC, PID, UTS and user namespaces on berth"
	whyDevices     = "host devices make the container root on the host: run it privileged where the agent's docker_allow_privileged is set"
	privilegedOnly = "only where the agent's docker_allow_privileged is set"
	whyRuntime     = "berth runs docker tasks with the daemon's default runtime"
	whyLoad        = "berth loads no image archives: load the image into Docker first (scripts/image/docker-setup.sh does so for localhost/busybox:latest)"
	whyStorage     = "berth sets no storage options on docker tasks"
	whyHealth      = "berth runs the job's service checks, not the image's HEALTHCHECK"
)

// configKeys is every key of a docker task's config block: what the
// driver does with it, how it is decoded and checked. The order is that
// of the problems reported.
var configKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("image", func(d *decoder, k string) { d.tc.Image = d.required(k) }).Note("pulled only when not in Docker's local storage or with force_pull, and only from a registry on this host (localhost, a loopback address): another is an error naming the image"),
	drivercfg.Run("command", func(d *decoder, k string) { d.tc.Command = d.str(k) }),
	drivercfg.Run("args", func(d *decoder, k string) { d.tc.Args = d.list(k) }),
	drivercfg.Run("entrypoint", func(d *decoder, k string) { d.tc.Entrypoint = d.entrypoint(k) }),
	drivercfg.Run("work_dir", func(d *decoder, k string) { d.tc.WorkDir = d.str(k) }),
	drivercfg.Run("hostname", func(d *decoder, k string) { d.tc.Hostname = d.str(k) }).Note("in the host's network or none; in a group network the refusal names the group's network { hostname }"),
	drivercfg.Run("labels", func(d *decoder, k string) { d.tc.Labels = d.strMap(k) }),
	drivercfg.Run("network_mode", func(d *decoder, k string) { d.tc.NetworkMode = d.networkMode(k) }).
		Note("\"\" and \"bridge\": the group's network (through the allocation's pause container); \"host\", \"none\"; \"container:\" and a docker network are refused: " + whyGroupNet),
	drivercfg.Run("ports", func(d *decoder, k string) { d.tc.Ports = d.list(k) }).
		Note("published by the group's network (the port's `to`); refused in the host's network, where nothing is mapped"),
	drivercfg.Refuse[*decoder]("port_map", whyPortMap),
	drivercfg.Run("dns_servers", func(d *decoder, k string) { d.tc.DNSServers = d.list(k, ipAddr) }).Note("in the host's network or none; in a group network use the group's network { dns }"),
	drivercfg.Run("dns_search_domains", func(d *decoder, k string) { d.tc.DNSSearchDomains = d.list(k) }).Note("as dns_servers"),
	drivercfg.Run("dns_options", func(d *decoder, k string) { d.tc.DNSOptions = d.list(k) }).Note("as dns_servers"),
	drivercfg.Run("extra_hosts", func(d *decoder, k string) { d.tc.ExtraHosts = d.list(k, hostIP) }).Note("as dns_servers"),
	drivercfg.Refuse[*decoder]("network_aliases", whyAddress),
	drivercfg.Refuse[*decoder]("ipv4_address", whyAddress),
	drivercfg.Refuse[*decoder]("ipv6_address", whyAddress),
	drivercfg.Refuse[*decoder]("mac_address", whyAddress),
	drivercfg.Refuse[*decoder]("advertise_ipv6_address", whyAddress),
	drivercfg.Refuse[*decoder]("volumes", whyVolumes),
	drivercfg.Refuse[*decoder]("mount", whyVolumes),
	drivercfg.Refuse[*decoder]("mounts", whyVolumes),
	drivercfg.Refuse[*decoder]("volume_driver", whyVolumes),
	drivercfg.Run("tmpfs", func(d *decoder, k string) { d.tc.Tmpfs = d.list(k, tmpfsSpec) }),
	drivercfg.Refuse[*decoder]("devices", whyDevices),
	drivercfg.Run("cap_add", func(d *decoder, k string) { d.tc.CapAdd = d.caps(k) }).Note("within the agent's allow_caps"),
	drivercfg.Run("cap_drop", func(d *decoder, k string) { d.tc.CapDrop = d.caps(k) }),
	drivercfg.Run("security_opt", func(d *decoder, k string) { d.tc.SecurityOpt = d.list(k, securityOpt) }).
		Note("no-new-privileges, seccomp=, apparmor=, label=; seccomp= (a host file), seccomp=unconfined, apparmor=unconfined and label=disable " + privilegedOnly),
	drivercfg.Run("privileged", func(d *decoder, k string) { d.tc.Privileged = d.boolean(k) }).Note(privilegedOnly),
	drivercfg.Run("readonly_rootfs", func(d *decoder, k string) { d.tc.ReadonlyRootfs = d.boolean(k) }),
	drivercfg.Run("init", func(d *decoder, k string) { d.tc.Init = d.boolean(k) }),
	drivercfg.Run("tty", func(d *decoder, k string) { d.tc.TTY = d.boolean(k) }),
	drivercfg.Run("interactive", func(d *decoder, k string) { d.tc.Interactive = d.boolean(k) }).Note("stdin is kept open, and empty: nothing writes to it"),
	drivercfg.Run("sysctl", func(d *decoder, k string) { d.tc.Sysctl = d.strMap(k) }),
	drivercfg.Run("ulimit", func(d *decoder, k string) { d.tc.Ulimit = d.ulimit(k) }),
	drivercfg.Run("shm_size", func(d *decoder, k string) { d.tc.ShmSize = int64(d.integer(k, 0, math.MaxInt32, 0)) }).Note("bytes, as Nomad's"),
	drivercfg.Run("pids_limit", func(d *decoder, k string) { d.tc.PidsLimit = d.integer(k, 0, math.MaxInt32, 0) }),
	drivercfg.Refuse[*decoder]("cpu_hard_limit", whyCPUQuota),
	drivercfg.Refuse[*decoder]("cpu_cfs_period", whyCPUQuota),
	drivercfg.Refuse[*decoder]("cpuset_cpus", whyCPUQuota),
	drivercfg.Refuse[*decoder]("memory_hard_limit", "use resources { memory_max }"),
	drivercfg.Refuse[*decoder]("ipc_mode", whyNamespaces),
	drivercfg.Refuse[*decoder]("pid_mode", whyNamespaces),
	drivercfg.Refuse[*decoder]("uts_mode", whyNamespaces),
	drivercfg.Refuse[*decoder]("userns_mode", whyNamespaces),
	drivercfg.Refuse[*decoder]("runtime", whyRuntime),
	drivercfg.Refuse[*decoder]("isolation", whyRuntime),
	drivercfg.Refuse[*decoder]("load", whyLoad),
	drivercfg.Refuse[*decoder]("storage_opt", whyStorage),
	drivercfg.Refuse[*decoder]("healthchecks", whyHealth),
	drivercfg.Refuse[*decoder]("group_add", whyNamespaces),
	drivercfg.Refuse[*decoder]("oom_score_adj", "not acted on by this driver yet: leave it out"),
	drivercfg.Run("force_pull", func(d *decoder, k string) { d.tc.ForcePull = d.boolean(k) }).Note("pulls from a registry on this host; an image of another registry is an error naming it"),
	drivercfg.Run("image_pull_timeout", func(d *decoder, k string) { d.imagePullTimeout(k) }),
	drivercfg.Run("auth_soft_fail", func(d *decoder, k string) { d.tc.AuthSoftFail = d.boolean(k) }).Note("a pull that fails with auth retries without it"),
	drivercfg.Run("auth", func(d *decoder, k string) { d.nested(k, authKeys) }).Note("sent with a pull (X-Registry-Auth)"),
	drivercfg.Run("logging", func(d *decoder, k string) { d.nested(k, loggingKeys) }).Note("type \"json-file\" without config only: " + whyLogDriver),
}

// loggingKeys is the logging block's.
var loggingKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("type", func(d *decoder, k string) {
		switch d.tc.Logging.Type = d.str(k); d.tc.Logging.Type {
		case "", "json-file":
		default:
			d.refuse(k, "%q is not supported: %s: use \"json-file\" or leave logging out", d.tc.Logging.Type, whyLogDriver)
		}
	}),
	drivercfg.Refuse[*decoder]("driver", "is Nomad's old name of type: use type"),
	drivercfg.Run("config", func(d *decoder, k string) {
		if d.tc.Logging.Config = d.strMap(k); len(d.tc.Logging.Config) > 0 {
			d.refuse(k, "is not supported: %s: leave it out", whyLogDriver)
		}
	}),
}

// authKeys is the auth block's.
var authKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("username", func(d *decoder, k string) { d.tc.Auth.Username = d.str(k) }),
	drivercfg.Run("password", func(d *decoder, k string) { d.tc.Auth.Password = d.str(k) }),
	drivercfg.Run("email", func(d *decoder, k string) { d.tc.Auth.Email = d.str(k) }),
	drivercfg.Run("server_address", func(d *decoder, k string) { d.tc.Auth.ServerAddress = d.str(k) }),
}

// ConfigKeys is the docker driver's config keys and verdicts, for the
// README's table.
func ConfigKeys() []drivercfg.Row { return configKeys.Rows() }

var ulimitRE = regexp.MustCompile(`^-?[0-9]+(:-?[0-9]+)?$`)

func (d *decoder) networkMode(key string) string {
	switch m := d.str(key); {
	case m == "", m == "bridge", m == "host", m == "none", m == "default":
		return m
	case strings.HasPrefix(m, "container:"):
		d.refuse(key, "%q is not supported: %s", m, whyGroupNet)
		return m
	default:
		d.refuse(key, "%q (a docker network) is not supported: %s", m, whyGroupNet)
		return m
	}
}

// Policy is what this node lets a docker task ask for beyond the
// defaults: agent settings, which no job can change.
type Policy struct {
	// AllowPrivileged lets a task set privileged = true (Nomad's
	// allow_privileged) and turn seccomp, AppArmor or SELinux off.
	AllowPrivileged bool
	// AllowCaps bounds cap_add (lower case, no "cap_"; "all" for any);
	// nil is DefaultAllowCaps.
	AllowCaps []string
}

// DefaultAllowCaps is Nomad's allow_caps: what cap_add may ask for where
// the agent sets none.
var DefaultAllowCaps = []string{"audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
	"net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"}

// Check refuses what tc asks for beyond the policy, naming the field.
func (p Policy) Check(tc *TaskConfig) error {
	if tc.Privileged && !p.AllowPrivileged {
		return &configError{field: "privileged",
			msg: "docker: config.privileged is not allowed on this node: a privileged container is root on the host (agent setting docker_allow_privileged)"}
	}
	return errors.Join(p.checkIsolation(tc)...)
}

func (p Policy) checkIsolation(tc *TaskConfig) []error {
	var errs []error
	refuse := func(field, format string, a ...any) {
		errs = append(errs, &configError{field: field, msg: "docker: config." + field + " " + fmt.Sprintf(format, a...)})
	}
	allowed := DefaultAllowCaps
	if p.AllowCaps != nil {
		allowed = make([]string, 0, len(p.AllowCaps))
		for _, c := range p.AllowCaps {
			allowed = append(allowed, strings.TrimPrefix(strings.ToLower(c), "cap_"))
		}
	}
	for _, c := range tc.CapAdd {
		if !slices.Contains(allowed, c) && !slices.Contains(allowed, "all") {
			refuse("cap_add", "%q is not in this node's allow_caps (%s)", c, strings.Join(allowed, ", "))
		}
	}
	if p.AllowPrivileged {
		return errs
	}
	const why = "is not allowed on this node: it gives the container what only a privileged one has (agent setting docker_allow_privileged)"
	for _, o := range tc.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") || o == "apparmor=unconfined" || o == "label=disable" || o == "label:disable" {
			refuse("security_opt", "%q %s", o, why)
		}
	}
	return errs
}

// ValidateConfig is ParseConfig and the policy's Check: what `berth
// validate` and the agent answer for a task's config block. What berth
// refuses to run is a warning here, naming the key, and an error when the
// task starts, as for podman.
func (p Policy) ValidateConfig(cfg map[string]any) error {
	tc, warns, refused, err := parseConfig(cfg)
	if err == nil && tc.Privileged && !p.AllowPrivileged {
		err = p.Check(tc)
	} else if err == nil {
		refused = append(refused, p.checkIsolation(tc)...)
	}
	for _, r := range refused {
		var ce *configError
		if errors.As(r, &ce) {
			msg := strings.TrimPrefix(strings.TrimPrefix(ce.msg, "docker: config."+ce.field), " ")
			warns = append(warns, &driver.ConfigWarning{Driver: Name, Field: ce.field, Msg: msg + " (the task will not start on this node)"})
		}
	}
	if len(warns) == 0 {
		return err
	}
	return errors.Join(append(warns, err)...)
}

// ParseConfig decodes and checks a task's config block. Errors name the
// key; every problem is reported (errors.Join).
func ParseConfig(cfg map[string]any) (*TaskConfig, error) {
	tc, _, refused, err := parseConfig(cfg)
	if err == nil && len(refused) > 0 {
		return nil, errors.Join(refused...)
	}
	return tc, err
}

func parseConfig(cfg map[string]any) (_ *TaskConfig, warns, refused []error, _ error) {
	d := &decoder{cfg: cfg, tc: &TaskConfig{ImagePullTimeout: 5 * time.Minute}}
	if unknown := configKeys.Walk(d, cfg); len(unknown) > 0 {
		d.errs = append([]error{&configError{field: unknown[0], msg: fmt.Sprintf("docker: unknown config key(s) %s (known: %s)",
			"config."+strings.Join(unknown, ", config."), strings.Join(configKeys.Names(), ", "))}}, d.errs...)
	}
	if err := errors.Join(d.errs...); err != nil {
		return nil, d.warns, d.refused, err
	}
	return d.tc, d.warns, d.refused, nil
}

// ulimitValues reads "n" or "soft:hard".
func ulimitValues(v string) (soft, hard int64) {
	s, h, ok := strings.Cut(v, ":")
	soft, _ = strconv.ParseInt(s, 10, 64)
	hard = soft
	if ok {
		hard, _ = strconv.ParseInt(h, 10, 64)
	}
	return soft, hard
}
