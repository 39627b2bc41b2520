package podman

import (
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/drivercfg"
)

// ErrInvalidConfig is matched (errors.Is) by every error ValidateConfig returns.
var ErrInvalidConfig = errors.New("invalid podman task config")

// configError keeps the exact, field-naming message while still matching
// ErrInvalidConfig.
type configError struct {
	msg   string
	field string
}

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

// ConfigField names the key for jobspec's positions.
func (e *configError) ConfigField() string { return e.field }

// TaskConfig is a task's `config {}` block for the podman driver, with
// every key of Nomad's podman task driver plugin. Each key is acted on or
// refused (configKeys says which and why): none is dropped.
type TaskConfig struct {
	Image      string
	Command    string
	Args       []string
	Entrypoint []string
	WorkingDir string
	Hostname   string
	Labels     map[string]string

	// Networking: NetworkMode is "" (the group's network), "bridge" (the
	// same, where the group has a namespace), "host", "none" or
	// "task:<name>"; Ports are the group's port labels the task uses.
	NetworkMode string
	Ports       []string
	DNS         []string
	ExtraHosts  []string

	Tmpfs          []string
	Devices        []string
	CapAdd         []string
	CapDrop        []string
	SecurityOpt    []string
	SelinuxOpts    []string
	AppArmor       string
	Privileged     bool
	ReadonlyRootfs bool
	Userns         string
	Init           bool
	InitPath       string
	TTY            bool
	Sysctl         map[string]string
	// Ulimit maps a limit name to "n" or "soft:hard".
	Ulimit map[string]string
	// OOMScoreAdj is nil when unset.
	OOMScoreAdj *int

	// Sizes in bytes (shm_size, memory_reservation, memory_swap written as
	// "64m", "1g", ...); 0 when unset (memory_swap -1: unlimited swap).
	// MemorySwappiness is -1 when unset.
	ShmSize           int64
	MemoryReservation int64
	MemorySwap        int64
	MemorySwappiness  int
	PidsLimit         int
	CPUHardLimit      bool
	CPUCFSPeriod      int

	Logging Logging
	// Socket names one of the agent's podman sockets; "" the default.
	Socket string

	// Image pulls: berth has no registry access, so images must be present
	// locally; these only matter to a pull.
	Auth             Auth
	AuthSoftFail     bool
	ForcePull        bool
	ImagePullTimeout time.Duration
}

// Logging is the logging block: Driver "nomad" (the default) or
// "journald", with driver options.
type Logging struct {
	Driver  string
	Options map[string]string
}

// Auth is the registry auth block.
type Auth struct {
	Username  string
	Password  string
	TLSVerify *bool
}

// noPulls is why the image pull keys are accepted: they only matter to a
// pull, and an image missing from local storage is an error naming it.
const noPulls = "only matters to a pull: berth pulls no images, a missing one is an error naming it"

// Why berth refuses what it cannot give.
const (
	whyGroupNet    = "the task is in its group's network: set the group's network mode (bridge, host, none, cni/<name>)"
	whyPortMap     = "is Nomad 0.12's form: give the group's port a `to` and list its label in ports"
	whyVolumes     = "would bind host paths the job chooses: berth binds only the task's directories (NOMAD_ALLOC_DIR, NOMAD_TASK_DIR, NOMAD_SECRETS_DIR); use a template or an artifact"
	whyCPUQuota    = "berth sets no CPU quota on podman tasks (resources.cpu is not a hard limit here)"
	whyPull        = "berth pulls no images: the image must be in local storage"
	whyLogDriver   = "berth copies the container's output into the task's logs itself (the logs block)"
	whyAddress     = "the group's network assigns the task's addresses"
	whyIPC         = "podman tasks keep a private IPC namespace on berth"
	whySocket      = "berth talks to the agent's own podman service only"
	privilegedOnly = "only where the agent's podman_allow_privileged is set"
)

