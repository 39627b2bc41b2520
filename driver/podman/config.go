package podman

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/driver"
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
// every key of Nomad's podman task driver plugin. Berth's driver acts on
// Image, Command, Args, Entrypoint, WorkingDir, Hostname and Labels today;
// the others are decoded and checked for the driver to use.
type TaskConfig struct {
	Image      string
	Command    string
	Args       []string
	Entrypoint []string
	WorkingDir string
	Hostname   string
	Labels     map[string]string

	// Networking: NetworkMode is "" (the group's namespace), "bridge",
	// "host", "none", "slirp4netns", "container:<id>", "ns:<path>" or
	// "task:<name>"; Ports are the group's port labels to publish;
	// PortMap is the older form (label -> container port).
	NetworkMode string
	Ports       []string
	PortMap     map[string]int
	DNS         []string
	ExtraHosts  []string

	Volumes        []string
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

	// Sizes in bytes (shm_size, memory_reservation, memory_swap written as
	// "64m", "1g", ...); 0 when unset. MemorySwappiness is -1 when unset.
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
	// locally; these are accepted for compatibility.
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

var knownKeys = []string{
	"apparmor_profile", "args", "auth", "auth_soft_fail", "cap_add", "cap_drop", "command", "cpu_cfs_period",
	"cpu_hard_limit", "devices", "dns", "entrypoint", "extra_hosts", "force_pull", "hostname", "image",
	"image_pull_timeout", "init", "init_path", "labels", "logging", "memory_reservation", "memory_swap",
	"memory_swappiness", "network_mode", "pids_limit", "port_map", "ports", "privileged", "readonly_rootfs",
	"security_opt", "selinux_opts", "shm_size", "socket", "sysctl", "tmpfs", "tty", "ulimit", "userns",
	"volumes", "working_dir",
}

var (
	sizeRE   = regexp.MustCompile(`^([0-9]+)([bkmgBKMG]?)$`)
	ulimitRE = regexp.MustCompile(`^-?[0-9]+(:-?[0-9]+)?$`)
)

// Policy is what this node lets a podman task ask for beyond the
// defaults: agent settings, which no job can change.
type Policy struct {
	// AllowPrivileged lets a task set privileged = true (Nomad's docker
	// driver's allow_privileged): the container gets every capability
	// and the host's devices, which is root on the host.
	AllowPrivileged bool
}

// Check refuses what tc asks for beyond the policy, naming the field.
func (p Policy) Check(tc *TaskConfig) error {
	if tc.Privileged && !p.AllowPrivileged {
		return &configError{field: "privileged",
			msg: "podman: config.privileged is not allowed on this node: a privileged container is root on the host (agent setting podman_allow_privileged)"}
	}
	return nil
}

// ValidateConfig is ParseConfig and the policy's Check: what `berth
// validate` and the agent answer for a task's config block.
func (p Policy) ValidateConfig(cfg map[string]any) error {
	tc, err := ParseConfig(cfg)
	if err != nil {
		return err
	}
	return p.Check(tc)
}

// decoder collects every problem of one config block.
type decoder struct {
	cfg  map[string]any
	errs []error
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

func (d *decoder) list(key string) []string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := stringList(v)
	if !ok {
		d.bad(key, "must be a list of strings, got %T", v)
	}
	return l
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
	d := &decoder{cfg: cfg}
	var unknown []string
	for k := range cfg {
		if !contains(knownKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		d.errs = append(d.errs, &configError{field: unknown[0], msg: fmt.Sprintf("podman: unknown config key(s) %s (known: %s)",
			"config."+strings.Join(unknown, ", config."), strings.Join(knownKeys, ", "))})
	}

	tc := &TaskConfig{MemorySwappiness: -1, ImagePullTimeout: 5 * time.Minute}
	tc.Image = d.str("image")
	if _, isStr := cfg["image"].(string); (isStr || cfg["image"] == nil) && strings.TrimSpace(tc.Image) == "" {
		d.errs = append(d.errs, &configError{msg: "podman: config.image is required", field: "image"})
	}
	tc.Command = d.str("command")
	tc.WorkingDir = d.str("working_dir")
	tc.Hostname = d.str("hostname")
	if v, ok := cfg["args"]; ok && v != nil {
		if tc.Args, ok = stringList(v); !ok {
			d.bad("args", "must be a list of strings, got %T", v)
		}
	}
	if v, ok := cfg["entrypoint"]; ok && v != nil {
		if s, isStr := v.(string); isStr {
			if s != "" {
				tc.Entrypoint = []string{s}
			}
		} else if tc.Entrypoint, ok = stringList(v); !ok {
			d.bad("entrypoint", "must be a string or a list of strings, got %T", v)
		}
	}
	tc.Labels = d.strMap("labels")

	tc.NetworkMode = d.str("network_mode")
	switch m := tc.NetworkMode; {
	case m == "", m == "bridge", m == "host", m == "none", m == "slirp4netns":
	case strings.HasPrefix(m, "container:") && len(m) > len("container:"),
		strings.HasPrefix(m, "ns:") && len(m) > len("ns:"),
		strings.HasPrefix(m, "task:") && len(m) > len("task:"):
	default:
		d.bad("network_mode", "%q is not a network mode: use \"bridge\", \"host\", \"none\", \"slirp4netns\", \"container:<id>\", \"ns:<path>\" or \"task:<name>\"", m)
	}
	tc.Ports = d.list("ports")
	if v, ok := cfg["port_map"]; ok && v != nil {
		tc.PortMap = d.portMap(v)
	}
	tc.DNS = d.list("dns")
	tc.ExtraHosts = d.list("extra_hosts")
	for _, h := range tc.ExtraHosts {
		if name, ip, ok := strings.Cut(h, ":"); !ok || name == "" || ip == "" {
			d.bad("extra_hosts", "%q is not host:ip", h)
		}
	}
	tc.Volumes = d.list("volumes")
	for _, v := range tc.Volumes {
		if parts := strings.Split(v, ":"); len(parts) < 2 || parts[0] == "" || parts[1] == "" || len(parts) > 3 {
			d.bad("volumes", "%q is not source:destination[:options]", v)
		}
	}
	tc.Tmpfs = d.list("tmpfs")
	for _, t := range tc.Tmpfs {
		if !strings.HasPrefix(t, "/") {
			d.bad("tmpfs", "%q must be an absolute path (with :options)", t)
		}
	}
	tc.Devices = d.list("devices")
	for _, dev := range tc.Devices {
		if !strings.HasPrefix(dev, "/") {
			d.bad("devices", "%q must be host-path[:container-path[:permissions]]", dev)
		}
	}
	tc.CapAdd = d.list("cap_add")
	tc.CapDrop = d.list("cap_drop")
	tc.SecurityOpt = d.list("security_opt")
	tc.SelinuxOpts = d.list("selinux_opts")
	tc.AppArmor = d.str("apparmor_profile")
	tc.Privileged = d.boolean("privileged")
	tc.ReadonlyRootfs = d.boolean("readonly_rootfs")
	tc.Userns = d.str("userns")
	tc.Init = d.boolean("init")
	tc.InitPath = d.str("init_path")
	tc.TTY = d.boolean("tty")
	tc.Sysctl = d.strMap("sysctl")
	tc.Ulimit = d.strMap("ulimit")
	for k, v := range tc.Ulimit {
		if !ulimitRE.MatchString(v) {
			d.bad("ulimit."+k, "%q is not \"n\" or \"soft:hard\"", v)
		}
	}
	tc.ShmSize = d.size("shm_size")
	tc.MemoryReservation = d.size("memory_reservation")
	tc.MemorySwap = d.size("memory_swap")
	tc.MemorySwappiness = d.integer("memory_swappiness", 0, 100, -1)
	tc.PidsLimit = d.integer("pids_limit", 0, math.MaxInt32, 0)
	tc.CPUHardLimit = d.boolean("cpu_hard_limit")
	tc.CPUCFSPeriod = d.integer("cpu_cfs_period", 0, 1000000, 0)
	tc.Socket = d.str("socket")
	tc.AuthSoftFail = d.boolean("auth_soft_fail")
	tc.ForcePull = d.boolean("force_pull")
	if s := d.str("image_pull_timeout"); s != "" {
		if dur, err := time.ParseDuration(s); err != nil || dur <= 0 {
			d.bad("image_pull_timeout", "%q is not a positive duration such as \"5m\"", s)
		} else {
			tc.ImagePullTimeout = dur
		}
	}
	if m := d.block("logging"); m != nil {
		sub := &decoder{cfg: m}
		tc.Logging.Driver = sub.str("driver")
		tc.Logging.Options = sub.strMap("options")
		for k := range m {
			if k != "driver" && k != "options" {
				sub.bad(k, "is not a key of logging (driver, options)")
			}
		}
		switch tc.Logging.Driver {
		case "", "nomad", "journald":
		default:
			sub.bad("driver", "%q is not a log driver: use \"nomad\" or \"journald\"", tc.Logging.Driver)
		}
		d.nest("logging", sub)
	}
	if m := d.block("auth"); m != nil {
		sub := &decoder{cfg: m}
		tc.Auth.Username = sub.str("username")
		tc.Auth.Password = sub.str("password")
		if _, ok := m["tls_verify"]; ok {
			b := sub.boolean("tls_verify")
			tc.Auth.TLSVerify = &b
		}
		for k := range m {
			if k != "username" && k != "password" && k != "tls_verify" {
				sub.bad(k, "is not a key of auth (username, password, tls_verify)")
			}
		}
		d.nest("auth", sub)
	}
	if err := errors.Join(d.errs...); err != nil {
		return nil, err
	}
	return tc, nil
}

// nest reports a nested block's problems under its key.
func (d *decoder) nest(key string, sub *decoder) {
	for _, e := range sub.errs {
		ce, ok := e.(*configError)
		if !ok {
			d.errs = append(d.errs, e)
			continue
		}
		d.errs = append(d.errs, &configError{msg: strings.Replace(ce.msg, "config.", "config."+key+".", 1), field: key})
	}
}

func (d *decoder) portMap(v any) map[string]int {
	var maps []map[string]any
	switch m := v.(type) {
	case map[string]any:
		maps = []map[string]any{m}
	case []any:
		for _, e := range m {
			if mm, ok := e.(map[string]any); ok {
				maps = append(maps, mm)
			}
		}
	case []map[string]any:
		maps = m
	default:
		d.bad("port_map", "must be a map of port label to container port, got %T", v)
		return nil
	}
	out := map[string]int{}
	for _, m := range maps {
		for k, e := range m {
			n, ok := wholeNumber(e)
			if !ok || n < 1 || n > 65535 {
				d.bad("port_map."+k, "must be a port number from 1 to 65535, got %v", e)
				continue
			}
			out[k] = int(n)
		}
	}
	return out
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

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
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