// configKeys is every key of a podman task's config block: what the
// driver does with it, how it is decoded and checked. The order is that
// of the problems reported.
var configKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("image", func(d *decoder, k string) { d.tc.Image = d.required(k) }).Note("must be in local storage: berth pulls no images"),
	drivercfg.Run("command", func(d *decoder, k string) { d.tc.Command = d.str(k) }),
	drivercfg.Run("working_dir", func(d *decoder, k string) { d.tc.WorkingDir = d.str(k) }),
	drivercfg.Run("hostname", func(d *decoder, k string) { d.tc.Hostname = d.str(k) }),
	drivercfg.Run("args", func(d *decoder, k string) { d.tc.Args = d.list(k) }),
	drivercfg.Run("entrypoint", func(d *decoder, k string) { d.tc.Entrypoint = d.entrypoint(k) }),
	drivercfg.Run("labels", func(d *decoder, k string) { d.tc.Labels = d.strMap(k) }),
	drivercfg.Run("network_mode", func(d *decoder, k string) { d.tc.NetworkMode = d.networkMode(k) }).
		Note("\"\" and \"bridge\": the group's network; \"host\", \"none\", \"task:<name>\"; \"slirp4netns\", \"container:\", \"ns:\" and a podman network are refused: " + whyGroupNet),
	drivercfg.Run("ports", func(d *decoder, k string) { d.tc.Ports = d.list(k) }).
		Note("published by the group's network (the port's `to`); refused in the host's network, where nothing is mapped: listen on NOMAD_PORT_<label> there"),
	drivercfg.Refuse[*decoder]("port_map", whyPortMap),
	drivercfg.Run("dns", func(d *decoder, k string) { d.tc.DNS = d.list(k, ipAddr) }),
	drivercfg.Run("extra_hosts", func(d *decoder, k string) { d.tc.ExtraHosts = d.list(k, hostIP) }),
	drivercfg.Refuse[*decoder]("volumes", whyVolumes),
	drivercfg.Run("tmpfs", func(d *decoder, k string) { d.tc.Tmpfs = d.list(k, tmpfsSpec) }),
	drivercfg.Run("devices", func(d *decoder, k string) { d.tc.Devices = d.list(k, deviceSpec) }).Note(privilegedOnly),
	drivercfg.Run("cap_add", func(d *decoder, k string) { d.tc.CapAdd = d.caps(k) }).Note("within the agent's allow_caps"),
	drivercfg.Run("cap_drop", func(d *decoder, k string) { d.tc.CapDrop = d.caps(k) }),
	drivercfg.Run("security_opt", func(d *decoder, k string) { d.tc.SecurityOpt = d.list(k, securityOpt) }).
		Note("no-new-privileges, seccomp=, apparmor=, label=, mask=, unmask=; seccomp= (a host file), unmask= and turning AppArmor or labels off only where the agent's podman_allow_privileged is set"),
	drivercfg.Run("selinux_opts", func(d *decoder, k string) { d.tc.SelinuxOpts = d.list(k) }),
	drivercfg.Run("apparmor_profile", func(d *decoder, k string) { d.tc.AppArmor = d.str(k) }).Note("unconfined " + privilegedOnly),
	drivercfg.Run("privileged", func(d *decoder, k string) { d.tc.Privileged = d.boolean(k) }).Note(privilegedOnly),
	drivercfg.Run("readonly_rootfs", func(d *decoder, k string) { d.tc.ReadonlyRootfs = d.boolean(k) }),
	drivercfg.Run("userns", func(d *decoder, k string) { d.tc.Userns = d.userns(k) }),
	drivercfg.Run("init", func(d *decoder, k string) { d.tc.Init = d.boolean(k) }),
	drivercfg.Run("init_path", func(d *decoder, k string) { d.tc.InitPath = d.str(k) }),
	drivercfg.Run("tty", func(d *decoder, k string) { d.tc.TTY = d.boolean(k) }),
	drivercfg.Run("sysctl", func(d *decoder, k string) { d.tc.Sysctl = d.strMap(k) }),
	drivercfg.Run("ulimit", func(d *decoder, k string) { d.tc.Ulimit = d.ulimit(k) }),
	drivercfg.Run("oom_score_adj", func(d *decoder, k string) { d.tc.OOMScoreAdj = d.optInteger(k, 0, 1000) }).Note("0 to 1000, as exec's: a task cannot shield itself from the OOM killer"),
	drivercfg.Run("shm_size", func(d *decoder, k string) { d.tc.ShmSize = d.size(k) }),
	drivercfg.Run("memory_reservation", func(d *decoder, k string) { d.tc.MemoryReservation = d.size(k) }),
	drivercfg.Run("memory_swap", func(d *decoder, k string) { d.tc.MemorySwap = d.swap(k) }).Note("with resources.memory (memory_max when higher) as the memory limit, which podman needs beside it"),
	drivercfg.Run("memory_swappiness", func(d *decoder, k string) { d.tc.MemorySwappiness = d.integer(k, 0, 100, -1) }),
	drivercfg.Run("pids_limit", func(d *decoder, k string) { d.tc.PidsLimit = d.integer(k, 0, math.MaxInt32, 0) }),
	drivercfg.Run("cpu_hard_limit", func(d *decoder, k string) { d.tc.CPUHardLimit = d.refuseTrue(k, whyCPUQuota) }).Note("false only: " + whyCPUQuota),
	drivercfg.Refuse[*decoder]("cpu_cfs_period", whyCPUQuota),
	drivercfg.Run("socket", func(d *decoder, k string) { d.tc.Socket = d.socket(k) }).Note("\"default\" only: " + whySocket),
	drivercfg.Accept("auth_soft_fail", noPulls, func(d *decoder, k string) { d.tc.AuthSoftFail = d.boolean(k) }),
	drivercfg.Run("force_pull", func(d *decoder, k string) { d.tc.ForcePull = d.refuseTrue(k, whyPull) }).Note("false only: " + whyPull),
	drivercfg.Accept("image_pull_timeout", noPulls, func(d *decoder, k string) { d.imagePullTimeout(k) }),
	drivercfg.Refuse[*decoder]("arch", whyPull),
	drivercfg.Refuse[*decoder]("os", whyPull),
	drivercfg.Refuse[*decoder]("variant", whyPull),
	drivercfg.Refuse[*decoder]("ipv4_address", whyAddress),
	drivercfg.Refuse[*decoder]("ipv6_address", whyAddress),
	drivercfg.Refuse[*decoder]("static_ips", whyAddress),
	drivercfg.Refuse[*decoder]("static_mac", whyAddress),
	drivercfg.Refuse[*decoder]("ipc_mode", whyIPC),
	drivercfg.Run("logging", func(d *decoder, k string) { d.nested(k, loggingKeys) }).Note("driver \"nomad\" without options only: " + whyLogDriver),
	drivercfg.Accept("auth", noPulls+" (username, password, tls_verify)", func(d *decoder, k string) { d.nested(k, authKeys) }),
}

// loggingKeys is the logging block's.
var loggingKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("driver", func(d *decoder, k string) { d.tc.Logging.Driver = d.logDriver(k) }),
	drivercfg.Run("options", func(d *decoder, k string) {
		if d.tc.Logging.Options = d.strMap(k); len(d.tc.Logging.Options) > 0 {
			d.refuse(k, "is not supported: %s: leave them out", whyLogDriver)
		}
	}),
}

// authKeys is the auth block's.
var authKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("username", func(d *decoder, k string) { d.tc.Auth.Username = d.str(k) }),
	drivercfg.Run("password", func(d *decoder, k string) { d.tc.Auth.Password = d.str(k) }),
	drivercfg.Run("tls_verify", func(d *decoder, k string) { d.tc.Auth.TLSVerify = d.optBoolean(k) }),
}

// ConfigKeys is the podman driver's config keys and verdicts, for the
// README's table.
func ConfigKeys() []drivercfg.Row { return configKeys.Rows() }

var (
	sizeRE   = regexp.MustCompile(`^([0-9]+)([bkmgBKMG]?)$`)
	ulimitRE = regexp.MustCompile(`^-?[0-9]+(:-?[0-9]+)?$`)
)

// Policy is what this node lets a podman task ask for beyond the
// defaults: agent settings, which no job can change.
type Policy struct {
	// AllowPrivileged lets a task set privileged = true (Nomad's docker
	// driver's allow_privileged): the container gets every capability
	// and the host's devices, which is root on the host. Host devices and
	// seccomp, AppArmor or SELinux turned off need it too.
	AllowPrivileged bool
	// AllowCaps bounds cap_add (lower case, no "cap_"; "all" for any);
	// nil is DefaultAllowCaps.
	AllowCaps []string
}

// Check refuses what tc asks for beyond the policy, naming the field.
func (p Policy) Check(tc *TaskConfig) error {
	if tc.Privileged && !p.AllowPrivileged {
		return &configError{field: "privileged",
			msg: "podman: config.privileged is not allowed on this node: a privileged container is root on the host (agent setting podman_allow_privileged)"}
	}
	return errors.Join(p.checkIsolation(tc)...)
}

// checkIsolation refuses what would weaken the container's isolation
// beyond the node's settings: capabilities outside allow_caps, host
// devices, seccomp, AppArmor or SELinux turned off.
func (p Policy) checkIsolation(tc *TaskConfig) []error {
	var errs []error
	refuse := func(field, format string, a ...any) {
		errs = append(errs, &configError{field: field, msg: "podman: config." + field + " " + fmt.Sprintf(format, a...)})
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
	const why = "is not allowed on this node: it gives the container what only a privileged one has (agent setting podman_allow_privileged)"
	if len(tc.Devices) > 0 {
		refuse("devices", why)
	}
	if tc.AppArmor == "unconfined" {
		refuse("apparmor_profile", "%q %s", tc.AppArmor, why)
	}
	for _, o := range tc.SecurityOpt {
		// A seccomp profile is a host file the job would choose.
		if strings.HasPrefix(o, "seccomp=") || o == "apparmor=unconfined" || o == "label=disable" || strings.HasPrefix(o, "unmask=") {
			refuse("security_opt", "%q %s", o, why)
		}
	}
	if slices.Contains(tc.SelinuxOpts, "disable") {
		refuse("selinux_opts", "%q %s", "disable", why)
	}
	return errs
}

// DefaultAllowCaps is Nomad's allow_caps: what cap_add may ask for where
// the agent sets none.
var DefaultAllowCaps = []string{"audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
	"net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"}

// ValidateConfig is ParseConfig and the policy's Check: what `berth
// validate` and the agent answer for a task's config block. What berth
// refuses to run (a key it cannot give, a setting this node denies) is a
// warning here, naming the key, and an error when the task starts: the
// job file is valid, this node cannot run it as it is.
func (p Policy) ValidateConfig(cfg map[string]any) error {
	tc, warns, refused, err := parseConfig(cfg)
	if err == nil && tc.Privileged && !p.AllowPrivileged {
		// An error here as before: what the node's settings keep from
		// every task.
		err = p.Check(tc)
	} else if err == nil {
		refused = append(refused, p.checkIsolation(tc)...)
	}
	for _, r := range refused {
		var ce *configError
		if errors.As(r, &ce) {
			msg := strings.TrimPrefix(strings.TrimPrefix(ce.msg, "podman: config."+ce.field), " ")
			warns = append(warns, &driver.ConfigWarning{Driver: "podman", Field: ce.field, Msg: msg + " (the task will not start on this node)"})
		}
	}
	if len(warns) == 0 {
		return err
	}
	return errors.Join(append(warns, err)...)
}

// decoder reads one config block (or a block nested in it) into tc and
// collects every problem.
type decoder struct {
	cfg   map[string]any
	tc    *TaskConfig
	errs  []error
	warns []error
	// refused is what berth cannot give: warnings at validate, errors at
	// start.
	refused []error
}

// Warn implements drivercfg.Reporter.
func (d *decoder) Warn(key, why string) {
	d.warns = append(d.warns, &driver.ConfigWarning{Driver: "podman", Field: key, Msg: why})
}

// Refuse implements drivercfg.Reporter.
func (d *decoder) Refuse(key, why string) { d.refuse(key, "is not supported: %s", why) }

// refuse records what berth will not run, naming key.
func (d *decoder) refuse(key, format string, a ...any) {
	d.refused = append(d.refused, &configError{msg: "podman: config." + key + " " + fmt.Sprintf(format, a...), field: key})
}

// refuseTrue reads a bool key that berth honours only as false.
func (d *decoder) refuseTrue(key, why string) bool {
	b := d.boolean(key)
	if b {
		d.refuse(key, "= true is not supported: %s", why)
	}
	return b
}

func (d *decoder) bad(field, format string, a ...any) {
	d.errs = append(d.errs, &configError{msg: "podman: config." + field + " " + fmt.Sprintf(format, a...), field: field})
}

func (d *decoder) str(key string) string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.bad(key, "must be a string, got %T", v)
	}
	return s
}

func (d *decoder) boolean(key string) bool {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		d.bad(key, "must be true or false, got %T", v)
	}
	return b
}

func (d *decoder) integer(key string, lo, hi int64, def int) int {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return def
	}
	n, ok := wholeNumber(v)
	if !ok {
		d.bad(key, "must be a whole number, got %T", v)
		return def
	}
	if n < lo || n > hi {
		d.bad(key, "must be from %d to %d, got %d", lo, hi, n)
		return def
	}
	return int(n)
}

func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	}
	return 0, false
}

// list reads a list of strings; each check returns the problem of an
// element (a format for %q of it), "" when there is none.
func (d *decoder) list(key string, checks ...func(string) string) []string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := stringList(v)
	if !ok {
		d.bad(key, "must be a list of strings, got %T", v)
	}
	for _, e := range l {
		for _, check := range checks {
			if msg := check(e); msg != "" {
				d.bad(key, msg, e)
			}
		}
	}
	return l
}

func hostIP(h string) string {
	if name, ip, ok := strings.Cut(h, ":"); !ok || name == "" || ip == "" {
		return "%q is not host:ip"
	}
	return ""
}

func ipAddr(s string) string {
	if net.ParseIP(s) == nil {
		return "%q is not an IP address"
	}
	return ""
}

// securityOpt checks one security_opt entry (podman run --security-opt).
func securityOpt(o string) string {
	name, val, hasVal := strings.Cut(o, "=")
	switch name {
	case "no-new-privileges":
		if !hasVal || val == "true" || val == "false" {
			return ""
		}
	case "seccomp", "apparmor", "label", "mask", "unmask":
		if val != "" {
			return ""
		}
	}
	return "%q is not a security option: use no-new-privileges, seccomp=<profile|unconfined>, apparmor=<profile|unconfined>, label=<disable|type:...>, mask=<paths>, unmask=<paths>"
}

func tmpfsSpec(t string) string {
	if !strings.HasPrefix(t, "/") {
		return "%q must be an absolute path (with :options)"
	}
	return ""
}

func deviceSpec(dev string) string {
	if !strings.HasPrefix(dev, "/") {
		return "%q must be host-path[:container-path[:permissions]]"
	}
	return ""
}

// required reads a string that must not be empty; a value of another
// type is reported as such only.
func (d *decoder) required(key string) string {
	s := d.str(key)
	if _, isStr := d.cfg[key].(string); (isStr || d.cfg[key] == nil) && strings.TrimSpace(s) == "" {
		d.errs = append(d.errs, &configError{msg: "podman: config." + key + " is required", field: key})
	}
	return s
}

// optBoolean is boolean, nil when the key is absent.
func (d *decoder) optBoolean(key string) *bool {
	if _, ok := d.cfg[key]; !ok {
		return nil
	}
	b := d.boolean(key)
	return &b
}

// entrypoint is a string or a list of strings.
func (d *decoder) entrypoint(key string) []string {
	switch v := d.cfg[key].(type) {
	case nil:
		return nil
	case string:
		if v == "" {
			return nil
		}
		return []string{v}
	default:
		l, ok := stringList(v)
		if !ok {
			d.bad(key, "must be a string or a list of strings, got %T", v)
		}
		return l
	}
}

func (d *decoder) networkMode(key string) string {
	switch m := d.str(key); {
	case m == "", m == "bridge", m == "host", m == "none":
		return m
	case strings.HasPrefix(m, "task:") && len(m) > len("task:"):
		return m
	case m == "slirp4netns", m == "pasta",
		strings.HasPrefix(m, "container:") && len(m) > len("container:"),
		strings.HasPrefix(m, "ns:") && len(m) > len("ns:"):
		d.refuse(key, "%q is not supported: %s", m, whyGroupNet)
		return m
	case networkNameRE.MatchString(m):
		// Nomad's podman driver takes any other name as a podman network.
		d.refuse(key, "%q (a podman network) is not supported: %s", m, whyGroupNet)
		return m
	default:
		d.bad(key, "%q is not a network mode: use \"bridge\", \"host\", \"none\" or \"task:<name>\"", m)
		return m
	}
}

// networkNameRE is what podman accepts as a network name.
var networkNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// caps reads capability names as podman takes them, upper case with
// CAP_, and keeps them lower case without it (Nomad's allow_caps form).
func (d *decoder) caps(key string) []string {
	l := d.list(key)
	out := make([]string, 0, len(l))
	for _, c := range l {
		n := strings.TrimPrefix(strings.ToLower(c), "cap_")
		if !capNameRE.MatchString(n) {
			d.bad(key, "%q is not a capability name such as \"NET_ADMIN\"", c)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

var capNameRE = regexp.MustCompile(`^(all|[a-z_]+)$`)

// userns is podman's --userns: "", "host", "auto[:opts]", "keep-id[:opts]",
// "nomap", "private" or "ns:<path>".
func (d *decoder) userns(key string) string {
	s := d.str(key)
	mode, _, _ := strings.Cut(s, ":")
	switch mode {
	case "", "host", "auto", "keep-id", "nomap", "private", "ns":
	default:
		d.bad(key, "%q is not a user namespace mode: use \"host\", \"auto\", \"keep-id\", \"nomap\", \"private\" or \"ns:<path>\"", s)
	}
	return s
}

// optInteger is integer, nil when the key is absent.
func (d *decoder) optInteger(key string, lo, hi int64) *int {
	if v, ok := d.cfg[key]; !ok || v == nil {
		return nil
	}
	n := d.integer(key, lo, hi, 0)
	return &n
}

// swap is a size, or "-1" for unlimited swap.
func (d *decoder) swap(key string) int64 {
	if d.str(key) == "-1" {
		return -1
	}
	return d.size(key)
}

// socket is "" or "default": berth has one podman service.
func (d *decoder) socket(key string) string {
	s := d.str(key)
	if s != "" && s != "default" {
		d.refuse(key, "%q is not supported: %s", s, whySocket)
	}
	return s
}

// ulimit maps a limit name to "n" or "soft:hard".
func (d *decoder) ulimit(key string) map[string]string {
	m := d.strMap(key)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !ulimitRE.MatchString(m[k]) {
			d.bad(key+"."+k, "%q is not \"n\" or \"soft:hard\"", m[k])
		}
	}
	return m
}

func (d *decoder) logDriver(key string) string {
	s := d.str(key)
	switch s {
	case "", "nomad":
	case "journald":
		d.refuse(key, "%q is not supported: %s: use driver \"nomad\"", s, whyLogDriver)
	default:
		d.bad(key, "%q is not a log driver: use \"nomad\" or \"journald\"", s)
	}
	return s
}

// imagePullTimeout keeps the default unless the key sets one.
func (d *decoder) imagePullTimeout(key string) {
	s := d.str(key)
	if s == "" {
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil || dur <= 0 {
		d.bad(key, "%q is not a positive duration such as \"5m\"", s)
		return
	}
	d.tc.ImagePullTimeout = dur
}

// nested walks the block at key with its own table, reporting its
// problems under key.
func (d *decoder) nested(key string, keys drivercfg.Table[*decoder]) {
	m := d.block(key)
	if m == nil {
		return
	}
	sub := &decoder{cfg: m, tc: d.tc}
	for _, k := range keys.Walk(sub, m) {
		sub.bad(k, "is not a key of %s (%s)", key, strings.Join(keys.Order(), ", "))
	}
	d.nest(key, sub)
}

func (d *decoder) strMap(key string) map[string]string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return nil
	}
	m, err := stringMap(key, v)
	if err != nil {
		d.errs = append(d.errs, err)
	}
	return m
}

// block reads a nested block, written `name { ... }` (a list of one map)
// or `name = { ... }` (a map).
func (d *decoder) block(key string) map[string]any {
	switch v := d.cfg[key].(type) {
	case nil:
		return nil
	case map[string]any:
		return v
	case []any:
		if len(v) == 1 {
			if m, ok := v[0].(map[string]any); ok {
				return m
			}
		}
		d.bad(key, "must be one block, got %d", len(v))
	case []map[string]any:
		if len(v) == 1 {
			return v[0]
		}
		d.bad(key, "must be one block, got %d", len(v))
	default:
		d.bad(key, "must be a block, got %T", v)
	}
	return nil
}

func (d *decoder) size(key string) int64 {
	s := d.str(key)
	if s == "" {
		return 0
	}
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		d.bad(key, "%q is not a size such as \"64m\" or \"1g\"", s)
		return 0
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		d.bad(key, "%q is too large", s)
		return 0
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "m": 20, "g": 30}[strings.ToLower(m[2])]
	if n > math.MaxInt64>>shift {
		d.bad(key, "%q is too large", s)
		return 0
	}
	return n << shift
}

// ParseConfig decodes and checks a task's config block. Errors name the
// field, e.g. "podman: config.args must be a list of strings"; every
// problem is reported (errors.Join).
func ParseConfig(cfg map[string]any) (*TaskConfig, error) {
	tc, _, refused, err := parseConfig(cfg)
	if err == nil && len(refused) > 0 {
		return nil, errors.Join(refused...)
	}
	return tc, err
}

// parseConfig is ParseConfig with the warnings of deprecated keys and,
// apart, what berth refuses to run.
func parseConfig(cfg map[string]any) (_ *TaskConfig, warns, refused []error, _ error) {
	d := &decoder{cfg: cfg, tc: &TaskConfig{MemorySwappiness: -1, ImagePullTimeout: 5 * time.Minute}}
	if unknown := configKeys.Walk(d, cfg); len(unknown) > 0 {
		// First, as before the table: the likeliest cause of the others.
		d.errs = append([]error{&configError{field: unknown[0], msg: fmt.Sprintf("podman: unknown config key(s) %s (known: %s)",
			"config."+strings.Join(unknown, ", config."), strings.Join(configKeys.Names(), ", "))}}, d.errs...)
	}
	if err := errors.Join(d.errs...); err != nil {
		return nil, d.warns, d.refused, err
	}
	return d.tc, d.warns, d.refused, nil
}

// nest reports a nested block's problems under its key.
func (d *decoder) nest(key string, sub *decoder) {
	d.warns = append(d.warns, sub.warns...)
	under := func(errs []error) []error {
		out := make([]error, 0, len(errs))
		for _, e := range errs {
			ce, ok := e.(*configError)
			if !ok {
				out = append(out, e)
				continue
			}
			out = append(out, &configError{msg: strings.Replace(ce.msg, "config.", "config."+key+".", 1), field: key})
		}
		return out
	}
	d.errs = append(d.errs, under(sub.errs)...)
	d.refused = append(d.refused, under(sub.refused)...)
}

func stringList(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return append([]string(nil), l...), true
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			// Numbers and bools become strings, as in Nomad.
			s, ok := driver.ConfigString(e)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func stringMap(key string, v any) (map[string]string, error) {
	switch m := v.(type) {
	case map[string]string:
		out := make(map[string]string, len(m))
		for k, s := range m {
			out[k] = s
		}
		return out, nil
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, e := range m {
			s, ok := e.(string)
			if !ok {
				return nil, &configError{msg: fmt.Sprintf("podman: config.%s.%s must be a string, got %T", key, k, e), field: key}
			}
			out[k] = s
		}
		return out, nil
	case []any:
		// A `labels { }` block (written once or more) decodes to a list of maps.
		out := map[string]string{}
		for _, e := range m {
			sub, err := stringMap(key, e)
			if err != nil {
				return nil, err
			}
			for k, s := range sub {
				out[k] = s
			}
		}
		return out, nil
	case []map[string]any:
		out := map[string]string{}
		for _, mm := range m {
			sub, err := stringMap(key, mm)
			if err != nil {
				return nil, err
			}
			for k, s := range sub {
				out[k] = s
			}
		}
		return out, nil
	}
	return nil, &configError{msg: fmt.Sprintf("podman: config.%s must be a map of strings, got %T", key, v), field: key}
}

// command is what the container runs: with `command`, it replaces the
// image's CMD and `args` follow it; `args` alone replace the CMD and go to
// the image's entrypoint, as in Nomad's docker driver.
func (tc *TaskConfig) command() []string {
	if tc.Command != "" {
		return append([]string{tc.Command}, tc.Args...)
	}
	if len(tc.Args) > 0 {
		return append([]string(nil), tc.Args...)
	}
	return nil
}
